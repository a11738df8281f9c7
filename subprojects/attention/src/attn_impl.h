/* Private: the resolved problem shape and the CPU/CUDA entry points (CUDA adds workspace and a
 * stream). Arguments are already validated by src/attn.c. */
#ifndef MT_ATTN_IMPL_H
#define MT_ATTN_IMPL_H

#include <mt/attention.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Attention dropout, resolved (mt_attn_config.dropout): ids NULL means none. */
typedef struct attn_drop {
    uint64_t seed;
    uint32_t site, thr; /* thr: mt_dropout_threshold(p) */
    float scale;        /* 1/(1-p) */
    const int64_t *ids; /* (B) sample ids on q's device, or NULL */
} attn_drop;

/* Attention dropout's draws come in 2 x 2 squares of weights: the Philox block of the square of
 * queries (i, i | 1) and keys (j, j | 1) of head h, word ((i & 1) << 1) | (j & 1) for (i, j), so
 * that a tensor-core thread's pair of neighbours (two keys of one query, or two queries of one
 * key in a transposed tile) costs one block. */
MT_PHILOX_FN mt_philox4 attn_drop_block(const attn_drop *d, int64_t id, int64_t h, int64_t T,
                                        int64_t i, int64_t j) {
    const int64_t T2 = (T + 1) >> 1;
    return mt_philox_block(d->seed, mt_dropout_stream(id, d->site),
                           (uint64_t)((h * T2 + (i >> 1)) * T2 + (j >> 1)));
}

/* Word ((i & 1) << 1) | (j & 1) of a square's block, for query parity qodd and key parity kodd
 * (selects: a run-time index into x.v would put the block in local memory on CUDA). */
MT_PHILOX_FN uint32_t attn_drop_word(const mt_philox4 x, int qodd, int kodd) {
    return qodd ? (kodd ? x.v[3] : x.v[2]) : (kodd ? x.v[1] : x.v[0]);
}

/* The factor of softmax weight (h, i, j) of a row whose sample id is `id`: d->scale when kept, 0
 * when dropped. */
MT_PHILOX_FN float attn_drop_factor(const attn_drop *d, int64_t id, int64_t h, int64_t T, int64_t i,
                                    int64_t j) {
    const uint32_t u =
        attn_drop_word(attn_drop_block(d, id, h, T, i, j), (int)(i & 1), (int)(j & 1));
    return u < d->thr ? d->scale : 0.0f;
}

typedef struct attn_shape {
    int64_t B, T, H, Hkv, D;
    int64_t Tk;  /* keys (k and v's T): T except in a forward over cached keys (attention.h) */
    float scale; /* resolved: never 0 */
    int causal, deterministic, ds_split;
    int esize;         /* bytes per element of q */
    const int32_t *ks; /* cfg.key_start's (B,T) data on q's device, or NULL */
    const int32_t *kl; /* cfg.key_len's (B) data on q's device, or NULL (Tk keys a row) */
    attn_drop drop;
} attn_shape;

/* Workspace of the CUDA backward: Di = rowsum(dout*out) (B,H,T) f32, 256-byte rounded; then,
 * for the fused (non-deterministic) tensor-core path, the f32 dQ accumulator: (B,H,T,D), or on
 * Hopper 64-row tiles in the wgmma fragment order (B,H,ceil(T/64),64,D), hence T rounded up. */
static inline size_t attn_ws_di_bytes(const attn_shape *s) {
    return ((size_t)(s->B * s->H * s->T) * 4 + 255) / 256 * 256;
}
static inline int attn_bwd_fused(const attn_shape *s) {
    return !s->deterministic && s->esize == 2 && (s->D == 64 || s->D == 128);
}
static inline size_t attn_ws_dqa_bytes(const attn_shape *s) {
    return attn_bwd_fused(s) ? (size_t)(s->B * s->H * ((s->T + 63) / 64 * 64) * s->D) * 4 : 0;
}
/* Then, for the fused non-causal backward on Hopper, room for the f32 dK and dV of the key tiles
 * whose walks are split over several blocks (attn_sm90.cu: plan_split): fewer than the blocks
 * resident at once, so at most ATTN_SPLIT_MAX of 64 keys (160 SMs of 128-key blocks), and never
 * more than the grid's key tiles. */
#define ATTN_SPLIT_MAX 320
static inline int64_t attn_split_keys(const attn_shape *s) { /* a key tile: the block's keys */
    return s->D == 128 ? 128 : 64;
}
static inline int64_t attn_split_cap(const attn_shape *s) {
    if (!attn_bwd_fused(s) || s->causal) return 0;
    const int64_t bc = attn_split_keys(s), tiles = s->B * s->Hkv * ((s->T + bc - 1) / bc);
    const int64_t cap = ATTN_SPLIT_MAX * 64 / bc;
    return tiles < cap ? tiles : cap;
}
static inline size_t attn_ws_split_bytes(const attn_shape *s) {
    return (size_t)(attn_split_cap(s) * attn_split_keys(s) * s->D * 8);
}
/* Then the bias sums' partials (mt_attn_bwd_bias): two regions of f32 (B, ceil(T/64), H, D),
 * one part per 64-row chunk of a batch entry. */
#define ATTN_PART_ROWS      64
#define ATTN_PART_CHUNKS(T) (((T) + ATTN_PART_ROWS - 1) / ATTN_PART_ROWS)
static inline size_t attn_ws_parts_bytes(const attn_shape *s) {
    return (size_t)(s->B * ATTN_PART_CHUNKS(s->T) * s->H * s->D) * 8;
}
static inline size_t attn_ws_bytes(const attn_shape *s) {
    return attn_ws_di_bytes(s) + attn_ws_dqa_bytes(s) + attn_ws_split_bytes(s) +
           attn_ws_parts_bytes(s);
}

/* The bias sums that mt_attn_bwd_bias asks for (NULL: none), validated. */
typedef struct attn_bias {
    mt_tensor *dq, *dk, *dv;
    int accumulate;
} attn_bias;

mt_status attn_fwd_cpu(const attn_shape *s, mt_tensor *out, mt_tensor *lse, const mt_tensor *q,
                       const mt_tensor *k, const mt_tensor *v);
/* With bias (NULL: none), also the bias sums: the column sums of dq, dk and dv. */
mt_status attn_bwd_cpu(const attn_shape *s, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                       const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                       const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse,
                       const attn_bias *bias);
mt_status attn_kv_append_cpu(mt_tensor *kc, mt_tensor *vc, const mt_tensor *k, const mt_tensor *v,
                             const int32_t *len);
mt_status attn_kv_append_cuda(mt_tensor *kc, mt_tensor *vc, const mt_tensor *k, const mt_tensor *v,
                              const int32_t *len, mt_stream stream);
mt_status attn_fwd_cuda(const attn_shape *s, mt_tensor *out, mt_tensor *lse, const mt_tensor *q,
                        const mt_tensor *k, const mt_tensor *v, mt_stream stream);
/* 1 if attn_bwd_cuda runs a backward over a key prefix (Tk > T) on the square's kernels, given
 * t = { q, k, v, out, dout, dq, dk, dv }; else src/attn.c pads the queries (bwd_padded). */
int attn_bwd_prefix_direct(const attn_shape *s, const mt_tensor *const *t);
mt_status attn_bwd_cuda(const attn_shape *s, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                        const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                        const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse,
                        const attn_bias *bias, void *workspace, mt_stream stream);

#ifdef __cplusplus
}
#endif

#include <mt/dispatch.h> /* MT_DISPATCH */

#endif /* MT_ATTN_IMPL_H */
