/* Elementwise ops: validation and device dispatch. */
#include "ops_impl.h"

static mt_status check_float(const mt_tensor *t, const char *what) {
    MT_TRY(mt_tensor_check(t, what, -1));
    MT_REQUIRE(mt_dtype_is_float(t->dtype), MT_ERR_UNSUPPORTED, "%s: dtype %s is not a float type",
               what, mt_dtype_name(t->dtype));
    return MT_OK;
}

static mt_status run(ew_op op, mt_tensor *out, const mt_tensor *a, const mt_tensor *b, float alpha,
                     mt_stream stream) {
    MT_TRY(check_float(out, "out"));
    if (a) {
        MT_TRY(check_float(a, "x"));
        MT_REQUIRE(mt_tensor_numel(a) == mt_tensor_numel(out), MT_ERR_INVALID_ARG,
                   "x has %lld elements, out %lld", (long long)mt_tensor_numel(a),
                   (long long)mt_tensor_numel(out));
        MT_REQUIRE(mt_device_eq(a->device, out->device), MT_ERR_INVALID_ARG,
                   "x and out are on different devices");
        MT_REQUIRE(op == EW_CAST || a->dtype == out->dtype, MT_ERR_INVALID_ARG,
                   "x is %s, out %s (use mt_cast)", mt_dtype_name(a->dtype),
                   mt_dtype_name(out->dtype));
    }
    if (b) {
        MT_TRY(check_float(b, "b"));
        MT_REQUIRE(mt_tensor_numel(b) == mt_tensor_numel(out) && b->dtype == out->dtype &&
                       mt_device_eq(b->device, out->device),
                   MT_ERR_INVALID_ARG, "b differs from out in numel, dtype or device");
    }
    return MT_DISPATCH(out->device, elementwise_cpu(op, out, a, b, alpha),
                       elementwise_cuda(op, out, a, b, alpha, stream));
}

mt_status mt_add(mt_tensor *out, const mt_tensor *a, const mt_tensor *b, mt_stream stream) {
    MT_REQUIRE(a && b, MT_ERR_INVALID_ARG, "NULL input");
    return run(EW_ADD, out, a, b, 0.0f, stream);
}

mt_status mt_scale(mt_tensor *out, const mt_tensor *x, float alpha, mt_stream stream) {
    MT_REQUIRE(x, MT_ERR_INVALID_ARG, "x is NULL");
    return run(EW_SCALE, out, x, NULL, alpha, stream);
}

mt_status mt_axpy(mt_tensor *y, float alpha, const mt_tensor *x, mt_stream stream) {
    MT_REQUIRE(x, MT_ERR_INVALID_ARG, "x is NULL");
    return run(EW_AXPY, y, x, NULL, alpha, stream);
}

mt_status mt_cast(mt_tensor *out, const mt_tensor *x, mt_stream stream) {
    MT_REQUIRE(x, MT_ERR_INVALID_ARG, "x is NULL");
    return run(EW_CAST, out, x, NULL, 0.0f, stream);
}

mt_status mt_fill(mt_tensor *x, float value, mt_stream stream) {
    return run(EW_FILL, x, NULL, NULL, value, stream);
}

mt_status mt_fill_normal(mt_tensor *x, float mean, float std, uint64_t seed, uint64_t stream_id,
                         mt_stream stream) {
    MT_TRY(check_float(x, "x"));
    return MT_DISPATCH(x->device, fill_normal_cpu(x, mean, std, seed, stream_id),
                       fill_normal_cuda(x, mean, std, seed, stream_id, stream));
}
