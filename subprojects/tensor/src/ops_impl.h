/* Private: the CPU and CUDA implementations share these signatures (CUDA adds the stream).
 * Arguments are already validated. */
#ifndef MT_TENSOR_OPS_IMPL_H
#define MT_TENSOR_OPS_IMPL_H

#include <mt/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* elementwise: op 0 add (out = a + b), 1 scale (out = alpha*a), 2 axpy (out = out + alpha*a),
 * 3 cast (out = a), 4 fill (out = alpha) */
typedef enum ew_op {
    EW_ADD,
    EW_SCALE,
    EW_AXPY,
    EW_CAST,
    EW_FILL
} ew_op;
/* head norms: fixed block count of the backward (its partials in scratch) and the CUDA paths */
#define HEAD_NORM_BLOCKS 264
mt_status head_norm_fwd_cuda(mt_tensor *x, mt_tensor *raw, mt_tensor *mean, mt_tensor *rstd,
                             const mt_tensor *weight, const mt_tensor *bias, int rms, float eps,
                             mt_stream stream);
mt_status head_norm_bwd_cuda(mt_tensor *dx, mt_tensor *dweight, mt_tensor *dbias,
                             mt_tensor *scratch, const mt_tensor *raw, const mt_tensor *weight,
                             const mt_tensor *mean, const mt_tensor *rstd, int rms, int accumulate,
                             mt_stream stream);

/* copy: shape and strides padded to 4 dims; the CUDA kernel */
void copy_dims4(const mt_tensor *t, int64_t shape[4], int64_t stride[4]);
mt_status copy_cuda(mt_tensor *dst, const mt_tensor *src, mt_stream stream);

mt_status elementwise_cpu(ew_op op, mt_tensor *out, const mt_tensor *a, const mt_tensor *b,
                          float alpha);
mt_status elementwise_cuda(ew_op op, mt_tensor *out, const mt_tensor *a, const mt_tensor *b,
                           float alpha, mt_stream stream);
mt_status fill_normal_cpu(mt_tensor *x, float mean, float std, uint64_t seed, uint64_t stream_id);
mt_status fill_normal_cuda(mt_tensor *x, float mean, float std, uint64_t seed, uint64_t stream_id,
                           mt_stream stream);
mt_status dropout_cpu(mt_tensor *out, const mt_tensor *x, const mt_tensor *resid,
                      const mt_dropout_config *cfg);
mt_status dropout_cuda(mt_tensor *out, const mt_tensor *x, const mt_tensor *resid,
                       const mt_dropout_config *cfg, mt_stream stream);

/* ---- gemm, norm, act ---- */

/* gemm: row-major c = epi(alpha * op(a) op(b) + beta * c + bias) over `batch` strided batches.
 * ld*: row strides, s*: batch strides (0: shared), in elements. */
typedef struct gemm_args {
    mt_dtype ab_dtype, c_dtype;
    int trans_a, trans_b, gelu, dgelu; /* dgelu: c *= GELU'(pre_gelu), an input */
    int gelu_split; /* MT_GEMM_GELU_RECOMPUTE: GELU as gelu_out's recompute repeats it */
    int64_t batch, M, N, K;
    const void *a, *b, *bias;
    void *c, *pre_gelu;
    float *colsum;   /* sm_90a DGELU only: partial column sums of c, (M / 32, N), or NULL */
    void *gelu_out;  /* sm_90a DGELU only: GELU(pre_gelu) stored here too (ld ldgo), or NULL */
    const void *cin; /* beta's c read from here instead of c (c's ld and stride), or NULL */
    int64_t lda, ldb, ldc, ldpre, ldgo, sa, sb, sc, spre;
    float alpha, beta;
} gemm_args;
mt_status gemm_cpu(const gemm_args *g);
/* c *= GELU'(pre_gelu) in place (the MT_GEMM_DGELU step after a plain GEMM), on the CPU or on
 * `stream` (cuda = 1). */
mt_status gemm_dgelu_apply(const gemm_args *g, int cuda, mt_stream stream);
/* c = GELU(src), src of c's shape (row stride ld, batch stride sb): the MT_GEMM_GELU step after a
 * plain GEMM, on the CPU or on `stream` (cuda = 1). */
mt_status gemm_gelu_apply(const gemm_args *g, const void *src, int64_t ld, int64_t sb, int cuda,
                          mt_stream stream);
/* cuBLASLt state of an mt_blas: handle, workspace, plan cache (src/cuda/gemm.c). */
typedef struct blas_lt blas_lt;
mt_status blas_lt_create(blas_lt **out);
void blas_lt_destroy(blas_lt *lt);
mt_status gemm_cuda(blas_lt *lt, const gemm_args *g, mt_stream stream);
/* g on the sm_90a kernels with GELU epilogues (gemm_sm90.cu): fc1's bf16 forward with pre_gelu
 * (and bias), fc2's bf16 dX through GELU' (with g->colsum: also its partial column sums; with
 * g->gelu_out: also GELU(pre_gelu), bitwise the forward kernel's).
 * MT_ERR_UNSUPPORTED, with nothing done, for every other case, device or build (without an error
 * message when switched off by MT_GEMM_SM90=0 or not built for sm_90a). */
mt_status gemm_sm90_cuda(const gemm_args *g, mt_stream stream);
/* g as a GEMV when it has at most 4 rows of bf16/f16 x (M,K) times w (N,K)^T, 16-byte aligned
 * rows, with any of alpha, beta (cin), bias and GELU (pre_gelu kept) (gemv.cu; MT_GEMM_GEMV=0
 * turns it off). MT_ERR_UNSUPPORTED, with nothing done and no message, for anything else. */
mt_status gemm_gemv_cuda(const gemm_args *g, mt_stream stream);
/* The DGELU GEMM g that also leaves dx_sum (+)= the column sums of c (fp32 sums of the values
 * before rounding): gemm_sm90_cuda's partial sums in the handle's workspace, then their column
 * sums. MT_ERR_UNSUPPORTED (nothing done) where that kernel does not take g or the partial sums do
 * not fit the workspace. */
mt_status gemm_dgelu_colsum_cuda(blas_lt *lt, const gemm_args *g, mt_tensor *dx_sum, int accumulate,
                                 mt_stream stream);
/* The n problems g[0..n) (plain, rank 2, one dtype combination, none empty) as cuBLAS grouped
 * GEMMs, or one by one on plans cached for rounded row counts where cuBLAS has none for the
 * dtypes; MT_ERR_UNSUPPORTED (nothing done, no message) with MT_GEMM_GROUPED=0. */
mt_status gemm_grouped_cuda(blas_lt *lt, int n, const gemm_args *g, mt_stream stream);
/* dst[0..n) = src[0..n) on `stream` (n <= GEMM_PTRS_MAX), pointers from a kernel's parameters
 * (no host copy, so a graph capture may hold it). */
#define GEMM_PTRS_MAX 192
mt_status gemm_ptrs_cuda(void **dst, const void *const *src, int n, mt_stream stream);
/* Overrides MT_GEMM_AUTOTUNE for this handle (see mt_blas_set_autotune). */
void blas_lt_set_autotune(blas_lt *lt, int on);
/* The weight-gradient GEMM g (c = dw, a = dy transposed) that also writes dbias (+)= the sum of
 * dy's rows through cuBLASLt's BGRADB epilogue; MT_ERR_UNSUPPORTED (nothing done) when cuBLASLt
 * has no such algorithm for g or the bias does not fit the handle's scratch. */
mt_status gemm_dw_bgrad_cuda(blas_lt *lt, const gemm_args *g, mt_tensor *dbias, int accumulate,
                             mt_stream stream);
/* dbias (+)= the column sums of dy (rows, N): colsum_cuda on the handle's workspace (idle between
 * GEMMs on the same stream). */
mt_status bias_grad_cuda(blas_lt *lt, mt_tensor *dbias, const mt_tensor *dy, int accumulate,
                         mt_stream stream);

/* norm: rows x C, contiguous. rms = 1: RMSNorm (no mean, no bias). NULL pointers are absent
 * operands. dweight and dbias have dtype w_dtype. */
typedef struct norm_args {
    int rms, accumulate;
    mt_dtype dtype, dw_dtype;
    int64_t rows, C;
    float eps;
    /* forward */
    void *out, *resid_out;
    float *mean, *rstd;
    const void *x, *residual, *weight, *bias;
    /* backward (x, weight, mean, rstd as above); dx_sum: column sums of dx (as stored) */
    void *dx, *dweight, *dbias, *dx_sum;
    float *scratch;
    int64_t scratch_numel;
    const void *dout, *dresid;
} norm_args;
mt_status norm_fwd_cpu(const norm_args *n);
mt_status norm_bwd_cpu(const norm_args *n);
mt_status norm_fwd_cuda(const norm_args *n, mt_stream stream);
mt_status norm_bwd_cuda(const norm_args *n, mt_stream stream);
/* Partial-sum blocks the CUDA norm backward uses for `rows` rows. */
int64_t norm_bwd_blocks(int64_t rows);

/* act: a rows x cols view of each operand with its own row stride (elements).
 * fwd: out0 = f(in0) or silu(in0) * in1; bwd: in0 = dout, in1 = x (or gate; sigmoid: its
 * output), in2 = up,
 * out0 = dx (or dgate), out1 = dup. */
typedef enum act_op {
    ACT_GELU_FWD,
    ACT_GELU_BWD,
    ACT_SILU_FWD,
    ACT_SILU_BWD,
    ACT_SIGMOID_FWD,
    ACT_SIGMOID_BWD,
    ACT_SWIGLU_FWD,
    ACT_SWIGLU_BWD
} act_op;
typedef struct act_args {
    act_op op;
    mt_dtype dtype;
    int64_t rows, cols;
    void *out0, *out1;
    const void *in0, *in1, *in2;
    int64_t ld_out0, ld_out1, ld_in0, ld_in1, ld_in2;
} act_args;
mt_status act_cpu(const act_args *a);
mt_status act_cuda(const act_args *a, mt_stream stream);

/* ---- softmax, xent, embedding, rope, reduce ---- */

/* softmax over the last dim: forward out = softmax(x) (dy == NULL), or backward out = dx with
 * x = y (the forward's output) and dy given. */
mt_status softmax_cpu(mt_tensor *out, const mt_tensor *x, const mt_tensor *dy);
mt_status softmax_cuda(mt_tensor *out, const mt_tensor *x, const mt_tensor *dy, mt_stream stream);

/* xent: forward when dlogits == NULL; dloss == NULL with dlogits: mean mode (g = dmean / count,
 * stats required). stats may be NULL otherwise. */
mt_status xent_cpu(mt_tensor *dlogits, mt_tensor *losses, mt_tensor *stats, const mt_tensor *logits,
                   const mt_tensor *targets, const mt_tensor *dloss, float dmean, int64_t V,
                   int64_t ignore_index);
mt_status xent_cuda(mt_tensor *dlogits, mt_tensor *losses, mt_tensor *stats,
                    const mt_tensor *logits, const mt_tensor *targets, const mt_tensor *dloss,
                    float dmean, int64_t V, int64_t ignore_index, mt_stream stream);

mt_status xent_stats_cpu(mt_tensor *stats, mt_tensor *dloss, const mt_tensor *losses,
                         const mt_tensor *targets, float dmean, int64_t ignore_index);
mt_status xent_stats_cuda(mt_tensor *stats, mt_tensor *dloss, const mt_tensor *losses,
                          const mt_tensor *targets, float dmean, int64_t ignore_index,
                          mt_stream stream);

/* embedding: ids viewed as (N / T, T) with T its last dim; rows of C channels. pos (ids' shape
 * and dtype) or NULL: the position row of token n is pos[n], else n % T. Token id v reads table
 * row v - v0. shard = 0: every id must have a row (the CPU refuses others); 1 (a vocab shard, no
 * position table): tokens without a row get a zero row and no gradient (CUDA: always so). */
mt_status embedding_fwd_cpu(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                            const mt_tensor *wpe, const mt_tensor *pos, int64_t v0, int shard);
mt_status embedding_fwd_cuda(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                             const mt_tensor *wpe, const mt_tensor *pos, int64_t v0,
                             mt_stream stream);
mt_status embedding_bwd_cpu(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                            const mt_tensor *ids, const mt_tensor *pos, int64_t v0, int shard);
mt_status embedding_bwd_cuda_workspace(int64_t N, int64_t V, size_t *bytes);
mt_status embedding_bwd_cuda(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                             const mt_tensor *ids, const mt_tensor *pos, int64_t v0, void *ws,
                             size_t ws_bytes, mt_stream stream);

/* rope: the angles pos * inv_freq[i], i < rotary_dim / 2, cos and sin times attn (mt_rope_inv_freq);
 * sign = +1 forward, -1 backward (rotation by -angle). */
mt_status rope_cpu(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos, int rotary_dim,
                   const double *inv_freq, double attn, int interleaved, int sign);
mt_status rope_cuda(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos, int rotary_dim,
                    const double *inv_freq, double attn, int interleaved, int sign,
                    mt_stream stream);

/* reduce: the CUDA path writes reduce_blocks(n) per-block fp64 partials to `ws`, then one block
 * adds them in order. colsum: colsum_chunks(R) row chunks of f32 partials (C each) in `ws`. */
#define REDUCE_MAX_BLOCKS 1024
int64_t reduce_blocks(int64_t n);
mt_status reduce_cpu(mt_tensor *out, const mt_tensor *x, mt_reduce_op op);
mt_status reduce_cuda(mt_tensor *out, const mt_tensor *x, mt_reduce_op op, void *ws,
                      mt_stream stream);
int64_t colsum_chunks(int64_t R, int64_t *rows_per_chunk);
mt_status colsum_cpu(mt_tensor *out, const mt_tensor *x, int accumulate);
mt_status colsum_cuda(mt_tensor *out, const mt_tensor *x, int accumulate, void *ws,
                      mt_stream stream);

#ifdef __cplusplus
}
#endif

#include <mt/dispatch.h> /* MT_DISPATCH */

#endif /* MT_TENSOR_OPS_IMPL_H */
