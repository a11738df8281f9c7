/* Attention backward on CUDA (FlashAttention-2 scheme): Di = rowsum(dout*out), P recomputed from
 * lse, dS = P (dP - Di). bf16/f16 with D 64 or 128 run tensor-core kernels: one block per key
 * tile accumulates dK, dV over the query heads of its group (GQA without copies) and adds dQ
 * with f32 atomics, or, deterministic, a second kernel per query tile computes dQ. Anything else
 * runs generic warp-per-row kernels (deterministic). */
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
    for (int j0 = 0; j0 < n; j0 += 32) {
        int j = j0 + lane;
        float ds = 0.0f;
        if (j < n) {
            const T *kr = kb + j * a.st[AK][1], *vr = vb + j * a.st[AV][1];
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < D; d++) {
                s += qs[warp][d] * attn_t<T>::ld(kr[d]);
                dp += gs[warp][d] * attn_t<T>::ld(vr[d]);
            }
            ds = expf(s - L) * (dp - Di);
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
        const float *Lb = lse + ((int64_t)b * a.H + h) * a.T,
                    *Db = Dv + ((int64_t)b * a.H + h) * a.T;
        for (int i0 = a.causal ? j : 0; i0 < a.T; i0 += 32) {
            int i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < a.T) {
                const T *qr = qb + i * a.st[AQ][1], *gr = gb + i * a.st[ADO][1];
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < D; d++) {
                    s += ks_[warp][d] * attn_t<T>::ld(qr[d]);
                    dp += vs_[warp][d] * attn_t<T>::ld(gr[d]);
                }
                p = expf(s - Lb[i]);
                ds = p * (dp - Db[i]);
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

/* Tensor-core dK, dV (and atomic dQ): a block of NW warps owns BC = 16*NW keys of kv head hk;
 * warp w owns keys 16w..16w+15 and their dK, dV rows in registers. For every query head of the
 * group and every 64-row query tile: S^T = K Q^T, P^T, dP^T = V dO^T, dS^T, then dV += P^T dO,
 * dK += dS^T Q, and (atomic mode) dQ += dS K through shared dS and f32 atomics. */
template <typename T, int D, int NW>
static __global__ void __launch_bounds__(NW * 32)
    attn_bwd_dkdv_mma_kernel(attn_args a, T *dk, T *dv, float *dqacc, const T *q, const T *k,
                             const T *v, const T *dout, const float *lse, const float *Dv) {
    constexpr int BC = 16 * NW, BR = 64, NT = NW * 32;
    extern __shared__ __align__(128) unsigned char smem[];
    T *sK = (T *)smem, *sV = sK + BC * D, *sQ = sV + BC * D, *sG = sQ + BR * D, *sS = sG + BR * D;
    float *sL = (float *)(sS + BC * BR), *sD = sL + BR;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.y / a.Hkv, hk = blockIdx.y % a.Hkv, k0 = blockIdx.x * BC;
    const int nq = (a.T + BR - 1) / BR;
    load_tile<T, BC, D, NT>(sK, k + b * a.st[AK][0] + hk * a.st[AK][2] + (int64_t)k0 * a.st[AK][1],
                            a.st[AK][1], min(BC, a.T - k0));
    load_tile<T, BC, D, NT>(sV, v + b * a.st[AV][0] + hk * a.st[AV][2] + (int64_t)k0 * a.st[AV][1],
                            a.st[AV][1], min(BC, a.T - k0));
    cp_async_commit();
    const float sl2 = a.scale * ATTN_LOG2E;
    float gk[D / 8][4], gv[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            gk[i][e] = gv[i][e] = 0.0f;
    const int key0 = k0 + warp * 16 + (lane >> 2);
    for (int h = hk * a.group; h < (hk + 1) * a.group; h++) {
        const T *qb = q + b * a.st[AQ][0] + h * a.st[AQ][2];
        const T *gb = dout + b * a.st[ADO][0] + h * a.st[ADO][2];
        const float *Lb = lse + ((int64_t)b * a.H + h) * a.T,
                    *Db = Dv + ((int64_t)b * a.H + h) * a.T;
        for (int it = a.causal ? k0 / BR : 0; it < nq; it++) {
            const int q0 = it * BR, qn = min(BR, a.T - q0);
            load_tile<T, BR, D, NT>(sQ, qb + (int64_t)q0 * a.st[AQ][1], a.st[AQ][1], qn);
            load_tile<T, BR, D, NT>(sG, gb + (int64_t)q0 * a.st[ADO][1], a.st[ADO][1], qn);
            cp_async_commit();
            for (int i = threadIdx.x; i < BR; i += NT) {
                sL[i] = i < qn ? Lb[q0 + i] * ATTN_LOG2E : INFINITY; // why: P = 0 past T
                sD[i] = i < qn ? Db[q0 + i] : 0.0f;
            }
            cp_async_wait<0>();
            __syncthreads();
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
                    ldsm_x4(bq, sQ + swz<D>(r, c));
                    ldsm_x4(bg, sG + swz<D>(r, c));
                    attn_t<T>::mma(p[2 * np], ka, bq[0], bq[1]);
                    attn_t<T>::mma(p[2 * np + 1], ka, bq[2], bq[3]);
                    attn_t<T>::mma(ds[2 * np], va, bg[0], bg[1]);
                    attn_t<T>::mma(ds[2 * np + 1], va, bg[2], bg[3]);
                }
            }
            const bool mask = k0 + BC > a.T || (a.causal && k0 + BC - 1 > q0);
#pragma unroll
            for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int cl = nt * 8 + 2 * (lane & 3) + (e & 1), key = key0 + (e >> 1) * 8;
                    float pe = exp2f(p[nt][e] * sl2 - sL[cl]);
                    if (mask && (key >= a.T || (a.causal && q0 + cl < key))) pe = 0.0f;
                    p[nt][e] = pe;
                    ds[nt][e] = pe * (ds[nt][e] - sD[cl]);
                }
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++) {
                uint32_t pa[4] = { attn_t<T>::pack(p[2 * kk][0], p[2 * kk][1]),
                                   attn_t<T>::pack(p[2 * kk][2], p[2 * kk][3]),
                                   attn_t<T>::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                   attn_t<T>::pack(p[2 * kk + 1][2], p[2 * kk + 1][3]) };
                uint32_t sa[4] = { attn_t<T>::pack(ds[2 * kk][0], ds[2 * kk][1]),
                                   attn_t<T>::pack(ds[2 * kk][2], ds[2 * kk][3]),
                                   attn_t<T>::pack(ds[2 * kk + 1][0], ds[2 * kk + 1][1]),
                                   attn_t<T>::pack(ds[2 * kk + 1][2], ds[2 * kk + 1][3]) };
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t bg[4], bq[4];
                    int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                        c = dp * 16 + (lane >> 4) * 8;
                    ldsm_x4_t(bg, sG + swz<D>(r, c));
                    ldsm_x4_t(bq, sQ + swz<D>(r, c));
                    attn_t<T>::mma(gv[2 * dp], pa, bg[0], bg[1]);
                    attn_t<T>::mma(gv[2 * dp + 1], pa, bg[2], bg[3]);
                    attn_t<T>::mma(gk[2 * dp], sa, bq[0], bq[1]);
                    attn_t<T>::mma(gk[2 * dp + 1], sa, bq[2], bq[3]);
                }
            }
            if (dqacc) {
                /* dS^T (keys x queries) to shared, then dQ (queries x D) = dS K */
#pragma unroll
                for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
                    for (int r = 0; r < 2; r++)
                        *(uint32_t *)(sS + swz<BR>(warp * 16 + (lane >> 2) + 8 * r,
                                                   nt * 8 + 2 * (lane & 3))) =
                            attn_t<T>::pack(ds[nt][2 * r], ds[nt][2 * r + 1]);
                __syncthreads();
                constexpr int WD = NW / 4, DW = D / WD; // warps along D, columns per warp
                const int wm = warp % 4, wd = warp / 4;
                float *dqb = dqacc + (((int64_t)b * a.T + q0) * a.H + h) * D;
#pragma unroll
                for (int dp = 0; dp < DW / 16; dp++) {
                    float acc[2][4] = { { 0.0f, 0.0f, 0.0f, 0.0f }, { 0.0f, 0.0f, 0.0f, 0.0f } };
#pragma unroll
                    for (int kk = 0; kk < BC / 16; kk++) {
                        uint32_t aa[4], bk[4];
                        ldsm_x4_t(aa, sS + swz<BR>(kk * 16 + (lane & 7) + (lane >> 4) * 8,
                                                   wm * 16 + ((lane >> 3) & 1) * 8));
                        ldsm_x4_t(bk, sK + swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                  wd * DW + dp * 16 + (lane >> 4) * 8));
                        attn_t<T>::mma(acc[0], aa, bk[0], bk[1]);
                        attn_t<T>::mma(acc[1], aa, bk[2], bk[3]);
                    }
#pragma unroll
                    for (int n2 = 0; n2 < 2; n2++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            int rl = wm * 16 + (lane >> 2) + 8 * (e >> 1);
                            int col = wd * DW + dp * 16 + n2 * 8 + 2 * (lane & 3) + (e & 1);
                            if (rl < qn)
                                atomicAdd(dqb + (int64_t)rl * a.H * D + col, acc[n2][e] * a.scale);
                        }
                }
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int key = key0 + 8 * r;
        T *ok = dk + b * a.st[ADK][0] + (int64_t)key * a.st[ADK][1] + hk * a.st[ADK][2];
        T *ov = dv + b * a.st[ADV][0] + (int64_t)key * a.st[ADV][1] + hk * a.st[ADV][2];
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            int c = dt * 8 + 2 * (lane & 3);
            if (key >= a.T) continue;
            *(uint32_t *)(ok + c) =
                attn_t<T>::pack(gk[dt][2 * r] * a.scale, gk[dt][2 * r + 1] * a.scale);
            *(uint32_t *)(ov + c) = attn_t<T>::pack(gv[dt][2 * r], gv[dt][2 * r + 1]);
        }
    }
}

/* Tensor-core dQ (deterministic mode): a block of NW warps owns BR = 16*NW query rows of one
 * (b, h) and walks the key tiles (double-buffered), recomputing P and dS; dQ stays in registers. */
template <typename T, int D, int NW>
static __global__ void __launch_bounds__(NW * 32)
    attn_bwd_dq_mma_kernel(attn_args a, T *dq, const T *q, const T *k, const T *v, const T *dout,
                           const float *lse, const float *Dv) {
    constexpr int BR = 16 * NW, BC = 64, NT = NW * 32;
    extern __shared__ __align__(128) unsigned char smem[];
    T *sQ = (T *)smem, *sG = sQ + BR * D, *sK = sG + BR * D, *sV = sK + 2 * BC * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nq = (a.T + BR - 1) / BR, nk_all = (a.T + BC - 1) / BC;
    const int qt = a.causal ? nq - 1 - (int)blockIdx.x : (int)blockIdx.x; // why: longest rows first
    const int b = blockIdx.y / a.H, h = blockIdx.y % a.H, hk = h / a.group;
    const int q0 = qt * BR, qn = min(BR, a.T - q0);
    const int nk = a.causal ? min(nk_all, (q0 + qn + BC - 1) / BC) : nk_all;
    const T *kg = k + b * a.st[AK][0] + hk * a.st[AK][2];
    const T *vg = v + b * a.st[AV][0] + hk * a.st[AV][2];
    const int64_t ks = a.st[AK][1], vs = a.st[AV][1];
    load_tile<T, BR, D, NT>(sQ, q + b * a.st[AQ][0] + h * a.st[AQ][2] + (int64_t)q0 * a.st[AQ][1],
                            a.st[AQ][1], qn);
    load_tile<T, BR, D, NT>(sG,
                            dout + b * a.st[ADO][0] + h * a.st[ADO][2] + (int64_t)q0 * a.st[ADO][1],
                            a.st[ADO][1], qn);
    load_tile<T, BC, D, NT>(sK, kg, ks, min(BC, a.T));
    load_tile<T, BC, D, NT>(sV, vg, vs, min(BC, a.T));
    cp_async_commit();
    const float sl2 = a.scale * ATTN_LOG2E;
    const int row0 = q0 + warp * 16 + (lane >> 2);
    float L[2], Di[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + 8 * r;
        int64_t off = ((int64_t)b * a.H + h) * a.T + row;
        L[r] = row < a.T ? lse[off] * ATTN_LOG2E : INFINITY;
        Di[r] = row < a.T ? Dv[off] : 0.0f;
    }
    float acc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++)
        acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    for (int j = 0; j < nk; j++) {
        if (j + 1 < nk) {
            int k1 = (j + 1) * BC, buf = (j + 1) & 1;
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
        const int k0 = j * BC;
        const bool mask = k0 + BC > a.T || (a.causal && k0 + BC - 1 > q0);
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = k0 + nt * 8 + 2 * (lane & 3) + (e & 1), row = row0 + (e >> 1) * 8;
                float pe = exp2f(p[nt][e] * sl2 - L[e >> 1]);
                if (mask && (col >= a.T || (a.causal && col > row))) pe = 0.0f;
                ds[nt][e] = pe * (ds[nt][e] - Di[e >> 1]);
            }
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            uint32_t sa[4] = { attn_t<T>::pack(ds[2 * kk][0], ds[2 * kk][1]),
                               attn_t<T>::pack(ds[2 * kk][2], ds[2 * kk][3]),
                               attn_t<T>::pack(ds[2 * kk + 1][0], ds[2 * kk + 1][1]),
                               attn_t<T>::pack(ds[2 * kk + 1][2], ds[2 * kk + 1][3]) };
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t bk[4];
                ldsm_x4_t(bk, cK + swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                          dp * 16 + (lane >> 4) * 8));
                attn_t<T>::mma(acc[2 * dp], sa, bk[0], bk[1]);
                attn_t<T>::mma(acc[2 * dp + 1], sa, bk[2], bk[3]);
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

/* dq (B,T,H,D, strided) = the f32 accumulator (B,T,H,D, contiguous, already scaled). */
template <typename T>
static __global__ void attn_bwd_dq_convert_kernel(attn_args a, T *dq, const float *acc) {
    int64_t n = (int64_t)a.B * a.T * a.H * a.D;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
         x += (int64_t)gridDim.x * blockDim.x) {
        int64_t d = x % a.D, h = x / a.D % a.H, t = x / a.D / a.H % a.T, b = x / a.D / a.H / a.T;
        dq[b * a.st[ADQ][0] + t * a.st[ADQ][1] + h * a.st[ADQ][2] + d] = attn_t<T>::st(acc[x]);
    }
}

template <typename T, int D, int NW_KV, int NW_Q>
static mt_status launch_mma(const attn_args &a, T *dq, T *dk, T *dv, const T *dout, const T *q,
                            const T *k, const T *v, const float *lse, float *Dv, float *dqacc,
                            mt_stream stream) {
    constexpr int BC = 16 * NW_KV, BRQ = 16 * NW_Q;
    const int smem_kv = (2 * BC * D + 2 * 64 * D + BC * 64) * (int)sizeof(T) + 2 * 64 * 4;
    const int smem_q = (2 * BRQ * D + 4 * 64 * D) * (int)sizeof(T);
    MT_TRY(attn_smem_attr(attn_bwd_dkdv_mma_kernel<T, D, NW_KV>, smem_kv));
    if (dqacc) MT_CUDA_TRY(cudaMemsetAsync(dqacc, 0, (size_t)a.B * a.T * a.H * D * 4, stream));
    dim3 grid_kv((a.T + BC - 1) / BC, a.B * a.Hkv);
    attn_bwd_dkdv_mma_kernel<T, D, NW_KV>
        <<<grid_kv, NW_KV * 32, smem_kv, stream>>>(a, dk, dv, dqacc, q, k, v, dout, lse, Dv);
    MT_CUDA_CHECK_LAUNCH();
    if (dqacc) {
        attn_bwd_dq_convert_kernel<T><<<1024, 256, 0, stream>>>(a, dq, dqacc);
        MT_CUDA_CHECK_LAUNCH();
        return MT_OK;
    }
    MT_TRY(attn_smem_attr(attn_bwd_dq_mma_kernel<T, D, NW_Q>, smem_q));
    dim3 grid_q((a.T + BRQ - 1) / BRQ, a.B * a.H);
    attn_bwd_dq_mma_kernel<T, D, NW_Q>
        <<<grid_q, NW_Q * 32, smem_q, stream>>>(a, dq, q, k, v, dout, lse, Dv);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

template <typename T>
static mt_status launch(const attn_args &a, int fast, int deterministic, mt_tensor *dq,
                        mt_tensor *dk, mt_tensor *dv, const mt_tensor *dout, const mt_tensor *q,
                        const mt_tensor *k, const mt_tensor *v, const mt_tensor *out,
                        const float *lse, float *Dv, float *dqacc, mt_stream stream) {
    int64_t rows = (int64_t)a.B * a.H * a.T;
    attn_bwd_dot_kernel<T><<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(
        a, Dv, (const T *)out->data, (const T *)dout->data);
    MT_CUDA_CHECK_LAUNCH();
    T *gq = (T *)dq->data, *gk = (T *)dk->data, *gv = (T *)dv->data;
    const T *g = (const T *)dout->data, *tq = (const T *)q->data, *tk = (const T *)k->data,
            *tv = (const T *)v->data;
    if constexpr (sizeof(T) == 2) {
        float *acc = deterministic ? nullptr : dqacc;
        if (fast && a.D == 64)
            return launch_mma<T, 64, 4, 4>(a, gq, gk, gv, g, tq, tk, tv, lse, Dv, acc, stream);
        if (fast && a.D == 128)
            return launch_mma<T, 128, 4, 4>(a, gq, gk, gv, g, tq, tk, tv, lse, Dv, acc, stream);
    }
    attn_bwd_dq_generic_kernel<T>
        <<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(a, gq, tq, tk, tv, g, lse, Dv);
    MT_CUDA_CHECK_LAUNCH();
    int64_t krows = (int64_t)a.B * a.Hkv * a.T;
    attn_bwd_dkdv_generic_kernel<T>
        <<<(unsigned)((krows + 3) / 4), 128, 0, stream>>>(a, gk, gv, tq, tk, tv, g, lse, Dv);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status attn_bwd_cuda(const attn_shape *s, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                                   const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                                   const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse,
                                   void *workspace, mt_stream stream) {
    const mt_tensor *t[A_NT] = { q, k, v, out, dout, dq, dk, dv };
    attn_args a = attn_make_args(s, t);
    int fast = 1;
    for (int i = 0; i < A_NT; i++)
        fast = fast && attn_aligned(t[i]);
    float *Dv = (float *)workspace;
    float *dqacc = (float *)((char *)workspace + attn_ws_rows_bytes(s));
    const float *L = (const float *)lse->data;
    switch (q->dtype) {
    case MT_F32:
        return launch<float>(a, 0, 1, dq, dk, dv, dout, q, k, v, out, L, Dv, dqacc, stream);
    case MT_BF16:
        return launch<__nv_bfloat16>(a, fast, s->deterministic, dq, dk, dv, dout, q, k, v, out, L,
                                     Dv, dqacc, stream);
    case MT_F16:
        return launch<__half>(a, fast, s->deterministic, dq, dk, dv, dout, q, k, v, out, L, Dv,
                              dqacc, stream);
    default:
        return MT_ERROR(MT_ERR_UNSUPPORTED, "attention dtype %s", mt_dtype_name(q->dtype));
    }
}
