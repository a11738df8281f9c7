/* Private CUDA helpers for tensor kernels: vectors, launch sizing and cached device queries (the
 * float loads and stores are the public mt/tensor/cuda.cuh's). */
#ifndef MT_TENSOR_CUDA_COMMON_CUH
#define MT_TENSOR_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mt/core_cuda.h>
#include <mt/sm90.cuh>        /* mbarriers and bulk copies (sm_90+) */
#include <mt/tensor/cuda.cuh> /* ldf, stf, MT_DISPATCH_FLOAT */

#include <map>
#include <mutex>
#include <tuple>

#include "../ops_impl.h"

/* N elements of T as one aligned unit: 16-byte loads and stores. */
template <typename T, int N> struct alignas(sizeof(T) * N) vec_t { T v[N]; };

/* tanh(u) = 1 - 2 / (exp(2u) + 1), within ~1e-7 absolute of tanhf. */
static __device__ __forceinline__ float tanh_fast(float u) {
    // why: tanhf's exact path costs about as much time as the memory traffic of GELU
    return 1.0f - __fdividef(2.0f, __expf(2.0f * u) + 1.0f);
}

/* GELU (tanh form): mt_gelu_fwd's and the GEMV's epilogue. */
static __device__ __forceinline__ float gelu_f(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanh_fast(k * (x + 0.044715f * x * x * x)));
}

/* Device attribute `attr` of the current device, cached per device (the query costs host time on
 * every launch otherwise). */
static inline mt_status mt_cuda_attr(cudaDeviceAttr attr, int *value) {
    static std::mutex mu;
    static std::map<std::pair<int, int>, int> cache;
    int dev = 0;
    MT_CUDA_TRY(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find({ dev, (int)attr });
    if (it == cache.end()) {
        int v = 0;
        MT_CUDA_TRY(cudaDeviceGetAttribute(&v, attr, dev));
        it = cache.emplace(std::make_pair(dev, (int)attr), v).first;
    }
    *value = it->second;
    return MT_OK;
}

/* Blocks of `kernel` resident per multiprocessor at `threads` threads and `smem` dynamic shared
 * bytes; cached per kernel, device and shape. The kernel may then be launched with up to the
 * device's opt-in shared-memory limit (less its static shared memory; raised on first use). */
template <typename K>
static inline mt_status mt_cuda_occupancy(K kernel, int threads, size_t smem, int *per_sm) {
    static std::mutex mu;
    static std::map<std::tuple<const void *, int, int, size_t>, int> cache;
    int dev = 0, optin = 0;
    MT_CUDA_TRY(cudaGetDevice(&dev));
    MT_TRY(mt_cuda_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, &optin));
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_tuple((const void *)kernel, dev, threads, smem);
    auto it = cache.find(key);
    if (it == cache.end()) {
        int v = 0;
        cudaFuncAttributes fa;
        MT_CUDA_TRY(cudaFuncGetAttributes(&fa, kernel));
        MT_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         optin - (int)fa.sharedSizeBytes));
        MT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel, threads, smem));
        it = cache.emplace(key, v < 1 ? 1 : v).first;
    }
    *per_sm = it->second;
    return MT_OK;
}

static inline unsigned mt_grid_1d(int64_t n, int block) {
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g < 1 ? 1 : (g > 65535 * 32 ? 65535 * 32 : g));
}

/* Block-wide merge of per-thread (max, sum of exp(x - max)) pairs; every thread gets the total.
 * Fixed order (bitwise reproducible). Any block size that is a multiple of 32, up to 1024. */
static __device__ __forceinline__ float exp_scale(float m, float M) {
    return m == -INFINITY ? 0.0f : __expf(m - M);
}
static __device__ void block_max_sum(float &m, float &s) {
    __shared__ float sm[32], ss[32];
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        float M = fmaxf(m, m2);
        s = s * exp_scale(m, M) + s2 * exp_scale(m2, M);
        m = M;
    }
    int w = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads(); // why: sm/ss may still be read by a previous call
    if (threadIdx.x % 32 == 0) sm[w] = m, ss[w] = s;
    __syncthreads();
    m = -INFINITY, s = 0.0f;
    for (int i = 0; i < nw; i++) {
        float M = fmaxf(m, sm[i]);
        s = s * exp_scale(m, M) + ss[i] * exp_scale(sm[i], M);
        m = M;
    }
}

#endif /* MT_TENSOR_CUDA_COMMON_CUH */
