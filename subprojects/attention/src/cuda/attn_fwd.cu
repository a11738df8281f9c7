/* Attention forward on CUDA. bf16/f16 with D 64 or 128: flash-style tensor-core kernel
 * (mma.sync m16n8k16, ldmatrix, double-buffered cp.async K/V tiles, online softmax in the exp2
 * domain, causal tile skipping, GQA by indexing); on Hopper with an sm_90a build, attn_sm90.cu's wgmma
 * version (at D128 without attention dropout, which the mma.sync kernel applies). Anything else: a
 * generic warp-per-row kernel. Queries over more keys (a KV cache's decoding): a block per row
 * (16-byte loads of a key's slices at D 64, 128, 256 in bf16/f16). */
#include "attn_common.cuh"

/* Generic path: one warp per query row, 32 keys per step (lane j scores key j0+j), fp32 math. */
template <typename T>
static __global__ void attn_fwd_generic_kernel(attn_args a, T *out, float *lse, const T *q,
                                               const T *k, const T *v) {
    __shared__ float qs[4][256];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * 4 + warp;
    if (row >= (int64_t)a.B * a.H * a.T) return;
    int i = (int)(row % a.T), h = (int)(row / a.T % a.H), b = (int)(row / a.T / a.H);
    const int64_t sid = a.drop.ids ? a.drop.ids[b] : 0; /* attention dropout */
    int hk = h / a.group, D = a.D, n = a.causal ? i + 1 : a.T;
    const T *qr = q + b * a.st[AQ][0] + i * a.st[AQ][1] + h * a.st[AQ][2];
    const T *kb = k + b * a.st[AK][0] + hk * a.st[AK][2];
    const T *vb = v + b * a.st[AV][0] + hk * a.st[AV][2];
    float sl2 = a.scale * ATTN_LOG2E;
    for (int d = lane; d < D; d += 32)
        qs[warp][d] = attn_t<T>::ld(qr[d]) * sl2;
    __syncwarp();
    float o[8] = { 0 }, m = -INFINITY, l = 0.0f;
    for (int j0 = key_start_of(a, b, i); j0 < n; j0 += 32) {
        int j = j0 + lane;
        float s = -INFINITY;
        if (j < n) {
            const T *kr = kb + j * a.st[AK][1];
            s = 0.0f;
            for (int d = 0; d < D; d++)
                s += qs[warp][d] * attn_t<T>::ld(kr[d]);
        }
        float mn = fmaxf(m, warp_max(s)); /* finite: lane 0 always has a key (j0 <= i) */
        float alpha = exp2f(m - mn), p = exp2f(s - mn);
        l = l * alpha + warp_sum(p);
        m = mn;
        if (a.drop.ids && j < n) p *= attn_drop_factor(&a.drop, sid, h, a.T, i, j);
#pragma unroll
        for (int c = 0; c < 8; c++)
            o[c] *= alpha;
        int cnt = min(32, n - j0);
        for (int jj = 0; jj < cnt; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
            const T *vr = vb + (j0 + jj) * a.st[AV][1];
#pragma unroll
            for (int c = 0; c < 8; c++)
                if (lane + 32 * c < D) o[c] += pj * attn_t<T>::ld(vr[lane + 32 * c]);
        }
    }
    T *orow = out + b * a.st[AO][0] + i * a.st[AO][1] + h * a.st[AO][2];
#pragma unroll
    for (int c = 0; c < 8; c++)
        if (lane + 32 * c < D) orow[lane + 32 * c] = attn_t<T>::st(o[c] / l);
    if (lane == 0) lse[row / a.T * a.T + i] = (m + log2f(l)) * ATTN_LN2;
}

/* The end of a rows kernel: ng partial softmax states (running max m[g] in the log2 domain, sum
 * l[g], unnormalised output o[g * ld .. + D)) in shared memory merged into the row's output and
 * lse by the block's nthreads threads. A state without keys is -inf and 0; state 0 has key 0. */
template <typename T>
static __device__ __forceinline__ void rows_merge(const float *m, const float *l, const float *o,
                                                  int ng, int ld, int D, int nthreads, T *orow,
                                                  float *lse) {
    float M = m[0], L = 0.0f;
    for (int g = 1; g < ng; g++)
        M = fmaxf(M, m[g]);
    for (int g = 0; g < ng; g++)
        L += l[g] * exp2f(m[g] - M);
    for (int d = threadIdx.x; d < D; d += nthreads) {
        float x = 0.0f;
        for (int g = 0; g < ng; g++)
            x += o[g * ld + d] * exp2f(m[g] - M);
        orow[d] = attn_t<T>::st(x / L);
    }
    if (threadIdx.x == 0) *lse = (M + log2f(L)) * ATTN_LN2;
}

/* Queries over cached keys (Tk > T; no document masks or dropout): a block of NW warps per query
 * row, warp w scoring keys w*32 .. w*32+31, then every NW*32-th run after (lane j key j0+j, as the
 * generic kernel), each warp with its own running max, sum and output, merged at the end. Causal
 * query i sees keys j <= i + L - T, L = key_len[b] or Tk. why a block per row: decoding has B*H rows, too few warps to
 * fill the GPU at one a row. */
template <typename T, int NW>
static __global__ void __launch_bounds__(NW * 32)
    attn_fwd_rows_kernel(attn_args a, T *out, float *lse, const T *q, const T *k, const T *v) {
    __shared__ float qs[256], wm[NW], wl[NW], wo[NW][256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x;
    const int i = (int)(row % a.T), h = (int)(row / a.T % a.H), b = (int)(row / a.T / a.H);
    const int nk = a.kl ? a.kl[b] : a.Tk; /* the row's keys */
    const int hk = h / a.group, D = a.D, n = a.causal ? i + 1 + nk - a.T : nk;
    const T *qr = q + b * a.st[AQ][0] + i * a.st[AQ][1] + h * a.st[AQ][2];
    const T *kb = k + b * a.st[AK][0] + hk * a.st[AK][2];
    const T *vb = v + b * a.st[AV][0] + hk * a.st[AV][2];
    const float sl2 = a.scale * ATTN_LOG2E;
    for (int d = threadIdx.x; d < D; d += NW * 32)
        qs[d] = attn_t<T>::ld(qr[d]) * sl2;
    __syncthreads();
    float o[8] = { 0 }, m = -INFINITY, l = 0.0f;
    for (int j0 = warp * 32; j0 < n; j0 += NW * 32) {
        const int j = j0 + lane;
        float s = -INFINITY;
        if (j < n) {
            const T *kr = kb + j * a.st[AK][1];
            s = 0.0f;
            for (int d = 0; d < D; d++)
                s += qs[d] * attn_t<T>::ld(kr[d]);
        }
        const float mn = fmaxf(m, warp_max(s)); /* finite: lane 0 has key j0 < n */
        const float alpha = exp2f(m - mn), p = exp2f(s - mn);
        l = l * alpha + warp_sum(p);
        m = mn;
#pragma unroll
        for (int c = 0; c < 8; c++)
            o[c] *= alpha;
        const int cnt = min(32, n - j0);
        for (int jj = 0; jj < cnt; jj++) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
            const T *vr = vb + (j0 + jj) * a.st[AV][1];
#pragma unroll
            for (int c = 0; c < 8; c++)
                if (lane + 32 * c < D) o[c] += pj * attn_t<T>::ld(vr[lane + 32 * c]);
        }
    }
    if (lane == 0) wm[warp] = m, wl[warp] = l; /* (a warp without keys: -inf and 0) */
#pragma unroll
    for (int c = 0; c < 8; c++)
        if (lane + 32 * c < D) wo[warp][lane + 32 * c] = o[c];
    __syncthreads();
    rows_merge<T>(wm, wl, &wo[0][0], NW, 256, D, NW * 32,
                  out + b * a.st[AO][0] + i * a.st[AO][1] + h * a.st[AO][2], &lse[row]);
}

/* The same for 16-byte aligned bf16/f16 rows of D = 8 * TPK (64, 128, 256): TPK threads share a
 * key, each with 8 of its elements (one 16-byte load of K and of V), so a warp takes 32 / TPK keys
 * at once; each such group keeps its own running max, sum and output over its keys, and the
 * block's groups are merged at the end. why: the lane-per-key kernel's scalar loads and serial
 * P V leave decoding latency-bound (14 us a GPT-2 124M layer at 272 keys on an H100). */
template <typename T, int TPK, int NW>
static __global__ void __launch_bounds__(NW * 32)
    attn_fwd_rows_vec_kernel(attn_args a, T *out, float *lse, const T *q, const T *k, const T *v) {
    constexpr int D = 8 * TPK, KPW = 32 / TPK, G = NW * KPW; /* groups: keys at once */
    __shared__ float gm[G], gl[G], go[G][D + 1];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int grp = warp * KPW + lane / TPK, d0 = (lane % TPK) * 8;
    const int64_t row = blockIdx.x;
    const int i = (int)(row % a.T), h = (int)(row / a.T % a.H), b = (int)(row / a.T / a.H);
    const int nk = a.kl ? a.kl[b] : a.Tk; /* the row's keys */
    const int hk = h / a.group, n = a.causal ? i + 1 + nk - a.T : nk;
    const T *kb = k + b * a.st[AK][0] + hk * a.st[AK][2] + d0;
    const T *vb = v + b * a.st[AV][0] + hk * a.st[AV][2] + d0;
    const float sl2 = a.scale * ATTN_LOG2E;
    float qf[8], o[8], m = -INFINITY, l = 0.0f;
    {
        const uint4 raw =
            *(const uint4 *)(q + b * a.st[AQ][0] + i * a.st[AQ][1] + h * a.st[AQ][2] + d0);
        const T *e = (const T *)&raw;
#pragma unroll
        for (int c = 0; c < 8; c++)
            qf[c] = attn_t<T>::ld(e[c]) * sl2, o[c] = 0.0f;
    }
#pragma unroll 4
    for (int j0 = warp * KPW; j0 < n; j0 += G) { /* (j0 the same for the warp's lanes: shuffles) */
        const int j = j0 + lane / TPK;
        const bool live = j < n;
        uint4 kr = make_uint4(0, 0, 0, 0), vr = kr;
        if (live) {
            kr = *(const uint4 *)(kb + (int64_t)j * a.st[AK][1]);
            vr = *(const uint4 *)(vb + (int64_t)j * a.st[AV][1]);
        }
        const T *ke = (const T *)&kr, *ve = (const T *)&vr;
        float s = 0.0f;
#pragma unroll
        for (int c = 0; c < 8; c++)
            s += qf[c] * attn_t<T>::ld(ke[c]);
#pragma unroll
        for (int off = TPK / 2; off > 0; off >>= 1) /* (the key's TPK threads) */
            s += __shfl_xor_sync(0xffffffffu, s, off);
        if (!live) continue;
        const float mn = fmaxf(m, s), alpha = exp2f(m - mn), p = exp2f(s - mn);
        l = l * alpha + p;
        m = mn;
#pragma unroll
        for (int c = 0; c < 8; c++)
            o[c] = o[c] * alpha + p * attn_t<T>::ld(ve[c]);
    }
    if (lane % TPK == 0) gm[grp] = m, gl[grp] = l; /* (a group without keys: -inf and 0) */
#pragma unroll
    for (int c = 0; c < 8; c++)
        go[grp][d0 + c] = o[c];
    __syncthreads();
    rows_merge<T>(gm, gl, &go[0][0], G, D + 1, D, NW * 32,
                  out + b * a.st[AO][0] + i * a.st[AO][1] + h * a.st[AO][2], &lse[row]);
}

/* Tensor-core path: a block of NW warps owns BR = 16*NW query rows of one (b, h); warp w owns
 * rows 16w..16w+15 and keeps S (16x64), O (16xD) and the running max/sum in registers. */
template <typename T, int D, int NW, bool DOCS, bool DROP>
static __global__ void __launch_bounds__(NW * 32)
    attn_fwd_mma_kernel(attn_args a, T *out, float *lse, const T *q, const T *k, const T *v) {
    constexpr int BR = 16 * NW, BC = 64, NT = NW * 32;
    extern __shared__ __align__(128) unsigned char smem[];
    T *sQ = (T *)smem, *sK = sQ + BR * D, *sV = sK + 2 * BC * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const q_block qb = q_block_of<BR, BC>(a);
    const int b = qb.b, h = qb.h, hk = qb.hk, q0 = qb.q0, qn = qb.qn, nk = qb.nk;
    const int64_t sid = DROP ? a.drop.ids[b] : 0; /* attention dropout: the row's sample id */
    const T *qg = q + b * a.st[AQ][0] + h * a.st[AQ][2] + (int64_t)q0 * a.st[AQ][1];
    const T *kg = k + b * a.st[AK][0] + hk * a.st[AK][2];
    const T *vg = v + b * a.st[AV][0] + hk * a.st[AV][2];
    const int64_t ks = a.st[AK][1], vs = a.st[AV][1];
    const int row0 = q0 + warp * 16 + (lane >> 2);
    const fwd_ks dm = fwd_ks_of<BR, BC, DOCS>(a, b, q0, row0); /* key tiles from dm.kb */
    const int kb0 = dm.kb * BC;
    load_tile<T, BR, D, NT>(sQ, qg, a.st[AQ][1], qn);
    load_tile<T, BC, D, NT>(sK, kg + kb0 * ks, ks, min(BC, a.T - kb0));
    load_tile<T, BC, D, NT>(sV, vg + kb0 * vs, vs, min(BC, a.T - kb0));
    cp_async_commit();

    const float sl2 = a.scale * ATTN_LOG2E;
    float o[D / 8][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
    acc_zero(o);
    uint32_t qf[D / 16][4];
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
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                ldsm_x4(qf[kk], sQ + swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
        }
        const T *cK = sK + (j & 1) * BC * D, *cV = sV + (j & 1) * BC * D;
        float s[BC / 8][4];
#pragma unroll
        for (int i = 0; i < BC / 8; i++)
            s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
            for (int np = 0; np < BC / 16; np++) {
                uint32_t bf[4];
                ldsm_x4(bf, cK + swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                        kk * 16 + ((lane >> 3) & 1) * 8));
                attn_t<T>::mma(s[2 * np], qf[kk], bf[0], bf[1]);
                attn_t<T>::mma(s[2 * np + 1], qf[kk], bf[2], bf[3]);
            }
        }
        online_softmax_tile<BC, D, DOCS>(a, s, o, m, l, sl2, kb0 + j * BC, q0, row0, dm, lane);
        if constexpr (DROP) /* (l, the softmax's sums, is the undropped P's) */
            attn_drop_rows<BC>(a, s, sid, h, row0, kb0 + j * BC, lane);
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            uint32_t pa[4];
            acc_pack<T>(s, kk, pa);
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t bf[4];
                ldsm_x4_t(bf, cV + swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                          dp * 16 + (lane >> 4) * 8));
                attn_t<T>::mma(o[2 * dp], pa, bf[0], bf[1]);
                attn_t<T>::mma(o[2 * dp + 1], pa, bf[2], bf[3]);
            }
        }
        __syncthreads();
    }
    fwd_store_out<T, D>(a, out, lse, o, m, l, b, h, row0, lane);
}

template <typename T, int D, int NW>
static mt_status launch_mma(const attn_args &a, T *out, float *lse, const T *q, const T *k,
                            const T *v, mt_stream stream) {
    constexpr int BR = 16 * NW, BC = 64;
    const int smem = (BR + 4 * BC) * D * (int)sizeof(T);
    const auto kernel = a.drop.ids ? (a.ks ? attn_fwd_mma_kernel<T, D, NW, true, true>
                                           : attn_fwd_mma_kernel<T, D, NW, false, true>)
                                   : (a.ks ? attn_fwd_mma_kernel<T, D, NW, true, false>
                                           : attn_fwd_mma_kernel<T, D, NW, false, false>);
    MT_TRY(attn_smem_attr(kernel, smem));
    dim3 grid(a.B * a.H, (a.Tq + BR - 1) / BR);
    kernel<<<grid, NW * 32, smem, stream>>>(a, out, lse, q, k, v);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

/* Queries over cached keys: a block per row, 16-byte slices of a key at D 64, 128, 256 (bf16,
 * f16, aligned), else a lane per key. */
template <typename T>
static mt_status launch_rows(const attn_args &a, int fast, T *o, float *lse, const T *q, const T *k,
                             const T *v, mt_stream stream) {
    const unsigned rows = (unsigned)((int64_t)a.B * a.H * a.T);
    auto kernel = attn_fwd_rows_kernel<T, 8>;
    unsigned threads = 256;
    if constexpr (sizeof(T) == 2) {
        if (fast && (a.D == 64 || a.D == 128 || a.D == 256)) {
            kernel = a.D == 64    ? attn_fwd_rows_vec_kernel<T, 8, 4>
                     : a.D == 128 ? attn_fwd_rows_vec_kernel<T, 16, 4>
                                  : attn_fwd_rows_vec_kernel<T, 32, 4>;
            threads = 128;
        }
    }
    kernel<<<rows, threads, 0, stream>>>(a, o, lse, q, k, v);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

template <typename T>
static mt_status launch(const attn_args &a, int fast, mt_tensor *out, mt_tensor *lse,
                        const mt_tensor *q, const mt_tensor *k, const mt_tensor *v,
                        mt_stream stream) {
    T *o = (T *)out->data;
    float *L = (float *)lse->data;
    const T *tq = (const T *)q->data, *tk = (const T *)k->data, *tv = (const T *)v->data;
    /* tensor cores (D 192: multi-latent attention's 128 + 64, on the mma.sync kernels) */
    const bool tc = sizeof(T) == 2 && fast && (a.D == 64 || a.D == 128 || a.D == 192);
    attn_args g = a;
    if (a.Tk != a.T || a.kl) { /* over cached keys */
        if (!tc || !attn_prefix_ok(a)) return launch_rows<T>(a, fast, o, L, tq, tk, tv, stream);
        g = attn_prefix_args(a); /* a key prefix in whole tiles: the square's kernels */
        o = attn_rows_back<T>(out, g.qoff), tq = attn_rows_back<const T>(q, g.qoff);
    }
    if constexpr (sizeof(T) == 2) {
        if (tc && a.D != 192 && attn_sm90_takes(g))
            return a.D == 64 ? attn_fwd_sm90<T, 64>(g, o, L, tq, tk, tv, stream)
                             : attn_fwd_sm90<T, 128>(g, o, L, tq, tk, tv, stream);
        if (tc && a.D == 64) return launch_mma<T, 64, 4>(g, o, L, tq, tk, tv, stream);
        if (tc && a.D == 128) return launch_mma<T, 128, 8>(g, o, L, tq, tk, tv, stream);
        if (tc && a.D == 192) return launch_mma<T, 192, 8>(g, o, L, tq, tk, tv, stream);
    }
    int64_t rows = (int64_t)a.B * a.H * a.T;
    attn_fwd_generic_kernel<T><<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(
        a, (T *)out->data, (float *)lse->data, (const T *)q->data, (const T *)k->data,
        (const T *)v->data);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

/* The KV cache's append: a thread per 16 bytes (8 bf16/f16 or 4 f32) of a row's head when D
 * allows, else per element; row b's token t to row len[b] - T + t. */
template <typename T, int VEC>
static __global__ void attn_kv_append_kernel(T *kc, T *vc, const T *k, const T *v, const int *len,
                                             int B, int Tn, int Hkv, int D, attn_args a) {
    const int64_t per = (int64_t)Hkv * (D / VEC), n = (int64_t)B * Tn * per;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < 2 * n;
         x += (int64_t)gridDim.x * blockDim.x) {
        const int which = x >= n; /* 0: keys, 1: values */
        const int64_t y = x - which * n, r = y / per, c = y % per;
        const int b = (int)(r / Tn), t = (int)(r % Tn), h = (int)(c / (D / VEC));
        const int d = (int)(c % (D / VEC)) * VEC, row = len[b] - Tn + t;
        const int s = which ? AV : AQ, dd = which ? AK : AO; /* (src, dst strides) */
        const T *src = (which ? v : k) + b * a.st[s][0] + t * a.st[s][1] + h * a.st[s][2] + d;
        T *dst =
            (which ? vc : kc) + b * a.st[dd][0] + (int64_t)row * a.st[dd][1] + h * a.st[dd][2] + d;
        if constexpr (VEC > 1)
            *(uint4 *)dst = *(const uint4 *)src;
        else
            *dst = *src;
    }
}

template <typename T>
static mt_status kv_append(const attn_args &a, mt_tensor *kc, mt_tensor *vc, const mt_tensor *k,
                           const mt_tensor *v, const int32_t *len, mt_stream stream) {
    const int B = (int)k->shape[0], Tn = (int)k->shape[1], Hkv = (int)k->shape[2];
    const int D = (int)k->shape[3];
    constexpr int V16 = 16 / (int)sizeof(T);
    const bool vec =
        D % V16 == 0 && attn_aligned(kc) && attn_aligned(vc) && attn_aligned(k) && attn_aligned(v);
    const int64_t n = 2 * (int64_t)B * Tn * Hkv * (vec ? D / V16 : D);
    const unsigned grid = (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    if (vec)
        attn_kv_append_kernel<T, V16>
            <<<grid, 256, 0, stream>>>((T *)kc->data, (T *)vc->data, (const T *)k->data,
                                       (const T *)v->data, len, B, Tn, Hkv, D, a);
    else
        attn_kv_append_kernel<T, 1>
            <<<grid, 256, 0, stream>>>((T *)kc->data, (T *)vc->data, (const T *)k->data,
                                       (const T *)v->data, len, B, Tn, Hkv, D, a);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status attn_kv_append_cuda(mt_tensor *kc, mt_tensor *vc, const mt_tensor *k,
                                         const mt_tensor *v, const int32_t *len, mt_stream stream) {
    attn_args a;
    memset(&a, 0, sizeof a);
    const mt_tensor *ts[4] = { k, v, kc,
                               vc }; /* strides: k's in slot AQ, v's AV, kc's AO, vc's AK */
    const int slot[4] = { AQ, AV, AO, AK };
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            a.st[slot[i]][j] = ts[i]->stride[j];
    switch (k->dtype) {
    case MT_F32:
        return kv_append<float>(a, kc, vc, k, v, len, stream);
    case MT_BF16:
        return kv_append<__nv_bfloat16>(a, kc, vc, k, v, len, stream);
    case MT_F16:
        return kv_append<__half>(a, kc, vc, k, v, len, stream);
    default:
        return MT_ERROR(MT_ERR_UNSUPPORTED, "KV cache dtype %s", mt_dtype_name(k->dtype));
    }
}

extern "C" mt_status attn_fwd_cuda(const attn_shape *s, mt_tensor *out, mt_tensor *lse,
                                   const mt_tensor *q, const mt_tensor *k, const mt_tensor *v,
                                   mt_stream stream) {
    const mt_tensor *t[A_NT] = { q, k, v, out, NULL, NULL, NULL, NULL };
    attn_args a = attn_make_args(s, t);
    int fast = attn_aligned(q) && attn_aligned(k) && attn_aligned(v) && attn_aligned(out);
    switch (q->dtype) {
    case MT_F32:
        return launch<float>(a, 0, out, lse, q, k, v, stream);
    case MT_BF16:
        return launch<__nv_bfloat16>(a, fast, out, lse, q, k, v, stream);
    case MT_F16:
        return launch<__half>(a, fast, out, lse, q, k, v, stream);
    default:
        return MT_ERROR(MT_ERR_UNSUPPORTED, "attention dtype %s", mt_dtype_name(q->dtype));
    }
}
