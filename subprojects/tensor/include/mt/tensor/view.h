/* mt_tensor: a plain value describing memory it never owns (data, dtype, shape, strides in
 * elements, device). Memory comes from arenas; views are made by value. */
#ifndef MT_TENSOR_VIEW_H
#define MT_TENSOR_VIEW_H

#include <mt/core.h>
#include <mt/tensor/dtype.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MT_MAX_DIMS 8

typedef struct mt_tensor {
    void *data;
    mt_dtype dtype;
    int ndim;
    int64_t shape[MT_MAX_DIMS];
    int64_t stride[MT_MAX_DIMS]; /* in elements */
    mt_device device;
} mt_tensor;

/* A contiguous (C-order) view of `data`. ndim in [0, MT_MAX_DIMS]. */
MT_API mt_tensor mt_tensor_make(void *data, mt_dtype dtype, int ndim, const int64_t *shape,
                                mt_device device);
/* Shorthands for contiguous 1-4 D views. */
MT_API mt_tensor mt_tensor_1d(void *data, mt_dtype dt, int64_t d0, mt_device dev);
MT_API mt_tensor mt_tensor_2d(void *data, mt_dtype dt, int64_t d0, int64_t d1, mt_device dev);
MT_API mt_tensor mt_tensor_3d(void *data, mt_dtype dt, int64_t d0, int64_t d1, int64_t d2,
                              mt_device dev);
MT_API mt_tensor mt_tensor_4d(void *data, mt_dtype dt, int64_t d0, int64_t d1, int64_t d2,
                              int64_t d3, mt_device dev);

MT_API int64_t mt_tensor_numel(const mt_tensor *t);
/* numel * element size (the span of a contiguous tensor). */
MT_API size_t mt_tensor_nbytes(const mt_tensor *t);
MT_API int mt_tensor_is_contiguous(const mt_tensor *t);
/* 1 if shapes are equal (dtype and strides ignored). */
MT_API int mt_tensor_same_shape(const mt_tensor *a, const mt_tensor *b);
/* "bf16[4,16,768]@cuda:0" into buf; returns buf. */
MT_API const char *mt_tensor_str(const mt_tensor *t, char *buf, size_t len);

/* A contiguous tensor with a new shape of the same numel (MT_ERR_INVALID_ARG otherwise). */
MT_API mt_status mt_tensor_reshape(const mt_tensor *t, int ndim, const int64_t *shape,
                                   mt_tensor *out);
/* Elements [start, start+len) along `dim`, sharing memory. */
MT_API mt_status mt_tensor_slice(const mt_tensor *t, int dim, int64_t start, int64_t len,
                                 mt_tensor *out);
/* A contiguous tensor carved from arena `a` (on the arena's device); contents undefined. */
MT_API mt_status mt_tensor_alloc(mt_arena *a, mt_dtype dtype, int ndim, const int64_t *shape,
                                 mt_tensor *out);
/* Copies src into dst (same dtype and shape, both contiguous, any devices). Enqueued on `s` when a
 * device is involved and s != NULL, else blocking. */
MT_API mt_status mt_tensor_copy(mt_tensor *dst, const mt_tensor *src, mt_stream s);

/* Validation used by every op: returns MT_ERR_INVALID_ARG naming `what` when t is NULL, has no
 * data (with numel > 0), is not contiguous or (if ndim >= 0) has another rank. */
MT_API mt_status mt_tensor_check(const mt_tensor *t, const char *what, int ndim);

#ifdef __cplusplus
}
#endif

#endif /* MT_TENSOR_VIEW_H */
