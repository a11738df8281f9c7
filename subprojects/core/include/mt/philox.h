/* Counter-based Philox4x32-10 (Salmon et al., SC'11): a pure function of (seed, stream, index),
 * header-only so the CPU and CUDA code draw bit-identical uniforms from the same inputs. */
#ifndef MT_PHILOX_H
#define MT_PHILOX_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define MT_PHILOX_FN static inline __host__ __device__
#else
#define MT_PHILOX_FN static inline
#endif

typedef struct mt_philox4 {
    uint32_t v[4];
} mt_philox4;

MT_PHILOX_FN uint32_t mt_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* Ten rounds of Philox4x32 on counter `c` with key (k0, k1). */
MT_PHILOX_FN mt_philox4 mt_philox4x32(mt_philox4 c, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mt_philox_mulhilo(0xD2511F53u, c.v[0], &hi0);
        uint32_t lo1 = mt_philox_mulhilo(0xCD9E8D57u, c.v[2], &hi1);
        mt_philox4 n;
        n.v[0] = hi1 ^ c.v[1] ^ k0;
        n.v[1] = lo1;
        n.v[2] = hi0 ^ c.v[3] ^ k1;
        n.v[3] = lo0;
        c = n;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

/* The 4 words of block `block` of stream `stream` under `seed`. */
MT_PHILOX_FN mt_philox4 mt_philox_block(uint64_t seed, uint64_t stream, uint64_t block) {
    mt_philox4 c;
    c.v[0] = (uint32_t)block;
    c.v[1] = (uint32_t)(block >> 32);
    c.v[2] = (uint32_t)stream;
    c.v[3] = (uint32_t)(stream >> 32);
    return mt_philox4x32(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Raw 32-bit draw number `index` (word index % 4 of block index / 4). */
MT_PHILOX_FN uint32_t mt_philox_u32(uint64_t seed, uint64_t stream, uint64_t index) {
    mt_philox4 x = mt_philox_block(seed, stream, index >> 2);
    return x.v[index & 3];
}

/* Maps 32 random bits to a float in (0, 1], exactly on every device. Not open at the top: for
 * draws >= 2^23 the float sum rounds (ties to even), so exactly 0.5 and 1.0 occur (2^-24 each). */
MT_PHILOX_FN float mt_philox_to_unit(uint32_t u) {
    return ((float)(u >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

/* Uniform in (0, 1] for element `index` (see mt_philox_to_unit). */
MT_PHILOX_FN float mt_philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return mt_philox_to_unit(mt_philox_u32(seed, stream, index));
}

/* Standard normal for element `index`: Box-Muller on words (2*(index%2), 2*(index%2)+1) of block
 * index/2, computed in double and rounded once, so CPU and GPU agree to the last float bit in
 * all but vanishingly rare ties. */
MT_PHILOX_FN float mt_philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    mt_philox4 x = mt_philox_block(seed, stream, index >> 1);
    int lane = (int)(index & 1) * 2;
    double u1 = ((double)(x.v[lane] >> 8) + 0.5) * (1.0 / 16777216.0);
    double u2 = ((double)(x.v[lane + 1] >> 8) + 0.5) * (1.0 / 16777216.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2));
}

/* A stable 64-bit stream id for a name (FNV-1a), e.g. a parameter name for initialization. */
MT_PHILOX_FN uint64_t mt_philox_stream_of(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *name; name++) {
        h ^= (unsigned char)*name;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Dropout's rule (mt_dropout, mt_attn_config.dropout): an element is kept iff its draw is below
 * mt_dropout_threshold(p) = floor((1 - p) 2^32) (p in (0, 1), computed in double from the float
 * p), and each sample has its own stream per dropout site. */
MT_PHILOX_FN uint32_t mt_dropout_threshold(float p) {
    const double t = (1.0 - (double)p) * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}
/* The kept elements' factor 1/(1-p), computed in double and rounded to float. */
MT_PHILOX_FN float mt_dropout_scale(float p) {
    return (float)(1.0 / (1.0 - (double)p));
}
MT_PHILOX_FN uint64_t mt_dropout_stream(int64_t sample, uint32_t site) {
    return (uint64_t)site << 32 | (uint32_t)sample;
}

#endif /* MT_PHILOX_H */
