/* NumPy's MT19937 (legacy RandomState) and PCG64/SeedSequence (default_rng), bit for bit: the
 * sample order of GPTDataset and the mock document lengths depend on every draw. */
#include <mt/data/random.h>

#define MT_N 624
#define MT_M 397

void mt_data_mt19937_seed(mt_data_mt19937 *r, uint32_t seed) {
    for (int pos = 0; pos < MT_N; pos++) {
        r->key[pos] = seed;
        seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)pos + 1;
    }
    r->pos = MT_N;
}

void mt_data_mt19937_seed_array(mt_data_mt19937 *r, const uint32_t *key, size_t n) {
    uint32_t *mt = r->key;
    size_t i = 1, j = 0;
    mt_data_mt19937_seed(r, 19650218u);
    for (size_t k = MT_N > n ? MT_N : n; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
        if (j >= n) j = 0;
    }
    for (size_t k = MT_N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
    }
    mt[0] = 0x80000000u;
    r->pos = MT_N;
}

static void mt_generate(mt_data_mt19937 *r) {
    uint32_t *mt = r->key, y;
    int i;
    for (i = 0; i < MT_N - MT_M; i++) {
        y = (mt[i] & 0x80000000u) | (mt[i + 1] & 0x7fffffffu);
        mt[i] = mt[i + MT_M] ^ (y >> 1) ^ (-(y & 1) & 0x9908b0dfu);
    }
    for (; i < MT_N - 1; i++) {
        y = (mt[i] & 0x80000000u) | (mt[i + 1] & 0x7fffffffu);
        mt[i] = mt[i + (MT_M - MT_N)] ^ (y >> 1) ^ (-(y & 1) & 0x9908b0dfu);
    }
    y = (mt[MT_N - 1] & 0x80000000u) | (mt[0] & 0x7fffffffu);
    mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ (-(y & 1) & 0x9908b0dfu);
    r->pos = 0;
}

uint32_t mt_data_mt19937_next(mt_data_mt19937 *r) {
    if (r->pos == MT_N) mt_generate(r);
    uint32_t y = r->key[r->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t mt_data_mt19937_interval(mt_data_mt19937 *r, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffu) {
        while ((v = (mt_data_mt19937_next(r) & mask)) > max) {
        }
    } else {
        do {
            uint64_t hi = mt_data_mt19937_next(r);
            v = ((hi << 32) | mt_data_mt19937_next(r)) & mask;
        } while (v > max);
    }
    return v;
}

void mt_data_mt19937_shuffle_i32(mt_data_mt19937 *r, int32_t *a, size_t n) {
    for (size_t i = n > 0 ? n - 1 : 0; i >= 1; i--) {
        size_t j = (size_t)mt_data_mt19937_interval(r, i);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void mt_data_mt19937_shuffle_i64(mt_data_mt19937 *r, int64_t *a, size_t n) {
    for (size_t i = n > 0 ? n - 1 : 0; i >= 1; i--) {
        size_t j = (size_t)mt_data_mt19937_interval(r, i);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ---- SeedSequence (pool of 4 words) and PCG64 ---- */

#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L  0xca01f9ddu
#define SS_MIX_R  0x4973f715u

static uint32_t ss_hashmix(uint32_t v, uint32_t *h) {
    v ^= *h;
    *h *= SS_MULT_A;
    v *= *h;
    return v ^ (v >> 16);
}

static uint32_t ss_mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
    return r ^ (r >> 16);
}

__extension__ typedef unsigned __int128 u128;
#define PCG_MULT (((u128)2549297995355413924ull << 64) | 4865540595714422341ull)

static u128 pcg_state(const mt_data_pcg64 *r) {
    return (u128)r->state_hi << 64 | r->state_lo;
}

static void pcg_step(mt_data_pcg64 *r) {
    u128 s = pcg_state(r) * PCG_MULT + ((u128)r->inc_hi << 64 | r->inc_lo);
    r->state_hi = (uint64_t)(s >> 64);
    r->state_lo = (uint64_t)s;
}

void mt_data_pcg64_seed(mt_data_pcg64 *r, uint32_t seed) {
    uint32_t pool[4], h = SS_INIT_A;
    /* entropy = [seed] (one word; numpy pads the pool with hashmix(0)) */
    for (int i = 0; i < 4; i++)
        pool[i] = ss_hashmix(i == 0 ? seed : 0, &h);
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            if (s != d) pool[d] = ss_mix(pool[d], ss_hashmix(pool[s], &h));
    uint32_t w[8];
    h = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % 4];
        v ^= h;
        h *= SS_MULT_B;
        v *= h;
        w[i] = v ^ (v >> 16);
    }
    uint64_t v[4];
    for (int i = 0; i < 4; i++)
        v[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
    /* pcg64_set_seed: state = (v0 << 64 | v1), increment = (v2 << 64 | v3) */
    u128 init = (u128)v[0] << 64 | v[1], seq = (u128)v[2] << 64 | v[3];
    u128 inc = seq << 1 | 1;
    r->inc_hi = (uint64_t)(inc >> 64);
    r->inc_lo = (uint64_t)inc;
    r->state_hi = r->state_lo = 0;
    pcg_step(r);
    u128 s = pcg_state(r) + init;
    r->state_hi = (uint64_t)(s >> 64);
    r->state_lo = (uint64_t)s;
    pcg_step(r);
    r->has_buf = 0;
    r->buf = 0;
}

uint64_t mt_data_pcg64_next64(mt_data_pcg64 *r) {
    pcg_step(r);
    uint64_t x = r->state_hi ^ r->state_lo;
    unsigned rot = (unsigned)(r->state_hi >> 58);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static uint32_t pcg_next32_buffered(mt_data_pcg64 *r) {
    if (r->has_buf) {
        r->has_buf = 0;
        return (uint32_t)(r->buf >> 32);
    }
    r->buf = mt_data_pcg64_next64(r);
    r->has_buf = 1;
    return (uint32_t)r->buf;
}

int32_t mt_data_pcg64_integers_i32(mt_data_pcg64 *r, int32_t low, int32_t high) {
    uint32_t rng = (uint32_t)((int64_t)high - low - 1); /* inclusive range, as numpy */
    if (rng == 0) return low;
    uint32_t excl = rng + 1; /* rng < 0xffffffff here: int32 ranges */
    uint64_t m = (uint64_t)pcg_next32_buffered(r) * excl;
    uint32_t left = (uint32_t)m;
    if (left < excl) {
        uint32_t threshold = (uint32_t)(-excl) % excl;
        while (left < threshold) {
            m = (uint64_t)pcg_next32_buffered(r) * excl;
            left = (uint32_t)m;
        }
    }
    return (int32_t)((int64_t)low + (int64_t)(m >> 32));
}
