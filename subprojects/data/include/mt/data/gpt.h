/* GPTDataset sample order identical to megatron-core's (document, sample and shuffle indices from
 * numpy's RandomState, cached next to the data), BlendedDataset, MockGPTDataset, and the
 * MegatronPretrainingSampler that hands global sample ids to data-parallel ranks. */
#ifndef MT_DATA_GPT_H
#define MT_DATA_GPT_H

#include <mt/core.h>
#include <mt/data/indexed.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mt_data_split {
    MT_DATA_SPLIT_TRAIN = 0,
    MT_DATA_SPLIT_VALID = 1,
    MT_DATA_SPLIT_TEST = 2,
} mt_data_split;

/* Parses a split string ("949,50,1": numbers, zero-padded to 3, normalized) into bookends
 * [beg, end) per split; present[i] = 0 where split i is empty (megatron's split_matrix None). */
MT_API mt_status mt_data_split_parse(const char *split, double bookends[3][2], int present[3]);

/* GPTDatasetConfig + the blend (--data-path) of BlendedMegatronDatasetConfig. */
typedef struct mt_data_config {
    size_t size;                               /* = sizeof(mt_data_config) */
    int64_t sequence_length;                   /* --seq-length */
    uint32_t seed;                             /* --seed */
    const char *split;                         /* --split; forced to "1,1,1" for mock data */
    int n_paths;                               /* number of prefixes; 0: mock data */
    const char *const *paths;                  /* dataset prefixes (P.bin, P.idx) */
    const double *weights;                     /* NULL, or one weight per prefix */
    int add_extra_token;                       /* add_extra_token_to_sequence */
    int drop_last_partial_validation_sequence; /* valid split only; others always drop */
    double mid_level_dataset_surplus;          /* --mid-level-dataset-surplus */
    const char *cache_dir;                     /* --data-cache-path; NULL: P/cache/..; "": none */
    int64_t vocab_size;                        /* mock data tokens are (1..len-1) % vocab_size */
    int64_t eod;                               /* tokenizer.eod (mock data, masks) */
    int64_t pad;                               /* pad id for short samples (-1: none) */
    int eod_mask_loss;                         /* --eod-mask-loss (get_sample) */
    int reset_position_ids;                    /* --reset-position-ids (get_sample) */
} mt_data_config;
#define MT_DATA_CONFIG_INIT                                                                        \
    {                                                                                              \
        sizeof(mt_data_config), 0, 1234, "969, 30, 1", 0, NULL, NULL, 1, 1, 0.005, NULL, 0, 0, -1, \
            0, 0                                                                                   \
    }

/* One split of a GPTDataset, BlendedDataset or MockGPTDataset. Read-only once built, except
 * that get_sample uses an internal buffer (one thread at a time). */
typedef struct mt_data_dataset mt_data_dataset;

/* Builds split `split` as BlendedMegatronDatasetBuilder does: one prefix without weights gives a
 * GPTDataset, several (or weights) a BlendedDataset, n_paths == 0 a MockGPTDataset. num_samples
 * < 0 means None (one epoch / exhaustive blend). Index files are loaded from or saved to the cache
 * directory. *out is NULL (and MT_OK) when the split is empty. Blocking. */
MT_API mt_status mt_data_dataset_create(const mt_data_config *cfg, mt_data_split split,
                                        int64_t num_samples, mt_data_dataset **out);
MT_API void mt_data_dataset_destroy(mt_data_dataset *ds); /* NULL is a no-op */

/* Number of samples (len(dataset)). */
MT_API int64_t mt_data_dataset_len(const mt_data_dataset *ds);
/* Tokens per sample: sequence_length + add_extra_token. */
MT_API int64_t mt_data_dataset_sample_tokens(const mt_data_dataset *ds);
/* Token ids of sample i into text[0..sample_tokens) (short samples padded with cfg->pad);
 * *dataset_id (may be NULL) gets the blended dataset it came from (0 without blending). */
MT_API mt_status mt_data_dataset_get(const mt_data_dataset *ds, int64_t i, int64_t *text,
                                     int *dataset_id);

/* Megatron's _get_ltor_masks_and_position_ids on one sequence of T tokens: start[t], the first
 * token of token t's document (documents end with an eod token, which belongs to its document).
 * --reset-position-ids makes position t be t - start[t]; --reset-attention-mask lets query t
 * attend to keys start[t] .. t (mt_attn_config.key_start). */
MT_API void mt_data_doc_starts(const int64_t *tokens, int64_t T, int64_t eod, int64_t *start);

/* GPTDataset.__getitem__ for sample i, each of T = sequence_length entries: tokens and labels
 * (text shifted by one; pad ids become 0), loss_mask (0 on pad labels, and on eod tokens with
 * eod_mask_loss) and position_ids (restarting after each eod with reset_position_ids). */
MT_API mt_status mt_data_dataset_get_sample(const mt_data_dataset *ds, int64_t i, int64_t *tokens,
                                            int64_t *labels, float *loss_mask,
                                            int64_t *position_ids);

/* Index arrays of a plain GPT/mock dataset (NULL for a blend): document_index (int32, n_doc),
 * sample_index (int64 pairs, n_samples + 1), shuffle_index (int64, n_samples). Borrowed. */
MT_API mt_status mt_data_dataset_indices(const mt_data_dataset *ds, const int32_t **doc,
                                         int64_t *n_doc, const int64_t **sample,
                                         const int64_t **shuffle, int64_t *n_samples);

/* Megatron's MegatronPretrainingSampler: global ids from consumed_samples on, cut into chunks of
 * micro_batch * dp_size; rank r takes [r*micro_batch, (r+1)*micro_batch) of each chunk. */
typedef struct mt_data_sampler {
    int64_t total_samples, next, micro_batch;
    int dp_rank, dp_size, drop_last;
} mt_data_sampler;

/* Validates like megatron (total > 0, consumed < total, micro_batch > 0, rank < size). */
MT_API mt_status mt_data_sampler_init(mt_data_sampler *s, int64_t total_samples,
                                      int64_t consumed_samples, int64_t micro_batch, int dp_rank,
                                      int dp_size, int drop_last);
/* This rank's next micro-batch into ids[0..micro_batch); returns how many (0: exhausted; the last
 * partial chunk, without drop_last, may give fewer). */
MT_API int64_t mt_data_sampler_next(mt_data_sampler *s, int64_t *ids);

#ifdef __cplusplus
}
#endif

#endif /* MT_DATA_GPT_H */
