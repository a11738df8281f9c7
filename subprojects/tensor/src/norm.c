/* LayerNorm/RMSNorm forward and backward (fused residual add): validation and device dispatch.
 * A tensor of shape (..., C) is viewed as rows x C. */
#include "ops_impl.h"

/* x-like operand: same shape, dtype and device as x, contiguous. NULL passes. */
static mt_status check_like(const mt_tensor *t, const char *what, const mt_tensor *x) {
    if (!t) return MT_OK;
    MT_TRY(mt_tensor_check(t, what, x->ndim));
    MT_REQUIRE(mt_tensor_same_shape(t, x), MT_ERR_INVALID_ARG, "%s and x differ in shape", what);
    MT_REQUIRE(t->dtype == x->dtype, MT_ERR_INVALID_ARG, "%s is %s, x %s", what,
               mt_dtype_name(t->dtype), mt_dtype_name(x->dtype));
    MT_REQUIRE(mt_device_eq(t->device, x->device), MT_ERR_INVALID_ARG,
               "%s and x are on different devices", what);
    return MT_OK;
}

/* 1-D operand of n elements with one of two dtypes, on x's device. NULL passes. */
static mt_status check_vec(const mt_tensor *t, const char *what, int64_t n, mt_dtype dt0,
                           mt_dtype dt1, const mt_tensor *x) {
    if (!t) return MT_OK;
    MT_TRY(mt_tensor_check(t, what, -1));
    MT_REQUIRE(mt_tensor_numel(t) == n, MT_ERR_INVALID_ARG, "%s has %lld elements, expected %lld",
               what, (long long)mt_tensor_numel(t), (long long)n);
    MT_REQUIRE(t->dtype == dt0 || t->dtype == dt1, MT_ERR_INVALID_ARG, "%s: dtype %s (want %s)",
               what, mt_dtype_name(t->dtype), mt_dtype_name(dt0));
    MT_REQUIRE(mt_device_eq(t->device, x->device), MT_ERR_INVALID_ARG,
               "%s and x are on different devices", what);
    return MT_OK;
}

static mt_status check_x(const mt_tensor *x, norm_args *n) {
    MT_TRY(mt_tensor_check(x, "x", -1));
    MT_REQUIRE(x->ndim >= 1, MT_ERR_INVALID_ARG, "x must have at least 1 dim");
    MT_REQUIRE(x->dtype == MT_F32 || x->dtype == MT_BF16 || x->dtype == MT_F16, MT_ERR_UNSUPPORTED,
               "x: dtype %s (f32, bf16 or f16)", mt_dtype_name(x->dtype));
    n->dtype = x->dtype;
    n->C = x->shape[x->ndim - 1];
    MT_REQUIRE(n->C > 0, MT_ERR_INVALID_ARG, "x has no channels");
    n->rows = mt_tensor_numel(x) / n->C;
    n->x = x->data;
    return MT_OK;
}

static mt_status fwd(int rms, mt_tensor *out, mt_tensor *resid_out, mt_tensor *mean,
                     mt_tensor *rstd, const mt_tensor *x, const mt_tensor *residual,
                     const mt_tensor *weight, const mt_tensor *bias, float eps, mt_stream stream) {
    norm_args n = { 0 };
    n.rms = rms;
    n.eps = eps;
    MT_TRY(check_x(x, &n));
    MT_REQUIRE(out && weight, MT_ERR_INVALID_ARG, "out and weight are required");
    MT_REQUIRE(eps >= 0.0f, MT_ERR_INVALID_ARG, "eps %g < 0", (double)eps);
    MT_TRY(check_like(out, "out", x));
    MT_TRY(check_like(resid_out, "resid_out", x));
    MT_TRY(check_like(residual, "residual", x));
    MT_TRY(check_vec(weight, "weight", n.C, x->dtype, x->dtype, x));
    MT_TRY(check_vec(bias, "bias", n.C, x->dtype, x->dtype, x));
    MT_TRY(check_vec(mean, "mean", n.rows, MT_F32, MT_F32, x));
    MT_TRY(check_vec(rstd, "rstd", n.rows, MT_F32, MT_F32, x));
    n.out = out->data;
    n.resid_out = resid_out ? resid_out->data : NULL;
    n.mean = mean ? mean->data : NULL;
    n.rstd = rstd ? rstd->data : NULL;
    n.residual = residual ? residual->data : NULL;
    n.weight = weight->data;
    n.bias = bias ? bias->data : NULL;
    if (n.rows == 0) return MT_OK;
    return MT_DISPATCH(x->device, norm_fwd_cpu(&n), norm_fwd_cuda(&n, stream));
}

mt_status mt_layernorm_fwd(mt_tensor *out, mt_tensor *resid_out, mt_tensor *mean, mt_tensor *rstd,
                           const mt_tensor *x, const mt_tensor *residual, const mt_tensor *weight,
                           const mt_tensor *bias, float eps, mt_stream stream) {
    return fwd(0, out, resid_out, mean, rstd, x, residual, weight, bias, eps, stream);
}

mt_status mt_rmsnorm_fwd(mt_tensor *out, mt_tensor *resid_out, mt_tensor *rstd, const mt_tensor *x,
                         const mt_tensor *residual, const mt_tensor *weight, float eps,
                         mt_stream stream) {
    return fwd(1, out, resid_out, NULL, rstd, x, residual, weight, NULL, eps, stream);
}

int64_t mt_norm_bwd_scratch_numel(int64_t rows, int64_t C) {
    return norm_bwd_blocks(rows) * 3 * C;
}

static mt_status bwd(int rms, mt_tensor *dx, mt_tensor *dweight, mt_tensor *dbias,
                     mt_tensor *dx_sum, mt_tensor *scratch, const mt_tensor *dout,
                     const mt_tensor *x, const mt_tensor *weight, const mt_tensor *mean,
                     const mt_tensor *rstd, const mt_tensor *dresid, int accumulate,
                     mt_stream stream) {
    norm_args n = { 0 };
    n.rms = rms;
    n.accumulate = accumulate != 0;
    MT_TRY(check_x(x, &n));
    MT_REQUIRE(dx && dout && weight && rstd && (rms || mean), MT_ERR_INVALID_ARG,
               "dx, dout, weight, rstd%s are required", rms ? "" : " and mean");
    MT_TRY(check_like(dx, "dx", x));
    MT_TRY(check_like(dout, "dout", x));
    MT_TRY(check_like(dresid, "dresid", x));
    MT_TRY(check_vec(weight, "weight", n.C, x->dtype, x->dtype, x));
    MT_TRY(check_vec(mean, "mean", n.rows, MT_F32, MT_F32, x));
    MT_TRY(check_vec(rstd, "rstd", n.rows, MT_F32, MT_F32, x));
    n.dw_dtype = dweight ? dweight->dtype : dbias ? dbias->dtype : dx_sum ? dx_sum->dtype : MT_F32;
    MT_TRY(check_vec(dweight, "dweight", n.C, MT_F32, x->dtype, x));
    MT_TRY(check_vec(dbias, "dbias", n.C, n.dw_dtype, n.dw_dtype, x));
    MT_TRY(check_vec(dx_sum, "dx_sum", n.C, n.dw_dtype, n.dw_dtype, x));
    MT_REQUIRE(n.dw_dtype == MT_F32 || n.dw_dtype == x->dtype, MT_ERR_INVALID_ARG,
               "dweight, dbias, dx_sum: dtype %s (want f32 or %s)", mt_dtype_name(n.dw_dtype),
               mt_dtype_name(x->dtype));
    if (mt_device_is_cuda(x->device) && (dweight || dbias || dx_sum)) {
        int64_t need = mt_norm_bwd_scratch_numel(n.rows, n.C);
        MT_REQUIRE(scratch, MT_ERR_INVALID_ARG, "scratch is NULL (needs %lld floats)",
                   (long long)need);
        MT_TRY(check_vec(scratch, "scratch", mt_tensor_numel(scratch), MT_F32, MT_F32, x));
        MT_REQUIRE(mt_tensor_numel(scratch) >= need, MT_ERR_INVALID_ARG,
                   "scratch has %lld floats, needs %lld", (long long)mt_tensor_numel(scratch),
                   (long long)need);
        n.scratch = scratch->data;
        n.scratch_numel = mt_tensor_numel(scratch);
    }
    n.dx = dx->data;
    n.dweight = dweight ? dweight->data : NULL;
    n.dbias = dbias ? dbias->data : NULL;
    n.dx_sum = dx_sum ? dx_sum->data : NULL;
    n.dout = dout->data;
    n.dresid = dresid ? dresid->data : NULL;
    n.weight = weight->data;
    n.mean = mean ? mean->data : NULL;
    n.rstd = rstd->data;
    return MT_DISPATCH(x->device, norm_bwd_cpu(&n), norm_bwd_cuda(&n, stream));
}

mt_status mt_layernorm_bwd(mt_tensor *dx, mt_tensor *dweight, mt_tensor *dbias, mt_tensor *dx_sum,
                           mt_tensor *scratch, const mt_tensor *dout, const mt_tensor *x,
                           const mt_tensor *weight, const mt_tensor *mean, const mt_tensor *rstd,
                           const mt_tensor *dresid, int accumulate, mt_stream stream) {
    return bwd(0, dx, dweight, dbias, dx_sum, scratch, dout, x, weight, mean, rstd, dresid,
               accumulate, stream);
}

mt_status mt_rmsnorm_bwd(mt_tensor *dx, mt_tensor *dweight, mt_tensor *dx_sum, mt_tensor *scratch,
                         const mt_tensor *dout, const mt_tensor *x, const mt_tensor *weight,
                         const mt_tensor *rstd, const mt_tensor *dresid, int accumulate,
                         mt_stream stream) {
    return bwd(1, dx, dweight, NULL, dx_sum, scratch, dout, x, weight, NULL, rstd, dresid,
               accumulate, stream);
}

int64_t norm_bwd_blocks(int64_t rows) {
    return rows < 1 ? 1 : rows < 512 ? rows : 512;
}
