/* Fast CPU GEMM for f32, bf16 and f16 inputs (the reference, cpu/gemm.c, stays the spec): packed
 * panels, a 6x16 register-tiled micro-kernel with an AVX2+FMA clone picked at run time, and up to
 * MT_CPU_THREADS pthreads over M or N. Accumulates in fp32 (the reference in fp64) over the full K
 * in a fixed order, so the result does not depend on the thread count. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ops_impl.h"

enum {
    MR = 6,
    NR = 16,
    MAX_THREADS = 8
};
#define KC                   512         /* longest k block: a K x NR panel of B stays in L1/L2 */
#define A_BLOCK_BYTES        (128 << 10) /* a packed A block (mc x kc) stays in L2 */
#define B_BLOCK_BYTES        (1 << 20)   /* a packed B block (kc x nc) stays in L2/L3 */
#define MIN_FLOPS_PER_THREAD (4.0e6)

// why vector extensions: at -O2 gcc vectorises a plain float acc[6][16] loop but keeps it on the
// stack; 12 named 8-wide vectors stay in registers (gcc and clang, any target)
typedef float v8 __attribute__((vector_size(32)));

typedef struct tile_job {
    const gemm_args *g;
    int64_t bt, i0, j0; /* batch, first row and column of the tile in c */
    int mr, nr;         /* valid rows and columns (<= MR, NR) */
} tile_job;

static float gelu(float x) {             /* as in the reference */
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

/* ct[i][j] = (more ? ct[i][j] : 0) + sum over k of a[k][i] * b[k][j], with a packed K x MR and b
 * packed K x NR: one k block of an MR x NR tile, in fp32. */
static inline __attribute__((always_inline)) void tile_body(float *restrict ct, int more, int64_t K,
                                                            const float *restrict a,
                                                            const float *restrict b) {
    v8 acc[MR][2];
    if (more)
        memcpy(acc, ct, sizeof acc);
    else
        memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < K; k++) {
        v8 b0, b1;
        memcpy(&b0, b + k * NR, sizeof b0); // why memcpy: no alignment or aliasing assumption
        memcpy(&b1, b + k * NR + 8, sizeof b1);
#pragma GCC unroll 8 // why: -O2 does not unroll; unrolled, acc[][] becomes 12 registers
        for (int i = 0; i < MR; i++) {
            acc[i][0] += a[k * MR + i] * b0; /* scalar * vector broadcasts */
            acc[i][1] += a[k * MR + i] * b1;
        }
    }
    memcpy(ct, acc, sizeof acc);
}

/* c = epilogue(tile): alpha, beta, bias, GELU on the valid part, in double like the reference. */
static void epilogue(const tile_job *t, const float (*out)[NR]) {
    const gemm_args *g = t->g;
    for (int i = 0; i < t->mr; i++) {
        int64_t ic = t->bt * g->sc + (t->i0 + i) * g->ldc + t->j0;
        int64_t ip = t->bt * g->spre + (t->i0 + i) * g->ldpre + t->j0;
        if (g->c_dtype == MT_F32 && g->alpha == 1.0f && g->beta == 0.0f && !g->bias && !g->gelu) {
            memcpy((float *)g->c + ic, out[i], (size_t)t->nr * sizeof(float)); // why: the common
            continue; // case (nn.Linear without bias) costs a copy, no per-element branches
        }
        for (int j = 0; j < t->nr; j++) {
            double v = (double)g->alpha * out[i][j];
            if (g->beta != 0.0f) v += (double)g->beta * mt_load_f32(g->c, g->c_dtype, ic + j);
            if (g->bias) v += mt_load_f32(g->bias, g->c_dtype, t->j0 + j);
            if (g->gelu) {
                if (g->pre_gelu) mt_store_f32(g->pre_gelu, g->c_dtype, ip + j, (float)v);
                v = gelu((float)v);
            }
            mt_store_f32(g->c, g->c_dtype, ic + j, (float)v);
        }
    }
}

typedef void tile_fn(float *ct, int more, int64_t K, const float *a, const float *b);

static void tile_generic(float *ct, int more, int64_t K, const float *a, const float *b) {
    tile_body(ct, more, K, a, b);
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define HAVE_AVX2_CLONE 1
#if defined(__clang__)
#define FP_CONTRACT_FAST /* clang contracts a*b+c by default */
#else
// why: -std=c11 turns gcc's fp-contract off, which would leave a mul and an add instead of an FMA
#define FP_CONTRACT_FAST , optimize("fp-contract=fast")
#endif
__attribute__((target("avx2,fma") FP_CONTRACT_FAST)) static void
tile_avx2(float *ct, int more, int64_t K, const float *a, const float *b) {
    tile_body(ct, more, K, a, b);
}
#endif

static tile_fn *pick_tile(void) {
#ifdef HAVE_AVX2_CLONE
    // why a runtime check: the library is built for baseline x86-64, the machine may do better
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return tile_avx2;
#endif
    return tile_generic;
}

/* Packs rows [0, rows) of a rows x K operand, element (r, k) at src[off + r*rs + k*cs], into
 * panels of W rows: dst[(p*K + k)*W + r], zero rows past the end (they are never stored). */
static inline __attribute__((always_inline)) void pack_t(float *dst, const void *src, mt_dtype dt,
                                                         int64_t off, int64_t rs, int64_t cs,
                                                         int64_t rows, int64_t K, int W) {
    for (int64_t p = 0; p < rows; p += W) {
        int64_t n = rows - p < W ? rows - p : W;
        for (int64_t k = 0; k < K; k++, dst += W) {
            int64_t s = off + p * rs + k * cs;
            for (int r = 0; r < n; r++)
                dst[r] = dt == MT_BF16  ? mt_bf16_to_f32(((const uint16_t *)src)[s + r * rs])
                         : dt == MT_F16 ? mt_f16_to_f32(((const uint16_t *)src)[s + r * rs])
                                        : ((const float *)src)[s + r * rs];
            for (int r = (int)n; r < W; r++)
                dst[r] = 0.0f;
        }
    }
}

static void pack(float *dst, const void *src, mt_dtype dt, int64_t off, int64_t rs, int64_t cs,
                 int64_t rows, int64_t K, int W) {
    if (dt == MT_BF16) // why three calls: each inlines a copy with the dtype branch folded away
        pack_t(dst, src, MT_BF16, off, rs, cs, rows, K, W);
    else if (dt == MT_F16)
        pack_t(dst, src, MT_F16, off, rs, cs, rows, K, W);
    else
        pack_t(dst, src, MT_F32, off, rs, cs, rows, K, W);
}

/* One thread's share: rows [m0, m1) x columns [n0, n1) of c in every batch, in blocks of mc rows,
 * nc columns and kc of K (packed into pa and pb), tile by tile; fp32 partial tiles in cbuf. */
typedef struct part {
    const gemm_args *g;
    tile_fn *tile;
    int64_t m0, m1, n0, n1, mc, nc, kc;
    float *pa, *pb, *cbuf;
} part;

static void *run_part(void *arg) {
    const part *w = arg;
    const gemm_args *g = w->g;
    int64_t K = g->K, kc = w->kc;
    int one_k = kc >= K; /* the common case: B is packed once per column block */
    /* op(a)[i][k] and op(b)[k][j] as (row, k) strides of a (M x K) and b^T (N x K) */
    int64_t ars = g->trans_a ? 1 : g->lda, acs = g->trans_a ? g->lda : 1;
    int64_t brs = g->trans_b ? g->ldb : 1, bcs = g->trans_b ? 1 : g->ldb;
    for (int64_t bt = 0; bt < g->batch; bt++) {
        for (int64_t j0 = w->n0; j0 < w->n1; j0 += w->nc) {
            int64_t nb = w->n1 - j0 < w->nc ? w->n1 - j0 : w->nc;
            if (one_k) pack(w->pb, g->b, g->ab_dtype, bt * g->sb + j0 * brs, brs, bcs, nb, K, NR);
            for (int64_t i0 = w->m0; i0 < w->m1; i0 += w->mc) {
                int64_t mb = w->m1 - i0 < w->mc ? w->m1 - i0 : w->mc;
                for (int64_t p0 = 0; p0 < K || p0 == 0; p0 += kc) { /* once for K = 0 */
                    int64_t kb = K - p0 < kc ? K - p0 : kc;
                    if (!one_k)
                        pack(w->pb, g->b, g->ab_dtype, bt * g->sb + j0 * brs + p0 * bcs, brs, bcs,
                             nb, kb, NR);
                    pack(w->pa, g->a, g->ab_dtype, bt * g->sa + i0 * ars + p0 * acs, ars, acs, mb,
                         kb, MR);
                    // why jr outside ir: one kb x NR panel of B stays in L1 across the A panels
                    for (int64_t jr = 0; jr < nb; jr += NR) {
                        for (int64_t ir = 0; ir < mb; ir += MR) {
                            // why one slot for one_k: the tile goes out at once, cbuf stays in L1
                            float *ct = one_k ? w->cbuf : w->cbuf + (jr / NR * w->mc + ir) * NR;
                            w->tile(ct, p0 > 0, kb, w->pa + ir * kb, w->pb + jr * kb);
                            if (p0 + kc < K) continue; /* more k blocks to come */
                            tile_job t = { g,
                                           bt,
                                           i0 + ir,
                                           j0 + jr,
                                           mb - ir < MR ? (int)(mb - ir) : MR,
                                           nb - jr < NR ? (int)(nb - jr) : NR };
                            epilogue(&t, (const float(*)[NR])ct);
                        }
                    }
                }
            }
        }
    }
    return NULL;
}

/* MT_CPU_THREADS, else the online CPUs; at most MAX_THREADS. */
static int cpu_threads(void) {
    long n = mt_env_int("MT_CPU_THREADS", 0);
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

static int64_t round_up(int64_t x, int64_t m) {
    return (x + m - 1) / m * m;
}

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

static tile_fn *tile_impl;
static void pick_once(void) {
    tile_impl = pick_tile();
}

mt_status gemm_fast_cpu(const gemm_args *g) {
    MT_REQUIRE(g->ab_dtype == MT_F32 || g->ab_dtype == MT_BF16 || g->ab_dtype == MT_F16,
               MT_ERR_UNSUPPORTED, "fast gemm: %s inputs", mt_dtype_name(g->ab_dtype));
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pick_once);
    /* k blocks of equal length up to KC (a function of K alone: the sum order never changes);
     * row and column blocks of whole tiles, about A_BLOCK_BYTES and B_BLOCK_BYTES packed */
    int64_t nk = g->K > KC ? (g->K + KC - 1) / KC : 1, kc = g->K > 0 ? (g->K + nk - 1) / nk : 1;
    int64_t mc = clamp64(A_BLOCK_BYTES / (4 * kc) / MR * MR, MR, round_up(g->M, MR));
    int64_t nc = clamp64(B_BLOCK_BYTES / (4 * kc) / NR * NR, NR, round_up(g->N, NR));
    /* threads split the dimension with more tiles, whole tiles each, MIN_FLOPS_PER_THREAD at least
     * (why: starting a thread costs tens of microseconds) */
    int64_t tm = (g->M + MR - 1) / MR, tn = (g->N + NR - 1) / NR;
    int split_n = tn >= tm;
    int64_t tiles = split_n ? tn : tm, W = split_n ? NR : MR, dim = split_n ? g->N : g->M;
    double flops = 2.0 * (double)g->batch * (double)g->M * (double)g->N * (double)g->K;
    int64_t nt = cpu_threads();
    if ((double)nt * MIN_FLOPS_PER_THREAD > flops) nt = (int64_t)(flops / MIN_FLOPS_PER_THREAD);
    nt = clamp64(nt, 1, tiles);
    int64_t per = (tiles + nt - 1) / nt * W;
    nt = (dim + per - 1) / per; /* no empty parts */

    part parts[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = { 0 }, oom = 0;
    size_t abytes = (size_t)round_up(mc * kc * 4, 64), bbytes = (size_t)round_up(nc * kc * 4, 64);
    size_t cbytes = (size_t)round_up((nk > 1 ? mc * nc : MR * NR) * 4, 64);
    for (int64_t t = 0; t < nt; t++) {
        int64_t lo = t * per, hi = lo + per < dim ? lo + per : dim;
        part w = { g, tile_impl, 0, g->M, 0, g->N, mc, nc, kc, NULL, NULL, NULL };
        if (split_n)
            w.n0 = lo, w.n1 = hi;
        else
            w.m0 = lo, w.m1 = hi;
        w.pa = aligned_alloc(64, abytes);
        w.pb = aligned_alloc(64, bbytes);
        w.cbuf = aligned_alloc(64, cbytes);
        oom |= !w.pa || !w.pb || !w.cbuf;
        parts[t] = w;
    }
    if (!oom) {
        for (int64_t t = 1; t < nt; t++)
            started[t] = pthread_create(&tid[t], NULL, run_part, &parts[t]) == 0;
        run_part(&parts[0]);
        for (int64_t t = 1; t < nt; t++) {
            if (started[t])
                pthread_join(tid[t], NULL);
            else
                run_part(&parts[t]); /* could not start a thread: same work, same bits, here */
        }
    }
    for (int64_t t = 0; t < nt; t++)
        free(parts[t].pa), free(parts[t].pb), free(parts[t].cbuf);
    MT_REQUIRE(!oom, MT_ERR_OOM, "fast gemm: %zu bytes of packing buffers per thread",
               abytes + bbytes + cbytes);
    return MT_OK;
}
