/* NumPy .npy files (format versions 1-3), host memory only: the format golden values use. mt-tensor
 * wraps these as mt_tensor views. */
#ifndef MT_NPY_H
#define MT_NPY_H

#include <mt/core.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MT_NPY_MAX_DIMS 8

typedef struct mt_npy {
    char descr[8]; /* NumPy type string, little-endian or byte-order-free: "<f4", "<f8", "|u1" */
    int ndim;
    int64_t shape[MT_NPY_MAX_DIMS];
    size_t itemsize; /* bytes per element */
    size_t count;    /* number of elements */
    void *data;      /* C-order elements, owned; mt_npy_free releases */
} mt_npy;

/* Reads `path`. Fortran order, big-endian, object and structured dtypes are MT_ERR_FORMAT or
 * MT_ERR_UNSUPPORTED with the reason. On failure *out holds nothing to free. */
MT_API mt_status mt_npy_load(const char *path, mt_npy *out);
MT_API void mt_npy_free(mt_npy *a);

/* Writes a C-order array (version 1.0 header, padded to 64 bytes). */
MT_API mt_status mt_npy_save(const char *path, const char *descr, int ndim, const int64_t *shape,
                             const void *data);

/* Element i of a numeric array as a double (f2/f4/f8, i1..i8, u1..u8; bf16 is not a NumPy type). */
MT_API double mt_npy_get(const mt_npy *a, size_t i);

#ifdef __cplusplus
}
#endif

#endif /* MT_NPY_H */
