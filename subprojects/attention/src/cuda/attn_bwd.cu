/* Attention backward on CUDA (FlashAttention-2 scheme): Di = rowsum(dout*out), P recomputed from
 * lse, dS = P (dP - Di). bf16/f16 with D 64 or 128 run tensor-core kernels. Default: one fused
 * kernel per key tile that accumulates dK, dV over the query heads of its group (GQA without
 * copies) and adds each tile's dQ part into an f32 accumulator with atomics (7 GEMMs with bf16's
 * hi + lo dS against 9); on sm_90a builds running on Hopper, attn_sm90.cu's wgmma version of
 * it. Deterministic mode: the same kernel without dQ, then a dQ kernel per
 * query tile (no atomics), which attention dropout also takes. Anything else runs generic
 * warp-per-row kernels. */
#include "attn_common.cuh"

/* Di = sum_d dout*out for each (b, h, i): one warp per row; Dv is (B,H,T). */
template <typename T>
static __global__ void attn_bwd_dot_kernel(attn_args a, float *Dv, const T *o, const T *dout) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * 4 + warp;
    if (row >= (int64_t)a.B * a.H * a.T) return;
    int i = (int)(row % a.T), h = (int)(row / a.T % a.H), b = (int)(row / a.T / a.H);
    const T *orow = o + b * a.st[AO][0] + i * a.st[AO][1] + h * a.st[AO][2];
    const T *grow = dout + b * a.st[ADO][0] + i * a.st[ADO][1] + h * a.st[ADO][2];
    float acc = 0.0f;
    for (int d = lane; d < a.D; d += 32)
        acc += attn_t<T>::ld(orow[d]) * attn_t<T>::ld(grow[d]);
    acc = warp_sum(acc);
    if (lane == 0) Dv[row] = acc;
}

/* Generic dQ: one warp per query row; lane j handles key j0+j. */
template <typename T>
static __global__ void attn_bwd_dq_generic_kernel(attn_args a, T *dq, const T *q, const T *k,
                                                  const T *v, const T *dout, const float *lse,
                                                  const float *Dv) {
    __shared__ float qs[4][256], gs[4][256];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * 4 + warp;
    if (row >= (int64_t)a.B * a.H * a.T) return;
    int i = (int)(row % a.T), h = (int)(row / a.T % a.H), b = (int)(row / a.T / a.H);
    int hk = h / a.group, D = a.D, n = a.causal ? i + 1 : a.T;
    const int64_t sid = a.drop.ids ? a.drop.ids[b] : 0; /* attention dropout */
    const T *qr = q + b * a.st[AQ][0] + i * a.st[AQ][1] + h * a.st[AQ][2];
    const T *gr = dout + b * a.st[ADO][0] + i * a.st[ADO][1] + h * a.st[ADO][2];
    const T *kb = k + b * a.st[AK][0] + hk * a.st[AK][2];
    const T *vb = v + b * a.st[AV][0] + hk * a.st[AV][2];
    for (int d = lane; d < D; d += 32) {
        qs[warp][d] = attn_t<T>::ld(qr[d]) * a.scale;
        gs[warp][d] = attn_t<T>::ld(gr[d]);
    }
    __syncwarp();
    float L = lse[row], Di = Dv[row], acc[8] = { 0 };
    for (int j0 = key_start_of(a, b, i); j0 < n; j0 += 32) {
        int j = j0 + lane;
        float ds = 0.0f;
        if (j < n) {
            const T *kr = kb + j * a.st[AK][1], *vr = vb + j * a.st[AV][1];
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < D; d++) {
                s += qs[warp][d] * attn_t<T>::ld(kr[d]);
                dp += gs[warp][d] * attn_t<T>::ld(vr[d]);
            }
            const float f = a.drop.ids ? attn_drop_factor(&a.drop, sid, h, a.T, i, j) : 1.0f;
            ds = expf(s - L) * (dp * f - Di);
        }
        int cnt = min(32, n - j0);
        for (int jj = 0; jj < cnt; jj++) {
            float dsj = __shfl_sync(0xffffffffu, ds, jj);
            const T *kr = kb + (j0 + jj) * a.st[AK][1];
#pragma unroll
            for (int c = 0; c < 8; c++)
                if (lane + 32 * c < D) acc[c] += dsj * attn_t<T>::ld(kr[lane + 32 * c]);
        }
    }
    T *out = dq + b * a.st[ADQ][0] + i * a.st[ADQ][1] + h * a.st[ADQ][2];
#pragma unroll
    for (int c = 0; c < 8; c++)
        if (lane + 32 * c < D) out[lane + 32 * c] = attn_t<T>::st(acc[c] * a.scale);
}

/* Generic dK, dV: one warp per key row (b, j, hk), summing over the group's query heads; lane i
 * handles query i0+i. */
template <typename T>
static __global__ void attn_bwd_dkdv_generic_kernel(attn_args a, T *dk, T *dv, const T *q,
                                                    const T *k, const T *v, const T *dout,
                                                    const float *lse, const float *Dv) {
    __shared__ float ks_[4][256], vs_[4][256];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * 4 + warp;
    if (row >= (int64_t)a.B * a.Hkv * a.T) return;
    int j = (int)(row % a.T), hk = (int)(row / a.T % a.Hkv), b = (int)(row / a.T / a.Hkv);
    int D = a.D;
    const int64_t sid = a.drop.ids ? a.drop.ids[b] : 0; /* attention dropout */
    const T *kr = k + b * a.st[AK][0] + j * a.st[AK][1] + hk * a.st[AK][2];
    const T *vr = v + b * a.st[AV][0] + j * a.st[AV][1] + hk * a.st[AV][2];
    for (int d = lane; d < D; d += 32) {
        ks_[warp][d] = attn_t<T>::ld(kr[d]) * a.scale;
        vs_[warp][d] = attn_t<T>::ld(vr[d]);
    }
    __syncwarp();
    float gk[8] = { 0 }, gv[8] = { 0 };
    for (int h = hk * a.group; h < (hk + 1) * a.group; h++) {
        const T *qb = q + b * a.st[AQ][0] + h * a.st[AQ][2];
        const T *gb = dout + b * a.st[ADO][0] + h * a.st[ADO][2];
        const float *Lb = lse + lse_row(a, b, h, 0), *Db = Dv + lse_row(a, b, h, 0);
        for (int i0 = a.causal ? j : 0; i0 < a.T; i0 += 32) {
            int i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < a.T && key_start_of(a, b, i) <= j) { /* (document masks) */
                const T *qr = qb + i * a.st[AQ][1], *gr = gb + i * a.st[ADO][1];
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < D; d++) {
                    s += ks_[warp][d] * attn_t<T>::ld(qr[d]);
                    dp += vs_[warp][d] * attn_t<T>::ld(gr[d]);
                }
                p = expf(s - Lb[i]);
                const float f = a.drop.ids ? attn_drop_factor(&a.drop, sid, h, a.T, i, j) : 1.0f;
                ds = p * (dp * f - Db[i]);
                p *= f; /* dV takes the dropped weights */
            }
            int cnt = min(32, a.T - i0);
            for (int ii = 0; ii < cnt; ii++) {
                float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
                const T *qr = qb + (i0 + ii) * a.st[AQ][1], *gr = gb + (i0 + ii) * a.st[ADO][1];
#pragma unroll
                for (int c = 0; c < 8; c++)
                    if (lane + 32 * c < D) {
                        gv[c] += pi * attn_t<T>::ld(gr[lane + 32 * c]);
                        gk[c] += dsi * attn_t<T>::ld(qr[lane + 32 * c]);
                    }
            }
        }
    }
    T *ok = dk + b * a.st[ADK][0] + j * a.st[ADK][1] + hk * a.st[ADK][2];
    T *ov = dv + b * a.st[ADV][0] + j * a.st[ADV][1] + hk * a.st[ADV][2];
#pragma unroll
    for (int c = 0; c < 8; c++)
        if (lane + 32 * c < D) {
            ok[lane + 32 * c] = attn_t<T>::st(gk[c] * a.scale);
            ov[lane + 32 * c] = attn_t<T>::st(gv[c]);
        }
}

/* Tensor-core dQ: a block of NW warps owns BR = 16*NW query rows of one
 * (b, h) and walks the key tiles (double-buffered), recomputing P and dS; dQ stays in registers. */
template <typename T, int D, int NW, bool DOCS, bool DROP>
static __global__ void __launch_bounds__(NW * 32)
    attn_bwd_dq_mma_kernel(attn_args a, T *dq, const T *q, const T *k, const T *v, const T *dout,
                           const float *lse, const float *Dv) {
    constexpr int BR = 16 * NW, BC = 64, NT = NW * 32;
    extern __shared__ __align__(128) unsigned char smem[];
    T *sQ = (T *)smem, *sG = sQ + BR * D, *sK = sG + BR * D, *sV = sK + 2 * BC * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const q_block qb = q_block_of<BR, BC>(a);
    const int b = qb.b, h = qb.h, hk = qb.hk, q0 = qb.q0, qn = qb.qn, nk = qb.nk;
    const T *kg = k + b * a.st[AK][0] + hk * a.st[AK][2];
    const T *vg = v + b * a.st[AV][0] + hk * a.st[AV][2];
    const int64_t ks = a.st[AK][1], vs = a.st[AV][1];
    const int row0 = q0 + warp * 16 + (lane >> 2);
    const fwd_ks dm = fwd_ks_of<BR, BC, DOCS>(a, b, q0, row0); /* key tiles from dm.kb */
    const int kb0 = dm.kb * BC;
    const int64_t sid = DROP ? a.drop.ids[b] : 0; /* attention dropout: the row's sample id */
    load_tile<T, BR, D, NT>(sQ, q + b * a.st[AQ][0] + h * a.st[AQ][2] + (int64_t)q0 * a.st[AQ][1],
                            a.st[AQ][1], qn);
    load_tile<T, BR, D, NT>(sG,
                            dout + b * a.st[ADO][0] + h * a.st[ADO][2] + (int64_t)q0 * a.st[ADO][1],
                            a.st[ADO][1], qn);
    load_tile<T, BC, D, NT>(sK, kg + kb0 * ks, ks, min(BC, a.T - kb0));
    load_tile<T, BC, D, NT>(sV, vg + kb0 * vs, vs, min(BC, a.T - kb0));
    cp_async_commit();
    const float sl2 = a.scale * ATTN_LOG2E;
    float L[2], Di[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + 8 * r;
        int64_t off = lse_row(a, b, h, row);
        L[r] = row < a.T ? lse[off] * ATTN_LOG2E : INFINITY;
        Di[r] = row < a.T ? Dv[off] : 0.0f;
    }
    float acc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++)
        acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    for (int j = 0; j < nk - dm.kb; j++) { /* key tile dm.kb + j, in buffer j & 1 */
        if (j + 1 < nk - dm.kb) {
            int k1 = kb0 + (j + 1) * BC, buf = (j + 1) & 1;
            load_tile<T, BC, D, NT>(sK + buf * BC * D, kg + k1 * ks, ks, min(BC, a.T - k1));
            load_tile<T, BC, D, NT>(sV + buf * BC * D, vg + k1 * vs, vs, min(BC, a.T - k1));
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T *cK = sK + (j & 1) * BC * D, *cV = sV + (j & 1) * BC * D;
        float p[BC / 8][4], ds[BC / 8][4];
#pragma unroll
        for (int i = 0; i < BC / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                p[i][e] = ds[i][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t qa[4], ga[4];
            ldsm_x4(qa, sQ + swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
            ldsm_x4(ga, sG + swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int np = 0; np < BC / 16; np++) {
                uint32_t bk[4], bv[4];
                int r = np * 16 + (lane & 7) + ((lane >> 4) << 3),
                    c = kk * 16 + ((lane >> 3) & 1) * 8;
                ldsm_x4(bk, cK + swz<D>(r, c));
                ldsm_x4(bv, cV + swz<D>(r, c));
                attn_t<T>::mma(p[2 * np], qa, bk[0], bk[1]);
                attn_t<T>::mma(p[2 * np + 1], qa, bk[2], bk[3]);
                attn_t<T>::mma(ds[2 * np], ga, bv[0], bv[1]);
                attn_t<T>::mma(ds[2 * np + 1], ga, bv[2], bv[3]);
            }
        }
        const int k0 = kb0 + j * BC;
        const bool mask = k0 + BC > a.T || (a.causal && k0 + BC - 1 > q0) || (DOCS && k0 < dm.lim);
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float f[2] = { 1.0f, 1.0f }; /* attention dropout's factors */
                if constexpr (DROP)
                    attn_drop_pair<false>(a, sid, h, row0 + 8 * r, k0 + nt * 8 + 2 * (lane & 3),
                                          f[0], f[1]);
#pragma unroll
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    int col = k0 + nt * 8 + 2 * (lane & 3) + (e & 1), row = row0 + (e >> 1) * 8;
                    float pe = attn_exp2(fmaf(p[nt][e], sl2, -L[e >> 1]));
                    if (mask &&
                        (col >= a.T || (a.causal && col > row) || (DOCS && col < dm.row[e >> 1])))
                        pe = 0.0f;
                    ds[nt][e] = pe * ((DROP ? ds[nt][e] * f[e & 1] : ds[nt][e]) - Di[e >> 1]);
                }
            }
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            uint32_t sa[4];
            acc_pack<T>(ds, kk, sa);
            /* why: a row with few keys has |dS| ~ 1 while its dQ = dS K cancels; bf16 dS alone
             * leaves errors of 2^-9 |dS| |K| in dQ, so bf16 adds the rounding residual as a
             * second term (an extra mma on the same K fragment) */
            uint32_t sl[4] = { 0, 0, 0, 0 };
            if constexpr (attn_t<T>::two_term) acc_residual<T>(ds, kk, sa, sl);
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t bk[4];
                ldsm_x4_t(bk, cK + swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                          dp * 16 + (lane >> 4) * 8));
                attn_t<T>::mma(acc[2 * dp], sa, bk[0], bk[1]);
                attn_t<T>::mma(acc[2 * dp + 1], sa, bk[2], bk[3]);
                if constexpr (attn_t<T>::two_term) {
                    attn_t<T>::mma(acc[2 * dp], sl, bk[0], bk[1]);
                    attn_t<T>::mma(acc[2 * dp + 1], sl, bk[2], bk[3]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + 8 * r;
        T *orow = dq + b * a.st[ADQ][0] + (int64_t)row * a.st[ADQ][1] + h * a.st[ADQ][2];
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            if (row < a.T)
                *(uint32_t *)(orow + dt * 8 + 2 * (lane & 3)) =
                    attn_t<T>::pack(acc[dt][2 * r] * a.scale, acc[dt][2 * r + 1] * a.scale);
    }
}

/* The bias sums' part (attn_ws_parts_bytes) of head h, chunk `chunk` (ATTN_PART_ROWS rows) of
 * batch entry b, for a tensor of `heads` heads. */
__device__ __forceinline__ float *attn_part(float *parts, int b, int chunk, int nchunk, int h,
                                            int heads, int D) {
    return parts + (((int64_t)b * nchunk + chunk) * heads + h) * D;
}

/* A 256-thread block's column sums of D columns: each thread holds x[8] of columns 8 (lane % (D/8))
 * (lanes D/8 apart share them) for its rows; threads below D write their column's sum to part. */
template <int D>
__device__ __forceinline__ void attn_block_colsum(float (&x)[8], float (*red)[D], float *part) {
    constexpr int TPR = D / 8;
#pragma unroll
    for (int off = TPR; off < 32; off <<= 1)
#pragma unroll
        for (int e = 0; e < 8; e++)
            x[e] += __shfl_xor_sync(0xffffffffu, x[e], off);
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    if (lane < TPR)
#pragma unroll
        for (int e = 0; e < 8; e++)
            red[w][lane * 8 + e] = x[e];
    __syncthreads();
    if (threadIdx.x < D) {
        float t = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++)
            t += red[i][threadIdx.x];
        part[threadIdx.x] = t;
    }
}

/* Fast-path prologue: Di (as attn_bwd_dot_kernel) with 16-byte loads, D/8 threads per row, and
 * zeroes the f32 dQ accumulator dqa: (B,H,T,D), or TILED (attn_sm90.cu) (B,H,nq,64,D) with the
 * rows past T of the last tile. A 256-thread block takes ATTN_PART_ROWS rows of one (b, h) in
 * passes; with SUMS it also writes dout's column sums over them to its part. */
template <typename T, int D, bool TILED, bool SUMS>
static __global__ void __launch_bounds__(256)
    attn_bwd_prep_kernel(attn_args a, float *Dv, float *dqa, const T *o, const T *dout,
                         float *parts) {
    constexpr int TPR = D / 8, RPP = 256 / TPR;        /* rows per pass */
    const int Tz = TILED ? (a.T + 63) / 64 * 64 : a.T; /* accumulator rows per (b, h) */
    const int nchunk = ATTN_PART_CHUNKS(a.T);
    const int64_t bh = blockIdx.x / nchunk;
    const int chunk = (int)(blockIdx.x % nchunk), c = (threadIdx.x % TPR) * 8;
    const int h = (int)(bh % a.H), b = (int)(bh / a.H);
    float sum[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
    for (int pass = 0; pass < ATTN_PART_ROWS / RPP; pass++) {
        const int i = chunk * ATTN_PART_ROWS + pass * RPP + (int)threadIdx.x / TPR;
        if (i < Tz) {
            float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float *zp = dqa + (bh * Tz + i) * D + c;
            *(float4 *)zp = z;
            *(float4 *)(zp + 4) = z;
        }
        float acc = 0.0f; /* no early exit: the shuffles need the warp */
        if (i < a.T) {
            uint4 x = *(const uint4 *)(o + b * a.st[AO][0] + i * a.st[AO][1] + h * a.st[AO][2] + c);
            uint4 y =
                *(const uint4 *)(dout + b * a.st[ADO][0] + i * a.st[ADO][1] + h * a.st[ADO][2] + c);
            const T *xs = (const T *)&x, *ys = (const T *)&y;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float ye = attn_t<T>::ld(ys[e]);
                acc += attn_t<T>::ld(xs[e]) * ye;
                if constexpr (SUMS) sum[e] += ye;
            }
        }
#pragma unroll
        for (int off = TPR / 2; off > 0; off >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (i < a.T && c == 0) Dv[bh * a.T + i] = acc;
    }
    if constexpr (SUMS) {
        __shared__ float red[8][D];
        attn_block_colsum<D>(sum, red, attn_part(parts, b, chunk, nchunk, h, a.H, D));
    }
}

/* dq = scale * dqa -> (B,T,H,D) strided, 8 columns per thread. (B,H,T,D): a 256-thread block
 * takes ATTN_PART_ROWS rows of one (b, h) in passes. TILED: a block takes one 64-row tile, in
 * passes of fragment groups (tile, warp w, row group g, 64-column block cb, 8-column step nt) of
 * dqa_tile_index, 64 contiguous bytes, columns 8nt.. of tile rows 16w+g and 16w+g+8. With SUMS
 * the block also writes dq's column sums over its rows to its part. */
template <typename T, int D, bool TILED, bool SUMS>
static __global__ void __launch_bounds__(256)
    attn_bwd_dq_convert_kernel(attn_args a, T *dq, const float *dqa, float *parts) {
    const float sc = a.scale;
    float sum[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
    auto store = [&](int64_t bh, int i, int c, const float *x) {
        if (i >= a.T) return;
        const int h = (int)(bh % a.H), b = (int)(bh / a.H);
        float y[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            y[e] = x[e] * sc;
            if constexpr (SUMS) sum[e] += y[e];
        }
        uint4 r;
        r.x = attn_t<T>::pack(y[0], y[1]);
        r.y = attn_t<T>::pack(y[2], y[3]);
        r.z = attn_t<T>::pack(y[4], y[5]);
        r.w = attn_t<T>::pack(y[6], y[7]);
        *(uint4 *)(dq + b * a.st[ADQ][0] + i * a.st[ADQ][1] + h * a.st[ADQ][2] + c) = r;
    };
    const int nchunk = ATTN_PART_CHUNKS(a.T);
    const int64_t bh = blockIdx.x / nchunk;
    const int chunk = (int)(blockIdx.x % nchunk);
    if constexpr (TILED) { /* chunks are the 64-row tiles */
        static_assert(ATTN_PART_ROWS == 64, "a part is one dQ tile");
        const float *tile = dqa + (int64_t)blockIdx.x * 64 * D;
#pragma unroll
        for (int pass = 0; pass < D / 64; pass++) { /* 4D threads per tile */
            const int id = pass * 256 + (int)threadIdx.x;
            const int nt = id % 8, cb = id / 8 % (D / 64), g = id / (D / 8) % 8,
                      w = id / (D / 8) / 8 % 4;
            const float4 *src = (const float4 *)tile + (cb * 8 + nt) * 128 + w * 32 + g * 4;
            float lo[8], hi[8];
#pragma unroll
            for (int j = 0; j < 4; j++) { /* lane 4g+j: (row, 2j..2j+1), (row + 8, 2j..2j+1) */
                float4 v = src[j];
                lo[2 * j] = v.x, lo[2 * j + 1] = v.y, hi[2 * j] = v.z, hi[2 * j + 1] = v.w;
            }
            const int i = chunk * 64 + w * 16 + g, c = cb * 64 + nt * 8;
            store(bh, i, c, lo);
            store(bh, i + 8, c, hi);
        }
    } else {
        constexpr int TPR = D / 8, RPP = 256 / TPR;
        const int c = (int)(threadIdx.x % TPR) * 8;
#pragma unroll
        for (int pass = 0; pass < ATTN_PART_ROWS / RPP; pass++) {
            const int i = chunk * ATTN_PART_ROWS + pass * RPP + (int)threadIdx.x / TPR;
            if (i < a.T) store(bh, i, c, dqa + (bh * a.T + i) * D + c);
        }
    }
    if constexpr (SUMS) {
        __shared__ float red[8][D];
        attn_block_colsum<D>(
            sum, red, attn_part(parts, (int)(bh / a.H), chunk, nchunk, (int)(bh % a.H), a.H, D));
    }
}

/* The bias sums' generic part kernel: each block one (b, h, chunk) of x (B,T,heads,D) strided,
 * a thread per column. */
template <typename T>
static __global__ void attn_colsum_parts_kernel(float *parts, const T *x, int B, int T_, int heads,
                                                int D, int64_t sb, int64_t st, int64_t sh) {
    const int nchunk = ATTN_PART_CHUNKS(T_);
    const int chunk = (int)(blockIdx.x % nchunk), bh = (int)(blockIdx.x / nchunk);
    const int b = bh / heads, h = bh % heads;
    const int i0 = chunk * ATTN_PART_ROWS, i1 = min(T_, i0 + ATTN_PART_ROWS);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float t = 0.0f;
        for (int i = i0; i < i1; i++)
            t += attn_t<T>::ld(x[b * sb + i * st + h * sh + d]);
        attn_part(parts, b, chunk, nchunk, h, heads, D)[d] = t;
    }
}

/* One bias sum of attn_bias_reduce_kernel: dst[j] (+)= the sum over parts p (`ld` floats apart)
 * and heads f < fold of parts[p][((j / D) fold + f) D + j % D]; no parts: zeros. */
struct attn_sum_job {
    float *dst;
    const float *parts;
    int ncols, ld, fold;
};
struct attn_sum_jobs {
    attn_sum_job job[3];
    int n, D, accumulate;
    int64_t P;
};

/* The jobs in one launch, 8 columns a block, in a fixed order: lanes take 8 columns of 4 parts,
 * 32 warps stride the parts. */
static __global__ void __launch_bounds__(1024) attn_bias_reduce_kernel(attn_sum_jobs js) {
    int blk = (int)blockIdx.x, k = 0;
    while (k + 1 < js.n && blk >= (js.job[k].ncols + 7) / 8)
        blk -= (js.job[k].ncols + 7) / 8, k++;
    const attn_sum_job jb = js.job[k];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, j = blk * 8 + lane % 8, D = js.D;
    float t = 0.0f;
    if (jb.parts && j < jb.ncols) {
        const int64_t base = (int64_t)(j / D) * jb.fold * D + j % D;
#pragma unroll 4
        for (int64_t p = w * 4 + lane / 8; p < js.P; p += 128)
            for (int f = 0; f < jb.fold; f++)
                t += jb.parts[p * jb.ld + base + f * D];
    }
    t += __shfl_xor_sync(0xffffffffu, t, 8);
    t += __shfl_xor_sync(0xffffffffu, t, 16);
    __shared__ float red[32][8];
    if (lane < 8) red[w][lane] = t;
    __syncthreads();
    if (threadIdx.x < 8 && blk * 8 + (int)threadIdx.x < jb.ncols) {
        float u = 0.0f;
        for (int i = 0; i < 32; i++)
            u += red[i][threadIdx.x];
        float *o = jb.dst + blk * 8 + threadIdx.x;
        *o = js.accumulate ? *o + u : u;
    }
}

/* Adds a sum to the launch: into `sum` (NULL: none) from the parts of `heads` heads, `fold` of
 * them per output head (no parts: zeros, and nothing at all when accumulating). */
static void add_job(attn_sum_jobs &js, mt_tensor *sum, const float *parts, int heads, int fold,
                    int D) {
    if (!sum || (!parts && js.accumulate)) return;
    js.job[js.n++] =
        attn_sum_job{ (float *)sum->data, parts, (int)mt_tensor_numel(sum), heads * D, fold };
}

static mt_status reduce_jobs(const attn_args &a, attn_sum_jobs &js, mt_stream stream) {
    if (js.n == 0) return MT_OK;
    int blocks = 0;
    for (int k = 0; k < js.n; k++)
        blocks += (js.job[k].ncols + 7) / 8;
    js.D = a.D;
    js.P = (int64_t)a.B * ATTN_PART_CHUNKS(a.T);
    attn_bias_reduce_kernel<<<blocks, 1024, 0, (cudaStream_t)stream>>>(js);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

/* A bias sum as defined, the column sums of x (B,T,heads,D): the generic path. */
template <typename T>
static mt_status bias_colsum(const attn_args &a, mt_tensor *sum, int accumulate, const mt_tensor *x,
                             float *parts, mt_stream stream) {
    if (!sum) return MT_OK;
    const int heads = (int)x->shape[2], nchunk = ATTN_PART_CHUNKS(a.T);
    const int threads = a.D < 128 ? (a.D + 31) / 32 * 32 : 128;
    attn_colsum_parts_kernel<T>
        <<<(unsigned)((int64_t)a.B * heads * nchunk), threads, 0, (cudaStream_t)stream>>>(
            parts, (const T *)x->data, a.B, a.T, heads, a.D, x->stride[0], x->stride[1],
            x->stride[2]);
    MT_CUDA_CHECK_LAUNCH();
    attn_sum_jobs js = {};
    js.accumulate = accumulate;
    add_job(js, sum, parts, heads, 1, a.D);
    return reduce_jobs(a, js, stream);
}

__device__ __forceinline__ void red_add2(float *p, float x, float y) {
#if __CUDA_ARCH__ >= 900
    atomicAdd((float2 *)p, make_float2(x, y)); // why: one 8-byte red instead of two
#else
    atomicAdd(p, x), atomicAdd(p + 1, y);
#endif
}

/* Tensor-core dK, dV (and with DQ, dQ): a block of NW warps owns BC = 16*NW keys of kv head hk;
 * warp w owns keys 16w..16w+15 and their dK, dV rows in registers. It walks every BR-row query
 * tile of every query head of the group (GQA without copies), Q/dO/lse/Di double-buffered so
 * that the next tile's loads overlap this tile's math: S^T = K Q^T, P^T, dP^T = V dO^T, dS^T,
 * dV += P^T dO, dK += dS^T Q. With DQ each warp also writes its dS^T (bf16: hi and lo terms) to
 * shared memory; after a barrier the block computes the tile's dQ part dS K (warp: 16 query
 * rows x DW columns) and adds it into the f32 accumulator dqa (B,H,T,D) with atomics. */
template <typename T, int D, int NW, int BR, bool DQ, bool DOCS, bool DROP = false>
static __global__ void __launch_bounds__(NW * 32)
    attn_bwd_dkdv_mma_kernel(attn_args a, T *dk, T *dv, float *dqa, const T *q, const T *k,
                             const T *v, const T *dout, const float *lse, const float *Dv) {
    constexpr int BC = 16 * NW, NT = NW * 32, TWO = attn_t<T>::two_term ? 2 : 1;
    constexpr int RG = BR / 16, DW = D / (NW / RG);
    static_assert(NW % RG == 0 && DW % 16 == 0, "dQ warp layout");
    extern __shared__ __align__(128) unsigned char smem[];
    T *sK = (T *)smem, *sV = sK + BC * D, *sQ = sV + BC * D, *sG = sQ + 2 * BR * D;
    T *sS = sG + 2 * BR * D; /* DQ: dS^T (BC, BR), hi then lo */
    float *sL = (float *)(sS + (DQ ? TWO * BC * BR : 0)), *sD = sL + 2 * BR;
    int *sKS = (int *)(sD + 2 * BR); /* document masks: the query tiles' key starts */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // why: key tiles are y, heads x, and blocks start x-fastest: the longest (causal) go first
    const int b = blockIdx.x / a.Hkv, hk = blockIdx.x % a.Hkv, k0 = blockIdx.y * BC;
    const int nq = (a.T + BR - 1) / BR, it0 = a.causal ? k0 / BR : 0;
    const int nqt = kv_walk_tiles<BR, DOCS>(a, b, it0, nq, k0 + BC - 1), ntile = a.group * nqt;
    const int64_t sid = DROP ? a.drop.ids[b] : 0; /* attention dropout: the row's sample id */
    bwd_load_kv<T, BC, D, NT, false>(a, sK, sV, k, v, b, hk, k0);
    auto issue = [&](int n, int buf) {
        bwd_issue_q<T, BR, D, NT, false, DOCS>(a, sQ, sG, sL, sD, sKS, q, dout, lse, Dv, b, hk, it0,
                                               nqt, n, buf);
    };
    if (ntile > 0) issue(0, 0);
    const float sl2 = a.scale * ATTN_LOG2E;
    float gk[D / 8][4], gv[D / 8][4];
    acc_zero(gk);
    acc_zero(gv);
    const int key0 = k0 + warp * 16 + (lane >> 2);
    const int rg = warp % RG, dc = warp / RG;
    const int nkstep = min(BC / 16, (a.T - k0 + 15) / 16);
    for (int n = 0; n < ntile; n++) {
        cp_async_wait<0>();
        __syncthreads(); // tile n is in; every warp is done with tile n-1's buffers and dS
        if (n + 1 < ntile) issue(n + 1, (n + 1) & 1);
        const int buf = n & 1;
        int h, q0;
        bwd_tile_of<BR>(a, hk, it0, nqt, n, h, q0);
        const T *cQ = sQ + buf * BR * D, *cG = sG + buf * BR * D;
        const float *cL = sL + buf * BR, *cD = sD + buf * BR;
        const int *cK = sKS + buf * BR;
        if (!a.causal || q0 + BR - 1 >= k0 + warp * 16) { // else this warp's keys all > queries
            float p[BR / 8][4], ds[BR / 8][4];
#pragma unroll
            for (int i = 0; i < BR / 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    p[i][e] = ds[i][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t ka[4], va[4];
                ldsm_x4(ka, sK + swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
                ldsm_x4(va, sV + swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
#pragma unroll
                for (int np = 0; np < BR / 16; np++) {
                    uint32_t bq[4], bg[4];
                    int r = np * 16 + (lane & 7) + ((lane >> 4) << 3),
                        c = kk * 16 + ((lane >> 3) & 1) * 8;
                    ldsm_x4(bq, cQ + swz<D>(r, c));
                    ldsm_x4(bg, cG + swz<D>(r, c));
                    attn_t<T>::mma(p[2 * np], ka, bq[0], bq[1]);
                    attn_t<T>::mma(p[2 * np + 1], ka, bq[2], bq[3]);
                    attn_t<T>::mma(ds[2 * np], va, bg[0], bg[1]);
                    attn_t<T>::mma(ds[2 * np + 1], va, bg[2], bg[3]);
                }
            }
            const bool mask = k0 + BC > a.T || q0 + BR > a.T || (a.causal && k0 + BC - 1 > q0) ||
                              bwd_ks_mask<BR, DOCS>(cK, k0);
            bwd_p_ds<BR, DOCS, DROP>(a, p, ds, cL, cD, cK, sl2, key0, q0, mask, lane, sid, h);
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++) {
                uint32_t pa[4], sa[4], sl[4] = { 0, 0, 0, 0 };
                acc_pack<T>(p, kk, pa);
                acc_pack<T>(ds, kk, sa);
                if constexpr (TWO == 2) // why: dK = dS^T Q and dQ = dS K cancel
                    acc_residual<T>(ds, kk, sa, sl);
                /* dS^T rows warp*16 + g (+8), query columns kk*16 + 2t (+8): for the dQ phase */
                const int sr = warp * 16 + (lane >> 2), sc = kk * 16 + 2 * (lane & 3);
#pragma unroll
                for (int t2 = 0; t2 < (DQ ? TWO : 0); t2++)
                    bwd_store_frag<T, BC, BR, false>(sS + t2 * BC * BR, sr, sc, t2 ? sl : sa);
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t bg[4], bq[4];
                    int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                        c = dp * 16 + (lane >> 4) * 8;
                    ldsm_x4_t(bg, cG + swz<D>(r, c));
                    ldsm_x4_t(bq, cQ + swz<D>(r, c));
                    attn_t<T>::mma(gv[2 * dp], pa, bg[0], bg[1]);
                    attn_t<T>::mma(gv[2 * dp + 1], pa, bg[2], bg[3]);
                    attn_t<T>::mma(gk[2 * dp], sa, bq[0], bq[1]);
                    attn_t<T>::mma(gk[2 * dp + 1], sa, bq[2], bq[3]);
                    if constexpr (TWO == 2) {
                        attn_t<T>::mma(gk[2 * dp], sl, bq[0], bq[1]);
                        attn_t<T>::mma(gk[2 * dp + 1], sl, bq[2], bq[3]);
                    }
                }
            }
        }
        if constexpr (!DQ) continue;
        __syncthreads(); // dS^T of every warp is in
        /* dQ rows q0 + rg*16.., columns dc*DW..: key steps past the causal edge are zero (and
         * their dS^T rows unwritten by warps that skipped) */
        int kend = nkstep;
        if (a.causal) kend = min(kend, max(0, (q0 + rg * 16 + 15 - k0) / 16 + 1));
        if (q0 + rg * 16 >= a.T) kend = 0;
        if (kend > 0) {
            float acc[DW / 8][4];
#pragma unroll
            for (int i = 0; i < DW / 8; i++)
                acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
            auto kstep = [&](int kk) {
                uint32_t ah[4], al[4];
                const int r = kk * 16 + (lane & 7) + ((lane >> 4) << 3),
                          c = rg * 16 + ((lane >> 3) & 1) * 8;
                ldsm_x4_t(ah, sS + swz<BR>(r, c));
                if constexpr (TWO == 2) ldsm_x4_t(al, sS + BC * BR + swz<BR>(r, c));
#pragma unroll
                for (int dp = 0; dp < DW / 16; dp++) {
                    uint32_t bk[4];
                    ldsm_x4_t(bk, sK + swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                              dc * DW + dp * 16 + (lane >> 4) * 8));
                    attn_t<T>::mma(acc[2 * dp], ah, bk[0], bk[1]);
                    attn_t<T>::mma(acc[2 * dp + 1], ah, bk[2], bk[3]);
                    if constexpr (TWO == 2) {
                        attn_t<T>::mma(acc[2 * dp], al, bk[0], bk[1]);
                        attn_t<T>::mma(acc[2 * dp + 1], al, bk[2], bk[3]);
                    }
                }
            };
            if (kend == BC / 16) { // why: unrolled, the next step's loads overlap this one's mma
#pragma unroll
                for (int kk = 0; kk < BC / 16; kk++)
                    kstep(kk);
            } else {
                for (int kk = 0; kk < kend; kk++)
                    kstep(kk);
            }
            const int row = q0 + rg * 16 + (lane >> 2);
            float *dst = dqa + (((int64_t)b * a.H + h) * a.T + row) * D + dc * DW + 2 * (lane & 3);
#pragma unroll
            for (int r = 0; r < 2; r++)
                if (row + 8 * r < a.T)
#pragma unroll
                    for (int nt = 0; nt < DW / 8; nt++)
                        red_add2(dst + 8 * r * D + nt * 8, acc[nt][2 * r], acc[nt][2 * r + 1]);
        }
    }
    bwd_store_dkdv<T, D>(a, dk, dv, gk, gv, b, hk, key0, lane);
}

/* The fused backward; with bias, dv's sums from the prologue's dout sums, dk's zero and dq's from
 * the conversion (mt_attn_bwd_bias). */
template <typename T, int D, int NW, int BR>
static mt_status launch_fused(const attn_args &a, T *dq, T *dk, T *dv, const T *dout, const T *o,
                              const T *q, const T *k, const T *v, const float *lse, float *Dv,
                              float *dqa, float *const *parts, const attn_bias *bias,
                              mt_stream stream) {
    constexpr int BC = 16 * NW, TWO = attn_t<T>::two_term ? 2 : 1;
    const unsigned blocks = (unsigned)((int64_t)a.B * a.H * ATTN_PART_CHUNKS(a.T));
    /* (attention dropout: dv's sums from dv itself, in launch, as a row of dropped weights does
     * not sum to 1) */
    const bool tiled = attn_sm90_takes(a);
    const bool vsum = bias && bias->dv && !a.drop.ids, qsum = bias && bias->dq;
    float *parts_o = parts[0], *parts_q = parts[1]; /* dout's sums, dq's */
    cudaStream_t st = (cudaStream_t)stream;
    if (tiled)
        (vsum ? attn_bwd_prep_kernel<T, D, true, true>
              : attn_bwd_prep_kernel<T, D, true, false>)<<<blocks, 256, 0, st>>>(a, Dv, dqa, o,
                                                                                 dout, parts_o);
    else
        (vsum ? attn_bwd_prep_kernel<T, D, false, true>
              : attn_bwd_prep_kernel<T, D, false, false>)<<<blocks, 256, 0, st>>>(a, Dv, dqa, o,
                                                                                  dout, parts_o);
    MT_CUDA_CHECK_LAUNCH();
    if (tiled) { /* the tiled accumulator; a key prefix's queries as the square's last rows */
        const attn_args g = a.Tk != a.T ? attn_prefix_args(a) : a;
        MT_TRY((attn_bwd_sm90<T, D>(g, dk, dv, dqa, q - (int64_t)g.qoff * a.st[AQ][1], k, v,
                                    dout - (int64_t)g.qoff * a.st[ADO][1], lse, Dv, stream)));
        (qsum ? attn_bwd_dq_convert_kernel<T, D, true, true>
              : attn_bwd_dq_convert_kernel<T, D, true, false>)<<<blocks, 256, 0, st>>>(a, dq, dqa,
                                                                                       parts_q);
    } else {
        const int smem = (2 * BC * D + 4 * BR * D + TWO * BC * BR) * (int)sizeof(T) + 6 * BR * 4;
        const auto kernel = a.drop.ids
                                ? (a.ks ? attn_bwd_dkdv_mma_kernel<T, D, NW, BR, true, true, true>
                                        : attn_bwd_dkdv_mma_kernel<T, D, NW, BR, true, false, true>)
                                : (a.ks ? attn_bwd_dkdv_mma_kernel<T, D, NW, BR, true, true>
                                        : attn_bwd_dkdv_mma_kernel<T, D, NW, BR, true, false>);
        MT_TRY(attn_smem_attr(kernel, smem));
        dim3 grid(a.B * a.Hkv, (a.T + BC - 1) / BC);
        kernel<<<grid, NW * 32, smem, st>>>(a, dk, dv, dqa, q, k, v, dout, lse, Dv);
        MT_CUDA_CHECK_LAUNCH();
        (qsum ? attn_bwd_dq_convert_kernel<T, D, false, true>
              : attn_bwd_dq_convert_kernel<T, D, false, false>)<<<blocks, 256, 0, st>>>(a, dq, dqa,
                                                                                        parts_q);
    }
    MT_CUDA_CHECK_LAUNCH();
    if (!bias) return MT_OK;
    attn_sum_jobs js = {}; /* one launch: dq's, dv's (dout's, folded), dk's (zero) */
    js.accumulate = bias->accumulate;
    add_job(js, bias->dq, parts_q, a.H, 1, D);
    if (vsum) add_job(js, bias->dv, parts_o, a.H, a.group, D);
    add_job(js, bias->dk, NULL, a.Hkv, 1, D);
    return reduce_jobs(a, js, stream);
}

template <typename T, int D, int NW_KV, int NW_Q>
static mt_status launch_mma(const attn_args &a, T *dq, T *dk, T *dv, const T *dout, const T *q,
                            const T *k, const T *v, const float *lse, float *Dv, mt_stream stream) {
    constexpr int BC = 16 * NW_KV, BRQ = 16 * NW_Q;
    const int smem_kv = (2 * BC * D + 4 * 64 * D) * (int)sizeof(T) + 6 * 64 * 4;
    const int smem_q = (2 * BRQ * D + 4 * 64 * D) * (int)sizeof(T);
    const auto kv = a.drop.ids
                        ? (a.ks ? attn_bwd_dkdv_mma_kernel<T, D, NW_KV, 64, false, true, true>
                                : attn_bwd_dkdv_mma_kernel<T, D, NW_KV, 64, false, false, true>)
                        : (a.ks ? attn_bwd_dkdv_mma_kernel<T, D, NW_KV, 64, false, true>
                                : attn_bwd_dkdv_mma_kernel<T, D, NW_KV, 64, false, false>);
    MT_TRY(attn_smem_attr(kv, smem_kv));
    dim3 grid_kv(a.B * a.Hkv, (a.T + BC - 1) / BC);
    kv<<<grid_kv, NW_KV * 32, smem_kv, stream>>>(a, dk, dv, NULL, q, k, v, dout, lse, Dv);
    MT_CUDA_CHECK_LAUNCH();
    const auto kq = a.drop.ids ? (a.ks ? attn_bwd_dq_mma_kernel<T, D, NW_Q, true, true>
                                       : attn_bwd_dq_mma_kernel<T, D, NW_Q, false, true>)
                               : (a.ks ? attn_bwd_dq_mma_kernel<T, D, NW_Q, true, false>
                                       : attn_bwd_dq_mma_kernel<T, D, NW_Q, false, false>);
    MT_TRY(attn_smem_attr(kq, smem_q));
    dim3 grid_q(a.B * a.H, (a.T + BRQ - 1) / BRQ);
    kq<<<grid_q, NW_Q * 32, smem_q, stream>>>(a, dq, q, k, v, dout, lse, Dv);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

template <typename T>
static mt_status launch(const attn_args &a, int fast, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                        const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                        const mt_tensor *v, const mt_tensor *out, const float *lse, float *Dv,
                        float *dqa, float *const *parts, const attn_bias *bias, mt_stream stream) {
    int64_t rows = (int64_t)a.B * a.H * a.T;
    if constexpr (sizeof(T) == 2) {
        if (fast && dqa) { /* non-deterministic: the fused kernel */
            T *gq = (T *)dq->data, *gk = (T *)dk->data, *gv = (T *)dv->data;
            const T *g = (const T *)dout->data, *o = (const T *)out->data, *tq = (const T *)q->data,
                    *tk = (const T *)k->data, *tv = (const T *)v->data;
            if (a.D == 64) // why: 4 warps (2 blocks per SM) beat 8 at D 64 on an H200
                MT_TRY((launch_fused<T, 64, 4, 64>(a, gq, gk, gv, g, o, tq, tk, tv, lse, Dv, dqa,
                                                   parts, bias, stream)));
            else
                MT_TRY((launch_fused<T, 128, 8, 64>(a, gq, gk, gv, g, o, tq, tk, tv, lse, Dv, dqa,
                                                    parts, bias, stream)));
            /* attention dropout: dv's sums from dv (launch_fused's come from dout's) */
            if (!a.drop.ids || !bias) return MT_OK;
            return bias_colsum<T>(a, bias->dv, bias->accumulate, dv, parts[0], stream);
        }
    }
    attn_bwd_dot_kernel<T><<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(
        a, Dv, (const T *)out->data, (const T *)dout->data);
    MT_CUDA_CHECK_LAUNCH();
    T *gq = (T *)dq->data, *gk = (T *)dk->data, *gv = (T *)dv->data;
    const T *g = (const T *)dout->data, *tq = (const T *)q->data, *tk = (const T *)k->data,
            *tv = (const T *)v->data;
    bool mma = false;
    if constexpr (sizeof(T) == 2) {
        mma = fast && (a.D == 64 || a.D == 128 || a.D == 192);
        if (mma && a.D == 64)
            MT_TRY((launch_mma<T, 64, 8, 4>(a, gq, gk, gv, g, tq, tk, tv, lse, Dv, stream)));
        else if (mma && a.D == 192) /* (multi-latent attention's heads) */
            MT_TRY((launch_mma<T, 192, 8, 4>(a, gq, gk, gv, g, tq, tk, tv, lse, Dv, stream)));
        else if (mma)
            MT_TRY((launch_mma<T, 128, 8, 4>(a, gq, gk, gv, g, tq, tk, tv, lse, Dv, stream)));
    }
    if (!mma) {
        attn_bwd_dq_generic_kernel<T>
            <<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(a, gq, tq, tk, tv, g, lse, Dv);
        MT_CUDA_CHECK_LAUNCH();
        int64_t krows = (int64_t)a.B * a.Hkv * a.T;
        attn_bwd_dkdv_generic_kernel<T>
            <<<(unsigned)((krows + 3) / 4), 128, 0, stream>>>(a, gk, gv, tq, tk, tv, g, lse, Dv);
        MT_CUDA_CHECK_LAUNCH();
    }
    if (!bias) return MT_OK;
    MT_TRY(bias_colsum<T>(a, bias->dq, bias->accumulate, dq, parts[0], stream));
    MT_TRY(bias_colsum<T>(a, bias->dk, bias->accumulate, dk, parts[1], stream));
    return bias_colsum<T>(a, bias->dv, bias->accumulate, dv, parts[0], stream);
}

/* Whether the fused Hopper backward takes these tensors (attn_bwd_fused, attn_sm90_takes, every
 * operand attn_aligned) with a key prefix (attn_prefix_ok): the square's kernels without padding. */
extern "C" int attn_bwd_prefix_direct(const attn_shape *s, const mt_tensor *const *t) {
    const attn_args a = attn_make_args(s, t);
    int ok = attn_bwd_fused(s) && attn_prefix_ok(a) && attn_sm90_takes(attn_prefix_args(a));
    for (int i = 0; i < A_NT; i++)
        ok = ok && attn_aligned(t[i]);
    return ok;
}

extern "C" mt_status attn_bwd_cuda(const attn_shape *s, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                                   const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                                   const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse,
                                   const attn_bias *bias, void *workspace, mt_stream stream) {
    const mt_tensor *t[A_NT] = { q, k, v, out, dout, dq, dk, dv };
    attn_args a = attn_make_args(s, t);
    if (s->Tk != s->T && !attn_bwd_prefix_direct(s, t)) /* (src/attn.c pads the others) */
        return MT_ERROR(MT_ERR_INTERNAL, "attention backward over a key prefix: not direct");
    int fast = 1; /* (dropout: not the fused kernels, attn_bwd_fused) */
    for (int i = 0; i < A_NT; i++)
        fast = fast && attn_aligned(t[i]);
    float *Dv = (float *)workspace;
    float *dqa = attn_bwd_fused(s) ? (float *)((char *)workspace + attn_ws_di_bytes(s)) : NULL;
    a.split_cap = (int)attn_split_cap(s);
    a.split_acc = a.split_cap ? (float *)((char *)dqa + attn_ws_dqa_bytes(s)) : NULL;
    /* the bias sums' two regions of parts, at the workspace's end */
    float *parts[2];
    parts[0] = (float *)((char *)workspace + attn_ws_bytes(s) - attn_ws_parts_bytes(s));
    parts[1] = parts[0] + attn_ws_parts_bytes(s) / 8;
    const float *L = (const float *)lse->data;
    switch (q->dtype) {
    case MT_F32:
        return launch<float>(a, 0, dq, dk, dv, dout, q, k, v, out, L, Dv, NULL, parts, bias,
                             stream);
    case MT_BF16:
        return launch<__nv_bfloat16>(a, fast, dq, dk, dv, dout, q, k, v, out, L, Dv, dqa, parts,
                                     bias, stream);
    case MT_F16:
        return launch<__half>(a, fast, dq, dk, dv, dout, q, k, v, out, L, Dv, dqa, parts, bias,
                              stream);
    default:
        return MT_ERROR(MT_ERR_UNSUPPORTED, "attention dtype %s", mt_dtype_name(q->dtype));
    }
}
