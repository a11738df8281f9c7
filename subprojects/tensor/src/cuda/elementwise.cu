/* Elementwise CUDA kernels: fp32 math, one rounding on store; 8 elements per thread with wide
 * loads when every pointer is aligned, a scalar grid-stride loop otherwise and for the tail. */
#include "common.cuh"

template <typename T> struct alignas(sizeof(T) * 8) vec8 { T v[8]; };

template <typename TO, typename TA>
static __device__ __forceinline__ float ew_apply(ew_op op, float o, float a, float b, float alpha) {
    switch (op) {
    case EW_ADD:
        return a + b;
    case EW_SCALE:
        return alpha * a;
    case EW_AXPY:
        return o + alpha * a;
    case EW_CAST:
        return a;
    default:
        return alpha;
    }
}

template <typename TO, typename TA>
static __global__ void elementwise_vec_kernel(ew_op op, TO *out, const TA *a, const TO *b,
                                              float alpha, int64_t nvec) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nvec;
         i += (int64_t)gridDim.x * blockDim.x) {
        vec8<TA> va = {};
        vec8<TO> vb = {}, vo = {};
        if (a) va = reinterpret_cast<const vec8<TA> *>(a)[i];
        if (b) vb = reinterpret_cast<const vec8<TO> *>(b)[i];
        if (op == EW_AXPY) vo = reinterpret_cast<const vec8<TO> *>(out)[i];
#pragma unroll
        for (int k = 0; k < 8; k++)
            vo.v[k] = stf<TO>(ew_apply<TO, TA>(op, ldf(vo.v[k]), a ? ldf(va.v[k]) : 0.0f,
                                               b ? ldf(vb.v[k]) : 0.0f, alpha));
        reinterpret_cast<vec8<TO> *>(out)[i] = vo;
    }
}

template <typename TO, typename TA>
static __global__ void elementwise_kernel(ew_op op, TO *out, const TA *a, const TO *b, float alpha,
                                          int64_t start, int64_t n) {
    for (int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = stf<TO>(
            ew_apply<TO, TA>(op, ldf(out[i]), a ? ldf(a[i]) : 0.0f, b ? ldf(b[i]) : 0.0f, alpha));
}

static int aligned(const void *p, size_t bytes) {
    return p == NULL || (uintptr_t)p % bytes == 0;
}

extern "C" mt_status elementwise_cuda(ew_op op, mt_tensor *out, const mt_tensor *a,
                                      const mt_tensor *b, float alpha, mt_stream stream) {
    int64_t n = mt_tensor_numel(out);
    if (n == 0) return MT_OK;
    const int block = 256;
    mt_dtype adt = a ? a->dtype : out->dtype;
    MT_DISPATCH_FLOAT(
        out->dtype, TO, MT_DISPATCH_FLOAT(adt, TA, {
            TO *o = (TO *)out->data;
            const TA *pa = a ? (const TA *)a->data : (const TA *)nullptr;
            const TO *pb = b ? (const TO *)b->data : (const TO *)nullptr;
            int64_t done = 0;
            if (aligned(o, sizeof(vec8<TO>)) && aligned(pa, sizeof(vec8<TA>)) &&
                aligned(pb, sizeof(vec8<TO>)) && n >= 8) {
                int64_t nvec = n / 8;
                elementwise_vec_kernel<TO, TA>
                    <<<mt_grid_1d(nvec, block), block, 0, stream>>>(op, o, pa, pb, alpha, nvec);
                MT_CUDA_CHECK_LAUNCH();
                done = nvec * 8;
            }
            if (done < n) {
                elementwise_kernel<TO, TA><<<mt_grid_1d(n - done, block), block, 0, stream>>>(
                    op, o, pa, pb, alpha, done, n);
                MT_CUDA_CHECK_LAUNCH();
            }
        }));
    return MT_OK;
}

template <typename T>
static __global__ void fill_normal_kernel(T *x, float mean, float std, uint64_t seed,
                                          uint64_t stream_id, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = stf<T>(mean + std * mt_philox_normal(seed, stream_id, (uint64_t)i));
}

extern "C" mt_status fill_normal_cuda(mt_tensor *x, float mean, float std, uint64_t seed,
                                      uint64_t stream_id, mt_stream stream) {
    int64_t n = mt_tensor_numel(x);
    if (n == 0) return MT_OK;
    MT_DISPATCH_FLOAT(x->dtype, T, {
        fill_normal_kernel<T>
            <<<mt_grid_1d(n, 256), 256, 0, stream>>>((T *)x->data, mean, std, seed, stream_id, n);
    });
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}
