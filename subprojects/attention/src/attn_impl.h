/* Private: the resolved problem shape and the CPU/CUDA entry points (CUDA adds workspace and a
 * stream). Arguments are already validated by src/attn.c. */
#ifndef MT_ATTN_IMPL_H
#define MT_ATTN_IMPL_H

#include <mt/attention.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_shape {
    int64_t B, T, H, Hkv, D;
    float scale; /* resolved: never 0 */
    int causal, deterministic, ds_split;
    int esize; /* bytes per element of q */
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
static inline size_t attn_ws_bytes(const attn_shape *s) {
    size_t acc = attn_bwd_fused(s) ? (size_t)(s->B * s->H * ((s->T + 63) / 64 * 64) * s->D) * 4 : 0;
    return attn_ws_di_bytes(s) + acc;
}

mt_status attn_fwd_cpu(const attn_shape *s, mt_tensor *out, mt_tensor *lse, const mt_tensor *q,
                       const mt_tensor *k, const mt_tensor *v);
mt_status attn_bwd_cpu(const attn_shape *s, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                       const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                       const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse);
mt_status attn_fwd_cuda(const attn_shape *s, mt_tensor *out, mt_tensor *lse, const mt_tensor *q,
                        const mt_tensor *k, const mt_tensor *v, mt_stream stream);
mt_status attn_bwd_cuda(const attn_shape *s, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                        const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                        const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse,
                        void *workspace, mt_stream stream);

#ifdef __cplusplus
}
#endif

#include <mt/dispatch.h> /* MT_DISPATCH */

#endif /* MT_ATTN_IMPL_H */
