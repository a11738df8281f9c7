/* Deterministic reductions (sum, sum of squares, L2 norm, zero count, column sum): validation,
 * workspace sizes and device dispatch. */
#include "ops_impl.h"

int64_t reduce_blocks(int64_t n) {
    int64_t b = (n + 4095) / 4096; /* >= 4096 elements per block of 256 threads */
    return b < 1 ? 1 : b > REDUCE_MAX_BLOCKS ? REDUCE_MAX_BLOCKS : b;
}

int64_t colsum_chunks(int64_t R, int64_t *rows_per_chunk) {
    int64_t rpc = 64;
    while ((R + rpc - 1) / rpc > 1024)
        rpc *= 2;
    *rows_per_chunk = rpc;
    return R < 1 ? 1 : (R + rpc - 1) / rpc;
}

static mt_status check_x(const mt_tensor *x) {
    MT_TRY(mt_tensor_check(x, "x", -1));
    MT_REQUIRE(mt_dtype_is_float(x->dtype), MT_ERR_UNSUPPORTED, "x: dtype %s is not a float type",
               mt_dtype_name(x->dtype));
    return MT_OK;
}

mt_status mt_reduce_workspace(const mt_tensor *x, size_t *bytes) {
    MT_TRY(check_x(x));
    MT_REQUIRE(bytes, MT_ERR_INVALID_ARG, "bytes is NULL");
    *bytes = mt_device_is_cuda(x->device)
                 ? (size_t)reduce_blocks(mt_tensor_numel(x)) * sizeof(double)
                 : 0;
    return MT_OK;
}

mt_status mt_reduce(mt_tensor *out, const mt_tensor *x, mt_reduce_op op, void *ws, size_t ws_bytes,
                    mt_stream stream) {
    size_t need;
    MT_TRY(mt_reduce_workspace(x, &need));
    MT_REQUIRE(op >= MT_REDUCE_SUM && op <= MT_REDUCE_COUNT_ZERO, MT_ERR_INVALID_ARG,
               "unknown reduce op %d", (int)op);
    MT_TRY(mt_tensor_check(out, "out", -1));
    MT_REQUIRE(mt_tensor_numel(out) == 1, MT_ERR_INVALID_ARG, "out has %lld elements, want 1",
               (long long)mt_tensor_numel(out));
    MT_REQUIRE(out->dtype == MT_F32 || (out->dtype == MT_I64 && op == MT_REDUCE_COUNT_ZERO),
               MT_ERR_UNSUPPORTED, "out: dtype %s, want f32 (or i64 for a zero count)",
               mt_dtype_name(out->dtype));
    MT_REQUIRE(mt_device_eq(out->device, x->device), MT_ERR_INVALID_ARG,
               "out and x are on different devices");
    MT_REQUIRE(ws_bytes >= need && (ws || need == 0), MT_ERR_INVALID_ARG,
               "workspace of %zu bytes, need %zu (mt_reduce_workspace)", ws_bytes, need);
    return MT_DISPATCH(x->device, reduce_cpu(out, x, op), reduce_cuda(out, x, op, ws, stream));
}

mt_status mt_colsum_workspace(const mt_tensor *x, size_t *bytes) {
    MT_TRY(check_x(x));
    MT_REQUIRE(x->ndim >= 1, MT_ERR_INVALID_ARG, "x: needs at least one dim");
    MT_REQUIRE(bytes, MT_ERR_INVALID_ARG, "bytes is NULL");
    int64_t C = x->shape[x->ndim - 1], R = C ? mt_tensor_numel(x) / C : 0, rpc;
    *bytes =
        mt_device_is_cuda(x->device) ? (size_t)(colsum_chunks(R, &rpc) * C) * sizeof(float) : 0;
    return MT_OK;
}

mt_status mt_colsum(mt_tensor *out, const mt_tensor *x, int accumulate, void *ws, size_t ws_bytes,
                    mt_stream stream) {
    size_t need;
    MT_TRY(mt_colsum_workspace(x, &need));
    MT_TRY(mt_tensor_check(out, "out", 1));
    MT_REQUIRE(out->shape[0] == x->shape[x->ndim - 1], MT_ERR_INVALID_ARG,
               "out has %lld elements, x %lld columns", (long long)out->shape[0],
               (long long)x->shape[x->ndim - 1]);
    MT_REQUIRE(out->dtype == MT_F32 || out->dtype == x->dtype, MT_ERR_INVALID_ARG,
               "out is %s, want f32 or %s", mt_dtype_name(out->dtype), mt_dtype_name(x->dtype));
    MT_REQUIRE(mt_device_eq(out->device, x->device), MT_ERR_INVALID_ARG,
               "out and x are on different devices");
    MT_REQUIRE(ws_bytes >= need && (ws || need == 0), MT_ERR_INVALID_ARG,
               "workspace of %zu bytes, need %zu (mt_colsum_workspace)", ws_bytes, need);
    return MT_DISPATCH(x->device, colsum_cpu(out, x, accumulate),
                       colsum_cuda(out, x, accumulate, ws, stream));
}
