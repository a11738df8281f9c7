/* Shared helpers of the tensor GPU tests (private to tests/): host and device tensors from f32
 * values, NaN-poisoned outputs, copy back and comparison. Each test is one translation unit and
 * owns the arena `ar` defined here. */
#ifndef MT_TENSOR_GPU_COMMON_H
#define MT_TENSOR_GPU_COMMON_H

#include <mt/tensor.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static mt_arena *ar;

/* f32 host values -> a fresh host tensor of dtype dt (caller frees ->data). */
static inline mt_tensor host_as(const float *v, mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor h = mt_tensor_make((void *)v, MT_F32, ndim, shape, MT_DEVICE_CPU);
    mt_tensor t = mt_tensor_make(malloc(mt_tensor_nbytes(&h) / 4 * mt_dtype_size(dt) + 16), dt,
                                 ndim, shape, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&t, &h, NULL));
    return t;
}

/* A device copy of host tensor h (any dtype), carved from the arena. */
static inline mt_tensor to_dev(const mt_tensor *h) {
    mt_tensor d;
    MT_CHECK(mt_tensor_alloc(ar, h->dtype, h->ndim, h->shape, &d));
    MT_CHECK(mt_tensor_copy(&d, h, NULL));
    return d;
}

/* An uninitialised device tensor poisoned with NaN (float dtypes), so unwritten outputs show. */
static inline mt_tensor dev_nan(mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor d;
    MT_CHECK(mt_tensor_alloc(ar, dt, ndim, shape, &d));
    MT_CHECK(mt_fill(&d, NAN, NULL));
    return d;
}

/* Any float tensor (host or device) -> malloc'd f32 host values. */
static inline float *as_f32(const mt_tensor *t) {
    int64_t n = mt_tensor_numel(t);
    mt_tensor h = mt_tensor_make(malloc((size_t)n * mt_dtype_size(t->dtype) + 16), t->dtype,
                                 t->ndim, t->shape, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&h, t, NULL));
    float *out = malloc((size_t)n * 4 + 16);
    mt_tensor o = mt_tensor_make(out, MT_F32, t->ndim, t->shape, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&o, &h, NULL));
    free(h.data);
    return out;
}

/* Compares a device result with a host reference of the same shape (both read as f32). */
static inline void close_dev(const char *what, const mt_tensor *dev, const mt_tensor *ref,
                             double atol, double rtol) {
    float *g = as_f32(dev), *r = as_f32(ref);
    mt_test_close_f32(what, g, r, (size_t)mt_tensor_numel(ref), atol, rtol);
    free(g), free(r);
}

static inline float *uniform(int64_t n, uint64_t seed, float lo, float hi) {
    float *v = malloc((size_t)n * 4 + 16);
    mt_test_fill_uniform(v, (size_t)n, seed, 0, lo, hi);
    return v;
}

/* A zeroed (rows, cols) host tensor of dt (caller frees ->data). */
static inline mt_tensor host_empty(mt_dtype dt, int64_t rows, int64_t cols) {
    return mt_tensor_2d(calloc((size_t)(rows * cols), mt_dtype_size(dt)), dt, rows, cols,
                        MT_DEVICE_CPU);
}

/* A (rows, cols) device tensor: a copy of host tensor h, or NaN-poisoned when h is NULL. */
static inline mt_tensor dev(const mt_tensor *h, mt_dtype dt, int64_t rows, int64_t cols) {
    mt_tensor d;
    int64_t shape[2] = { rows, cols };
    MT_CHECK(mt_tensor_alloc(ar, dt, 2, shape, &d));
    if (h)
        MT_CHECK(mt_tensor_copy(&d, h, NULL));
    else
        MT_CHECK(mt_fill(&d, NAN, NULL)); /* poison: every element must be written */
    return d;
}

#endif
