/* Tensor kernels. Each op validates its arguments, then runs on the tensors' device: the CPU
 * reference (src/cpu/, the spec) or CUDA (src/cuda/, enqueued on `stream`, returns before the work
 * completes). All tensors of one call must be on the same device. Float ops accept f32, bf16 and
 * f16 and accumulate in fp32. Shapes: B batch, T sequence, C channels, V vocab. */
#ifndef MT_TENSOR_OPS_H
#define MT_TENSOR_OPS_H

#include <mt/tensor/view.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise (any shape, same numel; out may alias an input) ---- */

/* out = a + b */
MT_API mt_status mt_add(mt_tensor *out, const mt_tensor *a, const mt_tensor *b, mt_stream stream);
/* out = alpha * x */
MT_API mt_status mt_scale(mt_tensor *out, const mt_tensor *x, float alpha, mt_stream stream);
/* y = y + alpha * x (y updated in place) */
MT_API mt_status mt_axpy(mt_tensor *y, float alpha, const mt_tensor *x, mt_stream stream);
/* out = x converted to out's dtype (f32, bf16, f16 in any direction; round to nearest even) */
MT_API mt_status mt_cast(mt_tensor *out, const mt_tensor *x, mt_stream stream);
/* dst = src for two views of one dtype and shape (at most 4 dims) with any strides, e.g. the q
 * heads of a fused qkv buffer into contiguous rows and back; they must not overlap. */
MT_API mt_status mt_copy(mt_tensor *dst, const mt_tensor *src, mt_stream stream);
/* x = 0 .. fills with a constant (any float dtype) */
MT_API mt_status mt_fill(mt_tensor *x, float value, mt_stream stream);
/* x[i] = mean + std * N(0,1) drawn by Philox from (seed, stream_id, i), i the element's index in
 * x: the same values on the CPU and CUDA (x contiguous, any float dtype, one rounding). */
MT_API mt_status mt_fill_normal(mt_tensor *x, float mean, float std, uint64_t seed,
                                uint64_t stream_id, mt_stream stream);

/* ---- dropout (Megatron's embedding and hidden dropout) ---- */

/* A dropout's mask, a pure function of these (the backward and recomputations regenerate the
 * forward's): x is viewed as (B, E), one row per entry of `sample`, and element e of row b is
 * kept iff mt_philox_u32(seed, mt_dropout_stream(sample[b], site), e) < mt_dropout_threshold(p)
 * (core's philox.h); kept elements are scaled by 1/(1-p), computed in double and rounded to
 * float. Keyed by each sample's global index, not its place in a micro-batch, so the masks do
 * not depend on how a global batch is split over micro-batches and data-parallel ranks. */
typedef struct mt_dropout_config {
    float p;                 /* drop probability in [0, 1); 0: out = resid + x */
    uint64_t seed;           /* Megatron's --seed */
    uint32_t site;           /* which dropout of a model: each site has its own streams */
    const mt_tensor *sample; /* (B) i64 on x's device, read when the kernel runs */
    /* A window of the (B, E) tensor the masks are of (e.g. a sequence-parallel rank's token rows):
     * x holds its elements [offset, offset + numel(x)), E = row (0: x is the whole tensor, offset
     * 0 and E = numel(x) / B). The masks are the whole tensor's, element for element. */
    int64_t offset, row;
} mt_dropout_config;

/* Checks a dropout config for data on `device`: p in [0, 1) and, when p > 0, sample ids as a
 * contiguous non-empty 1-D i64 tensor on that device (callers check the row count; a window,
 * offset or row, is mt_dropout's only). */
MT_API mt_status mt_dropout_check(const mt_dropout_config *cfg, mt_device device);
/* out = resid + dropout(x) (resid NULL: out = dropout(x), which is also the backward: dx =
 * dropout(dout) with the forward's config). x, out and resid share shape and dtype (any float);
 * fp32 math, one rounding. out may alias x or resid. */
MT_API mt_status mt_dropout(mt_tensor *out, const mt_tensor *x, const mt_tensor *resid,
                            const mt_dropout_config *cfg, mt_stream stream);

/* ---- GEMM (cuBLASLt on CUDA), LayerNorm/RMSNorm, GELU/SiLU/SwiGLU ---- */

/* Owns what GEMMs need on one device: the cuBLASLt handle, a workspace allocated once, and a
 * cache of matmul descriptors and algorithms per shape (steady-state calls allocate nothing).
 * Use one handle per concurrently running stream (the workspace is shared by its calls). */
typedef struct mt_blas mt_blas;

/* Creates a handle for `device` (the CPU: no CUDA state; CUDA: on the current device, with a
 * 32 MiB workspace). MT_ERR_UNSUPPORTED for CUDA in a CPU-only build. Blocking. */
MT_API mt_status mt_blas_create(mt_device device, mt_blas **out);
/* Frees the handle, its cache and workspace (NULL is a no-op). Blocking. */
MT_API void mt_blas_destroy(mt_blas *blas);
/* CUDA: on = 1 times cuBLASLt's top algorithms on each GEMM shape's first run and keeps the fastest
 * (the choice depends on timing: two processes may round differently); 0 (the default) takes the
 * heuristic's first. MT_GEMM_AUTOTUNE=0/1 in the environment overrides it. A no-op on the CPU. */
MT_API void mt_blas_set_autotune(mt_blas *blas, int on);
/* How many GEMMs this process ran on the Hopper kernels with GELU epilogues (built for sm_90a and
 * run on an sm_90 device; on unless MT_GEMM_SM90=0); -1 when not built for sm_90a or without such
 * a device. For tests and benchmarks. */
MT_API long long mt_gemm_sm90_count(void);

enum {
    MT_GEMM_TRANS_A = 1, /* a is stored (K,M): use its transpose */
    MT_GEMM_TRANS_B = 2, /* b is stored (N,K): use its transpose (nn.Linear's weight) */
    MT_GEMM_GELU = 4,    /* apply GELU (tanh approximation) after alpha, beta and bias */
    MT_GEMM_DGELU = 8,   /* backward through GELU: multiply by GELU'(pre_gelu), an input */
    /* with MT_GEMM_GELU and pre_gelu: c is bitwise what mt_linear_bwd_dgelu_recompute computes
     * again from pre_gelu (an activation dropped after the forward). On sm_90a both come from our
     * GELU epilogues; elsewhere c = mt_gelu_fwd(pre_gelu) after a plain GEMM (no cuBLASLt GELU
     * epilogue, whose GELU no other kernel repeats). */
    MT_GEMM_GELU_RECOMPUTE = 16,
};

/* Row-major c(M,N) = epilogue(alpha * op(a) op(b) + beta * c + bias), fp32 accumulation. a and b
 * are both f32, both bf16 or both f16; c, bias and pre_gelu have their dtype, or c is f32 for
 * 16-bit inputs without bias or GELU (fp32 gradient accumulation). op(a) is (M,K), op(b) is (K,N)
 * per the MT_GEMM_TRANS_* flags. Rank 3 tensors are strided batches along dim 0 (a rank-2 a or b is
 * shared by every batch); the last dim must be contiguous, rows may be padded. bias: (N) or NULL,
 * added to every row. With MT_GEMM_GELU, pre_gelu (same shape as c, or NULL) receives the value
 * before GELU, for the backward. With MT_GEMM_DGELU (no bias, beta = 0) pre_gelu is an input of
 * c's shape and dtype and c = (alpha * op(a) op(b)) * GELU'(pre_gelu): the backward of the GEMM
 * after a GELU (mt_gelu_bwd fused in; on CUDA in cuBLASLt's epilogue when it offers one). beta = 0
 * never reads c. c must not alias a, b or bias. blas may be NULL for CPU tensors. Enqueued on
 * `stream` (CUDA). */
MT_API mt_status mt_gemm(mt_blas *blas, mt_tensor *c, mt_tensor *pre_gelu, const mt_tensor *a,
                         const mt_tensor *b, const mt_tensor *bias, int flags, float alpha,
                         float beta, mt_stream stream);

/* n plain GEMMs in one call: c[i] = alpha * op(a[i]) op(b[i]) + beta * c[i] for i < n, each as
 * mt_gemm without bias or GELU (flags: MT_GEMM_TRANS_A and MT_GEMM_TRANS_B only, shared by all),
 * rank-2 operands of one dtype combination on one device. Their shapes differ freely (a mixture of
 * experts' tokens per expert); empty problems are skipped. On CUDA the n GEMMs are one launch
 * (cuBLAS's grouped GEMM, cublasGemmGroupedBatchedEx) where cuBLAS offers it for the dtypes; bf16
 * and f16 into f32 (weight gradients), which it does not, run one by one on cuBLASLt plans cached
 * for the shapes with row counts rounded up to multiples of 256 (no heuristic call per new row
 * count). MT_GEMM_GROUPED=0 runs mt_gemm's one by one, for comparisons; the CPU runs mt_gemm's
 * one by one. The results match mt_gemm's within its rounding (another algorithm), not bitwise.
 * Enqueued on `stream` (capturable: nothing is copied from the host). */
MT_API mt_status mt_gemm_grouped(mt_blas *blas, int n, mt_tensor *const *c,
                                 const mt_tensor *const *a, const mt_tensor *const *b, int flags,
                                 float alpha, float beta, mt_stream stream);

/* nn.Linear forward: y(N,out) = x(N,in) @ w(out,in)^T [+ bias(out)], optionally through GELU
 * (flags 0, MT_GEMM_GELU or MT_GEMM_GELU | MT_GEMM_GELU_RECOMPUTE; pre_gelu as in mt_gemm).
 * Enqueued on `stream`. */
MT_API mt_status mt_linear_fwd(mt_blas *blas, mt_tensor *y, mt_tensor *pre_gelu, const mt_tensor *x,
                               const mt_tensor *w, const mt_tensor *bias, int flags,
                               mt_stream stream);

/* A linear with the residual add fused in: y(N,out) = x @ w^T [+ bias] + residual, residual of y's
 * shape, strides and dtype, another tensor than y. The sum is rounded once (the GEMM's epilogue
 * reads residual on CUDA), so a transformer's residual stream costs no pass of its own. Enqueued
 * on `stream`. */
MT_API mt_status mt_linear_fwd_add(mt_blas *blas, mt_tensor *y, const mt_tensor *x,
                                   const mt_tensor *w, const mt_tensor *bias,
                                   const mt_tensor *residual, mt_stream stream);

/* nn.Linear backward for y = x @ w^T + bias: dx(N,in) = dy(N,out) @ w(out,in);
 * dw(out,in) (+)= dy^T @ x; dbias(out) (+)= sum over rows of dy. Any of dx, dw, dbias may be NULL
 * (skipped). accumulate = 1 adds into dw and dbias (gradient accumulation), 0 overwrites; dx is
 * always overwritten. dw and dbias have dy's dtype or f32 (fp32 main grads). The bias reduction is
 * deterministic (fixed order, no atomics). Enqueued on `stream`. */
MT_API mt_status mt_linear_bwd(mt_blas *blas, mt_tensor *dx, mt_tensor *dw, mt_tensor *dbias,
                               const mt_tensor *dy, const mt_tensor *x, const mt_tensor *w,
                               int accumulate, mt_stream stream);
/* mt_linear_bwd for a linear whose input x = GELU(pre_gelu): dx becomes the gradient of pre_gelu,
 * (dy @ w) * GELU'(pre_gelu) (MT_GEMM_DGELU). dx and pre_gelu are required. dx_sum (NULL to skip;
 * f32 or dx's dtype) receives the column sums of dx, written or added to (accumulate) as dbias: the
 * bias gradient of the linear that produced pre_gelu. On sm_90 they come from the GEMM's epilogue
 * as fp32 sums of dx before its rounding (fixed order), elsewhere from a column sum of dx. */
MT_API mt_status mt_linear_bwd_dgelu(mt_blas *blas, mt_tensor *dx, mt_tensor *dx_sum,
                                     const mt_tensor *pre_gelu, mt_tensor *dw, mt_tensor *dbias,
                                     const mt_tensor *dy, const mt_tensor *x, const mt_tensor *w,
                                     int accumulate, mt_stream stream);
/* mt_linear_bwd_dgelu for a linear whose input x = GELU(pre_gelu) was not kept after the forward
 * (Megatron's --recompute-modules mlp_act): x (contiguous, pre_gelu's shape and dtype; its
 * contents are not read) first receives GELU(pre_gelu), bitwise as mt_linear_fwd with
 * MT_GEMM_GELU | MT_GEMM_GELU_RECOMPUTE wrote it, then serves dw. On sm_90a x comes from the dx
 * GEMM's epilogue (no pass of its own), elsewhere from mt_gelu_fwd. */
MT_API mt_status mt_linear_bwd_dgelu_recompute(mt_blas *blas, mt_tensor *dx, mt_tensor *dx_sum,
                                               const mt_tensor *pre_gelu, mt_tensor *dw,
                                               mt_tensor *dbias, const mt_tensor *dy, mt_tensor *x,
                                               const mt_tensor *w, int accumulate,
                                               mt_stream stream);

/* LayerNorm over the last dim of x (rows = numel / C) with the residual add fused in:
 * h = x + residual (residual may be NULL: h = x), resid_out = h (when not NULL),
 * out = (h - mean) * rstd * weight + bias with rstd = 1/sqrt(var + eps) (biased variance).
 * mean and rstd (f32, one per row) are saved when not NULL. bias may be NULL. In bf16/f16, h is
 * rounded once and the rounded value is normalised. out may alias x or residual; resid_out may
 * alias x or residual. x, residual, out, resid_out, weight, bias share one dtype. Enqueued. */
MT_API mt_status mt_layernorm_fwd(mt_tensor *out, mt_tensor *resid_out, mt_tensor *mean,
                                  mt_tensor *rstd, const mt_tensor *x, const mt_tensor *residual,
                                  const mt_tensor *weight, const mt_tensor *bias, float eps,
                                  mt_stream stream);

/* RMSNorm, as mt_layernorm_fwd without mean and bias: out = h * rstd * weight with
 * rstd = 1/sqrt(mean(h^2) + eps). Enqueued. */
MT_API mt_status mt_rmsnorm_fwd(mt_tensor *out, mt_tensor *resid_out, mt_tensor *rstd,
                                const mt_tensor *x, const mt_tensor *residual,
                                const mt_tensor *weight, float eps, mt_stream stream);

/* Per-head norms in place, for the query or key heads inside a fused qkv buffer (Megatron's
 * qk_layernorm): x is a (B,T,heads,D) view with D contiguous (D <= 256; other strides free).
 * raw (B*T*heads, D), contiguous, x's dtype, receives x's values; then each head of x becomes its
 * RMSNorm (rms = 1: weight) or LayerNorm (weight, bias or NULL) over D, exactly as
 * mt_rmsnorm_fwd/mt_layernorm_fwd of raw (mean for LayerNorm, rstd: (B*T*heads) f32). The CPU
 * runs those ops on a copy (the spec); CUDA normalises the heads where they lie. Enqueued. */
MT_API mt_status mt_head_norm_fwd(mt_tensor *x, mt_tensor *raw, mt_tensor *mean, mt_tensor *rstd,
                                  const mt_tensor *weight, const mt_tensor *bias, int rms,
                                  float eps, mt_stream stream);
/* f32 elements of scratch that mt_head_norm_bwd needs on CUDA (none on the CPU). */
MT_API int64_t mt_head_norm_bwd_scratch_numel(int64_t D);
/* Its backward, in place: dx (a view as x) holds the normalised heads' gradient on entry and the
 * raw heads' on return; dweight and dbias (D, f32; NULL to skip) are overwritten, or added to when
 * accumulate = 1, deterministically (per-block partials in scratch, then a fixed-order sum). */
MT_API mt_status mt_head_norm_bwd(mt_tensor *dx, mt_tensor *dweight, mt_tensor *dbias,
                                  mt_tensor *scratch, const mt_tensor *raw, const mt_tensor *weight,
                                  const mt_tensor *mean, const mt_tensor *rstd, int rms,
                                  int accumulate, mt_stream stream);

/* f32 elements of scratch that mt_layernorm_bwd/mt_rmsnorm_bwd need on CUDA for `rows` rows of
 * C channels (per-block partial sums of dweight, dbias and dx_sum). The CPU needs none. */
MT_API int64_t mt_norm_bwd_scratch_numel(int64_t rows, int64_t C);

/* LayerNorm backward. x is the normalised input (h of the forward), mean and rstd as saved.
 * dx = dLN(dout) + dresid (dresid may be NULL, or alias dx to accumulate into a residual
 * gradient in place). dweight and dbias (f32 or x's dtype; NULL to skip) are overwritten, or
 * added to when accumulate = 1; so is dx_sum (NULL to skip; the same dtype as dweight), the sum
 * over rows of dx as stored: the bias gradient of the linear layer whose output dx is the
 * gradient of, in the same pass. Their reductions over rows are deterministic (per-block
 * partials in scratch, then a fixed-order second pass; no atomics). scratch: f32 with at least
 * mt_norm_bwd_scratch_numel() elements on CUDA, ignored (may be NULL) on the CPU. Enqueued. */
MT_API mt_status mt_layernorm_bwd(mt_tensor *dx, mt_tensor *dweight, mt_tensor *dbias,
                                  mt_tensor *dx_sum, mt_tensor *scratch, const mt_tensor *dout,
                                  const mt_tensor *x, const mt_tensor *weight,
                                  const mt_tensor *mean, const mt_tensor *rstd,
                                  const mt_tensor *dresid, int accumulate, mt_stream stream);

/* RMSNorm backward, as mt_layernorm_bwd without mean and dbias. Enqueued. */
MT_API mt_status mt_rmsnorm_bwd(mt_tensor *dx, mt_tensor *dweight, mt_tensor *dx_sum,
                                mt_tensor *scratch, const mt_tensor *dout, const mt_tensor *x,
                                const mt_tensor *weight, const mt_tensor *rstd,
                                const mt_tensor *dresid, int accumulate, mt_stream stream);

/* out = GELU(x), tanh approximation (GPT-2's gelu_new, torch approximate='tanh'). Any shape;
 * out may alias x. Enqueued. */
MT_API mt_status mt_gelu_fwd(mt_tensor *out, const mt_tensor *x, mt_stream stream);
/* dx = dout * GELU'(x). dx may alias dout or x. Enqueued. */
MT_API mt_status mt_gelu_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *x,
                             mt_stream stream);
/* out = SiLU(x) = x * sigmoid(x). out may alias x. Enqueued. */
MT_API mt_status mt_silu_fwd(mt_tensor *out, const mt_tensor *x, mt_stream stream);
/* dx = dout * SiLU'(x). dx may alias dout or x. Enqueued. */
MT_API mt_status mt_silu_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *x,
                             mt_stream stream);
/* out = sigmoid(x) = 1 / (1 + exp(-x)). out may alias x. Enqueued. */
MT_API mt_status mt_sigmoid_fwd(mt_tensor *out, const mt_tensor *x, mt_stream stream);
/* dx = dout * y * (1 - y), y = sigmoid(x) the forward's output (not x). dx may alias dout or y.
 * Enqueued. */
MT_API mt_status mt_sigmoid_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *y,
                                mt_stream stream);
/* SwiGLU: out(..., F) = SiLU(gate) * up. With up == NULL, gate is Megatron's fused (..., 2F)
 * input, split into halves gate | up. Otherwise gate and up are (..., F) (rows may be strided
 * views, e.g. slices of one tensor). out must not alias the inputs. Enqueued. */
MT_API mt_status mt_swiglu_fwd(mt_tensor *out, const mt_tensor *gate, const mt_tensor *up,
                               mt_stream stream);
/* SwiGLU backward: dgate = dout * up * SiLU'(gate), dup = dout * SiLU(gate). With up == NULL (the
 * fused form), dgate is (..., 2F) and receives both halves and dup must be NULL. Enqueued. */
MT_API mt_status mt_swiglu_bwd(mt_tensor *dgate, mt_tensor *dup, const mt_tensor *dout,
                               const mt_tensor *gate, const mt_tensor *up, mt_stream stream);

/* ---- softmax, cross-entropy, embedding, RoPE, reductions (last dim contiguous) ---- */

/* out = softmax(x) over the last dim, for every leading index. Same shape and dtype (f32, bf16,
 * f16); out may alias x. */
MT_API mt_status mt_softmax_fwd(mt_tensor *out, const mt_tensor *x, mt_stream stream);
/* dx = y * (dy - sum(dy * y)) over the last dim, where y = softmax(x) from mt_softmax_fwd.
 * Same shape and dtype; dx may alias dy. */
MT_API mt_status mt_softmax_bwd(mt_tensor *dx, const mt_tensor *y, const mt_tensor *dy,
                                mt_stream stream);

#define MT_XENT_IGNORE_INDEX (-100) /* torch's default ignore_index */

/* Softmax cross-entropy over the first V columns of logits (N, Vp), V <= Vp (padded vocab columns
 * are ignored). targets (N) i32 or i64, each in [0, V) or == ignore_index. Writes losses (N) f32
 * (0 for ignored tokens) and, if stats != NULL, stats (2) f32 = {mean loss over non-ignored
 * tokens, their count} in a fixed order (mean of no tokens: NaN, as torch). One read of logits.
 * A target outside [0, V): MT_ERR_INVALID_ARG on the CPU, a NaN loss (and gradient) on CUDA. */
MT_API mt_status mt_xent_fwd(mt_tensor *losses, mt_tensor *stats, const mt_tensor *logits,
                             const mt_tensor *targets, int64_t V, int64_t ignore_index,
                             mt_stream stream);
/* Fused forward and backward (llm.c's fused classifier): writes losses/stats as mt_xent_fwd and
 * dlogits = (softmax(logits[:, :V]) - onehot(target)) * g with g = dloss[n] (dloss (N) f32, the
 * per-token gradient) or, when dloss == NULL, g = dmean / count (the mean's gradient; then stats
 * is required). Padded columns and ignored rows get 0. dlogits has logits' shape and dtype and may
 * alias it (in place): each row is read once for max/sum, then read and overwritten once. */
MT_API mt_status mt_xent_fwd_bwd(mt_tensor *dlogits, mt_tensor *losses, mt_tensor *stats,
                                 const mt_tensor *logits, const mt_tensor *targets,
                                 const mt_tensor *dloss, float dmean, int64_t V,
                                 int64_t ignore_index, mt_stream stream);

/* For a mean over several mt_xent calls on row slices of one batch (the output layer in chunks):
 * stats[1] = the count of targets (N) != ignore_index; with dloss (N) f32, dloss[n] = dmean /
 * count for those targets and 0 for ignored ones (the g of mt_xent_fwd_bwd's mean mode, to pass
 * it as its per-token dloss); with losses (N) f32, stats[0] = their mean over the counted
 * targets (fp64, fixed order; NaN for none), as mt_xent_fwd writes it. Enqueued. */
MT_API mt_status mt_xent_stats(mt_tensor *stats, mt_tensor *dloss, const mt_tensor *losses,
                               const mt_tensor *targets, float dmean, int64_t ignore_index,
                               mt_stream stream);

/* out (..., C) = wte[ids[...]] (+ wpe[t], t the index along ids' last dim, when wpe != NULL).
 * ids (...) i32 or i64 in [0, V) (CPU: MT_ERR_INVALID_ARG otherwise; CUDA: zeros for such rows);
 * wte (V, C), wpe (Tmax, C) with Tmax >= T; float tables of out's dtype. */
MT_API mt_status mt_embedding_fwd(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                                  const mt_tensor *wpe, mt_stream stream);
/* Workspace bytes for mt_embedding_bwd on device `dev` (0 on the CPU). */
MT_API mt_status mt_embedding_bwd_workspace(const mt_tensor *ids, int64_t V, mt_device dev,
                                            size_t *bytes);
/* dwte[v] += sum of dout over the tokens with id v, in token order; dwpe[t] += sum over the
 * leading index of dout[..., t, :] (dwpe may be NULL). Deterministic, no float atomics (CUDA:
 * token ids are stably sorted in `ws`). dwte and dwpe are both f32 or both dout's dtype.
 * Enqueued. */
MT_API mt_status mt_embedding_bwd(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                                  const mt_tensor *ids, void *ws, size_t ws_bytes,
                                  mt_stream stream);
/* As mt_embedding_fwd and mt_embedding_bwd with position ids: wpe's row for the token at
 * ids[..., t] is pos[..., t] (pos: ids' shape and dtype; NULL: t itself), e.g. Megatron's
 * --reset-position-ids. Each pos in [0, wpe rows) (CPU: MT_ERR_INVALID_ARG otherwise; CUDA: no
 * position row added, no gradient). dwpe[p] += the dout rows of the tokens at position p, in
 * token order (the backward then sorts pos as it sorts ids: its workspace is
 * mt_embedding_bwd_workspace with V = max(wte rows, wpe rows)). */
MT_API mt_status mt_embedding_fwd_pos(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                                      const mt_tensor *wpe, const mt_tensor *pos, mt_stream stream);
MT_API mt_status mt_embedding_bwd_pos(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                                      const mt_tensor *ids, const mt_tensor *pos, void *ws,
                                      size_t ws_bytes, mt_stream stream);

/* The local part of a vocab-parallel embedding (Megatron's VocabParallelEmbedding): wte (rows, C)
 * holds token ids [vocab_start, vocab_start + rows) of a larger vocabulary. out[n] = wte[ids[n] -
 * vocab_start] for the ids it holds, zeros for the others (any other id, also negative ones),
 * plus the position row as mt_embedding_fwd_pos when wpe != NULL (pos NULL: t); the backward adds
 * dout's rows onto dwte's (f32 or dout's dtype) for the held ids only, and onto dwpe's (may be
 * NULL) for every token, in token order (workspace: mt_embedding_bwd_workspace with V = max(rows,
 * wpe rows)). */
MT_API mt_status mt_embedding_fwd_shard(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                                        int64_t vocab_start, const mt_tensor *wpe,
                                        const mt_tensor *pos, mt_stream stream);
MT_API mt_status mt_embedding_bwd_shard(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                                        const mt_tensor *ids, int64_t vocab_start,
                                        const mt_tensor *pos, void *ws, size_t ws_bytes,
                                        mt_stream stream);

/* Rotary position embedding on x (B,T,H,D) into out (same shape and dtype). Strides: D must be
 * innermost (stride 1); the B, T and H strides are free and may differ between out and x, so q and
 * k can be slices along dim 2 of one fused (B,T,H+2G,D) QKV buffer (as for mt_attn_*). In place:
 * out == x (same data and strides); other overlaps are undefined. CUDA vectorises when the data
 * and all strides are 16-byte multiples, else takes a scalar path (same results). The first
 * rotary_dim (even, <= D) channels of each head rotate by angle pos * theta^(-2i/rotary_dim),
 * i < rotary_dim/2; the rest pass through. interleaved = 0: pairs (x[i], x[i + rotary_dim/2])
 * (Hugging Face rotate_half); 1: pairs (x[2i], x[2i+1]) (Meta). pos: NULL for 0..T-1, or (T) or
 * (B,T) i32/i64 position ids. Angles in fp64, rotation in fp32. */
MT_API mt_status mt_rope_fwd(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos,
                             int rotary_dim, double theta, int interleaved, mt_stream stream);
/* Backward of mt_rope_fwd (rotation by the negated angle): dx from dout; dx may alias dout. */
MT_API mt_status mt_rope_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *pos,
                             int rotary_dim, double theta, int interleaved, mt_stream stream);

/* RoPE frequency scaling for longer contexts (Megatron's and Hugging Face's rope_scaling). Zero
 * fields take the defaults given (the mscales none); factor must be > 0. With base_i =
 * theta^(-2i/rotary_dim):
 * - LINEAR: base_i / factor (positions interpolated: Megatron
 *   --rotary-seq-len-interpolation-factor, Hugging Face "linear");
 * - LLAMA3: Llama 3.x's (Megatron --use-rope-scaling, Hugging Face "llama3"): wavelengths
 *   2 pi / base_i below original/high_freq_factor kept, above original/low_freq_factor divided by
 *   factor, between them blended by s = (original / wavelength - low) / (high - low):
 *   (1 - s) base_i / factor + s base_i;
 * - YARN: YaRN's (Megatron --rope-type yarn, Hugging Face "yarn"): base_i / factor blended into
 *   base_i by a ramp over channel pairs [lo, hi], the pairs where base_i turns beta_fast and
 *   beta_slow times within original positions (d(b) = rotary_dim ln(original / (2 pi b)) /
 *   (2 ln theta), lo = floor d(beta_fast) >= 0, hi = ceil d(beta_slow) <= rotary_dim - 1; not
 *   rounded with no_truncate): r = clamp((i - lo) / (hi - lo), 0, 1), base_i (r / factor + 1 - r);
 *   and cos and sin times m(factor, mscale) / m(factor, mscale_all_dim), m(s, k) = 0.1 k ln s + 1
 *   (s > 1; else 1) (mt_rope_yarn_mscale);
 * - LONGROPE: LongRoPE's (Hugging Face "longrope": Phi-3's long contexts): base_i /
 *   ext_factors[i], cos and sin times attention_factor. */
/* The most rotary channel pairs mt_rope_scaled_* take (rotary_dim <= 512). */
#define MT_ROPE_MAX_PAIRS 256

typedef enum mt_rope_scaling_type {
    MT_ROPE_SCALING_NONE = 0,
    MT_ROPE_SCALING_LINEAR = 1,
    MT_ROPE_SCALING_LLAMA3 = 2,
    MT_ROPE_SCALING_YARN = 3,
    MT_ROPE_SCALING_LONGROPE = 4
} mt_rope_scaling_type;

typedef struct mt_rope_scaling {
    mt_rope_scaling_type type;
    double factor;
    double low_freq_factor, high_freq_factor; /* LLAMA3: 1, 4 */
    double original_max_position_embeddings;  /* LLAMA3: 8192; YARN: 4096 */
    double beta_fast, beta_slow;              /* YARN: 32, 1 */
    double mscale, mscale_all_dim;            /* YARN: as given (Megatron's: 1, 0) */
    int no_truncate; /* YARN: lo, hi unrounded (Hugging Face truncate false) */
    /* LONGROPE: the cos/sin factor (0: sqrt(1 + ln factor / ln original) for factor > 1, else
     * 1), and each channel pair's divisor (> 0; Hugging Face's short_factor or long_factor) */
    double attention_factor;
    double ext_factors[MT_ROPE_MAX_PAIRS];
} mt_rope_scaling;

/* YaRN's m(s, k) = 0.1 k ln s + 1 for s > 1, else 1. */
MT_API double mt_rope_yarn_mscale(double s, double k);
/* The rotary_dim / 2 inverse frequencies (fp64) of rotary_dim channels under scaling (NULL or
 * NONE: base_i), and the factor cos and sin are multiplied by (1 but for YARN). */
MT_API mt_status mt_rope_inv_freq(double *inv_freq, double *attn_factor, int rotary_dim,
                                  double theta, const mt_rope_scaling *scaling);
/* mt_rope_fwd / mt_rope_bwd with the angles pos * inv_freq[i] and the rotation times attn_factor
 * of mt_rope_inv_freq (scaling NULL: the same as mt_rope_fwd / mt_rope_bwd, bit for bit). */
MT_API mt_status mt_rope_scaled_fwd(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos,
                                    int rotary_dim, double theta, int interleaved,
                                    const mt_rope_scaling *scaling, mt_stream stream);
MT_API mt_status mt_rope_scaled_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *pos,
                                    int rotary_dim, double theta, int interleaved,
                                    const mt_rope_scaling *scaling, mt_stream stream);

typedef enum mt_reduce_op {
    MT_REDUCE_SUM,       /* sum(x) */
    MT_REDUCE_SUMSQ,     /* sum(x^2) */
    MT_REDUCE_NORM2,     /* sqrt(sum(x^2)) */
    MT_REDUCE_COUNT_ZERO /* number of x == 0 (Megatron's --log-num-zeros-in-grad) */
} mt_reduce_op;

/* Workspace bytes for mt_reduce (CUDA: per-block partials; 0 on the CPU). */
MT_API mt_status mt_reduce_workspace(const mt_tensor *x, size_t *bytes);
/* out (1 element, f32; i64 also for MT_REDUCE_COUNT_ZERO) = op over all elements of x, with fp64
 * accumulation in a fixed order (deterministic run to run). Enqueued. */
MT_API mt_status mt_reduce(mt_tensor *out, const mt_tensor *x, mt_reduce_op op, void *ws,
                           size_t ws_bytes, mt_stream stream);
/* Workspace bytes for mt_colsum (CUDA: per-row-chunk partials; 0 on the CPU). */
MT_API mt_status mt_colsum_workspace(const mt_tensor *x, size_t *bytes);
/* out (C) (+)= sum of x (..., C) over all leading dims (bias gradient), fp32 accumulation in a
 * fixed order; accumulate = 1 adds to out. out is f32 or x's dtype. Enqueued. */
MT_API mt_status mt_colsum(mt_tensor *out, const mt_tensor *x, int accumulate, void *ws,
                           size_t ws_bytes, mt_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* MT_TENSOR_OPS_H */
