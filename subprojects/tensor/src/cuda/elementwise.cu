/* Elementwise CUDA kernels: grid-stride loops, fp32 math, one rounding on store. */
#include "common.cuh"

template <typename TO, typename TA>
static __global__ void elementwise_kernel(ew_op op, TO *out, const TA *a, const TO *b, float alpha,
                                          int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v;
        switch (op) {
        case EW_ADD:
            v = ldf(a[i]) + ldf(b[i]);
            break;
        case EW_SCALE:
            v = alpha * ldf(a[i]);
            break;
        case EW_AXPY:
            v = ldf(out[i]) + alpha * ldf(a[i]);
            break;
        case EW_CAST:
            v = ldf(a[i]);
            break;
        default:
            v = alpha;
        }
        out[i] = stf<TO>(v);
    }
}

extern "C" mt_status elementwise_cuda(ew_op op, mt_tensor *out, const mt_tensor *a,
                                      const mt_tensor *b, float alpha, mt_stream stream) {
    int64_t n = mt_tensor_numel(out);
    if (n == 0) return MT_OK;
    const int block = 256;
    unsigned grid = mt_grid_1d(n, block);
    mt_dtype adt = a ? a->dtype : out->dtype;
    MT_DISPATCH_FLOAT(out->dtype, TO, MT_DISPATCH_FLOAT(adt, TA, {
                          elementwise_kernel<TO, TA><<<grid, block, 0, stream>>>(
                              op, (TO *)out->data, a ? (const TA *)a->data : (const TA *)nullptr,
                              b ? (const TO *)b->data : (const TO *)nullptr, alpha, n);
                      }));
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}
