/* Shared helpers of the tensor unit tests (private to tests/): CPU tensors from golden .npy files,
 * NaN-poisoned outputs, and the comparison of a result with its golden. */
#ifndef MT_TENSOR_TEST_COMMON_H
#define MT_TENSOR_TEST_COMMON_H

#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A CPU tensor of `dt` holding golden `name` (rounded once to dt); the caller frees ->data. */
static inline mt_tensor golden_tensor(const char *name, mt_dtype dt, int ndim,
                                      const int64_t *shape) {
    size_t n;
    float *f = mt_test_golden_f32(name, &n, NULL);
    mt_tensor t32 = mt_tensor_make(f, MT_F32, ndim, shape, MT_DEVICE_CPU);
    MT_ASSERT((int64_t)n == mt_tensor_numel(&t32));
    if (dt == MT_F32) return t32;
    mt_tensor t = mt_tensor_make(malloc(n * mt_dtype_size(dt)), dt, ndim, shape, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&t, &t32, NULL));
    free(f);
    return t;
}

/* A CPU tensor of `dt` filled with NaN bits: every element must be written. */
static inline mt_tensor poison_tensor(mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor t = mt_tensor_make(NULL, dt, ndim, shape, MT_DEVICE_CPU);
    size_t bytes = mt_tensor_nbytes(&t);
    t.data = malloc(bytes);
    memset(t.data, 0xff, bytes);
    return t;
}

/* Compares t (any float dtype, contiguous) with scale * golden `name`, labelled "what label_dt". */
static inline void expect_golden(const char *what, mt_dtype label_dt, const mt_tensor *t,
                                 const char *name, double atol, double rtol, float scale) {
    size_t n = (size_t)mt_tensor_numel(t);
    float *ref = mt_test_golden_f32(name, NULL, NULL), *got = malloc(n * 4);
    for (size_t i = 0; scale != 1.0f && i < n; i++)
        ref[i] *= scale;
    mt_tensor g = mt_tensor_1d(got, MT_F32, (int64_t)n, MT_DEVICE_CPU), src = *t;
    MT_CHECK(mt_tensor_reshape(&src, 1, (int64_t[]){ (int64_t)n }, &src));
    MT_CHECK(mt_cast(&g, &src, NULL));
    char buf[96];
    snprintf(buf, sizeof buf, "%s %s", what, mt_dtype_name(label_dt));
    mt_test_close_f32(buf, got, ref, n, atol, rtol);
    free(ref), free(got);
}

#endif /* MT_TENSOR_TEST_COMMON_H */
