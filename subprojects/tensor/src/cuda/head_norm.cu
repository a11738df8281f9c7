/* Per-head norms in place on CUDA, read where the heads lie (a fused qkv buffer's q or k heads),
 * the input kept in raw, statistics in fp32: rows of 16-byte packs in lane groups (several rows a
 * warp), else one warp a row of D <= 256 values. The backward's weight and bias gradients:
 * per-block partials in scratch, then a fixed-order sum (deterministic, no atomics). */
#include "common.cuh"

namespace {

constexpr int kWarps = 8; // warps per block
constexpr int kPer = 8;   // values per lane: D <= 256

struct hn_view {
    int64_t T, H, sB, sT, sH; /* the (B,T,heads,D) view's shape and strides (elements) */
};

__device__ __forceinline__ int64_t row_off(const hn_view &v, int64_t r) {
    int64_t h = r % v.H, t = r / v.H % v.T, b = r / (v.H * v.T);
    return b * v.sB + t * v.sT + h * v.sH;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T>
__global__ void head_norm_fwd_kernel(T *x, T *raw, float *mean, float *rstd, const T *w, const T *b,
                                     hn_view v, int64_t rows, int D, int rms, float eps) {
    const int lane = threadIdx.x % 32;
    for (int64_t r = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32; r < rows;
         r += (int64_t)gridDim.x * kWarps) {
        T *xr = x + row_off(v, r);
        float h[kPer], s = 0.0f;
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            int d = lane + 32 * i;
            h[i] = 0.0f;
            if (d < D) {
                T e = xr[d];
                raw[r * D + d] = e;
                h[i] = ldf(e);
                s += h[i];
            }
        }
        float mu = rms ? 0.0f : warp_sum(s) / (float)D, ss = 0.0f;
#pragma unroll
        for (int i = 0; i < kPer; i++)
            if (lane + 32 * i < D) ss += (h[i] - mu) * (h[i] - mu);
        float rs = rsqrtf(warp_sum(ss) / (float)D + eps);
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            int d = lane + 32 * i;
            if (d < D) xr[d] = stf<T>((h[i] - mu) * rs * ldf(w[d]) + (b ? ldf(b[d]) : 0.0f));
        }
        if (lane == 0) {
            if (mean) mean[r] = mu;
            rstd[r] = rs;
        }
    }
}

template <typename T>
__global__ void head_norm_bwd_kernel(T *dx, float *part, const T *raw, const T *w,
                                     const float *mean, const float *rstd, hn_view v, int64_t rows,
                                     int D, int rms) {
    __shared__ float red[2][kWarps][256];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float dw[kPer], db[kPer];
#pragma unroll
    for (int i = 0; i < kPer; i++)
        dw[i] = db[i] = 0.0f;
    for (int64_t r = (int64_t)blockIdx.x * kWarps + warp; r < rows;
         r += (int64_t)gridDim.x * kWarps) {
        T *dr = dx + row_off(v, r);
        const float mu = rms ? 0.0f : mean[r], rs = rstd[r];
        float dy[kPer], xh[kPer], g[kPer], s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            int d = lane + 32 * i;
            dy[i] = xh[i] = g[i] = 0.0f;
            if (d < D) {
                dy[i] = ldf(dr[d]);
                xh[i] = (ldf(raw[r * D + d]) - mu) * rs;
                g[i] = dy[i] * ldf(w[d]);
                s1 += g[i];
                s2 += g[i] * xh[i];
            }
        }
        s1 = rms ? 0.0f : warp_sum(s1) / (float)D;
        s2 = warp_sum(s2) / (float)D;
#pragma unroll
        for (int i = 0; i < kPer; i++) {
            int d = lane + 32 * i;
            if (d < D) {
                dr[d] = stf<T>(rs * (g[i] - s1 - xh[i] * s2));
                dw[i] += dy[i] * xh[i];
                db[i] += dy[i];
            }
        }
    }
#pragma unroll
    for (int i = 0; i < kPer; i++) {
        int d = lane + 32 * i;
        if (d < D) red[0][warp][d] = dw[i], red[1][warp][d] = db[i];
    }
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x) { /* the warps in order */
        float a = 0.0f, c = 0.0f;
        for (int k = 0; k < kWarps; k++)
            a += red[0][k][d], c += red[1][k][d];
        part[(int64_t)blockIdx.x * D + d] = a;
        part[(int64_t)(gridDim.x + blockIdx.x) * D + d] = c;
    }
}

__global__ void head_norm_finish_kernel(float *dw, float *db, const float *part, int blocks, int D,
                                        int accumulate) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float a = 0.0f, c = 0.0f;
        for (int k = 0; k < blocks; k++) /* the blocks in order */
            a += part[(int64_t)k * D + d], c += part[(int64_t)(blocks + k) * D + d];
        if (dw) dw[d] = accumulate ? dw[d] + a : a;
        if (db) db[d] = accumulate ? db[d] + c : c;
    }
}

/* The 16-byte path: a head row is LPR lanes of one 16-byte pack each (VEC values), a warp holds
 * 32 / LPR rows at once; a row's sums are xor-shuffles inside its lane group. */
template <typename T> struct pack16 {
    static constexpr int VEC = 16 / sizeof(T);
    union {
        uint4 u;
        T v[VEC];
    };
};

template <int LPR> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T, int LPR>
__global__ void head_norm_fwd_vec(T *x, T *raw, float *mean, float *rstd, const T *w, const T *b,
                                  hn_view v, int64_t rows, int rms, float eps) {
    constexpr int VEC = pack16<T>::VEC, RPW = 32 / LPR, D = LPR * VEC;
    const int lane = threadIdx.x % 32, sub = lane % LPR;
    pack16<T> wp, bp;
    wp.u = ((const uint4 *)w)[sub];
    bp.u = b ? ((const uint4 *)b)[sub] : make_uint4(0, 0, 0, 0);
    for (int64_t r0 = ((int64_t)blockIdx.x * kWarps + threadIdx.x / 32) * RPW; r0 < rows;
         r0 += (int64_t)gridDim.x * kWarps * RPW) {
        const int64_t r = r0 + lane / LPR;
        const bool ok = r < rows;
        pack16<T> in;
        in.u = make_uint4(0, 0, 0, 0);
        float h[VEC], s = 0.0f;
        if (ok) {
            in.u = ((const uint4 *)(x + row_off(v, r)))[sub];
            ((uint4 *)(raw + r * D))[sub] = in.u;
        }
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            h[j] = ok ? ldf(in.v[j]) : 0.0f;
            s += h[j];
        }
        float mu = rms ? 0.0f : group_sum<LPR>(s) / (float)D, ss = 0.0f;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            ss += (h[j] - mu) * (h[j] - mu);
        float rs = rsqrtf(group_sum<LPR>(ss) / (float)D + eps);
        if (!ok) continue;
        pack16<T> out;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            out.v[j] = stf<T>((h[j] - mu) * rs * ldf(wp.v[j]) + (b ? ldf(bp.v[j]) : 0.0f));
        ((uint4 *)(x + row_off(v, r)))[sub] = out.u;
        if (sub == 0) {
            if (mean) mean[r] = mu;
            rstd[r] = rs;
        }
    }
}

template <typename T, int LPR>
__global__ void head_norm_bwd_vec(T *dx, float *part, const T *raw, const T *w, const float *mean,
                                  const float *rstd, hn_view v, int64_t rows, int rms) {
    constexpr int VEC = pack16<T>::VEC, RPW = 32 / LPR, D = LPR * VEC;
    __shared__ float red[2][kWarps * RPW][D];
    const int lane = threadIdx.x % 32, sub = lane % LPR, warp = threadIdx.x / 32;
    pack16<T> wp;
    wp.u = ((const uint4 *)w)[sub];
    float dw[VEC], db[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++)
        dw[j] = db[j] = 0.0f;
    for (int64_t r0 = ((int64_t)blockIdx.x * kWarps + warp) * RPW; r0 < rows;
         r0 += (int64_t)gridDim.x * kWarps * RPW) {
        const int64_t r = r0 + lane / LPR;
        const bool ok = r < rows;
        pack16<T> gin, xin;
        gin.u = xin.u = make_uint4(0, 0, 0, 0);
        float dy[VEC], xh[VEC], g[VEC], s1 = 0.0f, s2 = 0.0f;
        const float mu = ok && !rms ? mean[r] : 0.0f, rs = ok ? rstd[r] : 0.0f;
        if (ok) {
            gin.u = ((const uint4 *)(dx + row_off(v, r)))[sub];
            xin.u = ((const uint4 *)(raw + r * D))[sub];
        }
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            dy[j] = ok ? ldf(gin.v[j]) : 0.0f;
            xh[j] = ok ? (ldf(xin.v[j]) - mu) * rs : 0.0f;
            g[j] = dy[j] * ldf(wp.v[j]);
            s1 += g[j];
            s2 += g[j] * xh[j];
        }
        s1 = rms ? 0.0f : group_sum<LPR>(s1) / (float)D;
        s2 = group_sum<LPR>(s2) / (float)D;
        if (!ok) continue;
        pack16<T> out;
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            out.v[j] = stf<T>(rs * (g[j] - s1 - xh[j] * s2));
            dw[j] += dy[j] * xh[j];
            db[j] += dy[j];
        }
        ((uint4 *)(dx + row_off(v, r)))[sub] = out.u;
    }
    const int slot = warp * RPW + lane / LPR;
#pragma unroll
    for (int j = 0; j < VEC; j++)
        red[0][slot][sub * VEC + j] = dw[j], red[1][slot][sub * VEC + j] = db[j];
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x) { /* the row slots in order */
        float a = 0.0f, c = 0.0f;
        for (int k = 0; k < kWarps * RPW; k++)
            a += red[0][k][d], c += red[1][k][d];
        part[(int64_t)blockIdx.x * D + d] = a;
        part[(int64_t)(gridDim.x + blockIdx.x) * D + d] = c;
    }
}

/* Lanes a row takes on the 16-byte path (0: the scalar kernels): D a power-of-two count of
 * 16-byte packs, every row and raw 16-byte aligned. */
int lanes_per_row(const mt_tensor *x, const mt_tensor *raw) {
    const int64_t es = (int64_t)mt_dtype_size(x->dtype), D = x->shape[3];
    if (D * es % 16 != 0 || (uintptr_t)x->data % 16 != 0 || (uintptr_t)raw->data % 16 != 0)
        return 0;
    for (int d = 0; d < 3; d++)
        if (x->stride[d] * es % 16 != 0) return 0;
    const int64_t lpr = D * es / 16;
    return lpr <= 32 && (lpr & (lpr - 1)) == 0 ? (int)lpr : 0;
}

#define HN_LPR_SWITCH(lpr, L, ...) \
    switch (lpr) {                 \
    case 1: {                      \
        constexpr int L = 1;       \
        __VA_ARGS__;               \
    } break;                       \
    case 2: {                      \
        constexpr int L = 2;       \
        __VA_ARGS__;               \
    } break;                       \
    case 4: {                      \
        constexpr int L = 4;       \
        __VA_ARGS__;               \
    } break;                       \
    case 8: {                      \
        constexpr int L = 8;       \
        __VA_ARGS__;               \
    } break;                       \
    case 16: {                     \
        constexpr int L = 16;      \
        __VA_ARGS__;               \
    } break;                       \
    default: {                     \
        constexpr int L = 32;      \
        __VA_ARGS__;               \
    } break;                       \
    }

hn_view view_of(const mt_tensor *x) {
    return hn_view{ x->shape[1], x->shape[2], x->stride[0], x->stride[1], x->stride[2] };
}

} // namespace

extern "C" mt_status head_norm_fwd_cuda(mt_tensor *x, mt_tensor *raw, mt_tensor *mean,
                                        mt_tensor *rstd, const mt_tensor *weight,
                                        const mt_tensor *bias, int rms, float eps,
                                        mt_stream stream) {
    const int64_t rows = x->shape[0] * x->shape[1] * x->shape[2];
    if (rows == 0) return MT_OK;
    const int D = (int)x->shape[3];
    const int lpr = lanes_per_row(x, raw);
    if (lpr) {
        const int64_t per_block = (int64_t)kWarps * (32 / lpr);
        const int64_t want_v = (rows + per_block - 1) / per_block;
        const unsigned gv = (unsigned)(want_v < 65535 * 8 ? want_v : 65535 * 8);
        MT_DISPATCH_FLOAT(x->dtype, T, {
            HN_LPR_SWITCH(lpr, L,
                          (head_norm_fwd_vec<T, L><<<gv, 32 * kWarps, 0, stream>>>(
                              (T *)x->data, (T *)raw->data, mean ? (float *)mean->data : nullptr,
                              (float *)rstd->data, (const T *)weight->data,
                              bias ? (const T *)bias->data : nullptr, view_of(x), rows, rms, eps)));
        });
        MT_CUDA_CHECK_LAUNCH();
        return MT_OK;
    }
    int64_t want = (rows + kWarps - 1) / kWarps;
    unsigned grid = (unsigned)(want < 65535 * 8 ? want : 65535 * 8);
    MT_DISPATCH_FLOAT(x->dtype, T, {
        head_norm_fwd_kernel<T><<<grid, 32 * kWarps, 0, stream>>>(
            (T *)x->data, (T *)raw->data, mean ? (float *)mean->data : nullptr, (float *)rstd->data,
            (const T *)weight->data, bias ? (const T *)bias->data : nullptr, view_of(x), rows, D,
            rms, eps);
    });
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status head_norm_bwd_cuda(mt_tensor *dx, mt_tensor *dweight, mt_tensor *dbias,
                                        mt_tensor *scratch, const mt_tensor *raw,
                                        const mt_tensor *weight, const mt_tensor *mean,
                                        const mt_tensor *rstd, int rms, int accumulate,
                                        mt_stream stream) {
    const int64_t rows = dx->shape[0] * dx->shape[1] * dx->shape[2];
    const int D = (int)dx->shape[3];
    if (rows == 0 && !dweight && !dbias) return MT_OK;
    float *part = (float *)scratch->data;
    const int lpr = lanes_per_row(dx, raw);
    if (lpr) {
        MT_DISPATCH_FLOAT(dx->dtype, T, {
            HN_LPR_SWITCH(lpr, L,
                          (head_norm_bwd_vec<T, L><<<HEAD_NORM_BLOCKS, 32 * kWarps, 0, stream>>>(
                              (T *)dx->data, part, (const T *)raw->data, (const T *)weight->data,
                              mean ? (const float *)mean->data : nullptr, (const float *)rstd->data,
                              view_of(dx), rows, rms)));
        });
    } else {
        MT_DISPATCH_FLOAT(dx->dtype, T, {
            head_norm_bwd_kernel<T><<<HEAD_NORM_BLOCKS, 32 * kWarps, 0, stream>>>(
                (T *)dx->data, part, (const T *)raw->data, (const T *)weight->data,
                mean ? (const float *)mean->data : nullptr, (const float *)rstd->data, view_of(dx),
                rows, D, rms);
        });
    }
    MT_CUDA_CHECK_LAUNCH();
    if (dweight || dbias) {
        head_norm_finish_kernel<<<1, 256, 0, stream>>>(dweight ? (float *)dweight->data : nullptr,
                                                       dbias ? (float *)dbias->data : nullptr, part,
                                                       HEAD_NORM_BLOCKS, D, accumulate);
        MT_CUDA_CHECK_LAUNCH();
    }
    return MT_OK;
}
