/* GEMMs of a few rows (a decoding step's linears: M <= 4 tokens) as a GEMV: c = epilogue(a b^T)
 * for bf16/f16 a (M,K) and b (N,K) row-major, each warp two output columns over all M rows,
 * 16-byte loads along K (b's rows read once: the weights' bandwidth), fp32 accumulation, then
 * alpha, beta (from cin or c), bias and GELU as the CPU reference (gemm_cpu; not the GELU a
 * recompute repeats bitwise: gelu_split goes to the other paths). why: cuBLASLt's
 * kernels take about 7 us for such a GEMM on an H100, several times their bytes' time. */
#include "../ops_impl.h"
#include "common.cuh"

#define GEMV_MAX_M 4
#define GEMV_COLS  2 /* output columns per warp */
#define GEMV_WARPS 4

template <typename T, int M>
static __global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_kernel(gemm_args g, const T *__restrict__ a, const T *__restrict__ b) {
    const int lane = threadIdx.x & 31;
    const int64_t n0 = ((int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * GEMV_COLS;
    if (n0 >= g.N) return; /* (whole warps) */
    float acc[M][GEMV_COLS] = {};
    const T *brow[GEMV_COLS];
#pragma unroll
    for (int c = 0; c < GEMV_COLS; c++)
        brow[c] = b + (n0 + c < g.N ? n0 + c : n0) * g.ldb;
#pragma unroll 2
    for (int64_t k = (int64_t)lane * 8; k < g.K; k += 256) {
        uint4 bv[GEMV_COLS], av[M];
#pragma unroll
        for (int c = 0; c < GEMV_COLS; c++)
            bv[c] = __ldg((const uint4 *)(brow[c] + k));
#pragma unroll
        for (int m = 0; m < M; m++)
            av[m] = __ldg((const uint4 *)(a + m * g.lda + k));
#pragma unroll
        for (int m = 0; m < M; m++) {
            const T *x = (const T *)&av[m];
#pragma unroll
            for (int c = 0; c < GEMV_COLS; c++) {
                const T *w = (const T *)&bv[c];
#pragma unroll
                for (int e = 0; e < 8; e++)
                    acc[m][c] += ldf(x[e]) * ldf(w[e]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int c = 0; c < GEMV_COLS; c++)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                acc[m][c] += __shfl_xor_sync(0xffffffffu, acc[m][c], off);
    if (lane >= M * GEMV_COLS) return;
    const int m = lane / GEMV_COLS, c = lane % GEMV_COLS;
    const int64_t n = n0 + c;
    if (n >= g.N) return;
    float v = acc[0][0]; /* (acc[m][c] without a run-time index into registers) */
#pragma unroll
    for (int mm = 0; mm < M; mm++)
#pragma unroll
        for (int cc = 0; cc < GEMV_COLS; cc++)
            if (mm == m && cc == c) v = acc[mm][cc];
    v *= g.alpha;
    const int64_t ic = m * g.ldc + n;
    if (g.beta != 0.0f) v += g.beta * ldf(((const T *)(g.cin ? g.cin : g.c))[ic]);
    if (g.bias) v += ldf(((const T *)g.bias)[n]);
    if (g.gelu) {
        const T pre = stf<T>(v);
        if (g.pre_gelu) ((T *)g.pre_gelu)[m * g.ldpre + n] = pre;
        v = gelu_f(ldf(pre)); /* (of the stored value, as gemm_gelu_apply) */
    }
    ((T *)g.c)[ic] = stf<T>(v);
}

template <typename T, int M> static mt_status launch(const gemm_args *g, mt_stream stream) {
    const int64_t warps = (g->N + GEMV_COLS - 1) / GEMV_COLS;
    gemv_kernel<T, M><<<(unsigned)((warps + GEMV_WARPS - 1) / GEMV_WARPS), GEMV_WARPS * 32, 0,
                        (cudaStream_t)stream>>>(*g, (const T *)g->a, (const T *)g->b);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

template <typename T> static mt_status launch_m(const gemm_args *g, mt_stream stream) {
    switch (g->M) {
    case 1:
        return launch<T, 1>(g, stream);
    case 2:
        return launch<T, 2>(g, stream);
    case 3:
        return launch<T, 3>(g, stream);
    default:
        return launch<T, 4>(g, stream);
    }
}

static int aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

/* MT_GEMM_GEMV=0 turns it off (comparisons). */
static int gemv_on(void) {
    static int v = MT_ENV_UNREAD;
    return mt_env_int_once("MT_GEMM_GEMV", 1, &v) != 0;
}

extern "C" mt_status gemm_gemv_cuda(const gemm_args *g, mt_stream stream) {
    const int takes = gemv_on() && g->batch == 1 && g->M >= 1 && g->M <= GEMV_MAX_M &&
                      !g->trans_a && g->trans_b && !g->dgelu && !g->colsum && !g->gelu_out &&
                      !g->gelu_split && g->ab_dtype == g->c_dtype &&
                      (g->ab_dtype == MT_BF16 || g->ab_dtype == MT_F16) && g->K % 8 == 0 &&
                      g->lda % 8 == 0 && g->ldb % 8 == 0 && aligned16(g->a) && aligned16(g->b);
    if (!takes) return MT_ERR_UNSUPPORTED; /* (no message: the caller goes on to cuBLASLt) */
    return g->ab_dtype == MT_BF16 ? launch_m<__nv_bfloat16>(g, stream)
                                  : launch_m<__half>(g, stream);
}
