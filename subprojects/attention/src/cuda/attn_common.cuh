/* Private CUDA helpers for the attention kernels: arguments, dtype traits, mma.sync m16n8k16
 * (bf16/f16 in, f32 accumulate), ldmatrix, cp.async and the swizzled shared-memory tile layout. */
#ifndef MT_ATTN_COMMON_CUH
#define MT_ATTN_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mt/core_cuda.h>

#include "../attn_impl.h"

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2   0.6931471805599453f

/* 2^x by the MUFU alone: exp2f without fast math adds a denormal-result path (FSETP, two FMUL),
 * and the probabilities it would keep (below 2^-126) are nothing beside a row sum of at least 1. */
__device__ __forceinline__ float attn_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Strides (b, t, h) in elements of the eight (B,T,heads,D) operands. */
enum {
    AQ,
    AK,
    AV,
    AO,
    ADO,
    ADQ,
    ADK,
    ADV,
    A_NT
};
struct attn_args {
    int B, T, H, Hkv, D, group, causal, ds_split;
    int Tk; /* keys: T, or more in a forward over cached keys (attn_fwd_rows_kernel) */
    /* Queries over a key prefix in the square kernels (attn_prefix_args): T is then the keys'
     * count and the queries are rows qoff .. T - 1 of that square (Tq = T - qoff of them; q, out
     * and dout passed as if row 0 were the square's), lse, Di and dQ's accumulator have Tq rows.
     * Otherwise qoff 0 and Tq = T. */
    int qoff, Tq;
    int tail_heads; /* wgmma grids: the last heads taken a tile per block (block_work) */
    /* the non-causal wgmma backward: its last split_tiles key tiles walked by split_pieces
     * blocks (kv_pass_of), their f32 dK, dV added into split_acc, room for split_cap tiles
     * (attn_impl.h) */
    int split_tiles, split_pieces, split_cap;
    float *split_acc;
    int lse_bulk; /* the wgmma backward: lse and Di tiles by bulk copies (attn_sm90.cu) */
    float scale;
    int64_t st[A_NT][3];
    const int *ks;  /* document masks: key_start (B,T), or NULL (attention.h) */
    const int *kl;  /* a KV cache's lengths: key_len (B), or NULL (Tk keys a row) */
    attn_drop drop; /* attention dropout (drop.ids NULL: none); the generic kernels only */
};

/* The first key that query row i of batch entry b may see (document masks; 0 without them).
 * Rows past T take the last row's: they are masked anyway. */
__device__ __forceinline__ int key_start_of(const attn_args &a, int b, int i) {
    return a.ks ? a.ks[(int64_t)b * a.T + min(i, a.T - 1)] : 0;
}

/* Index of row q0 of head h, batch b in lse and Di ((B, H, Tq) floats; q0 from qoff on). */
__device__ __forceinline__ int64_t lse_row(const attn_args &a, int b, int h, int q0) {
    return ((int64_t)b * a.H + h) * a.Tq + q0 - a.qoff;
}

static inline attn_args attn_make_args(const attn_shape *s, const mt_tensor *const *t) {
    attn_args a;
    a.B = (int)s->B, a.T = (int)s->T, a.H = (int)s->H, a.Hkv = (int)s->Hkv, a.D = (int)s->D;
    a.Tk = (int)(s->Tk ? s->Tk : s->T);
    a.qoff = 0, a.Tq = a.T;
    a.group = (int)(s->H / s->Hkv), a.causal = s->causal, a.scale = s->scale;
    a.ds_split = s->ds_split, a.tail_heads = 0;
    a.split_tiles = a.split_pieces = a.split_cap = 0, a.split_acc = NULL, a.lse_bulk = 0;
    a.ks = s->ks;
    a.kl = s->kl;
    a.drop = s->drop;
    for (int i = 0; i < A_NT; i++)
        for (int j = 0; j < 3; j++)
            a.st[i][j] = t[i] ? t[i]->stride[j] : 0;
    return a;
}

/* Causal queries over a key prefix (Tk > T, the queries the last T of the Tk positions) run on
 * the square kernels when the prefix's extra keys fill whole query tiles (128 rows: every
 * kernel's tile divides it; attention.h's MT_ATTN_PREFIX_ALIGN): the square of Tk rows whose
 * first Tk - T rows (whole tiles) are never visited. */
static inline int attn_prefix_ok(const attn_args &a) {
    return a.causal && !a.kl && !a.ks && !a.drop.ids && a.Tk > a.T &&
           (a.Tk - a.T) % MT_ATTN_PREFIX_ALIGN == 0;
}
/* a as that square: T = Tk, qoff = Tk - T (the caller shifts q, out, dout and dq back by qoff
 * rows: attn_rows_back). */
static inline attn_args attn_prefix_args(const attn_args &a) {
    attn_args p = a;
    p.qoff = a.Tk - a.T, p.Tq = a.T, p.T = a.Tk;
    return p;
}
/* A (B,T,heads,D) operand's pointer moved back by n rows (row i of the result is row i - n of
 * t; only rows from n on are ever read or written). */
template <typename T> static inline T *attn_rows_back(const mt_tensor *t, int n) {
    return (T *)t->data - (int64_t)n * t->stride[1];
}

/* 1 if t can feed the tensor-core kernels: 16-byte aligned rows. */
static inline int attn_aligned(const mt_tensor *t) {
    return ((uintptr_t)t->data & 15) == 0 && t->stride[0] % 8 == 0 && t->stride[1] % 8 == 0 &&
           t->stride[2] % 8 == 0;
}

template <typename T> struct attn_t;
template <> struct attn_t<float> {
    static __device__ __forceinline__ float ld(float v) {
        return v;
    }
    static __device__ __forceinline__ float st(float v) {
        return v;
    }
};
template <> struct attn_t<__nv_bfloat16> {
    /* bf16 keeps 8 significant bits: operands that need more go in as hi + lo (see residual) */
    static constexpr bool two_term = true;
    static __device__ __forceinline__ float ld(__nv_bfloat16 v) {
        return __bfloat162float(v);
    }
    static __device__ __forceinline__ __nv_bfloat16 st(float v) {
        return __float2bfloat16_rn(v);
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    /* (lo, hi) - unpack(packed): what pack() rounded away, itself packed */
    static __device__ __forceinline__ uint32_t residual(float lo, float hi, uint32_t packed) {
        float2 f = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&packed));
        return pack(lo - f.x, hi - f.y);
    }
    static __device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0,
                                               uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct attn_t<__half> {
    static constexpr bool two_term = false;
    static __device__ __forceinline__ float ld(__half v) {
        return __half2float(v);
    }
    static __device__ __forceinline__ __half st(float v) {
        return __float2half_rn(v);
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0,
                                               uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

/* Element (r, c) of a shared tile with W columns (W >= 64): 16-byte chunks XOR-swizzled by row
 * so that ldmatrix over 8 consecutive rows hits 8 distinct bank groups. */
template <int W> __device__ __forceinline__ int swz(int r, int c) {
    return r * W + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
}

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
/* 16-byte async copy; zero-fills the destination when !valid (rows past T). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
/* 4-byte async copy (for f32 rows of unknown alignment); zero-fills when !valid. */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Element (r, c) of an R-row tile stored as 64-column panels of 128-byte rows, 16-byte chunks
 * XOR-swizzled by row: wgmma's 128-byte swizzle when each panel starts 1024-byte aligned. */
template <int R> __device__ __forceinline__ int pswz(int r, int c) {
    return (c >> 6) * R * 64 + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}

/* Async load of a (R,D) tile, rows [0, nvalid) from g (row stride rs elements), into swizzled
 * shared memory (PANELS: the pswz layout, else swz), zeros in the remaining rows. All NT threads
 * take part. */
template <typename T, int R, int D, int NT, bool PANELS = false>
__device__ __forceinline__ void load_tile(T *sm, const T *g, int64_t rs, int nvalid) {
    constexpr int CH = D / 8;
    static_assert(R * CH % NT == 0, "tile chunks must divide among the threads");
#pragma unroll
    for (int it = 0; it < R * CH / NT; it++) {
        int idx = threadIdx.x + it * NT, r = idx / CH, c = (idx % CH) * 8;
        bool ok = r < nvalid;
        cp_async16(sm + (PANELS ? pswz<R>(r, c) : swz<D>(r, c)), g + (ok ? r * rs + c : 0), ok);
    }
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* Blocks per head of the wgmma kernels over ntiles tiles: a tile each, or a causal pair. */
__host__ __device__ __forceinline__ int pair_blocks_per_head(const attn_args &a, int ntiles) {
    return a.causal ? (ntiles + 1) / 2 : ntiles;
}

/* The wgmma kernels' grids are one-dimensional. Heads 0 .. heads_all - tail_heads - 1 come first,
 * tiles fastest: their blocks take tile pt (pair_blocks_per_head; causal: tiles pt and
 * ntiles-1-pt, npass 2, but the middle tile of an odd count alone). why: the blocks running at
 * once then share a few heads, whose operands and dQ accumulator stay in L2 (heads fastest spread
 * them over every head: 16% L2 load hits at T=4096). Then the last tail_heads heads (causal), a
 * tile per block, heads fastest, the longest tiles (rank pt = 0) first: they fill the last wave
 * that equal pairs would leave nearly empty (attn_sm90.cu: pick_tail_heads). The mma.sync kernels
 * keep heads fastest: without pairs, causal blocks of uneven length lose more there than L2 gains
 * (deterministic GQA fwd+bwd -13% on an H200). */
__device__ __forceinline__ void block_work(const attn_args &a, int heads_all, int ntiles, int &pt,
                                           int &bh, int &npass) {
    const unsigned np = (unsigned)pair_blocks_per_head(a, ntiles),
                   paired = (unsigned)(heads_all - a.tail_heads) * np, i = blockIdx.x;
    if (i < paired) {
        pt = (int)(i % np), bh = (int)(i / np);
        npass = a.causal && ntiles - 1 - pt != pt ? 2 : 1;
    } else {
        pt = (int)((i - paired) / (unsigned)a.tail_heads);
        bh = heads_all - a.tail_heads + (int)((i - paired) % (unsigned)a.tail_heads);
        npass = 1;
    }
}
static inline dim3 work_grid(const attn_args &a, int heads_all, int ntiles) {
    return dim3((unsigned)((int64_t)(heads_all - a.tail_heads) * pair_blocks_per_head(a, ntiles) +
                           (int64_t)a.tail_heads * ntiles));
}

/* Pass `pass` of a block of the wgmma backward, whose walks have ntile query tiles when non-causal:
 * key tile kt of kv head bh, query tiles n0 .. n1 - 1 of its walk (n1 < 0: all of them), and split,
 * the index of a split tile whose walk this is a part of (else -1); false past the block's last
 * pass. Blocks below the split tail take block_work's tiles. why: a non-causal grid of equal tiles
 * whose count is just over whole waves leaves a last wave of few blocks (B4 H16 T4096 D128: 2048
 * tiles on 132 SMs, 68 in the sixteenth wave); its last split_tiles tiles are cut instead into
 * split_pieces runs of equal length over the concatenated walks, each run over at most two
 * tiles. */
struct kv_pass {
    int bh, kt, n0, n1, split;
};
__device__ __forceinline__ bool kv_pass_of(const attn_args &a, int heads_all, int nkt, int ntile,
                                           int pass, kv_pass &w) {
    const int whole = heads_all * nkt - a.split_tiles;
    if (a.split_tiles == 0 || (int)blockIdx.x < whole) {
        int pt, npass;
        block_work(a, heads_all, nkt, pt, w.bh, npass);
        w.kt = pass ? nkt - 1 - pt : pt, w.n0 = 0, w.n1 = -1, w.split = -1;
        return pass < npass;
    }
    const int64_t units = (int64_t)a.split_tiles * ntile, p = blockIdx.x - whole;
    const int64_t u0 = p * units / a.split_pieces, u1 = (p + 1) * units / a.split_pieces;
    const int s = (int)(u0 / ntile) + pass;
    const int64_t n0 = pass ? 0 : u0 - (int64_t)s * ntile,
                  n1 = min((int64_t)ntile, u1 - (int64_t)s * ntile);
    if (n1 <= n0) return false;
    w.bh = (whole + s) / nkt, w.kt = (whole + s) % nkt, w.n0 = (int)n0, w.n1 = (int)n1, w.split = s;
    return true;
}

/* Key tiles of BC columns (nk_all in all) that query rows q0 .. q0 + qn - 1 visit (causal: up to
 * the last row). */
template <int BC>
__device__ __forceinline__ int key_tiles(const attn_args &a, int nk_all, int q0, int qn) {
    return a.causal ? min(nk_all, (q0 + qn + BC - 1) / BC) : nk_all;
}

/* An f32 accumulator, zeroed. */
template <int N> __device__ __forceinline__ void acc_zero(float (&x)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
        x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}

/* A query-tile block's place: blockIdx.x is (batch b, head h; kv head hk), blockIdx.y the tile of
 * BR rows from q0 (qn of them valid), and nk key tiles of BC to visit. */
struct q_block {
    int b, h, hk, q0, qn, nk;
};
template <int BR, int BC> __device__ __forceinline__ q_block q_block_of(const attn_args &a) {
    const int nq = (a.Tq + BR - 1) / BR, nk_all = (a.T + BC - 1) / BC;
    // why: tiles are y, heads x, and blocks start x-fastest: every head's longest rows go first
    const int qt = a.causal ? nq - 1 - (int)blockIdx.y : (int)blockIdx.y;
    const int b = blockIdx.x / a.H, h = blockIdx.x % a.H, q0 = a.qoff + qt * BR,
              qn = min(BR, a.T - q0);
    return { b, h, h / a.group, q0, qn, key_tiles<BC>(a, nk_all, q0, qn) };
}

/* Document masks in the tensor-core kernels: a template flag DOCS (set exactly when a.ks is
 * given), so that the kernels without them compile as before. */

/* A query tile's document-mask bounds (fwd_ks): the first key tile of BC keys that any of its
 * rows q0 .. q0 + BR - 1 sees (kb), the largest key start of its rows (lim: key tiles from it on
 * need no document mask), and the key starts of a thread's rows row0 and row0 + 8. All zero
 * without document masks. */
struct fwd_ks {
    int kb, lim, row[2];
};
template <int BR, int BC, bool DOCS>
__device__ __forceinline__ fwd_ks fwd_ks_of(const attn_args &a, int b, int q0, int row0) {
    if constexpr (!DOCS) return { 0, 0, { 0, 0 } };
    return { key_start_of(a, b, q0) / BC,
             key_start_of(a, b, q0 + BR - 1),
             { key_start_of(a, b, row0), key_start_of(a, b, row0 + 8) } };
}

/* One key tile of the forward's online softmax (exp2 domain) for a warp's query rows row0 and
 * row0+8 in the mma accumulator order (mma.sync and wgmma alike): masks the scores s of keys k0..
 * (past T, causal, before the row's key start), updates the running max m and sum l; s becomes
 * P, and alpha[r] the factor that O's rows take. */
template <int BC, bool DOCS>
__device__ __forceinline__ void
softmax_scores(const attn_args &a, float (&s)[BC / 8][4], float (&m)[2], float (&l)[2],
               float (&alpha)[2], float sl2, int k0, int q0, int row0, const fwd_ks &ks, int lane) {
    const bool mask = k0 + BC > a.T || (a.causal && k0 + BC - 1 > q0) || (DOCS && k0 < ks.lim);
    if (mask)
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = k0 + nt * 8 + 2 * (lane & 3) + (e & 1), row = row0 + (e >> 1) * 8;
                if (col >= a.T || (a.causal && col > row) || (DOCS && col < ks.row[e >> 1]))
                    s[nt][e] = -INFINITY;
            }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
            mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* the running max m is in the exp2 domain (scores times sl2 > 0, so the max commutes) */
        float mn = fmaxf(m[r], mx * sl2);
        float ms = mn == -INFINITY ? 0.0f : mn; // why: a fully masked row must not give NaN
        float sum = 0.0f;
        alpha[r] = attn_exp2(m[r] - ms);
        m[r] = mn;
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
            s[nt][2 * r] = attn_exp2(fmaf(s[nt][2 * r], sl2, -ms));
            s[nt][2 * r + 1] = attn_exp2(fmaf(s[nt][2 * r + 1], sl2, -ms));
            sum += s[nt][2 * r] + s[nt][2 * r + 1];
        }
        l[r] = l[r] * alpha[r] + sum;
    }
}
/* O's rows row0 (r = 0) and row0 + 8 (r = 1) times alpha[r]. */
template <int D>
__device__ __forceinline__ void softmax_rescale(float (&o)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++)
        o[dt][0] *= alpha[0], o[dt][1] *= alpha[0], o[dt][2] *= alpha[1], o[dt][3] *= alpha[1];
}
/* softmax_scores, then O rescaled. */
template <int BC, int D, bool DOCS>
__device__ __forceinline__ void online_softmax_tile(const attn_args &a, float (&s)[BC / 8][4],
                                                    float (&o)[D / 8][4], float (&m)[2],
                                                    float (&l)[2], float sl2, int k0, int q0,
                                                    int row0, const fwd_ks &ks, int lane) {
    float alpha[2];
    softmax_scores<BC, DOCS>(a, s, m, l, alpha, sl2, k0, q0, row0, ks, lane);
    softmax_rescale<D>(o, alpha);
}

/* The forward's output rows row0 and row0+8 of head h, batch b (O / l) and their logsumexp, from
 * the online softmax's accumulators o, running max m (exp2 domain) and partial sums l. */
template <typename T, int D>
__device__ __forceinline__ void
fwd_store_out(const attn_args &a, T *out, float *lse, const float (&o)[D / 8][4],
              const float (&m)[2], const float (&l)[2], int b, int h, int row0, int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lt = l[r];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        int row = row0 + r * 8;
        float inv = 1.0f / lt;
        T *orow = out + b * a.st[AO][0] + (int64_t)row * a.st[AO][1] + h * a.st[AO][2];
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            if (row < a.T)
                *(uint32_t *)(orow + dt * 8 + 2 * (lane & 3)) =
                    attn_t<T>::pack(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
        if ((lane & 3) == 0 && row < a.T)
            lse[lse_row(a, b, h, row)] = (m[r] + log2f(lt)) * ATTN_LN2;
    }
}

/* ---- the fused backward's pieces shared by the mma.sync (attn_bwd.cu) and wgmma (attn_sm90.cu)
 * kernels; PANELS selects the shared layout as in load_tile ---- */

/* K and V of the BC keys from k0 of kv head hk, batch b, into shared memory. */
template <typename T, int BC, int D, int NT, bool PANELS>
__device__ __forceinline__ void bwd_load_kv(const attn_args &a, T *sK, T *sV, const T *k,
                                            const T *v, int b, int hk, int k0) {
    const int n = min(BC, a.T - k0);
    load_tile<T, BC, D, NT, PANELS>(
        sK, k + b * a.st[AK][0] + hk * a.st[AK][2] + (int64_t)k0 * a.st[AK][1], a.st[AK][1], n);
    load_tile<T, BC, D, NT, PANELS>(
        sV, v + b * a.st[AV][0] + hk * a.st[AV][2] + (int64_t)k0 * a.st[AV][1], a.st[AV][1], n);
}

/* Head and first row of query tile n of a key tile's walk: head hk*group + n/nqt, rows from
 * (it0 + n%nqt)*BR. */
template <int BR>
__device__ __forceinline__ void bwd_tile_of(const attn_args &a, int hk, int it0, int nqt, int n,
                                            int &h, int &q0) {
    const int g = a.group == 1 ? 0 : n / nqt; // why: no integer division (~20 instructions) for MHA
    h = hk * a.group + g, q0 = (it0 + n - g * nqt) * BR;
}

/* cp.async of the BR lse and Di values from row q0 of head h into buffer buf (zeros past T), and
 * with DOCS the rows' key starts into sK's. */
template <int BR, int NT, bool DOCS>
__device__ __forceinline__ void bwd_issue_ld(const attn_args &a, float *sL, float *sD, int *sK,
                                             const float *lse, const float *Dv, int b, int h,
                                             int q0, int buf) {
    const int qn = min(BR, a.T - q0);
    const int64_t ro = lse_row(a, b, h, q0);
    for (int i = threadIdx.x; i < 2 * BR; i += NT) {
        const int r = i % BR;
        const bool ok = r < qn;
        cp_async4((i < BR ? sL : sD) + buf * BR + r, (i < BR ? lse : Dv) + ro + (ok ? r : 0), ok);
    }
    if constexpr (DOCS)
        for (int r = threadIdx.x; r < BR; r += NT)
            cp_async4(sK + buf * BR + r, a.ks + (int64_t)b * a.T + q0 + (r < qn ? r : 0), r < qn);
}

/* Document masks: how many query tiles of BR rows, from tile it0 on, see some key of a key tile
 * whose last key is klast (of nq tiles: the tiles up to the first whose first row's key start is
 * past klast; key starts never decrease along a row). Tile it0 holds key klast's tile's first
 * query or an earlier one, so it counts. */
template <int BR, bool DOCS>
__device__ __forceinline__ int kv_walk_tiles(const attn_args &a, int b, int it0, int nq,
                                             int klast) {
    if constexpr (!DOCS) return nq - it0;
    const int *ks = a.ks + (int64_t)b * a.T;
    int lo = it0 + 1, hi = nq; /* the first tile past the walk, in [it0 + 1, nq] */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ks[mid * BR] > klast)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo - it0;
}

/* Starts the loads of query tile n of a key tile's walk (bwd_tile_of) into buffer buf: Q, dO,
 * lse and Di, one cp.async group. Rows past T load zeros (the caller masks them). */
template <typename T, int BR, int D, int NT, bool PANELS, bool DOCS>
__device__ __forceinline__ void bwd_issue_q(const attn_args &a, T *sQ, T *sG, float *sL, float *sD,
                                            int *sKS, const T *q, const T *dout, const float *lse,
                                            const float *Dv, int b, int hk, int it0, int nqt, int n,
                                            int buf) {
    int h, q0;
    bwd_tile_of<BR>(a, hk, it0, nqt, n, h, q0);
    const int qn = min(BR, a.T - q0);
    load_tile<T, BR, D, NT, PANELS>(
        sQ + buf * BR * D, q + b * a.st[AQ][0] + h * a.st[AQ][2] + (int64_t)q0 * a.st[AQ][1],
        a.st[AQ][1], qn);
    load_tile<T, BR, D, NT, PANELS>(
        sG + buf * BR * D, dout + b * a.st[ADO][0] + h * a.st[ADO][2] + (int64_t)q0 * a.st[ADO][1],
        a.st[ADO][1], qn);
    bwd_issue_ld<BR, NT, DOCS>(a, sL, sD, sKS, lse, Dv, b, h, q0, buf);
    cp_async_commit();
}

/* Attention dropout's factors (attn_drop_factor) of a thread's pair of weights in an mma
 * accumulator tile: query i with keys j, j + 1 (j even), or with QT (a transposed tile, keys in
 * rows) queries j, j + 1 (j even) with key i; one Philox block for both (attn_drop_block). */
template <bool QT>
__device__ __forceinline__ void attn_drop_pair(const attn_args &a, int64_t id, int h, int i, int j,
                                               float &f0, float &f1) {
    const mt_philox4 x = QT ? attn_drop_block(&a.drop, id, h, a.T, j, i)
                            : attn_drop_block(&a.drop, id, h, a.T, i, j);
    const int odd = i & 1; /* (QT: the key's parity, else the query's; j, j + 1: even, odd) */
    const uint32_t u0 = QT ? attn_drop_word(x, 0, odd) : attn_drop_word(x, odd, 0);
    const uint32_t u1 = QT ? attn_drop_word(x, 1, odd) : attn_drop_word(x, odd, 1);
    f0 = u0 < a.drop.thr ? a.drop.scale : 0.0f;
    f1 = u1 < a.drop.thr ? a.drop.scale : 0.0f;
}

/* The forward's P (rows row0, row0 + 8 of queries; keys from c0) times the dropout factors. */
template <int BC>
__device__ __forceinline__ void attn_drop_rows(const attn_args &a, float (&s)[BC / 8][4],
                                               int64_t id, int h, int row0, int c0, int lane) {
#pragma unroll
    for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float f0, f1;
            attn_drop_pair<false>(a, id, h, row0 + 8 * r, c0 + nt * 8 + 2 * (lane & 3), f0, f1);
            s[nt][2 * r] *= f0, s[nt][2 * r + 1] *= f1;
        }
}

/* P^T and dS^T = P^T (dP^T - Di) of a warp's keys key0 (+8) against query columns q0.. (mma
 * accumulator order), from the scores s (becoming P^T) and dP^T (becoming dS^T), with the tile's
 * lse, Di and (document masks) key starts cK; masked entries (past T, causal, before the query's
 * key start) are zero when `mask`. DROP (attention dropout, head h, sample id): dS^T = P^T
 * (dP^T f - Di) and P^T becomes P^T f, f each weight's factor. */
template <int BR, bool MASK, bool DOCS, bool DROP = false>
__device__ __forceinline__ void bwd_p_ds_tile(const attn_args &a, float (&p)[BR / 8][4],
                                              float (&ds)[BR / 8][4], const float *cL,
                                              const float *cD, const int *cK, float sl2, int key0,
                                              int q0, int lane, int64_t id = 0, int h = 0) {
#pragma unroll
    for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float f[2] = { 1.0f, 1.0f };
            if constexpr (DROP)
                attn_drop_pair<true>(a, id, h, key0 + 8 * r, q0 + nt * 8 + 2 * (lane & 3), f[0],
                                     f[1]);
#pragma unroll
            for (int e = 2 * r; e < 2 * r + 2; e++) {
                int cl = nt * 8 + 2 * (lane & 3) + (e & 1), key = key0 + (e >> 1) * 8;
                float pe = attn_exp2(fmaf(p[nt][e], sl2, -cL[cl] * ATTN_LOG2E));
                if (MASK && ((key >= a.T) | (q0 + cl >= a.T) | (a.causal & (q0 + cl < key)) |
                             (DOCS && key < cK[cl])))
                    pe = 0.0f;
                if constexpr (DROP) {
                    p[nt][e] = pe * f[e & 1];
                    ds[nt][e] = pe * (ds[nt][e] * f[e & 1] - cD[cl]);
                } else {
                    p[nt][e] = pe;
                    ds[nt][e] = pe * (ds[nt][e] - cD[cl]);
                }
            }
        }
}
/* Whether a key tile from k0 needs bwd_p_ds's document mask against a query tile whose key
 * starts are cK (the last, of BR rows, the largest; a tile past T is masked anyway). */
template <int BR, bool DOCS> __device__ __forceinline__ bool bwd_ks_mask(const int *cK, int k0) {
    return DOCS && k0 < cK[BR - 1];
}
template <int BR, bool DOCS, bool DROP = false>
__device__ __forceinline__ void bwd_p_ds(const attn_args &a, float (&p)[BR / 8][4],
                                         float (&ds)[BR / 8][4], const float *cL, const float *cD,
                                         const int *cK, float sl2, int key0, int q0, bool mask,
                                         int lane, int64_t id = 0, int h = 0) {
    // why: one branch per tile; `mask && (...)` per element compiled to a branch per element
    if (mask)
        bwd_p_ds_tile<BR, true, DOCS, DROP>(a, p, ds, cL, cD, cK, sl2, key0, q0, lane, id, h);
    else
        bwd_p_ds_tile<BR, false, DOCS, DROP>(a, p, ds, cL, cD, cK, sl2, key0, q0, lane, id, h);
}

/* Step kk (16 columns) of an f32 accumulator as an mma A fragment (acc_pack); the rounding
 * residual of each of its pairs (acc_residual: bf16's second term). */
template <typename T, int N>
__device__ __forceinline__ void acc_pack(const float (&x)[N][4], int kk, uint32_t (&hi)[4]) {
    hi[0] = attn_t<T>::pack(x[2 * kk][0], x[2 * kk][1]);
    hi[1] = attn_t<T>::pack(x[2 * kk][2], x[2 * kk][3]);
    hi[2] = attn_t<T>::pack(x[2 * kk + 1][0], x[2 * kk + 1][1]);
    hi[3] = attn_t<T>::pack(x[2 * kk + 1][2], x[2 * kk + 1][3]);
}
template <typename T, int N>
__device__ __forceinline__ void acc_residual(const float (&x)[N][4], int kk,
                                             const uint32_t (&hi)[4], uint32_t (&lo)[4]) {
    lo[0] = attn_t<T>::residual(x[2 * kk][0], x[2 * kk][1], hi[0]);
    lo[1] = attn_t<T>::residual(x[2 * kk][2], x[2 * kk][3], hi[1]);
    lo[2] = attn_t<T>::residual(x[2 * kk + 1][0], x[2 * kk + 1][1], hi[2]);
    lo[3] = attn_t<T>::residual(x[2 * kk + 1][2], x[2 * kk + 1][3], hi[3]);
}

/* An A fragment at rows sr (+8), columns sc (+8) of a shared (R rows, W columns) tile. */
template <typename T, int R, int W, bool PANELS>
__device__ __forceinline__ void bwd_store_frag(T *dst, int sr, int sc, const uint32_t (&f)[4]) {
    auto at = [](int r, int c) { return PANELS ? pswz<R>(r, c) : swz<W>(r, c); };
    *(uint32_t *)(dst + at(sr, sc)) = f[0];
    *(uint32_t *)(dst + at(sr + 8, sc)) = f[1];
    *(uint32_t *)(dst + at(sr, sc + 8)) = f[2];
    *(uint32_t *)(dst + at(sr + 8, sc + 8)) = f[3];
}

/* A warp's dK (times the softmax scale) and dV rows key0 (+8) from the accumulators. */
template <typename T, int D>
__device__ __forceinline__ void
bwd_store_dkdv(const attn_args &a, T *dk, T *dv, const float (&gk)[D / 8][4],
               const float (&gv)[D / 8][4], int b, int hk, int key0, int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int key = key0 + 8 * r;
        if (key >= a.T) continue;
        T *ok = dk + b * a.st[ADK][0] + (int64_t)key * a.st[ADK][1] + hk * a.st[ADK][2];
        T *ov = dv + b * a.st[ADV][0] + (int64_t)key * a.st[ADV][1] + hk * a.st[ADV][2];
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            int c = dt * 8 + 2 * (lane & 3);
            *(uint32_t *)(ok + c) =
                attn_t<T>::pack(gk[dt][2 * r] * a.scale, gk[dt][2 * r + 1] * a.scale);
            *(uint32_t *)(ov + c) = attn_t<T>::pack(gv[dt][2 * r], gv[dt][2 * r + 1]);
        }
    }
}

/* Raises a kernel's dynamic shared-memory limit (on the current device: so at every launch). */
template <typename K> static mt_status attn_smem_attr(K kernel, int bytes) {
    MT_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return MT_OK;
}

/* The sm_90a (wgmma) kernels, attn_sm90.cu: the forward; the fused backward's dK, dV and f32 dQ
 * accumulator (Dv and dqa prepared as for the mma.sync fused kernel). */
template <typename T, int D>
mt_status attn_fwd_sm90(const attn_args &a, T *out, float *lse, const T *q, const T *k, const T *v,
                        mt_stream stream);
template <typename T, int D>
mt_status attn_bwd_sm90(const attn_args &a, T *dk, T *dv, float *dqa, const T *q, const T *k,
                        const T *v, const T *dout, const float *lse, const float *Dv,
                        mt_stream stream);
/* 1 if this build has the sm_90a kernels, the current device is compute capability 9.0 and the
 * environment does not say MT_ATTN_SM90=0. */
int attn_sm90_enabled(void);
/* Whether a bf16/f16 call with D 64 or 128 takes the wgmma kernels: attn_sm90_enabled(), and at
 * D128 no attention dropout (the D128 wgmma kernels have none; the mma.sync ones do). */
static inline bool attn_sm90_takes(const attn_args &a) {
    return attn_sm90_enabled() && (!a.drop.ids || a.D == 64);
}

#endif /* MT_ATTN_COMMON_CUH */
