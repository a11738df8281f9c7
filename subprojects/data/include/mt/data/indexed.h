/* Megatron's indexed dataset: a path prefix P with P.bin (raw tokens) and P.idx (MMIDIDX version 1
 * header, sequence lengths and byte pointers, document indices, optional modes). Byte-compatible
 * with megatron-core's IndexedDataset / IndexedDatasetBuilder. */
#ifndef MT_DATA_INDEXED_H
#define MT_DATA_INDEXED_H

#include <mt/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Token dtype codes as stored in .idx (megatron's DType enum values). */
typedef enum mt_data_dtype {
    MT_DATA_U8 = 1,
    MT_DATA_I8 = 2,
    MT_DATA_I16 = 3,
    MT_DATA_I32 = 4,
    MT_DATA_I64 = 5,
    MT_DATA_F64 = 6,
    MT_DATA_F32 = 7,
    MT_DATA_U16 = 8,
} mt_data_dtype;

/* Bytes per element of a dtype code; 0 for an unknown code. */
MT_API size_t mt_data_dtype_size(int code);
/* Megatron's DType.optimal_dtype: U16 if vocab_size < 65500, else I32. */
MT_API mt_data_dtype mt_data_dtype_optimal(int64_t vocab_size);

typedef struct mt_data_indexed mt_data_indexed; /* read-only, thread-safe after open */

/* Opens `prefix`.idx and `prefix`.bin by mmap and validates the whole index (sizes, lengths,
 * pointers within .bin, document indices). `multimodal`: the .idx carries the modes array. A file
 * that is truncated, corrupt or inconsistent is MT_ERR_FORMAT naming the field. */
MT_API mt_status mt_data_indexed_open(const char *prefix, int multimodal, mt_data_indexed **out);
/* The same over caller memory (not copied; must outlive the handle): for tests and fuzzing. */
MT_API mt_status mt_data_indexed_from_memory(const void *idx, size_t idx_len, const void *bin,
                                             size_t bin_len, int multimodal, mt_data_indexed **out);
MT_API void mt_data_indexed_close(mt_data_indexed *ds); /* NULL is a no-op */

MT_API mt_data_dtype mt_data_indexed_dtype(const mt_data_indexed *ds);
/* Number of sequences S. */
MT_API int64_t mt_data_indexed_sequence_count(const mt_data_indexed *ds);
/* Number of documents (len(document_indices) - 1). */
MT_API int64_t mt_data_indexed_document_count(const mt_data_indexed *ds);
/* Tokens in sequence i (0 <= i < S; not checked). */
MT_API int32_t mt_data_indexed_sequence_length(const mt_data_indexed *ds, int64_t i);
/* Byte offset of sequence i in .bin. */
MT_API int64_t mt_data_indexed_sequence_pointer(const mt_data_indexed *ds, int64_t i);
/* document_indices[k], 0 <= k <= document_count: the first sequence of document k. */
MT_API int64_t mt_data_indexed_document_index(const mt_data_indexed *ds, int64_t k);
/* Mode of sequence i (multimodal files), else 0. */
MT_API int8_t mt_data_indexed_mode(const mt_data_indexed *ds, int64_t i);

/* Points *tokens at `length` tokens of sequence i starting at token `offset` inside the mapping
 * (no copy; element type is the dataset's dtype, aligned to its size). length < 0: to the end. */
MT_API mt_status mt_data_indexed_get(const mt_data_indexed *ds, int64_t i, int64_t offset,
                                     int64_t length, const void **tokens, int64_t *n);
/* Like mt_data_indexed_get, but converts the tokens to int64 into out[0..n). */
MT_API mt_status mt_data_indexed_get_i64(const mt_data_indexed *ds, int64_t i, int64_t offset,
                                         int64_t length, int64_t *out, int64_t *n);

/* ---- writer (megatron's IndexedDatasetBuilder) ---- */

typedef struct mt_data_writer mt_data_writer;

/* Creates `bin_path` for tokens of `dtype`; .idx is written by finalize. */
MT_API mt_status mt_data_writer_create(const char *bin_path, mt_data_dtype dtype,
                                       mt_data_writer **out);
/* Appends one sequence (add_item). Values must fit the dtype. */
MT_API mt_status mt_data_writer_add_item(mt_data_writer *w, const int64_t *tokens, int64_t n,
                                         int8_t mode);
/* Closes the current document (end_document). */
MT_API mt_status mt_data_writer_end_document(mt_data_writer *w);
/* add_document: tokens of n_lengths sequences (sum(lengths) tokens), then end_document. An empty
 * document still gets its (repeated) document index. */
MT_API mt_status mt_data_writer_add_document(mt_data_writer *w, const int64_t *tokens,
                                             const int64_t *lengths, int64_t n_lengths);
/* Appends another dataset `prefix` (same dtype) as add_index does. */
MT_API mt_status mt_data_writer_add_index(mt_data_writer *w, const char *prefix);
/* Closes .bin and writes `idx_path`; the modes array is written when `multimodal`. */
MT_API mt_status mt_data_writer_finalize(mt_data_writer *w, const char *idx_path, int multimodal);
MT_API void mt_data_writer_destroy(mt_data_writer *w); /* NULL is a no-op; unfinished files stay */

#ifdef __cplusplus
}
#endif

#endif /* MT_DATA_INDEXED_H */
