/* LayerNorm/RMSNorm CUDA kernels. A block of tpr x rpb threads holds rpb rows at a time, each row
 * in registers across tpr threads (16-byte packs, fp32 math): one read of every input, one write
 * of every output. The backward keeps per-thread weight/bias gradient sums in registers, writes
 * one partial per block, and a second kernel adds the partials in a fixed order (no atomics). */
#include "common.cuh"

template <typename T, int W> struct alignas(sizeof(T) * W) norm_pack { T v[W]; };

template <typename T, int W>
static __device__ __forceinline__ void ld_row(float (&f)[W], const void *base, int64_t off) {
    norm_pack<T, W> p = *reinterpret_cast<const norm_pack<T, W> *>((const T *)base + off);
#pragma unroll
    for (int j = 0; j < W; j++)
        f[j] = ldf(p.v[j]);
}

template <typename T, int W>
static __device__ __forceinline__ void st_row(void *base, int64_t off, const float (&f)[W]) {
    norm_pack<T, W> p;
#pragma unroll
    for (int j = 0; j < W; j++)
        p.v[j] = stf<T>(f[j]);
    *reinterpret_cast<norm_pack<T, W> *>((T *)base + off) = p;
}

/* Sum of (a, b) over the tpr threads of row ty; every thread of the row gets it. Called by all
 * threads of the block (it synchronises when a row spans several warps). */
static __device__ __forceinline__ float2 row_sum2(float a, float b, float2 (*buf)[32]) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    int nw = blockDim.x / 32;
    if (nw == 1) return make_float2(a, b);
    if (threadIdx.x % 32 == 0) buf[threadIdx.y][threadIdx.x / 32] = make_float2(a, b);
    __syncthreads();
    float2 s = buf[threadIdx.y][0];
    for (int w = 1; w < nw; w++) {
        s.x += buf[threadIdx.y][w].x;
        s.y += buf[threadIdx.y][w].y;
    }
    __syncthreads();
    return s;
}

template <bool RMS, typename T, int W, int NV> static __global__ void norm_fwd_kernel(norm_args n) {
    __shared__ float2 buf[16][32];
    const int64_t npk = n.C / W, C = n.C;
    float w[NV][W], b[NV][W];
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
#pragma unroll
        for (int j = 0; j < W; j++)
            w[i][j] = b[i][j] = 0.0f;
        if (p < npk) {
            ld_row<T, W>(w[i], n.weight, p * W);
            if (!RMS && n.bias) ld_row<T, W>(b[i], n.bias, p * W);
        }
    }
    for (int64_t base = (int64_t)blockIdx.x * blockDim.y; base < n.rows;
         base += (int64_t)gridDim.x * blockDim.y) {
        int64_t r = base + threadIdx.y;
        bool row_ok = r < n.rows;
        float h[NV][W], s = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
#pragma unroll
            for (int j = 0; j < W; j++)
                h[i][j] = 0.0f;
            if (row_ok && p < npk) {
                ld_row<T, W>(h[i], n.x, r * C + p * W);
                if (n.residual) {
                    float res[W];
                    ld_row<T, W>(res, n.residual, r * C + p * W);
                    // why: normalise the sum as stored (rounded to T), as an unfused add would
#pragma unroll
                    for (int j = 0; j < W; j++)
                        h[i][j] = ldf(stf<T>(h[i][j] + res[j]));
                }
                if (n.resid_out) st_row<T, W>(n.resid_out, r * C + p * W, h[i]);
#pragma unroll
                for (int j = 0; j < W; j++)
                    s += h[i][j];
            }
        }
        float mean = 0.0f;
        if (!RMS) mean = row_sum2(s, 0.0f, buf).x / (float)C;
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
            if (row_ok && p < npk) {
#pragma unroll
                for (int j = 0; j < W; j++)
                    ss += (h[i][j] - mean) * (h[i][j] - mean);
            }
        }
        float rstd = rsqrtf(row_sum2(ss, 0.0f, buf).x / (float)C + n.eps);
        if (!row_ok) continue;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
            if (p < npk) {
                float y[W];
#pragma unroll
                for (int j = 0; j < W; j++)
                    y[j] = (h[i][j] - mean) * rstd * w[i][j] + b[i][j];
                st_row<T, W>(n.out, r * C + p * W, y);
            }
        }
        if (threadIdx.x == 0) {
            if (n.mean) n.mean[r] = mean;
            if (n.rstd) n.rstd[r] = rstd;
        }
    }
}

/* Partials: scratch[block][0..C) weight gradient, scratch[block][C..2C) bias gradient. Dynamic
 * shared memory: blockDim.y * C floats, to add the rows of a block in a fixed order. */
template <bool RMS, typename T, int W, int NV> static __global__ void norm_bwd_kernel(norm_args n) {
    __shared__ float2 buf[16][32];
    extern __shared__ float part[];
    const int64_t npk = n.C / W, C = n.C;
    float w[NV][W], dw[NV][W], db[NV][W];
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
#pragma unroll
        for (int j = 0; j < W; j++)
            w[i][j] = dw[i][j] = db[i][j] = 0.0f;
        if (p < npk) ld_row<T, W>(w[i], n.weight, p * W);
    }
    for (int64_t base = (int64_t)blockIdx.x * blockDim.y; base < n.rows;
         base += (int64_t)gridDim.x * blockDim.y) {
        int64_t r = base + threadIdx.y;
        bool row_ok = r < n.rows;
        float mean = 0.0f, rstd = 0.0f;
        if (row_ok) {
            if (!RMS) mean = n.mean[r];
            rstd = n.rstd[r];
        }
        float xh[NV][W], g[NV][W], sg = 0.0f, sgx = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
#pragma unroll
            for (int j = 0; j < W; j++)
                xh[i][j] = g[i][j] = 0.0f;
            if (row_ok && p < npk) {
                float d[W];
                ld_row<T, W>(xh[i], n.x, r * C + p * W);
                ld_row<T, W>(d, n.dout, r * C + p * W);
#pragma unroll
                for (int j = 0; j < W; j++) {
                    xh[i][j] = (xh[i][j] - mean) * rstd;
                    g[i][j] = d[j] * w[i][j];
                    sg += g[i][j];
                    sgx += g[i][j] * xh[i][j];
                    dw[i][j] += d[j] * xh[i][j];
                    db[i][j] += d[j];
                }
            }
        }
        float2 s = row_sum2(sg, sgx, buf);
        if (!row_ok) continue;
        float mg = RMS ? 0.0f : s.x / (float)C, mgx = s.y / (float)C;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
            if (p < npk) {
                float dx[W], res[W];
                if (n.dresid) ld_row<T, W>(res, n.dresid, r * C + p * W);
#pragma unroll
                for (int j = 0; j < W; j++) {
                    dx[j] = rstd * (g[i][j] - mg - xh[i][j] * mgx);
                    if (n.dresid) dx[j] += res[j];
                }
                st_row<T, W>(n.dx, r * C + p * W, dx);
            }
        }
    }
    if (!n.dweight && !n.dbias) return;
    float *out = n.scratch + (int64_t)blockIdx.x * 2 * C;
    if (blockDim.y == 1) { /* one row at a time: the thread's sums are the block's */
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
            if (p < npk) {
#pragma unroll
                for (int j = 0; j < W; j++) {
                    out[p * W + j] = dw[i][j];
                    out[C + p * W + j] = db[i][j];
                }
            }
        }
        return;
    }
    for (int k = 0; k < 2; k++) { /* k 0: weight gradient, 1: bias gradient */
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
            if (p < npk) {
#pragma unroll
                for (int j = 0; j < W; j++)
                    part[threadIdx.y * C + p * W + j] = k == 0 ? dw[i][j] : db[i][j];
            }
        }
        __syncthreads();
        for (int64_t c = threadIdx.y * blockDim.x + threadIdx.x; c < C;
             c += (int64_t)blockDim.x * blockDim.y) {
            float acc = 0.0f;
            for (unsigned y = 0; y < blockDim.y; y++)
                acc += part[y * C + c];
            out[k * C + c] = acc;
        }
        __syncthreads();
    }
}

/* dweight[c] (+)= sum over blocks of scratch[p][c]; dbias likewise from scratch[p][C + c]. A block
 * of 32 x 32 threads takes 32 columns; warp y adds blocks y, y+32, ...; then a fixed-order sum. */
template <typename TW> static __global__ void norm_bwd_finish_kernel(norm_args n, int nblocks) {
    __shared__ float sm[2][32][33];
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float a = 0.0f, b = 0.0f;
    if (c < n.C) {
        for (int p = threadIdx.y; p < nblocks; p += 32) {
            a += n.scratch[(int64_t)p * 2 * n.C + c];
            b += n.scratch[(int64_t)p * 2 * n.C + n.C + c];
        }
    }
    sm[0][threadIdx.y][threadIdx.x] = a;
    sm[1][threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || c >= n.C) return;
    for (int y = 1; y < 32; y++) {
        a += sm[0][y][threadIdx.x];
        b += sm[1][y][threadIdx.x];
    }
    TW *dw = (TW *)n.dweight, *db = (TW *)n.dbias;
    if (dw) dw[c] = stf<TW>(a + (n.accumulate ? ldf(dw[c]) : 0.0f));
    if (db) db[c] = stf<TW>(b + (n.accumulate ? ldf(db[c]) : 0.0f));
}

/* Launch shape: W elements per pack, NV packs per thread, tpr threads per row, rpb rows. */
typedef struct norm_shape {
    int W, NV, tpr, rpb;
} norm_shape;

static mt_status pick_shape(const norm_args *n, size_t es, int max_elems, norm_shape *s) {
    int W = (int)(16 / es);
    // why: 16-byte packs need C to be a multiple of the pack and every row 16-byte aligned
    uintptr_t all = (uintptr_t)n->x | (uintptr_t)n->out | (uintptr_t)n->resid_out |
                    (uintptr_t)n->residual | (uintptr_t)n->weight | (uintptr_t)n->bias |
                    (uintptr_t)n->dx | (uintptr_t)n->dout | (uintptr_t)n->dresid;
    if (n->C % W != 0 || all % 16 != 0) W = 1;
    int64_t npk = n->C / W;
    for (int pass = 0; pass < 2; pass++) {
        int64_t limit = pass == 0 ? 512 : 1024;
        for (int NV = 1; NV <= 4 && NV * W <= max_elems; NV *= 2) {
            int64_t tpr = ((npk + NV - 1) / NV + 31) / 32 * 32;
            if (tpr <= limit) {
                s->W = W;
                s->NV = NV;
                s->tpr = (int)tpr;
                s->rpb = (int)(512 / tpr > 16 ? 16 : 512 / tpr < 1 ? 1 : 512 / tpr);
                return MT_OK;
            }
        }
    }
    return MT_ERROR(MT_ERR_UNSUPPORTED, "norm: C=%lld is too large for the CUDA kernels",
                    (long long)n->C);
}

#define NORM_NV_SWITCH(NV, ...) \
    do {                        \
        if ((NV) == 1) {        \
            const int NVC = 1;  \
            __VA_ARGS__;        \
        } else if ((NV) == 2) { \
            const int NVC = 2;  \
            __VA_ARGS__;        \
        } else {                \
            const int NVC = 4;  \
            __VA_ARGS__;        \
        }                       \
    } while (0)

template <bool RMS, typename T> static mt_status fwd_launch(const norm_args *n, mt_stream stream) {
    norm_shape s;
    MT_TRY(pick_shape(n, sizeof(T), 32, &s));
    int64_t grid = (n->rows + s.rpb - 1) / s.rpb;
    dim3 block(s.tpr, s.rpb);
    const int WV = 16 / sizeof(T);
    if (s.W == WV) {
        NORM_NV_SWITCH(s.NV, (norm_fwd_kernel<RMS, T, WV, NVC><<<grid, block, 0, stream>>>(*n)));
    } else {
        NORM_NV_SWITCH(s.NV, (norm_fwd_kernel<RMS, T, 1, NVC><<<grid, block, 0, stream>>>(*n)));
    }
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status norm_fwd_cuda(const norm_args *n, mt_stream stream) {
    if (n->dtype == MT_F32)
        return n->rms ? fwd_launch<true, float>(n, stream) : fwd_launch<false, float>(n, stream);
    if (n->dtype == MT_BF16)
        return n->rms ? fwd_launch<true, __nv_bfloat16>(n, stream)
                      : fwd_launch<false, __nv_bfloat16>(n, stream);
    return MT_ERROR(MT_ERR_UNSUPPORTED, "norm: dtype %s", mt_dtype_name(n->dtype));
}

template <bool RMS, typename T> static mt_status bwd_launch(const norm_args *n, mt_stream stream) {
    norm_shape s;
    MT_TRY(pick_shape(n, sizeof(T), 16, &s));
    int64_t grid = (n->rows + s.rpb - 1) / s.rpb;
    if (grid > norm_bwd_blocks(n->rows)) grid = norm_bwd_blocks(n->rows);
    dim3 block(s.tpr, s.rpb);
    /* rpb > 1 only when tpr <= 256, so rpb * C <= 512 * 16 floats: within the 48 KiB default */
    size_t smem = (n->dweight || n->dbias) && s.rpb > 1 ? (size_t)s.rpb * n->C * sizeof(float) : 0;
    const int WV = 16 / sizeof(T);
    if (n->rows > 0) {
        if (s.W == WV) {
            NORM_NV_SWITCH(s.NV,
                           (norm_bwd_kernel<RMS, T, WV, NVC><<<grid, block, smem, stream>>>(*n)));
        } else {
            NORM_NV_SWITCH(s.NV,
                           (norm_bwd_kernel<RMS, T, 1, NVC><<<grid, block, smem, stream>>>(*n)));
        }
        MT_CUDA_CHECK_LAUNCH();
    } else {
        grid = 0; /* no partials: the finish kernel writes zeros (or leaves sums as they are) */
    }
    if (!n->dweight && !n->dbias) return MT_OK;
    unsigned fgrid = (unsigned)((n->C + 31) / 32);
    if (n->dw_dtype == MT_F32)
        norm_bwd_finish_kernel<float><<<fgrid, dim3(32, 32), 0, stream>>>(*n, (int)grid);
    else
        norm_bwd_finish_kernel<T><<<fgrid, dim3(32, 32), 0, stream>>>(*n, (int)grid);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status norm_bwd_cuda(const norm_args *n, mt_stream stream) {
    if (n->dtype == MT_F32)
        return n->rms ? bwd_launch<true, float>(n, stream) : bwd_launch<false, float>(n, stream);
    if (n->dtype == MT_BF16)
        return n->rms ? bwd_launch<true, __nv_bfloat16>(n, stream)
                      : bwd_launch<false, __nv_bfloat16>(n, stream);
    return MT_ERROR(MT_ERR_UNSUPPORTED, "norm: dtype %s", mt_dtype_name(n->dtype));
}
