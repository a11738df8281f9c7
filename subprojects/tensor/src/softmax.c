/* Softmax over the last dim: validation and device dispatch. */
#include "ops_impl.h"

static mt_status check_like(const mt_tensor *t, const mt_tensor *ref, const char *what) {
    MT_TRY(mt_tensor_check(t, what, -1));
    MT_REQUIRE(t->ndim >= 1, MT_ERR_INVALID_ARG, "%s: needs at least one dim", what);
    MT_REQUIRE(mt_dtype_is_float(t->dtype), MT_ERR_UNSUPPORTED, "%s: dtype %s is not a float type",
               what, mt_dtype_name(t->dtype));
    if (ref) {
        MT_REQUIRE(mt_tensor_same_shape(t, ref) && t->dtype == ref->dtype, MT_ERR_INVALID_ARG,
                   "%s differs from out in shape or dtype", what);
        MT_REQUIRE(mt_device_eq(t->device, ref->device), MT_ERR_INVALID_ARG,
                   "%s and out are on different devices", what);
    }
    return MT_OK;
}

mt_status mt_softmax_fwd(mt_tensor *out, const mt_tensor *x, mt_stream stream) {
    MT_TRY(check_like(out, NULL, "out"));
    MT_TRY(check_like(x, out, "x"));
    return MT_DISPATCH(out->device, softmax_cpu(out, x, NULL), softmax_cuda(out, x, NULL, stream));
}

mt_status mt_softmax_bwd(mt_tensor *dx, const mt_tensor *y, const mt_tensor *dy, mt_stream stream) {
    MT_TRY(check_like(dx, NULL, "dx"));
    MT_TRY(check_like(y, dx, "y"));
    MT_TRY(check_like(dy, dx, "dy"));
    return MT_DISPATCH(dx->device, softmax_cpu(dx, y, dy), softmax_cuda(dx, y, dy, stream));
}
