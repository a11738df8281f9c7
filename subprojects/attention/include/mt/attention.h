/* mt-attention: scaled dot-product attention forward and backward (causal or full, multi-head,
 * GQA/MQA), a plain-loop CPU reference beside flash-style CUDA kernels that never materialise
 * the (T,T) score matrix. */
#ifndef MT_ATTENTION_H
#define MT_ATTENTION_H

#include <mt/core.h>
#include <mt/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Layout and stride rules, for every call below:
 * - q, out, dout, dq are (B,T,H,D); k, v, dk, dv are (B,T,Hkv,D), with H a multiple of Hkv
 *   (Hkv == H: multi-head, 1 < Hkv < H: GQA, Hkv == 1: MQA; query head h reads kv head
 *   h / (H/Hkv)). D <= 256. Causal masks key j > query i.
 * - The forward's k and v may hold more rows than q (Tk > T: a KV cache's keys): the queries are
 *   then the last T of the Tk positions, and causal query i sees keys j <= i + Tk - T (the
 *   bottom-right alignment; cfg.key_len gives per-row lengths instead). The backward takes
 *   Tk >= T (dk, dv then (B,Tk,Hkv,D)): a context-parallel rank's queries over the sequence's keys
 *   up to theirs. On CUDA, causal calls whose extra keys Tk - T are a multiple of
 *   MT_ATTN_PREFIX_ALIGN run on the square's tensor-core kernels (bf16/f16, D 64 or 128; the
 *   backward on Hopper's, not deterministic), which skip the first Tk - T rows of the Tk x Tk
 *   square: they cost the queries' share. Otherwise the forward takes a kernel made for
 *   decoding's few rows (a block per query), and the backward pads the queries in front to Tk
 *   rows that add nothing (the square's cost; the workspace holds the padded tensors).
 * - Strides are free (in elements) except that D is innermost (stride 1), so q, k and v may be
 *   slices along dim 2 of one fused (B,T,(H+2*Hkv)*D) QKV buffer viewed as (B,T,H+2*Hkv,D).
 *   The CUDA tensor-core path also needs D in {64,128}, 16-byte aligned data and strides that
 *   are multiples of 8; anything else takes a slower generic CUDA path (same results).
 * - lse is (B,H,T) f32, contiguous: the natural-log logsumexp of each row of scaled scores.
 * - All tensors share one dtype (f32, bf16, f16; lse f32) and one device. */
typedef struct mt_attn_config {
    size_t size;
    float scale;       /* softmax scale; 0 means 1/sqrt(D) */
    int causal;        /* 1: key j attends only to queries i >= j */
    int deterministic; /* 1: the backward must be bitwise repeatable (0: CUDA dQ may use atomics) */
    int ds_split;      /* bf16 backward on sm_90a: 1 carries dS into the dK and dQ GEMMs as a bf16
                          pair hi + lo (fp16's precision, 1.4x the MMA work); 0 (default) rounds it
                          to bf16 once, as flash-attention and cuDNN do. The other CUDA paths
                          (deterministic, sm_80) always split. */
    /* Document masks (Megatron's --reset-attention-mask), causal only: NULL, or a contiguous
     * (B,T) i32 tensor on q's device holding, for each query i of each batch entry, the first
     * key it may attend to: keys key_start[b][i] <= j <= i. Each row must satisfy
     * key_start[b][i-1] <= key_start[b][i] <= i (e.g. the first token of the row's document);
     * the CPU path checks it, the CUDA kernels rely on it (they skip key tiles that no query of
     * a tile may see). */
    const mt_tensor *key_start;
    /* Attention dropout (Megatron's --attention-dropout) on the softmax weights: dropout.p 0 is
     * none. Otherwise dropout.sample is a (B) i64 tensor on q's device (each row's global sample
     * index, read when the kernels run) and weight (h, i, j) of row b (query head h, query i, key
     * j) is kept, times 1/(1-p), iff its draw is below mt_dropout_threshold(p): word
     * ((i & 1) << 1) | (j & 1) of Philox block ((h T2 + i / 2) T2 + j / 2), T2 = ceil(T / 2), of
     * stream mt_dropout_stream(sample[b], site) (core's philox.h: 2 x 2 squares of weights share
     * a block); lse stays the undropped softmax's. The backward regenerates the mask. CUDA runs
     * it on the tensor-core kernels for bf16/f16 with D 64 or 128 (at D128 the mma.sync ones,
     * not the wgmma ones), else on the generic ones. */
    mt_dropout_config dropout;
    /* Forwards over a KV cache whose length lives on the device (a CUDA graph of the forward then
     * stays valid as it grows): NULL, or a contiguous (B) i32 tensor on q's device, read when the
     * kernels run. Row b's T queries are then the last T of its first key_len[b] keys (T <=
     * key_len[b] <= k's T), the keys it attends to (causal: query i sees keys j <= i + key_len[b]
     * - T); keys past key_len[b] are not read. Forward only, without document masks or dropout;
     * the CPU checks the lengths, CUDA relies on them. */
    const mt_tensor *key_len;
} mt_attn_config;

/* The multiple of extra keys (Tk - T) that the CUDA tensor-core kernels take (above). */
#define MT_ATTN_PREFIX_ALIGN 128

#define MT_ATTN_CONFIG_INIT \
    { sizeof(mt_attn_config), 0.0f, 0, 0, 0, NULL, { 0.0f, 0, 0, NULL, 0, 0 }, NULL }

/* out = softmax(scale * q k^T [+ causal mask]) v per (batch, head), and lse per row (kept for
 * the backward). Enqueued on `stream` for CUDA tensors; blocking on the CPU. out must not alias
 * q, k or v. */
MT_API mt_status mt_attn_fwd(mt_tensor *out, mt_tensor *lse, const mt_tensor *q, const mt_tensor *k,
                             const mt_tensor *v, const mt_attn_config *cfg, mt_stream stream);

/* Bytes of scratch that mt_attn_bwd needs for these shapes (device memory for CUDA tensors,
 * host memory is never needed: the CPU path reports 0). */
MT_API mt_status mt_attn_bwd_workspace(const mt_tensor *q, const mt_tensor *k,
                                       const mt_attn_config *cfg, size_t *bytes);

/* Gradients dq, dk, dv (overwritten, not accumulated) from dout, the forward's inputs, its out
 * and lse. `workspace` holds at least mt_attn_bwd_workspace() bytes on the tensors' device
 * (256-byte aligned; may be NULL when that size is 0). Enqueued on `stream` for CUDA tensors. */
MT_API mt_status mt_attn_bwd(mt_tensor *dq, mt_tensor *dk, mt_tensor *dv, const mt_tensor *dout,
                             const mt_tensor *q, const mt_tensor *k, const mt_tensor *v,
                             const mt_tensor *out, const mt_tensor *lse, const mt_attn_config *cfg,
                             void *workspace, size_t workspace_bytes, mt_stream stream);

/* mt_attn_bwd, and the gradients of biases added to q, k and v just before the attention (a qkv
 * projection's, with no rotary embedding between): dbq (H*D), dbk and dbv (Hkv*D elements), f32
 * and contiguous on the tensors' device, each NULL when not wanted, written or, with accumulate,
 * added to. They are dq's, dk's and dv's column sums over batch and tokens. The fused CUDA path
 * (bf16/f16, D 64 or 128, not deterministic) gets them without reading dq, dk and dv back: dv's
 * as dout's, summed over each kv head's query heads (a row of softmax weights sums to 1); dk's as
 * zero (a bias on the keys moves all of a query's scores by one constant, which the softmax
 * ignores); dq's as the f32 dQ accumulator is converted. */
MT_API mt_status mt_attn_bwd_bias(mt_tensor *dq, mt_tensor *dk, mt_tensor *dv, mt_tensor *dbq,
                                  mt_tensor *dbk, mt_tensor *dbv, int accumulate,
                                  const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                                  const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse,
                                  const mt_attn_config *cfg, void *workspace,
                                  size_t workspace_bytes, mt_stream stream);

/* A KV cache's append: the T new tokens' keys and values k, v (B,T,Hkv,D) into rows
 * key_len[b] - T .. key_len[b] - 1 of kcache, vcache (B,Tmax,Hkv,D) for each b (key_len: the (B)
 * i32 lengths after the append, on the tensors' device, read when the copy runs, as
 * mt_attn_config.key_len). The CPU checks T <= key_len[b] <= Tmax; CUDA relies on it. Enqueued on
 * `stream` for CUDA tensors. */
MT_API mt_status mt_attn_kv_append(mt_tensor *kcache, mt_tensor *vcache, const mt_tensor *k,
                                   const mt_tensor *v, const mt_tensor *key_len, mt_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* MT_ATTENTION_H */
