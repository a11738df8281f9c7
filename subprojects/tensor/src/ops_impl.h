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
typedef enum ew_op { EW_ADD, EW_SCALE, EW_AXPY, EW_CAST, EW_FILL } ew_op;
mt_status elementwise_cpu(ew_op op, mt_tensor *out, const mt_tensor *a, const mt_tensor *b,
                          float alpha);
mt_status elementwise_cuda(ew_op op, mt_tensor *out, const mt_tensor *a, const mt_tensor *b,
                           float alpha, mt_stream stream);

/* ---- gemm, norm, act ---- */

/* gemm: row-major c = epi(alpha * op(a) op(b) + beta * c + bias) over `batch` strided batches.
 * ld*: row strides, s*: batch strides (0: shared), in elements. */
typedef struct gemm_args {
    mt_dtype ab_dtype, c_dtype;
    int trans_a, trans_b, gelu;
    int64_t batch, M, N, K;
    const void *a, *b, *bias;
    void *c, *pre_gelu;
    int64_t lda, ldb, ldc, ldpre, sa, sb, sc, spre;
    float alpha, beta;
} gemm_args;
mt_status gemm_cpu(const gemm_args *g);
/* cuBLASLt state of an mt_blas: handle, workspace, plan cache (src/cuda/gemm.c). */
typedef struct blas_lt blas_lt;
mt_status blas_lt_create(blas_lt **out);
void blas_lt_destroy(blas_lt *lt);
mt_status gemm_cuda(blas_lt *lt, const gemm_args *g, mt_stream stream);
/* dbias(N) = (accumulate ? dbias : 0) + sum over `rows` rows of dy(rows, N) (contiguous). */
mt_status bias_grad_cpu(void *dbias, mt_dtype db_dtype, const void *dy, mt_dtype dy_dtype,
                        int64_t rows, int64_t N, int accumulate);
mt_status bias_grad_cuda(blas_lt *lt, void *dbias, mt_dtype db_dtype, const void *dy,
                         mt_dtype dy_dtype, int64_t rows, int64_t N, int accumulate,
                         mt_stream stream);
/* CUDA launcher of the bias-gradient kernels, with its scratch (float partials) given. */
mt_status bias_grad_launch(void *dbias, mt_dtype db_dtype, const void *dy, mt_dtype dy_dtype,
                           int64_t rows, int64_t N, int accumulate, float *scratch,
                           size_t scratch_bytes, mt_stream stream);

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
    /* backward (x, weight, mean, rstd as above) */
    void *dx, *dweight, *dbias;
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
 * fwd: out0 = f(in0) or silu(in0) * in1; bwd: in0 = dout, in1 = x (or gate), in2 = up,
 * out0 = dx (or dgate), out1 = dup. */
typedef enum act_op {
    ACT_GELU_FWD,
    ACT_GELU_BWD,
    ACT_SILU_FWD,
    ACT_SILU_BWD,
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

#ifdef __cplusplus
}
#endif

/* Dispatch helper for op front-ends: run the CPU reference or the CUDA launcher. */
#if MT_HAVE_CUDA
#define MT_DISPATCH(dev, cpu_call, cuda_call) (mt_device_is_cuda(dev) ? (cuda_call) : (cpu_call))
#else
#define MT_DISPATCH(dev, cpu_call, cuda_call)                                                      \
    (mt_device_is_cuda(dev) ? MT_ERROR(MT_ERR_UNSUPPORTED, "built without CUDA") : (cpu_call))
#endif

#endif /* MT_TENSOR_OPS_IMPL_H */
