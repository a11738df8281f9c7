/* Strided copy: validation, the CPU loops and device dispatch. */
#include <string.h>

#include "ops_impl.h"

/* shape and strides padded to 4 dims (leading 1s) */
void copy_dims4(const mt_tensor *t, int64_t shape[4], int64_t stride[4]) {
    int pad = 4 - t->ndim;
    for (int d = 0; d < 4; d++) {
        shape[d] = d < pad ? 1 : t->shape[d - pad];
        stride[d] = d < pad ? 0 : t->stride[d - pad];
    }
}

static mt_status copy_cpu(mt_tensor *dst, const mt_tensor *src) {
    int64_t sh[4], ds[4], ss[4];
    copy_dims4(dst, sh, ds);
    copy_dims4(src, sh, ss);
    size_t es = mt_dtype_size(dst->dtype);
    for (int64_t a = 0; a < sh[0]; a++)
        for (int64_t b = 0; b < sh[1]; b++)
            for (int64_t c = 0; c < sh[2]; c++)
                for (int64_t d = 0; d < sh[3]; d++)
                    memcpy((char *)dst->data +
                               (size_t)(a * ds[0] + b * ds[1] + c * ds[2] + d * ds[3]) * es,
                           (const char *)src->data +
                               (size_t)(a * ss[0] + b * ss[1] + c * ss[2] + d * ss[3]) * es,
                           es);
    return MT_OK;
}

mt_status mt_copy(mt_tensor *dst, const mt_tensor *src, mt_stream stream) {
    MT_REQUIRE(dst && src, MT_ERR_INVALID_ARG, "NULL argument");
    for (int i = 0; i < 2; i++) { /* mt_tensor_check's, without contiguity */
        const mt_tensor *t = i ? src : dst;
        MT_REQUIRE(mt_dtype_size(t->dtype) > 0 && (t->data || mt_tensor_numel(t) == 0),
                   MT_ERR_INVALID_ARG, "%s has an invalid dtype or no data", i ? "src" : "dst");
        for (int d = 0; d < t->ndim; d++)
            MT_REQUIRE(t->stride[d] >= 0, MT_ERR_INVALID_ARG, "%s has a negative stride",
                       i ? "src" : "dst");
    }
    MT_REQUIRE(dst->ndim <= 4 && src->ndim == dst->ndim, MT_ERR_INVALID_ARG,
               "dst has %d dims, src %d (at most 4, equal)", dst->ndim, src->ndim);
    for (int d = 0; d < dst->ndim; d++)
        MT_REQUIRE(dst->shape[d] == src->shape[d], MT_ERR_INVALID_ARG,
                   "dst dim %d is %lld, src %lld", d, (long long)dst->shape[d],
                   (long long)src->shape[d]);
    MT_REQUIRE(dst->dtype == src->dtype, MT_ERR_INVALID_ARG, "dst is %s, src %s",
               mt_dtype_name(dst->dtype), mt_dtype_name(src->dtype));
    MT_REQUIRE(mt_device_eq(dst->device, src->device), MT_ERR_INVALID_ARG,
               "dst and src are on different devices");
    if (mt_tensor_numel(dst) == 0) return MT_OK;
    return MT_DISPATCH(dst->device, copy_cpu(dst, src), copy_cuda(dst, src, stream));
}
