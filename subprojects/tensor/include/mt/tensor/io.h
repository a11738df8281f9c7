/* Tensor files: .npy (through mt-core's reader) and safetensors (spec: huggingface/safetensors),
 * host memory only. */
#ifndef MT_TENSOR_IO_H
#define MT_TENSOR_IO_H

#include <mt/npy.h>
#include <mt/tensor/view.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A host view over a loaded .npy array (f4, f2, i4, i8, u2, u1); the npy keeps ownership. */
MT_API mt_status mt_tensor_from_npy(const mt_npy *a, mt_tensor *out);
/* Writes a contiguous host tensor as .npy (bf16 is written as its raw uint16 bits, "<u2"). */
MT_API mt_status mt_tensor_save_npy(const char *path, const mt_tensor *t);

/* ---- safetensors ---- */

/* An opened safetensors file: the header is parsed and checked (64-bit header length, JSON with
 * dtype/shape/data_offsets, optional __metadata__ of strings; offsets must tile the data exactly,
 * no duplicates), the data is mapped read-only. Malformed, truncated, overlapping or
 * duplicate-key files give MT_ERR_FORMAT naming the problem. */
typedef struct mt_safetensors mt_safetensors;

MT_API mt_status mt_safetensors_open(const char *path, mt_safetensors **out);
/* Parses an in-memory file image (not copied: `buf` must outlive the handle). */
MT_API mt_status mt_safetensors_parse(const void *buf, size_t len, mt_safetensors **out);
MT_API void mt_safetensors_close(mt_safetensors *f); /* NULL is a no-op */

/* Number of tensors and the name of tensor i (in the file's data order). */
MT_API int mt_safetensors_count(const mt_safetensors *f);
MT_API const char *mt_safetensors_name(const mt_safetensors *f, int i);
/* A read-only host view of tensor `name` (MT_ERR_INVALID_ARG naming it if absent; dtypes we do not
 * handle give MT_ERR_UNSUPPORTED). The view lives as long as the handle. */
MT_API mt_status mt_safetensors_get(const mt_safetensors *f, const char *name, mt_tensor *out);
/* Byte offset of tensor `name`'s data from the start of the file (for ranged reads), and size. */
MT_API mt_status mt_safetensors_extent(const mt_safetensors *f, const char *name, uint64_t *offset,
                                       uint64_t *nbytes);
/* Value of __metadata__[key], or NULL. */
MT_API const char *mt_safetensors_metadata(const mt_safetensors *f, const char *key);

typedef struct mt_safetensors_item {
    const char *name;
    const mt_tensor *tensor; /* contiguous host tensor */
} mt_safetensors_item;

/* Writes `n` tensors and optional metadata (meta[2k] = key, meta[2k+1] = value, n_meta pairs) to
 * `path` in the reference layout (tensors sorted by descending dtype size then name; header padded
 * to 8 bytes). Not atomic: callers that need atomicity write a temporary name and rename. */
MT_API mt_status mt_safetensors_save(const char *path, const mt_safetensors_item *items, int n,
                                     const char *const *meta, int n_meta);

#ifdef __cplusplus
}
#endif

#endif /* MT_TENSOR_IO_H */
