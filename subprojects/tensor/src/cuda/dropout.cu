/* Dropout CUDA kernels: 8 elements a thread (two Philox blocks) with wide accesses when rows and
 * the window are whole groups of 8 and every pointer is aligned, else one element a thread. fp32 math, one
 * rounding, as the CPU reference. */
#include "../ops_impl.h"
#include "common.cuh"

template <typename T> struct alignas(sizeof(T) * 8) drop_vec8 { T v[8]; };

template <typename T>
static __global__ void dropout_vec_kernel(T *out, const T *x, const T *resid, const int64_t *ids,
                                          uint64_t seed, uint32_t site, uint32_t thr, float scale,
                                          int64_t E, int64_t off, int64_t nvec) {
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < nvec;
         g += (int64_t)gridDim.x * blockDim.x) {
        drop_vec8<T> vx = reinterpret_cast<const drop_vec8<T> *>(x)[g], vr = {};
        if (resid) vr = reinterpret_cast<const drop_vec8<T> *>(resid)[g];
        const int64_t i = off + g * 8, b = i / E, e = i - b * E; /* in the whole tensor */
        float keep[8];
        if (ids) {
            const uint64_t st = mt_dropout_stream(ids[b], site);
            const mt_philox4 r0 = mt_philox_block(seed, st, (uint64_t)e >> 2);
            const mt_philox4 r1 = mt_philox_block(seed, st, ((uint64_t)e >> 2) + 1);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                keep[k] = r0.v[k] < thr ? scale : 0.0f;
                keep[k + 4] = r1.v[k] < thr ? scale : 0.0f;
            }
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++)
                keep[k] = 1.0f;
        }
        drop_vec8<T> vo;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            // why: __fmul_rn keeps nvcc from fusing the product into resid's add (the CPU rounds
            // twice)
            float v = __fmul_rn(ldf(vx.v[k]), keep[k]);
            if (resid) v = ldf(vr.v[k]) + v;
            vo.v[k] = stf<T>(v);
        }
        reinterpret_cast<drop_vec8<T> *>(out)[g] = vo;
    }
}

template <typename T>
static __global__ void dropout_kernel(T *out, const T *x, const T *resid, const int64_t *ids,
                                      uint64_t seed, uint32_t site, uint32_t thr, float scale,
                                      int64_t E, int64_t off, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = ldf(x[i]);
        if (ids) {
            const int64_t b = (off + i) / E, e = off + i - b * E;
            const uint32_t u = mt_philox_u32(seed, mt_dropout_stream(ids[b], site), (uint64_t)e);
            v = __fmul_rn(v, u < thr ? scale : 0.0f);
        }
        if (resid) v = ldf(resid[i]) + v;
        out[i] = stf<T>(v);
    }
}

extern "C" mt_status dropout_cuda(mt_tensor *out, const mt_tensor *x, const mt_tensor *resid,
                                  const mt_dropout_config *cfg, mt_stream stream) {
    const int64_t n = mt_tensor_numel(x);
    const int on = cfg->p > 0.0f;
    const int64_t E = !on ? n : cfg->row ? cfg->row : n / cfg->sample->shape[0];
    const int64_t off = on ? cfg->offset : 0;
    const int64_t *ids = on ? (const int64_t *)cfg->sample->data : nullptr;
    const uint32_t thr = mt_dropout_threshold(cfg->p);
    const float scale = mt_dropout_scale(cfg->p);
    const int block = 256;
    MT_DISPATCH_FLOAT(x->dtype, T, {
        T *o = (T *)out->data;
        const T *px = (const T *)x->data, *pr = resid ? (const T *)resid->data : nullptr;
        const uintptr_t al = sizeof(drop_vec8<T>);
        if (E % 8 == 0 && off % 8 == 0 && n % 8 == 0 && (uintptr_t)o % al == 0 &&
            (uintptr_t)px % al == 0 && (uintptr_t)pr % al == 0) {
            dropout_vec_kernel<T><<<mt_grid_1d(n / 8, block), block, 0, stream>>>(
                o, px, pr, ids, cfg->seed, cfg->site, thr, scale, E, off, n / 8);
        } else {
            dropout_kernel<T><<<mt_grid_1d(n, block), block, 0, stream>>>(
                o, px, pr, ids, cfg->seed, cfg->site, thr, scale, E, off, n);
        }
    });
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}
