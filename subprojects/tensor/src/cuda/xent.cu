/* Fused softmax cross-entropy CUDA kernels (llm.c's fused classifier), one row per block. Main
 * path: the row is copied once into shared memory (a bulk copy, or cp.async), max and sum come from
 * there (fp32) and the gradient is written from there, possibly over the logits: one read and one
 * write of the row. Fallback (odd widths, rows over the shared-memory limit): two passes over
 * global memory, the second from L2. Stats by one block in fixed order. */
#include <cuda_pipeline.h>

#include "common.cuh"

/* One row of logits (Vp columns, the first V real). dlogits == NULL: forward only. */
template <typename T, typename I, int N>
static __global__ void xent_kernel(T *dlogits, float *losses, const T *logits, const I *targets,
                                   const float *dloss, const float *stats, float dmean, int64_t V,
                                   int64_t Vp, int64_t ignore_index) {
    typedef vec_t<T, N> VT;
    int64_t row = blockIdx.x, nv = Vp / N;
    const VT *x = (const VT *)(logits + row * Vp);
    VT *dx = dlogits ? (VT *)(dlogits + row * Vp) : nullptr;
    int64_t t = (int64_t)targets[row];
    if (t == ignore_index) { /* no loss, no gradient */
        if (threadIdx.x == 0) losses[row] = 0.0f;
        VT z;
#pragma unroll
        for (int k = 0; k < N; k++)
            z.v[k] = stf<T>(0.0f);
        for (int64_t i = threadIdx.x; dx && i < nv; i += blockDim.x)
            dx[i] = z;
        return;
    }
    int valid = t >= 0 && t < V;
    // why: read x[t] before the barrier in block_max_sum; pass 2 may overwrite it in place
    float xt = valid ? ldf(logits[row * Vp + t]) : NAN;
    float m = -INFINITY, s = 0.0f;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        VT p = x[i];
        float f[N], vm = -INFINITY, add = 0.0f;
#pragma unroll
        for (int k = 0; k < N; k++) {
            f[k] = i * N + k < V ? ldf(p.v[k]) : -INFINITY;
            vm = fmaxf(vm, f[k]);
        }
        float M = fmaxf(m, vm);
        if (M == -INFINITY) continue;
#pragma unroll
        for (int k = 0; k < N; k++)
            add += __expf(f[k] - M);
        s = s * exp_scale(m, M) + add;
        m = M;
    }
    block_max_sum(m, s);
    if (threadIdx.x == 0) losses[row] = m + logf(s) - xt; /* NaN for a target outside [0, V) */
    if (!dx) return;
    float g = dloss ? dloss[row] : dmean / stats[1];
    if (!valid) g = NAN;
    float inv = 1.0f / s;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        VT p = x[i];
#pragma unroll
        for (int k = 0; k < N; k++) {
            int64_t c = i * N + k;
            float d = 0.0f;
            if (c < V) d = (__expf(ldf(p.v[k]) - m) * inv - (c == t ? 1.0f : 0.0f)) * g;
            p.v[k] = stf<T>(d);
        }
        dx[i] = p;
    }
}

/* 2^x; flushes results below 2^-126 to zero (as __expf does). */
static __device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Vector p of a row as floats, columns c0.. at or past V as -inf (when MASK). */
template <bool MASK, typename T, int N>
static __device__ __forceinline__ void row_vals(float (&f)[N], const vec_t<T, N> &p, int c0,
                                                int V) {
#pragma unroll
    for (int k = 0; k < N; k++)
        f[k] = MASK && c0 + k >= V ? -INFINITY : ldf(p.v[k]);
}

/* Vector i of a row in shared memory as floats; only vectors from nfull on reach past V. */
template <typename T, int N>
static __device__ __forceinline__ void row_at(float (&f)[N], const vec_t<T, N> *sv, int i,
                                              int nfull, int V) {
    if (i < nfull)
        row_vals<false>(f, sv[i], i * N, V);
    else
        row_vals<true>(f, sv[i], i * N, V);
}

/* One row from shared memory (sv: its Vp values): per-thread max, per-thread sum (ONLINE: both in
 * one pass, the sum rescaled when the max grows), one block merge, the loss and the gradient.
 * Vector i belongs to thread i % blockDim.x in every loop. */
template <typename T, int N, bool ONLINE>
static __device__ void xent_row(T *dlogits, float *loss, const vec_t<T, N> *sv, float g0, int64_t t,
                                int V, int Vp) {
    typedef vec_t<T, N> VT;
    const float L2E = 1.4426950408889634f;
    int nv = Vp / N, nfull = V / N; /* vectors [0, nfull) lie inside [0, V) */
    float m = -INFINITY, s = 0.0f, f[N];
    if constexpr (ONLINE) {
        for (int i = threadIdx.x; i < nv; i += blockDim.x) {
            row_at(f, sv, i, nfull, V);
            float M = m;
#pragma unroll
            for (int k = 0; k < N; k++)
                M = fmaxf(M, f[k]);
            if (M == -INFINITY) continue;
            const float mb = M * L2E;
            float add = 0.0f;
#pragma unroll
            for (int k = 0; k < N; k++)
                add += ex2(fmaf(f[k], L2E, -mb));
            s = (m == -INFINITY ? 0.0f : s * ex2(fmaf(m, L2E, -mb))) + add;
            m = M;
        }
    } else
        for (int i = threadIdx.x; i < nv; i += blockDim.x) {
            row_at(f, sv, i, nfull, V);
#pragma unroll
            for (int k = 0; k < N; k++)
                m = fmaxf(m, f[k]);
        }
    if (!ONLINE && m != -INFINITY) {
        float mb = m * L2E;
        for (int i = threadIdx.x; i < nv; i += blockDim.x) {
            row_at(f, sv, i, nfull, V);
#pragma unroll
            for (int k = 0; k < N; k++)
                s += ex2(fmaf(f[k], L2E, -mb));
        }
    }
    block_max_sum(m, s);
    int valid = t >= 0 && t < V;
    float xt = valid ? ldf(((const T *)sv)[t]) : NAN;
    if (threadIdx.x == 0) *loss = m + logf(s) - xt; /* NaN for a target outside [0, V) */
    if (!dlogits) return;
    float g = valid ? g0 : NAN, gs = g / s, mb = m * L2E;
    VT *dx = (VT *)dlogits;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        row_at(f, sv, i, nfull, V);
        VT p;
#pragma unroll
        for (int k = 0; k < N; k++)
            p.v[k] = stf<T>(ex2(fmaf(f[k], L2E, -mb)) * gs);
        dx[i] = p;
    }
    // why: the target's -g goes in after the loop, by the thread that stored its vector
    if (valid && (int)(t / N) % blockDim.x == threadIdx.x)
        dlogits[t] = stf<T>(ex2(fmaf(xt, L2E, -mb)) * gs - g);
}

/* The shared-memory path, one row per block: the row's Vp values (16-byte aligned,
 * Vp * sizeof(T) % 16 == 0) are copied into dynamic shared memory (one bulk copy on sm_90+, else
 * cp.async), read once from global memory. (A persistent grid that copied the next row during
 * this row's math, one block per SM, ran slower, with cp.async and again with bulk copies into two
 * buffers: 2.23 against 3.26 TiB/s, nvidia-h200; two blocks of 512 threads overlap better.) */
template <typename T, typename I, bool ONLINE>
static __global__ void __launch_bounds__(1024)
    xent_smem_kernel(T *dlogits, float *losses, const T *logits, const I *targets,
                     const float *dloss, const float *stats, float dmean, int V, int Vp,
                     int64_t ignore_index, int bulk) {
    const int N = 16 / sizeof(T);
    typedef vec_t<T, N> VT;
    extern __shared__ uint4 sbuf[];
    int64_t row = blockIdx.x, t = (int64_t)targets[row];
    int nv = Vp / N;
    T *dx = dlogits ? dlogits + row * Vp : nullptr;
    if (t == ignore_index) { /* no loss, no gradient */
        if (threadIdx.x == 0) losses[row] = 0.0f;
        VT z;
#pragma unroll
        for (int q = 0; q < N; q++)
            z.v[q] = stf<T>(0.0f);
        for (int i = threadIdx.x; dx && i < nv; i += blockDim.x)
            ((VT *)dx)[i] = z;
        return;
    }
    const uint4 *x = (const uint4 *)(logits + row * Vp);
#if __CUDA_ARCH__ >= 900
    if (bulk) { // why: one bulk copy instead of ~12 cp.async a thread (fewer requests, less power)
        __shared__ uint64_t bar;
        if (threadIdx.x == 0) {
            mt_mbar_init(&bar, 1);
            mt_mbar_expect(&bar, (uint32_t)nv * 16);
            mt_bulk_load(sbuf, x, (uint32_t)nv * 16, &bar);
        }
        __syncthreads(); /* the barrier's init before anyone waits on it */
        mt_mbar_wait(&bar, 0);
    } else
#endif
    {
        for (int i = threadIdx.x; i < nv; i += blockDim.x)
            __pipeline_memcpy_async(&sbuf[i], &x[i], 16);
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();
    }
    float g = !dx ? 0.0f : dloss ? dloss[row] : dmean / stats[1];
    xent_row<T, N, ONLINE>(dx, losses + row, (const VT *)sbuf, g, t, V, Vp);
}

/* stats[1] = count of non-ignored targets; with_mean: stats[0] = sum(losses) / count (fp64). */
template <typename I>
static __global__ void xent_stats_kernel(float *stats, const float *losses, const I *targets,
                                         int64_t n, int64_t ignore_index, int with_mean) {
    __shared__ double sc[32], sl[32];
    double c = 0.0, l = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        int keep = (int64_t)targets[i] != ignore_index;
        c += keep;
        if (with_mean && keep) l += losses[i];
    }
    for (int o = 16; o > 0; o >>= 1) {
        c += __shfl_xor_sync(0xffffffffu, c, o);
        l += __shfl_xor_sync(0xffffffffu, l, o);
    }
    if (threadIdx.x % 32 == 0) sc[threadIdx.x / 32] = c, sl[threadIdx.x / 32] = l;
    __syncthreads();
    if (threadIdx.x != 0) return;
    c = 0.0, l = 0.0;
    for (int i = 0; i < (int)blockDim.x / 32; i++)
        c += sc[i], l += sl[i];
    stats[1] = (float)c;
    if (with_mean) stats[0] = (float)(l / c);
}

template <typename T, typename I>
static mt_status launch(mt_tensor *dlogits, mt_tensor *losses, mt_tensor *stats,
                        const mt_tensor *logits, const mt_tensor *targets, const mt_tensor *dloss,
                        float dmean, int64_t V, int64_t ignore_index, mt_stream stream) {
    int64_t Nrows = logits->shape[0], Vp = logits->shape[1];
    const int N = 16 / sizeof(T);
    int vec = Vp % N == 0 && (uintptr_t)logits->data % 16 == 0 &&
              (!dlogits || (uintptr_t)dlogits->data % 16 == 0);
    int64_t nv = vec ? Vp / N : Vp;
    int threads = 32;
    while (threads < nv && threads < 1024)
        threads *= 2;
    size_t smem = (size_t)Vp * sizeof(T);
    /* forward only: the row's max and sum in one pass over shared memory (bench_xent xent_fwd
     * 2.42 -> 2.58 TiB/s, nvidia-h100-x1); with the gradient's pass beside them it made no
     * difference (2.55 -> 2.56), so that path keeps the cheaper max pass */
    auto smem_kernel = dlogits ? xent_smem_kernel<T, I, false> : xent_smem_kernel<T, I, true>;
    int smem_max = 0, per_sm = 0;
    MT_TRY(mt_cuda_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, &smem_max));
    int use_smem = vec && smem + 1024 <= (size_t)smem_max; /* 1 KiB: the block merge's arrays */
    if (use_smem) {
        // why: ~16 values per thread; a bf16 GPT-2 row (98 KiB) leaves room for 2 blocks per SM
        threads = 32;
        while (threads < (nv + 15) / 16 && threads < 1024)
            threads *= 2;
        MT_TRY(mt_cuda_occupancy(smem_kernel, threads, smem, &per_sm));
    }
    /* MT_XENT_BULK=0: per-thread cp.async instead of one bulk copy a row (sm_90 and later) */
    static int bulk_env = MT_ENV_UNREAD;
    const int bulk = mt_env_int_once("MT_XENT_BULK", 1, &bulk_env) != 0;
    const I *tg = (const I *)targets->data;
    float *st = stats ? (float *)stats->data : nullptr;
    if (dlogits && !dloss) { /* the mean's gradient needs the count first */
        xent_stats_kernel<I><<<1, 1024, 0, stream>>>(st, nullptr, tg, Nrows, ignore_index, 0);
        MT_CUDA_CHECK_LAUNCH();
    }
    T *dx = dlogits ? (T *)dlogits->data : nullptr;
    const float *dl = dloss ? (const float *)dloss->data : nullptr;
    for (int64_t r0 = 0; r0 < Nrows; r0 += 65535LL * 32) { // why: gridDim.x limit per launch
        unsigned g = (unsigned)(Nrows - r0 < 65535LL * 32 ? Nrows - r0 : 65535LL * 32);
        T *d = dx ? dx + r0 * Vp : nullptr;
        float *l = (float *)losses->data + r0;
        const T *x = (const T *)logits->data + r0 * Vp;
        if (use_smem)
            smem_kernel<<<g, threads, smem, stream>>>(d, l, x, tg + r0, dl ? dl + r0 : dl, st,
                                                      dmean, (int)V, (int)Vp, ignore_index, bulk);
        else if (vec)
            xent_kernel<T, I, N><<<g, threads, 0, stream>>>(d, l, x, tg + r0, dl ? dl + r0 : dl, st,
                                                            dmean, V, Vp, ignore_index);
        else
            xent_kernel<T, I, 1><<<g, threads, 0, stream>>>(d, l, x, tg + r0, dl ? dl + r0 : dl, st,
                                                            dmean, V, Vp, ignore_index);
        MT_CUDA_CHECK_LAUNCH();
    }
    if (st) {
        xent_stats_kernel<I>
            <<<1, 1024, 0, stream>>>(st, (const float *)losses->data, tg, Nrows, ignore_index, 1);
        MT_CUDA_CHECK_LAUNCH();
    }
    return MT_OK;
}

extern "C" mt_status xent_cuda(mt_tensor *dlogits, mt_tensor *losses, mt_tensor *stats,
                               const mt_tensor *logits, const mt_tensor *targets,
                               const mt_tensor *dloss, float dmean, int64_t V, int64_t ignore_index,
                               mt_stream stream) {
    if (logits->shape[0] == 0) {
        if (stats) return MT_ERROR(MT_ERR_UNSUPPORTED, "xent stats of zero tokens on CUDA");
        return MT_OK;
    }
    if (targets->dtype == MT_I64) {
        MT_DISPATCH_FLOAT(logits->dtype, T,
                          return launch<T, int64_t>(dlogits, losses, stats, logits, targets, dloss,
                                                    dmean, V, ignore_index, stream));
    } else {
        MT_DISPATCH_FLOAT(logits->dtype, T,
                          return launch<T, int32_t>(dlogits, losses, stats, logits, targets, dloss,
                                                    dmean, V, ignore_index, stream));
    }
    return MT_OK;
}

/* dloss[n] = dmean / stats[1] for kept targets, else 0 (the mean mode's g, as xent_smem_kernel). */
template <typename I>
static __global__ void xent_dloss_kernel(float *dloss, const float *stats, const I *targets,
                                         int64_t n, float dmean, int64_t ignore_index) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dloss[i] = (int64_t)targets[i] == ignore_index ? 0.0f : dmean / stats[1];
}

template <typename I>
static mt_status stats_launch(float *st, float *dl, const float *losses, const I *tg, int64_t n,
                              float dmean, int64_t ignore_index, mt_stream stream) {
    xent_stats_kernel<I>
        <<<1, 1024, 0, stream>>>(st, losses, tg, n, ignore_index, losses != nullptr);
    MT_CUDA_CHECK_LAUNCH();
    if (dl && n > 0) {
        xent_dloss_kernel<I>
            <<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(dl, st, tg, n, dmean, ignore_index);
        MT_CUDA_CHECK_LAUNCH();
    }
    return MT_OK;
}

extern "C" mt_status xent_stats_cuda(mt_tensor *stats, mt_tensor *dloss, const mt_tensor *losses,
                                     const mt_tensor *targets, float dmean, int64_t ignore_index,
                                     mt_stream stream) {
    float *st = (float *)stats->data, *dl = dloss ? (float *)dloss->data : nullptr;
    const float *lo = losses ? (const float *)losses->data : nullptr;
    int64_t n = mt_tensor_numel(targets);
    if (targets->dtype == MT_I64)
        return stats_launch<int64_t>(st, dl, lo, (const int64_t *)targets->data, n, dmean,
                                     ignore_index, stream);
    return stats_launch<int32_t>(st, dl, lo, (const int32_t *)targets->data, n, dmean, ignore_index,
                                 stream);
}
