/* Fused AdamW/SGD step over one contiguous range of the buffer (4 elements per thread, fp32 math
 * in the CPU reference's order) and the deterministic grad statistics (fixed grid, fp64 partials
 * summed on the host in block order). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mt/core_cuda.h>

#include "../optim_impl.h"

template <typename T> struct param_store;
template <> struct param_store<float> {
    static __device__ __forceinline__ void st(float *p, float4 v) {
        *reinterpret_cast<float4 *>(p) = v;
    }
};
template <> struct param_store<__nv_bfloat16> {
    static __device__ __forceinline__ void st(__nv_bfloat16 *p, float4 v) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        uint2 u;
        u.x = *reinterpret_cast<uint32_t *>(&lo);
        u.y = *reinterpret_cast<uint32_t *>(&hi);
        *reinterpret_cast<uint2 *>(p) = u;
    }
};
template <> struct param_store<__half> {
    static __device__ __forceinline__ void st(__half *p, float4 v) {
        __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        uint2 u;
        u.x = *reinterpret_cast<uint32_t *>(&lo);
        u.y = *reinterpret_cast<uint32_t *>(&hi);
        *reinterpret_cast<uint2 *>(p) = u;
    }
};

struct step_params {
    float lr, wd, beta1, beta2, eps, momentum, step_size, bc2_sqrt, inv_scale, clip;
};

static __device__ __forceinline__ float adamw1(float p, float g, float &m, float &v, float wd,
                                               const step_params &h) {
    p = p * (1.0f - h.lr * wd);
    m = m + (g - m) * (1.0f - h.beta1);
    v = v * h.beta2 + (1.0f - h.beta2) * g * g;
    float denom = sqrtf(v) / h.bc2_sqrt + h.eps;
    return p - h.step_size * (m / denom);
}

static __device__ __forceinline__ float sgd1(float p, float g, float &buf, float wd,
                                             const step_params &h) {
    g = g + wd * p;
    buf = h.momentum * buf + g;
    return p - h.lr * buf;
}

template <typename TP, bool MASTER, bool ADAM>
static __global__ void optim_step_kernel(int64_t n4, int64_t start, const uint32_t *wd_mask,
                                         TP *param, float *master, const float *grad, float *m,
                                         float *v, step_params h) {
    float *w = MASTER ? master : reinterpret_cast<float *>(param);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t grp = (start + 4 * i) / MT_OPTIM_ALIGN; // why: 4 | 64, one mask bit per float4
        float wd = (!wd_mask || ((wd_mask[grp >> 5] >> (grp & 31)) & 1u)) ? h.wd : 0.0f;
        float4 g = __ldcs(reinterpret_cast<const float4 *>(grad) + i);
        float4 p = reinterpret_cast<float4 *>(w)[i];
        float4 mm = reinterpret_cast<float4 *>(m)[i];
        g.x = g.x * h.inv_scale * h.clip;
        g.y = g.y * h.inv_scale * h.clip;
        g.z = g.z * h.inv_scale * h.clip;
        g.w = g.w * h.inv_scale * h.clip;
        if (ADAM) {
            float4 vv = reinterpret_cast<float4 *>(v)[i];
            p.x = adamw1(p.x, g.x, mm.x, vv.x, wd, h);
            p.y = adamw1(p.y, g.y, mm.y, vv.y, wd, h);
            p.z = adamw1(p.z, g.z, mm.z, vv.z, wd, h);
            p.w = adamw1(p.w, g.w, mm.w, vv.w, wd, h);
            reinterpret_cast<float4 *>(v)[i] = vv;
        } else {
            p.x = sgd1(p.x, g.x, mm.x, wd, h);
            p.y = sgd1(p.y, g.y, mm.y, wd, h);
            p.z = sgd1(p.z, g.z, mm.z, wd, h);
            p.w = sgd1(p.w, g.w, mm.w, wd, h);
        }
        reinterpret_cast<float4 *>(m)[i] = mm;
        reinterpret_cast<float4 *>(w)[i] = p;
        if (MASTER) param_store<TP>::st(param + 4 * i, p);
    }
}

template <typename TP, bool MASTER>
static mt_status launch_step(const optim_step_args *a, const step_params &h, mt_stream stream) {
    const int block = 256;
    int64_t n4 = a->n / 4;
    int64_t g = (n4 + block - 1) / block;
    unsigned grid = (unsigned)(g < 1 ? 1 : (g > 65535 * 32 ? 65535 * 32 : g));
    if (a->kind == MT_OPTIM_ADAMW)
        optim_step_kernel<TP, MASTER, true>
            <<<grid, block, 0, stream>>>(n4, a->start, a->wd_mask, (TP *)a->param, a->master,
                                         a->grad, a->exp_avg, a->exp_avg_sq, h);
    else
        optim_step_kernel<TP, MASTER, false><<<grid, block, 0, stream>>>(
            n4, a->start, a->wd_mask, (TP *)a->param, a->master, a->grad, a->exp_avg, nullptr, h);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status optim_step_cuda(const optim_step_args *a, mt_stream stream) {
    if (a->n == 0) return MT_OK;
    MT_REQUIRE(a->n % 4 == 0 && a->start % MT_OPTIM_ALIGN == 0, MT_ERR_INTERNAL,
               "range [%lld, +%lld) not aligned", (long long)a->start, (long long)a->n);
    step_params h = { a->lr,       a->wd,        a->beta1,    a->beta2,     a->eps,
                      a->momentum, a->step_size, a->bc2_sqrt, a->inv_scale, a->clip };
    if (!a->master) {
        MT_REQUIRE(a->param_dtype == MT_F32, MT_ERR_INTERNAL, "no master weights for %s",
                   mt_dtype_name(a->param_dtype));
        return launch_step<float, false>(a, h, stream);
    }
    switch (a->param_dtype) {
    case MT_BF16:
        return launch_step<__nv_bfloat16, true>(a, h, stream);
    case MT_F16:
        return launch_step<__half, true>(a, h, stream);
    default:
        return launch_step<float, true>(a, h, stream);
    }
}

static __global__ void optim_stats_kernel(int64_t n4, int64_t start, const uint32_t *norm_mask,
                                          const float *grad, double *partial) {
    double sumsq = 0.0, zeros = 0.0, nonfinite = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 g = __ldcs(reinterpret_cast<const float4 *>(grad) + i);
        int64_t grp = (start + 4 * i) / MT_OPTIM_ALIGN;
        bool counted = (norm_mask[grp >> 5] >> (grp & 31)) & 1u;
        nonfinite += !isfinite(g.x) || !isfinite(g.y) || !isfinite(g.z) || !isfinite(g.w);
        if (counted) {
            sumsq += (double)g.x * g.x + (double)g.y * g.y + (double)g.z * g.z + (double)g.w * g.w;
            zeros += (g.x == 0.0f) + (g.y == 0.0f) + (g.z == 0.0f) + (g.w == 0.0f);
        }
    }
    __shared__ double sh[3][256];
    sh[0][threadIdx.x] = sumsq;
    sh[1][threadIdx.x] = zeros;
    sh[2][threadIdx.x] = nonfinite;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            for (int k = 0; k < 3; k++)
                sh[k][threadIdx.x] += sh[k][threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        for (int k = 0; k < 3; k++)
            partial[k * gridDim.x + blockIdx.x] = sh[k][0];
}

extern "C" mt_status optim_stats_cuda(const optim_stats_args *a, double *scratch, optim_stats *out,
                                      mt_stream stream) {
    out->sumsq = out->zeros = out->nonfinite = 0.0;
    if (a->n == 0) return MT_OK;
    const int block = 256;
    int64_t n4 = a->n / 4;
    int64_t g = (n4 + block - 1) / block;
    int grid = (int)(g > OPTIM_STATS_BLOCKS ? OPTIM_STATS_BLOCKS : g);
    optim_stats_kernel<<<grid, block, 0, stream>>>(n4, a->start, a->norm_mask, a->grad, scratch);
    MT_CUDA_CHECK_LAUNCH();
    double host[3 * OPTIM_STATS_BLOCKS];
    MT_CUDA_TRY(cudaMemcpyAsync(host, scratch, 3 * (size_t)grid * sizeof(double),
                                cudaMemcpyDeviceToHost, stream));
    MT_CUDA_TRY(cudaStreamSynchronize(stream));
    for (int b = 0; b < grid; b++) { /* block order: deterministic */
        out->sumsq += host[b];
        out->zeros += host[grid + b];
        out->nonfinite += host[2 * grid + b];
    }
    return MT_OK;
}
