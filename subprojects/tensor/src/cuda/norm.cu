/* LayerNorm/RMSNorm CUDA kernels, the row in registers (16-byte packs, fp32 math): one read of
 * every input, one write of every output. Rows of up to 256 packs: one warp per row, shuffle-only
 * reductions. Wider rows (or unaligned ones): a block of tpr x rpb threads holds rpb rows. The
 * backward keeps per-thread weight/bias gradient (and dx column) sums, writes one partial per
 * block, and a second kernel adds the partials in a fixed order (no atomics). */
#include "common.cuh"

#include <type_traits>

template <typename T, int W> struct alignas(sizeof(T) * W) norm_pack { T v[W]; };

/* Column sums the backward keeps per block: weight and bias gradient, and dx's with dx_sum. */
static __host__ __device__ __forceinline__ int norm_sums(const norm_args &n) {
    return n.dx_sum ? 3 : 2;
}

template <typename T, int W>
static __device__ __forceinline__ void unpack(float (&f)[W], const norm_pack<T, W> &p) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value && W % 2 == 0) {
        // why: a bf16 pair's high half is one AND (ldf per element extracts it first: two ops)
        const unsigned *u = reinterpret_cast<const unsigned *>(p.v);
#pragma unroll
        for (int j = 0; j < W / 2; j++) {
            f[2 * j] = __uint_as_float(u[j] << 16);
            f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int j = 0; j < W; j++)
            f[j] = ldf(p.v[j]);
    }
}

template <typename T, int W>
static __device__ __forceinline__ void ld_row(float (&f)[W], const void *base, int64_t off) {
    norm_pack<T, W> p = *reinterpret_cast<const norm_pack<T, W> *>((const T *)base + off);
    unpack<T, W>(f, p);
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

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sums (a, b) over the G warps of row group `grp` (block of 256 threads, 8 / G groups); every
 * thread of the group gets them. red: [2][8] float2, used alternately (`slot`) so that a fast
 * warp's next write cannot meet a slow warp's read. Warps are added in order: deterministic. */
template <int G>
static __device__ __forceinline__ float2 group_sum2(float a, float b, float2 (*red)[8], int &slot) {
    a = warp_sum(a);
    b = warp_sum(b);
    if (G == 1) return make_float2(a, b);
    int warp = threadIdx.x / 32, grp = warp / G;
    if (threadIdx.x % 32 == 0) red[slot][warp] = make_float2(a, b);
    asm volatile("bar.sync %0, %1;" ::"r"(1 + grp), "r"(32 * G) : "memory");
    float2 s = red[slot][grp * G];
#pragma unroll
    for (int k = 1; k < G; k++) {
        s.x += red[slot][grp * G + k].x;
        s.y += red[slot][grp * G + k].y;
    }
    slot ^= 1;
    return s;
}

template <typename T, int W>
static __device__ __forceinline__ norm_pack<T, W> ld_pack(const void *base, int64_t off) {
    return *reinterpret_cast<const norm_pack<T, W> *>((const T *)base + off);
}

/* Group-per-row kernels (blocks of 256 threads): G warps hold a row in registers, thread u of the
 * group (0 <= u < 32 G) holding packs u + 32 G i, i < NV (16 bytes each); reductions by shuffles
 * and, for G > 1, a named barrier per group.
 * Forward: group grp takes RP rows, blockIdx.x (8 / G) RP + grp + k (8 / G), k < RP, every load
 * of them issued before the first row's math. RP = 2 (only without residual and resid_out)
 * keeps as many bytes in flight as a row with its residual does at RP = 1. */
template <bool RMS, typename T, int G, int NV, int RP>
static __global__ void __launch_bounds__(256, 4) norm_fwd_grp_kernel(norm_args n) {
    __shared__ float2 red[2][8];
    constexpr bool RES = RP == 1; /* the launch takes RP = 2 only without residual, resid_out */
    const int W = 16 / sizeof(T), u = threadIdx.x % (32 * G), npk = (int)(n.C / W), ng = 8 / G;
    const int64_t r0 = (int64_t)blockIdx.x * ng * RP + threadIdx.x / (32 * G), C = n.C;
    int slot = 0;
    norm_pack<T, W> px[RP][NV], pr[RES ? NV : 1];
    // why: every load of the rows is issued before the first use
#pragma unroll
    for (int k = 0; k < RP; k++)
        if (r0 + k * ng < n.rows)
#pragma unroll
            for (int i = 0; i < NV; i++)
                if (u + 32 * G * i < npk)
                    px[k][i] = ld_pack<T, W>(n.x, (r0 + k * ng) * C + (u + 32 * G * i) * W);
    if (RES && n.residual && r0 < n.rows) {
#pragma unroll
        for (int i = 0; i < NV; i++)
            if (u + 32 * G * i < npk)
                pr[i] = ld_pack<T, W>(n.residual, r0 * C + (u + 32 * G * i) * W);
    }
#pragma unroll
    for (int k = 0; k < RP; k++) {
        const int64_t r = r0 + k * ng, off = r * C;
        if (r >= n.rows) return; /* the group's later rows are past the end too */
        float h[NV][W], s = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int p = u + 32 * G * i;
#pragma unroll
            for (int j = 0; j < W; j++)
                h[i][j] = 0.0f;
            if (p < npk) {
                unpack<T, W>(h[i], px[k][i]);
                if (RES && n.residual) {
                    float res[W];
                    unpack<T, W>(res, pr[RES ? i : 0]);
                    // why: normalise the sum as stored (rounded to T), as an unfused add would
#pragma unroll
                    for (int j = 0; j < W; j++)
                        h[i][j] = ldf(stf<T>(h[i][j] + res[j]));
                }
                if (RES && n.resid_out) st_row<T, W>(n.resid_out, off + p * W, h[i]);
#pragma unroll
                for (int j = 0; j < W; j++)
                    s += h[i][j];
            }
        }
        float mean = RMS ? 0.0f : group_sum2<G>(s, 0.0f, red, slot).x / (float)C, ss = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++)
            if (u + 32 * G * i < npk) {
#pragma unroll
                for (int j = 0; j < W; j++)
                    ss += (h[i][j] - mean) * (h[i][j] - mean);
            }
        float rstd = rsqrtf(group_sum2<G>(ss, 0.0f, red, slot).x / (float)C + n.eps);
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int p = u + 32 * G * i;
            if (p < npk) {
                float w[W], b[W], y[W];
                ld_row<T, W>(w, n.weight, p * W);
#pragma unroll
                for (int j = 0; j < W; j++)
                    b[j] = 0.0f;
                if (!RMS && n.bias) ld_row<T, W>(b, n.bias, p * W);
#pragma unroll
                for (int j = 0; j < W; j++)
                    y[j] = (h[i][j] - mean) * rstd * w[j] + b[j];
                st_row<T, W>(n.out, off + p * W, y);
            }
        }
        if (u == 0) {
            if (n.mean) n.mean[r] = mean;
            if (n.rstd) n.rstd[r] = rstd;
        }
    }
}

/* Backward: group grp takes rows blockIdx.x * (8 / G) + grp, then + gridDim.x * (8 / G), ...;
 * the weight and bias gradient terms (and dx's, for dx_sum) go to the group's shared-memory sums
 * ((8 / G) x S x C floats, dynamic, S = norm_sums(n); float4 q of pack p at index
 * q * npk + p, so accesses are contiguous); at the end the block adds its groups' sums in group
 * order and writes partial blockIdx.x. */
template <bool RMS, typename T, int G, int NV, int RP>
static __global__ void __launch_bounds__(256, RP == 2 ? 2 : 0) norm_bwd_grp_kernel(norm_args n) {
    extern __shared__ float4 acc4[];
    __shared__ float2 red[2][8];
    const int W = 16 / sizeof(T), Q = W / 4, u = threadIdx.x % (32 * G), npk = (int)(n.C / W);
    const int grp = threadIdx.x / (32 * G), ng = 8 / G, S = norm_sums(n);
    const int64_t C = n.C, step = (int64_t)gridDim.x * ng;
    int slot = 0;
    float4 *dw4 = acc4 + (int64_t)grp * S * npk * Q, *db4 = dw4 + npk * Q, *ds4 = db4 + npk * Q;
#pragma unroll
    for (int i = 0; i < NV; i++)
        if (u + 32 * G * i < npk)
#pragma unroll
            for (int q = 0; q < Q; q++)
                for (int k = 0; k < S; k++)
                    dw4[k * npk * Q + q * npk + u + 32 * G * i] =
                        make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    /* RP rows a round (r, r + step, ...): their column-sum terms are added in registers, then
     * into the group's shared-memory sums once */
    for (int64_t r0 = (int64_t)blockIdx.x * ng + grp; r0 < n.rows; r0 += step * RP) {
        float mean[RP], rstd[RP];
        int64_t off[RP];
        bool ok[RP];
        norm_pack<T, W> px[RP][NV], pd[RP][NV], pr[RP][NV];
        // why: every load of the rows is issued before the first use
#pragma unroll
        for (int k = 0; k < RP; k++) {
            const int64_t r = r0 + k * step;
            ok[k] = k == 0 || r < n.rows;
            const int64_t rr = ok[k] ? r : r0; /* a row past the end reads row r0, unused */
            off[k] = rr * C;
            mean[k] = RMS ? 0.0f : n.mean[rr];
            rstd[k] = n.rstd[rr];
#pragma unroll
            for (int i = 0; i < NV; i++) {
                int p = u + 32 * G * i;
                if (p < npk) {
                    px[k][i] = ld_pack<T, W>(n.x, off[k] + p * W);
                    pd[k][i] = ld_pack<T, W>(n.dout, off[k] + p * W);
                    if (n.dresid) pr[k][i] = ld_pack<T, W>(n.dresid, off[k] + p * W);
                }
            }
        }
        float sg[RP], sgx[RP];
#pragma unroll
        for (int k = 0; k < RP; k++)
            sg[k] = sgx[k] = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int p = u + 32 * G * i;
            if (p < npk) {
                float w[W], aw[W], ab[W];
                ld_row<T, W>(w, n.weight, p * W);
#pragma unroll
                for (int k = 0; k < RP; k++) {
                    if (!ok[k]) continue; /* ok[0] always: row 0 sets aw, ab */
                    float x[W], d[W];
                    unpack<T, W>(x, px[k][i]);
                    unpack<T, W>(d, pd[k][i]);
#pragma unroll
                    for (int j = 0; j < W; j++) {
                        float xh = (x[j] - mean[k]) * rstd[k], g = d[j] * w[j];
                        sg[k] += g;
                        sgx[k] = fmaf(g, xh, sgx[k]);
                        aw[j] = k == 0 ? d[j] * xh : fmaf(d[j], xh, aw[j]);
                        ab[j] = k == 0 ? d[j] : ab[j] + d[j];
                    }
                }
#pragma unroll
                for (int q = 0; q < Q; q++) {
                    float4 a = dw4[q * npk + p], b = db4[q * npk + p];
                    a.x += aw[q * 4], a.y += aw[q * 4 + 1], a.z += aw[q * 4 + 2];
                    a.w += aw[q * 4 + 3];
                    b.x += ab[q * 4], b.y += ab[q * 4 + 1], b.z += ab[q * 4 + 2];
                    b.w += ab[q * 4 + 3];
                    dw4[q * npk + p] = a;
                    db4[q * npk + p] = b;
                }
            }
        }
        /* dx = rstd (d w - mg - xh mgx) [+ dresid] = rstd t [+ dresid] with
         * t = d w - mg - (x - mean) cx, cx = rstd mgx: four operations an element */
        float mg[RP], cx[RP];
#pragma unroll
        for (int k = 0; k < RP; k++) {
            float2 sums = group_sum2<G>(sg[k], sgx[k], red, slot);
            mg[k] = RMS ? 0.0f : sums.x / (float)C, cx[k] = rstd[k] * (sums.y / (float)C);
        }
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int p = u + 32 * G * i;
            if (p < npk) {
                float w[W], as[W];
                ld_row<T, W>(w, n.weight, p * W);
#pragma unroll
                for (int k = 0; k < RP; k++) {
                    if (!ok[k]) continue;
                    float x[W], d[W], res[W];
                    unpack<T, W>(x, px[k][i]);
                    unpack<T, W>(d, pd[k][i]);
                    if (n.dresid)
                        unpack<T, W>(res, pr[k][i]);
                    else
#pragma unroll
                        for (int j = 0; j < W; j++)
                            res[j] = 0.0f;
                    norm_pack<T, W> o;
#pragma unroll
                    for (int j = 0; j < W; j++) {
                        float t = fmaf(-(x[j] - mean[k]), cx[k], fmaf(d[j], w[j], -mg[k]));
                        o.v[j] = stf<T>(fmaf(rstd[k], t, res[j]));
                    }
                    *reinterpret_cast<norm_pack<T, W> *>((T *)n.dx + off[k] + p * W) = o;
                    if (n.dx_sum) { /* dx as stored (rounded to T) */
                        float back[W];
                        unpack<T, W>(back, o);
#pragma unroll
                        for (int j = 0; j < W; j++)
                            as[j] = k == 0 ? back[j] : as[j] + back[j];
                    }
                }
                if (n.dx_sum) {
#pragma unroll
                    for (int q = 0; q < Q; q++) {
                        float4 c = ds4[q * npk + p];
                        c.x += as[q * 4], c.y += as[q * 4 + 1], c.z += as[q * 4 + 2];
                        c.w += as[q * 4 + 3];
                        ds4[q * npk + p] = c;
                    }
                }
            }
        }
    }
    if (!n.dweight && !n.dbias && !n.dx_sum) return;
    __syncthreads();
    const float *acc = (const float *)acc4;
    float *out = n.scratch + (int64_t)blockIdx.x * S * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        int64_t k = ((c % W) / 4 * npk + c / W) * 4 + c % 4; /* column c in a group's sums */
        for (int s = 0; s < S; s++) {
            float a = 0.0f;
            for (int v = 0; v < ng; v++) /* fixed order: group 0, 1, ... */
                a += acc[(int64_t)v * S * C + s * C + k];
            out[s * C + c] = a;
        }
    }
}

/* Partials: scratch[block][0..C) weight gradient, [C..2C) bias gradient, [2C..3C) dx_sum's (when
 * dx_sum is set). Dynamic shared memory: blockDim.y * C floats, to add the rows of a block
 * in a fixed order. */
template <bool RMS, typename T, int W, int NV> static __global__ void norm_bwd_kernel(norm_args n) {
    __shared__ float2 buf[16][32];
    extern __shared__ float part[];
    const int64_t npk = n.C / W, C = n.C;
    const int S = norm_sums(n);
    float w[NV][W], dw[NV][W], db[NV][W], ds[NV][W];
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
#pragma unroll
        for (int j = 0; j < W; j++)
            w[i][j] = dw[i][j] = db[i][j] = ds[i][j] = 0.0f;
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
                    ds[i][j] += ldf(stf<T>(dx[j])); /* as stored */
                }
                st_row<T, W>(n.dx, r * C + p * W, dx);
            }
        }
    }
    if (!n.dweight && !n.dbias && !n.dx_sum) return;
    float *out = n.scratch + (int64_t)blockIdx.x * S * C;
    if (blockDim.y == 1) { /* one row at a time: the thread's sums are the block's */
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
            if (p < npk) {
#pragma unroll
                for (int j = 0; j < W; j++) {
                    out[p * W + j] = dw[i][j];
                    out[C + p * W + j] = db[i][j];
                    if (S == 3) out[2 * C + p * W + j] = ds[i][j];
                }
            }
        }
        return;
    }
    for (int k = 0; k < S; k++) { /* k 0: weight gradient, 1: bias gradient, 2: dx_sum */
#pragma unroll
        for (int i = 0; i < NV; i++) {
            int64_t p = threadIdx.x + (int64_t)i * blockDim.x;
            if (p < npk) {
#pragma unroll
                for (int j = 0; j < W; j++)
                    part[threadIdx.y * C + p * W + j] = k == 0   ? dw[i][j]
                                                        : k == 1 ? db[i][j]
                                                                 : ds[i][j];
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

/* dweight[c] (+)= sum over blocks of scratch[p][c]; dbias and dx_sum likewise from scratch[p][C + c]
 * and scratch[p][2C + c] (partials of S = 2 or 3 sums, S * C floats each). A block of 32 x 32
 * threads takes 32 columns; warp y adds blocks y, y+32, ...; then a fixed-order sum. */
template <typename TW> static __global__ void norm_bwd_finish_kernel(norm_args n, int nblocks) {
    __shared__ float sm[3][32][33];
    const int S = norm_sums(n);
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, stride = S * n.C;
    float a[3] = { 0.0f, 0.0f, 0.0f };
    if (c < n.C) {
        int p = threadIdx.y;
        for (; p + 96 < nblocks; p += 128) { /* 4 partials' loads in flight, added in order of p */
            float v[4][3];
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int s = 0; s < 3; s++)
                    v[u][s] =
                        s < S ? n.scratch[(int64_t)(p + 32 * u) * stride + s * n.C + c] : 0.0f;
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int s = 0; s < 3; s++)
                    a[s] += v[u][s];
        }
        for (; p < nblocks; p += 32)
            for (int s = 0; s < S; s++)
                a[s] += n.scratch[(int64_t)p * stride + s * n.C + c];
    }
#pragma unroll
    for (int s = 0; s < 3; s++)
        sm[s][threadIdx.y][threadIdx.x] = a[s];
    __syncthreads();
    if (threadIdx.y != 0 || c >= n.C) return;
    for (int y = 1; y < 32; y++)
#pragma unroll
        for (int s = 0; s < 3; s++)
            a[s] += sm[s][y][threadIdx.x];
    TW *out[3] = { (TW *)n.dweight, (TW *)n.dbias, (TW *)n.dx_sum };
#pragma unroll
    for (int s = 0; s < 3; s++)
        if (out[s]) out[s][c] = stf<TW>(a[s] + (n.accumulate ? ldf(out[s][c]) : 0.0f));
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

/* Shape of the group-per-row kernels: G warps per row, NV <= 3 packs per thread (register use);
 * *G = 0: use the block kernels. */
static void grp_shape(const norm_args *n, size_t es, int *G, int *NV) {
    int W = (int)(16 / es);
    uintptr_t all = (uintptr_t)n->x | (uintptr_t)n->out | (uintptr_t)n->resid_out |
                    (uintptr_t)n->residual | (uintptr_t)n->weight | (uintptr_t)n->bias |
                    (uintptr_t)n->dx | (uintptr_t)n->dout | (uintptr_t)n->dresid;
    *G = 0;
    if (n->C % W != 0 || all % 16 != 0) return;
    for (int g = 1; g <= 8; g *= 2) {
        int64_t nv = (n->C / W + 32 * g - 1) / (32 * g);
        if (nv <= 3) {
            *G = g;
            *NV = (int)nv;
            return;
        }
    }
}

/* Calls __VA_ARGS__ with constants GC = G (1, 2, 4, 8) and NVC = NV (1, 2, 3). */
#define NORM_GRP_SWITCH(G, NV, ...)        \
    do {                                   \
        if ((NV) == 3) {                   \
            const int NVC = 3;             \
            NORM_G_SWITCH(G, __VA_ARGS__); \
        } else if ((NV) == 2) {            \
            const int NVC = 2;             \
            NORM_G_SWITCH(G, __VA_ARGS__); \
        } else {                           \
            const int NVC = 1;             \
            NORM_G_SWITCH(G, __VA_ARGS__); \
        }                                  \
    } while (0)
#define NORM_G_SWITCH(G, ...)  \
    do {                       \
        if ((G) == 1) {        \
            const int GC = 1;  \
            __VA_ARGS__;       \
        } else if ((G) == 2) { \
            const int GC = 2;  \
            __VA_ARGS__;       \
        } else if ((G) == 4) { \
            const int GC = 4;  \
            __VA_ARGS__;       \
        } else {               \
            const int GC = 8;  \
            __VA_ARGS__;       \
        }                      \
    } while (0)

template <bool RMS, typename T> static mt_status fwd_launch(const norm_args *n, mt_stream stream) {
    int G, NV;
    grp_shape(n, sizeof(T), &G, &NV);
    if (G) {
        /* two rows a group without residual (1.5B B32 step, nvidia-h200: fwd.norm 8.3 -> 7.4 ms);
         * MT_NORM_FWD_ROWS=1: one, for comparisons */
        static int rows_env = MT_ENV_UNREAD;
        int rp =
            !n->residual && !n->resid_out ? mt_env_int_once("MT_NORM_FWD_ROWS", 2, &rows_env) : 1;
        int64_t per_block = 8 / G * (rp == 2 ? 2 : 1);
        unsigned grid = (unsigned)((n->rows + per_block - 1) / per_block);
        if (rp == 2)
            NORM_GRP_SWITCH(
                G, NV, (norm_fwd_grp_kernel<RMS, T, GC, NVC, 2><<<grid, 256, 0, stream>>>(*n)));
        else
            NORM_GRP_SWITCH(
                G, NV, (norm_fwd_grp_kernel<RMS, T, GC, NVC, 1><<<grid, 256, 0, stream>>>(*n)));
        MT_CUDA_CHECK_LAUNCH();
        return MT_OK;
    }
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
    if (n->dtype == MT_F16)
        return n->rms ? fwd_launch<true, __half>(n, stream) : fwd_launch<false, __half>(n, stream);
    return MT_ERROR(MT_ERR_UNSUPPORTED, "norm: dtype %s", mt_dtype_name(n->dtype));
}

/* Blocks of the group-per-row backward: at most the resident ones and norm_bwd_blocks(rows), and
 * as few as give each row group the same number of rows (a ragged last round leaves the memory
 * system underused for its whole duration). */
template <typename K>
static mt_status bwd_grp_grid(K kernel, size_t smem, int64_t rows, int G, int64_t *grid) {
    int sms = 0, per_sm = 0;
    MT_TRY(mt_cuda_attr(cudaDevAttrMultiProcessorCount, &sms));
    MT_TRY(mt_cuda_occupancy(kernel, 256, smem, &per_sm));
    int64_t ng = 8 / G, most = (int64_t)sms * per_sm;
    if (most > norm_bwd_blocks(rows)) most = norm_bwd_blocks(rows);
    int64_t k = (rows + most * ng - 1) / (most * ng); /* rows per group */
    *grid = (rows + k * ng - 1) / (k * ng);
    return MT_OK;
}

/* The group-per-row backward with RP rows a round; *grid: its blocks. */
template <bool RMS, typename T, int RP>
static mt_status bwd_grp_launch(const norm_args *n, int G, int NV, size_t smem, int64_t *grid,
                                mt_stream stream) {
    NORM_GRP_SWITCH(G, NV, {
        MT_TRY(bwd_grp_grid(norm_bwd_grp_kernel<RMS, T, GC, NVC, RP>, smem, n->rows, G, grid));
        norm_bwd_grp_kernel<RMS, T, GC, NVC, RP><<<(unsigned)*grid, 256, smem, stream>>>(*n);
    });
    return MT_OK;
}

template <bool RMS, typename T> static mt_status bwd_launch(const norm_args *n, mt_stream stream) {
    int64_t grid = 0; /* 0 rows: no partials; the finish kernel writes zeros (or leaves sums) */
    const int WV = 16 / sizeof(T);
    int G, NV;
    grp_shape(n, sizeof(T), &G, &NV);
    if (G && n->rows > 0) {
        size_t smem = (size_t)(8 / G) * norm_sums(*n) * n->C * sizeof(float); /* groups' sums */
        /* two rows a round, their column-sum terms added in registers before the one shared-
         * memory read-modify-write (bench_norm layernorm_bwd_sum bf16 N16384 C768 56.6 -> 52.8
         * us, nvidia-h100-x1); MT_NORM_BWD_ROWS=1: one row a round, for comparisons */
        static int rows_env = MT_ENV_UNREAD;
        if (mt_env_int_once("MT_NORM_BWD_ROWS", 2, &rows_env) != 1)
            MT_TRY((bwd_grp_launch<RMS, T, 2>(n, G, NV, smem, &grid, stream)));
        else
            MT_TRY((bwd_grp_launch<RMS, T, 1>(n, G, NV, smem, &grid, stream)));
        MT_CUDA_CHECK_LAUNCH();
    } else if (!G && n->rows > 0) {
        norm_shape s;
        MT_TRY(pick_shape(n, sizeof(T), 16, &s));
        grid = (n->rows + s.rpb - 1) / s.rpb;
        if (grid > norm_bwd_blocks(n->rows)) grid = norm_bwd_blocks(n->rows);
        dim3 block(s.tpr, s.rpb);
        /* rpb > 1 only when tpr <= 256, so rpb * C <= 512 * 16 floats: within the 48 KiB default */
        size_t smem = (n->dweight || n->dbias || n->dx_sum) && s.rpb > 1
                          ? (size_t)s.rpb * n->C * sizeof(float)
                          : 0;
        if (s.W == WV) {
            NORM_NV_SWITCH(s.NV,
                           (norm_bwd_kernel<RMS, T, WV, NVC><<<grid, block, smem, stream>>>(*n)));
        } else {
            NORM_NV_SWITCH(s.NV,
                           (norm_bwd_kernel<RMS, T, 1, NVC><<<grid, block, smem, stream>>>(*n)));
        }
        MT_CUDA_CHECK_LAUNCH();
    }
    if (!n->dweight && !n->dbias && !n->dx_sum) return MT_OK;
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
    if (n->dtype == MT_F16)
        return n->rms ? bwd_launch<true, __half>(n, stream) : bwd_launch<false, __half>(n, stream);
    return MT_ERROR(MT_ERR_UNSUPPORTED, "norm: dtype %s", mt_dtype_name(n->dtype));
}
