/* Rotary position embedding (half-split and interleaved): validation and device dispatch. */
#include "ops_impl.h"

/* A (B,T,H,D) view whose D is innermost (stride 1); the B, T and H strides are free. */
static mt_status check_bthd(const mt_tensor *t, const char *what) {
    MT_REQUIRE(t, MT_ERR_INVALID_ARG, "%s is NULL", what);
    MT_REQUIRE(mt_dtype_size(t->dtype) > 0, MT_ERR_INVALID_ARG, "%s has an invalid dtype", what);
    MT_REQUIRE(t->ndim == 4, MT_ERR_INVALID_ARG, "%s is %d-d, expected (B,T,H,D)", what, t->ndim);
    MT_REQUIRE(t->data || mt_tensor_numel(t) == 0, MT_ERR_INVALID_ARG, "%s has no data", what);
    MT_REQUIRE(t->stride[3] == 1 || t->shape[3] <= 1, MT_ERR_INVALID_ARG,
               "%s: D must be innermost (stride %lld, want 1)", what, (long long)t->stride[3]);
    return MT_OK;
}

static mt_status run(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos, int rotary_dim,
                     double theta, int interleaved, int sign, mt_stream stream) {
    MT_TRY(check_bthd(out, "out"));
    MT_TRY(check_bthd(x, "x"));
    MT_REQUIRE(mt_dtype_is_float(x->dtype), MT_ERR_UNSUPPORTED, "x: dtype %s is not a float type",
               mt_dtype_name(x->dtype));
    MT_REQUIRE(mt_tensor_same_shape(out, x) && out->dtype == x->dtype &&
                   mt_device_eq(out->device, x->device),
               MT_ERR_INVALID_ARG, "out differs from x (B,T,H,D) in shape, dtype or device");
    int64_t B = x->shape[0], T = x->shape[1], D = x->shape[3];
    MT_REQUIRE(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= D, MT_ERR_INVALID_ARG,
               "rotary_dim = %d, want even in [2, D = %lld]", rotary_dim, (long long)D);
    MT_REQUIRE(theta > 0.0, MT_ERR_INVALID_ARG, "theta = %g, want > 0", theta);
    if (pos) {
        MT_TRY(mt_tensor_check(pos, "pos", -1));
        MT_REQUIRE(pos->dtype == MT_I32 || pos->dtype == MT_I64, MT_ERR_UNSUPPORTED,
                   "pos: dtype %s, want i32 or i64", mt_dtype_name(pos->dtype));
        MT_REQUIRE((pos->ndim == 1 && pos->shape[0] == T) ||
                       (pos->ndim == 2 && pos->shape[0] == B && pos->shape[1] == T),
                   MT_ERR_INVALID_ARG, "pos must be (T) or (B,T) = (%lld,%lld)", (long long)B,
                   (long long)T);
        MT_REQUIRE(mt_device_eq(pos->device, x->device), MT_ERR_INVALID_ARG,
                   "pos and x are on different devices");
    }
    return MT_DISPATCH(x->device, rope_cpu(out, x, pos, rotary_dim, theta, interleaved, sign),
                       rope_cuda(out, x, pos, rotary_dim, theta, interleaved, sign, stream));
}

mt_status mt_rope_fwd(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos, int rotary_dim,
                      double theta, int interleaved, mt_stream stream) {
    return run(out, x, pos, rotary_dim, theta, interleaved, 1, stream);
}

mt_status mt_rope_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *pos, int rotary_dim,
                      double theta, int interleaved, mt_stream stream) {
    return run(dx, dout, pos, rotary_dim, theta, interleaved, -1, stream);
}
