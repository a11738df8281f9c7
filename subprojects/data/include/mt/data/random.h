/* NumPy's generators reproduced bit for bit: the legacy MT19937 RandomState (seed, shuffle) that
 * GPTDataset uses, and PCG64 + SeedSequence behind default_rng (mock data document lengths). */
#ifndef MT_DATA_RANDOM_H
#define MT_DATA_RANDOM_H

#include <mt/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* numpy.random.RandomState: MT19937 state. */
typedef struct mt_data_mt19937 {
    uint32_t key[624];
    int pos;
} mt_data_mt19937;

/* RandomState(seed) for an integer seed (init_genrand, numpy's mt19937_seed). */
MT_API void mt_data_mt19937_seed(mt_data_mt19937 *r, uint32_t seed);
/* RandomState(array) (numpy's mt19937_init_by_array). */
MT_API void mt_data_mt19937_seed_array(mt_data_mt19937 *r, const uint32_t *key, size_t n);
/* Next raw 32-bit output (genrand_int32). */
MT_API uint32_t mt_data_mt19937_next(mt_data_mt19937 *r);
/* numpy's random_interval: uniform in [0, max] by masked rejection. */
MT_API uint64_t mt_data_mt19937_interval(mt_data_mt19937 *r, uint64_t max);
/* RandomState.shuffle of a 1-D array, in place (Fisher-Yates from the end). */
MT_API void mt_data_mt19937_shuffle_i32(mt_data_mt19937 *r, int32_t *a, size_t n);
MT_API void mt_data_mt19937_shuffle_i64(mt_data_mt19937 *r, int64_t *a, size_t n);

/* numpy.random.default_rng(seed): PCG64 (XSL-RR 128/64) seeded through SeedSequence(seed). */
typedef struct mt_data_pcg64 {
    uint64_t state_hi, state_lo, inc_hi, inc_lo;
    uint64_t buf; /* the buffered upper half for 32-bit draws */
    int has_buf;
} mt_data_pcg64;

MT_API void mt_data_pcg64_seed(mt_data_pcg64 *r, uint32_t seed);
MT_API uint64_t mt_data_pcg64_next64(mt_data_pcg64 *r);
/* Generator.integers(low, high, dtype=int32) for one value: Lemire's bounded draw on buffered
 * 32-bit halves. high > low. */
MT_API int32_t mt_data_pcg64_integers_i32(mt_data_pcg64 *r, int32_t low, int32_t high);

#ifdef __cplusplus
}
#endif

#endif /* MT_DATA_RANDOM_H */
