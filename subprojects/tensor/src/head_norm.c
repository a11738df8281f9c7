/* Per-head norms in place (query/key heads inside a fused qkv buffer): validation, the CPU path
 * (the spec: a strided copy out, the row norm of norm.c, a copy back) and device dispatch. */
#include <stdlib.h>

#include "ops_impl.h"

int64_t mt_head_norm_bwd_scratch_numel(int64_t D) {
    return 2 * HEAD_NORM_BLOCKS * D;
}

/* x: a (B,T,heads,D) view with D contiguous; raw: (B*T*heads, D) contiguous, x's dtype; the
 * statistics (B*T*heads) f32; weight and bias (D) of x's dtype. */
static mt_status check(const mt_tensor *x, const mt_tensor *raw, const mt_tensor *mean,
                       const mt_tensor *rstd, const mt_tensor *weight, const mt_tensor *bias,
                       int rms) {
    MT_REQUIRE(x && raw && rstd && weight && (rms || mean), MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(x->ndim == 4 && x->stride[3] == 1 && x->data, MT_ERR_INVALID_ARG,
               "x must be a (B,T,heads,D) view with D contiguous");
    MT_REQUIRE(x->dtype == MT_F32 || x->dtype == MT_BF16 || x->dtype == MT_F16, MT_ERR_UNSUPPORTED,
               "x: dtype %s", mt_dtype_name(x->dtype));
    const int64_t D = x->shape[3], rows = x->shape[0] * x->shape[1] * x->shape[2];
    MT_REQUIRE(D > 0 && D <= 256, MT_ERR_UNSUPPORTED, "head dim %lld (1 to 256)", (long long)D);
    MT_TRY(mt_tensor_check(raw, "raw", 2));
    MT_REQUIRE(raw->shape[0] == rows && raw->shape[1] == D && raw->dtype == x->dtype &&
                   mt_device_eq(raw->device, x->device),
               MT_ERR_INVALID_ARG, "raw must be (%lld, %lld) %s on x's device", (long long)rows,
               (long long)D, mt_dtype_name(x->dtype));
    for (int i = 0; i < 2; i++) {
        const mt_tensor *s = i ? rstd : mean;
        if (!s) continue;
        MT_TRY(mt_tensor_check(s, i ? "rstd" : "mean", -1));
        MT_REQUIRE(mt_tensor_numel(s) == rows && s->dtype == MT_F32, MT_ERR_INVALID_ARG,
                   "%s must be %lld f32", i ? "rstd" : "mean", (long long)rows);
    }
    for (int i = 0; i < 2; i++) {
        const mt_tensor *w = i ? bias : weight;
        if (!w) continue;
        MT_TRY(mt_tensor_check(w, i ? "bias" : "weight", -1));
        MT_REQUIRE(mt_tensor_numel(w) == D && w->dtype == x->dtype, MT_ERR_INVALID_ARG,
                   "%s must be (%lld) %s", i ? "bias" : "weight", (long long)D,
                   mt_dtype_name(x->dtype));
    }
    MT_REQUIRE(!(rms && bias), MT_ERR_INVALID_ARG, "RMSNorm has no bias");
    return MT_OK;
}

/* A host buffer shaped as raw, and its (B,T,heads,D) view. */
static mt_status host_rows(const mt_tensor *x, const mt_tensor *raw, mt_tensor *rows,
                           mt_tensor *rows4) {
    void *p = malloc(mt_tensor_nbytes(raw) + 1);
    MT_REQUIRE(p, MT_ERR_OOM, "head norm rows");
    *rows = mt_tensor_make(p, raw->dtype, 2, raw->shape, raw->device);
    *rows4 = mt_tensor_make(p, raw->dtype, 4, x->shape, raw->device);
    return MT_OK;
}

mt_status mt_head_norm_fwd(mt_tensor *x, mt_tensor *raw, mt_tensor *mean, mt_tensor *rstd,
                           const mt_tensor *weight, const mt_tensor *bias, int rms, float eps,
                           mt_stream stream) {
    MT_TRY(check(x, raw, mean, rstd, weight, bias, rms));
    if (mt_device_is_cuda(x->device))
        return MT_DISPATCH(x->device, MT_OK,
                           head_norm_fwd_cuda(x, raw, mean, rstd, weight, bias, rms, eps, stream));
    mt_tensor raw4 = mt_tensor_make(raw->data, raw->dtype, 4, x->shape, raw->device), out, out4;
    MT_TRY(mt_copy(&raw4, x, NULL));
    MT_TRY(host_rows(x, raw, &out, &out4));
    mt_status st =
        rms ? mt_rmsnorm_fwd(&out, NULL, rstd, raw, NULL, weight, eps, NULL)
            : mt_layernorm_fwd(&out, NULL, mean, rstd, raw, NULL, weight, bias, eps, NULL);
    if (st == MT_OK) st = mt_copy(x, &out4, NULL);
    free(out.data);
    return st;
}

mt_status mt_head_norm_bwd(mt_tensor *dx, mt_tensor *dweight, mt_tensor *dbias, mt_tensor *scratch,
                           const mt_tensor *raw, const mt_tensor *weight, const mt_tensor *mean,
                           const mt_tensor *rstd, int rms, int accumulate, mt_stream stream) {
    MT_TRY(check(dx, raw, mean, rstd, weight, NULL, rms));
    const int64_t D = dx->shape[3];
    for (int i = 0; i < 2; i++) {
        const mt_tensor *g = i ? dbias : dweight;
        if (!g) continue;
        MT_TRY(mt_tensor_check(g, i ? "dbias" : "dweight", -1));
        MT_REQUIRE(mt_tensor_numel(g) == D && g->dtype == MT_F32 &&
                       mt_device_eq(g->device, dx->device),
                   MT_ERR_INVALID_ARG, "%s must be (%lld) f32 on dx's device",
                   i ? "dbias" : "dweight", (long long)D);
    }
    MT_REQUIRE(!(rms && dbias), MT_ERR_INVALID_ARG, "RMSNorm has no bias");
    if (mt_device_is_cuda(dx->device)) {
        MT_REQUIRE(scratch && scratch->dtype == MT_F32 &&
                       mt_tensor_numel(scratch) >= mt_head_norm_bwd_scratch_numel(D),
                   MT_ERR_INVALID_ARG, "scratch: %lld f32 (mt_head_norm_bwd_scratch_numel)",
                   (long long)mt_head_norm_bwd_scratch_numel(D));
        return MT_DISPATCH(dx->device, MT_OK,
                           head_norm_bwd_cuda(dx, dweight, dbias, scratch, raw, weight, mean, rstd,
                                              rms, accumulate, stream));
    }
    mt_tensor dy, dy4, g = { 0 }, g4;
    MT_TRY(host_rows(dx, raw, &dy, &dy4));
    mt_status st = host_rows(dx, raw, &g, &g4);
    if (st == MT_OK) st = mt_copy(&dy4, dx, NULL);
    if (st == MT_OK)
        st = rms ? mt_rmsnorm_bwd(&g, dweight, NULL, NULL, &dy, raw, weight, rstd, NULL, accumulate,
                                  NULL)
                 : mt_layernorm_bwd(&g, dweight, dbias, NULL, NULL, &dy, raw, weight, mean, rstd,
                                    NULL, accumulate, NULL);
    if (st == MT_OK) st = mt_copy(dx, &g4, NULL);
    free(dy.data);
    free(g.data);
    return st;
}
