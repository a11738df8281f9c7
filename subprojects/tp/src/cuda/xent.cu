/* The vocab-parallel cross-entropy's passes on CUDA: one 256-thread block a row, fp32 sums over
 * the row's columns by strided threads and a block reduction (fixed order: deterministic). Rows
 * of whole 16-byte vectors (aligned) are read and written 16 bytes at a time, a vector a thread
 * (8 bf16/f16 or 4 f32 elements in order), the tail past the last whole vector of real columns
 * one element a thread. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <mt/core_cuda.h>
#include <mt/tensor/cuda.cuh> /* ldf, stf, MT_DISPATCH_FLOAT */

#include "../tp_impl.h"

#define TPX_THREADS 256

/* The block's reduction of v (max or sum) in a fixed order; every thread gets the result. */
template <bool MAX> static __device__ float block_reduce(float v) {
    __shared__ float part[TPX_THREADS / 32];
    for (int o = 16; o > 0; o /= 2) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    __syncthreads(); /* part[] may still be read by a previous call */
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < TPX_THREADS / 32; w++)
        v = MAX ? fmaxf(v, part[w]) : v + part[w];
    return v;
}

template <typename T> struct alignas(16) tpx_vec { T v[16 / sizeof(T)]; };

/* This thread's max (MAX) or sum of exp(x - m) over the row's first R columns. */
template <bool MAX, bool VEC, typename T>
static __device__ float row_pass(const T *row, int64_t R, float m) {
    constexpr int K = 16 / sizeof(T);
    float a = MAX ? -INFINITY : 0.0f;
    int64_t c0 = 0;
    if (VEC) {
        const int64_t nv = R / K;
        for (int64_t i = threadIdx.x; i < nv; i += TPX_THREADS) {
            const tpx_vec<T> x = reinterpret_cast<const tpx_vec<T> *>(row)[i];
#pragma unroll
            for (int k = 0; k < K; k++)
                a = MAX ? fmaxf(a, ldf(x.v[k])) : a + expf(ldf(x.v[k]) - m);
        }
        c0 = nv * K;
    }
    for (int64_t c = c0 + threadIdx.x; c < R; c += TPX_THREADS)
        a = MAX ? fmaxf(a, ldf(row[c])) : a + expf(ldf(row[c]) - m);
    return a;
}

template <typename T, bool VEC>
static __global__ void xent_max_kernel(float *mx, const T *logits, int64_t C, int64_t R) {
    const T *row = logits + blockIdx.x * C;
    float m = block_reduce<true>(row_pass<true, VEC>(row, R, 0.0f));
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

template <typename T, typename I, bool VEC>
static __global__ void xent_sum_kernel(float *stats, const T *logits, const I *targets, int64_t N,
                                       int64_t C, int64_t R, int64_t v0, int64_t ignore) {
    int64_t n = blockIdx.x;
    const T *row = logits + n * C;
    float m = stats[n];
    float s = block_reduce<false>(row_pass<false, VEC>(row, R, m));
    if (threadIdx.x == 0) {
        int64_t t = (int64_t)targets[n];
        stats[N + n] = s;
        stats[2 * N + n] = t != ignore && t >= v0 && t - v0 < R ? ldf(row[t - v0]) : 0.0f;
    }
}

template <typename T, typename I, bool VEC>
static __global__ void xent_finish_kernel(float *losses, T *dlogits, const T *logits,
                                          const I *targets, const float *dloss, const float *stats,
                                          int64_t N, int64_t C, int64_t R, int64_t v0, int64_t V,
                                          int64_t ignore) {
    int64_t n = blockIdx.x, t = (int64_t)targets[n];
    float m = stats[n], s = stats[N + n];
    bool ignored = t == ignore, bad = !ignored && (t < 0 || t >= V);
    if (threadIdx.x == 0) losses[n] = ignored ? 0.0f : bad ? NAN : logf(s) + m - stats[2 * N + n];
    if (!dlogits) return;
    float g = ignored ? 0.0f : bad ? NAN : dloss[n];
    const T *row = logits + n * C;
    constexpr int K = 16 / sizeof(T);
    int64_t c0 = 0;
    if (VEC) { /* (in place: each vector read, then written, by one thread) */
        const int64_t nv = C / K;
        for (int64_t i = threadIdx.x; i < nv; i += TPX_THREADS) {
            const tpx_vec<T> x = reinterpret_cast<const tpx_vec<T> *>(row)[i];
            tpx_vec<T> o;
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int64_t c = i * K + k;
                float d = 0.0f;
                if (c < R && !ignored)
                    d = (expf(ldf(x.v[k]) - m) / s - (v0 + c == t ? 1.0f : 0.0f)) * g;
                o.v[k] = stf<T>(d);
            }
            reinterpret_cast<tpx_vec<T> *>(dlogits + n * C)[i] = o;
        }
        c0 = nv * K;
    }
    for (int64_t c = c0 + threadIdx.x; c < C; c += TPX_THREADS) {
        float d = 0.0f;
        if (c < R && !ignored) d = (expf(ldf(row[c]) - m) / s - (v0 + c == t ? 1.0f : 0.0f)) * g;
        dlogits[n * C + c] = stf<T>(d);
    }
}

/* Whether rows of C elements of T at p (and q, may be NULL) take the 16-byte vector path. */
static bool tpx_vec_ok(int64_t C, size_t es, const void *p, const void *q) {
    return C % (int64_t)(16 / es) == 0 && (uintptr_t)p % 16 == 0 && (uintptr_t)q % 16 == 0;
}

/* Runs the statements with I the targets' C++ type (int64_t when there are none). */
#define TPX_IDX(targets, ...)                       \
    if (!(targets) || (targets)->dtype == MT_I64) { \
        typedef int64_t I;                          \
        __VA_ARGS__;                                \
    } else {                                        \
        typedef int32_t I;                          \
        __VA_ARGS__;                                \
    }

/* Runs the statements with T the logits' C++ type and I the targets'. */
#define TPX_DISPATCH(logits, targets, ...)      \
    do {                                        \
        if ((logits)->dtype == MT_BF16) {       \
            typedef __nv_bfloat16 T;            \
            TPX_IDX(targets, __VA_ARGS__)       \
        } else if ((logits)->dtype == MT_F16) { \
            typedef __half T;                   \
            TPX_IDX(targets, __VA_ARGS__)       \
        } else {                                \
            typedef float T;                    \
            TPX_IDX(targets, __VA_ARGS__)       \
        }                                       \
    } while (0)

extern "C" mt_status tp_xent_max_cuda(mt_tensor *stats, const mt_tensor *logits, int64_t v0,
                                      int64_t V, mt_stream stream) {
    int64_t N = logits->shape[0], C = logits->shape[1], R = tp_real_cols(logits, v0, V);
    if (N == 0) return MT_OK;
    const bool vec = tpx_vec_ok(C, mt_dtype_size(logits->dtype), logits->data, nullptr);
    TPX_DISPATCH(logits, (const mt_tensor *)NULL, {
        (void)sizeof(I);
        if (vec)
            xent_max_kernel<T, true><<<(unsigned)N, TPX_THREADS, 0, stream>>>(
                (float *)stats->data, (const T *)logits->data, C, R);
        else
            xent_max_kernel<T, false><<<(unsigned)N, TPX_THREADS, 0, stream>>>(
                (float *)stats->data, (const T *)logits->data, C, R);
    });
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status tp_xent_sum_cuda(mt_tensor *stats, const mt_tensor *logits,
                                      const mt_tensor *targets, int64_t v0, int64_t V,
                                      int64_t ignore_index, mt_stream stream) {
    int64_t N = logits->shape[0], C = logits->shape[1], R = tp_real_cols(logits, v0, V);
    if (N == 0) return MT_OK;
    const bool vec = tpx_vec_ok(C, mt_dtype_size(logits->dtype), logits->data, nullptr);
    TPX_DISPATCH(logits, targets, {
        if (vec)
            xent_sum_kernel<T, I, true><<<(unsigned)N, TPX_THREADS, 0, stream>>>(
                (float *)stats->data, (const T *)logits->data, (const I *)targets->data, N, C, R,
                v0, ignore_index);
        else
            xent_sum_kernel<T, I, false><<<(unsigned)N, TPX_THREADS, 0, stream>>>(
                (float *)stats->data, (const T *)logits->data, (const I *)targets->data, N, C, R,
                v0, ignore_index);
    });
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status tp_xent_finish_cuda(mt_tensor *losses, mt_tensor *dlogits,
                                         const mt_tensor *logits, const mt_tensor *targets,
                                         const mt_tensor *dloss, const mt_tensor *stats, int64_t v0,
                                         int64_t V, int64_t ignore_index, mt_stream stream) {
    int64_t N = logits->shape[0], C = logits->shape[1], R = tp_real_cols(logits, v0, V);
    if (N == 0) return MT_OK;
    const bool vec =
        dlogits && tpx_vec_ok(C, mt_dtype_size(logits->dtype), logits->data, dlogits->data);
    TPX_DISPATCH(logits, targets, {
        T *dl = dlogits ? (T *)dlogits->data : nullptr;
        const float *dls = dloss ? (const float *)dloss->data : nullptr;
        if (vec)
            xent_finish_kernel<T, I, true><<<(unsigned)N, TPX_THREADS, 0, stream>>>(
                (float *)losses->data, dl, (const T *)logits->data, (const I *)targets->data, dls,
                (const float *)stats->data, N, C, R, v0, V, ignore_index);
        else
            xent_finish_kernel<T, I, false><<<(unsigned)N, TPX_THREADS, 0, stream>>>(
                (float *)losses->data, dl, (const T *)logits->data, (const I *)targets->data, dls,
                (const float *)stats->data, N, C, R, v0, V, ignore_index);
    });
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}
