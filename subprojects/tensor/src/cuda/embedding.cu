/* Embedding CUDA kernels. Forward: 16-byte row gathers. Backward without float atomics (llm.c's
 * encoder_backward idea on the device): token ids are stably radix-sorted (CUB) with their token
 * index; then each run of equal ids adds its dout rows in token order, a run of up to 16 by one
 * warp, a longer one by blocks that stage its rows in shared memory, a column slab each. */
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"

template <typename T, typename I, int N>
static __global__ void embedding_fwd_kernel(T *out, const I *ids, const T *wte, const T *wpe,
                                            const I *pos, int64_t ntok, int64_t T_, int64_t C,
                                            int64_t V, int64_t P, int64_t v0) {
    typedef vec_t<T, N> VT;
    int64_t cv = C / N, total = ntok * cv;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / cv, j = i % cv, v = (int64_t)ids[n] - v0;
        VT e;
        if (v >= 0 && v < V) {
            e = ((const VT *)(wte + v * C))[j];
        } else {
#pragma unroll
            for (int k = 0; k < N; k++)
                e.v[k] = stf<T>(0.0f);
        }
        int64_t t = pos ? (int64_t)pos[n] : n % T_;
        if (wpe && t >= 0 && t < P) {
            VT p = ((const VT *)(wpe + t * C))[j];
#pragma unroll
            for (int k = 0; k < N; k++)
                e.v[k] = stf<T>(ldf(e.v[k]) + ldf(p.v[k]));
        }
        ((VT *)(out + n * C))[j] = e;
    }
}

/* keys = the table's row id - v0 (V for rows outside [0, V): sorted last, skipped), vals = token
 * index. */
template <typename I>
static __global__ void embedding_keys_kernel(int *keys, int *vals, const I *ids, int n, int64_t V,
                                             int64_t v0) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t v = (int64_t)ids[i] - v0;
    keys[i] = v >= 0 && v < V ? (int)v : (int)V;
    vals[i] = i;
}

#define EMB_SHORT_RUN 8 /* the longest run one warp takes */

/* Warp p (sorted position p) owns the run that starts at p, if any: it adds the run's dout rows in
 * token order onto dwte[v], fp32, with U rows' loads in flight at a time. Runs longer than
 * EMB_SHORT_RUN are appended to `lng` (order irrelevant) for embedding_wte_long_kernel. */
template <typename TD, typename TW, int N>
static __global__ void embedding_wte_short_kernel(TW *dwte, const TD *dout, const int *keys,
                                                  const int *vals, int n, int64_t C, int V,
                                                  int *lng, int *nlng) {
    const int JB = 3, U = 2; /* column vectors per lane per pass, rows per batch */
    int lane = threadIdx.x % 32, p = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (p >= n) return;
    // why: one round of loads: lane l has keys[p - 1 + l] and vals[p + l]
    int kq = p - 1 + lane >= 0 && p - 1 + lane < n ? keys[p - 1 + lane] : -1;
    int tq = p + lane < n ? vals[p + lane] : 0;
    int v = __shfl_sync(0xffffffffu, kq, 1);
    if (v >= V || __shfl_sync(0xffffffffu, kq, 0) == v) return;
    unsigned diff = __ballot_sync(0xffffffffu, lane > 0 && kq != v); /* lane l: position p+l-1 */
    int L = diff ? __ffs(diff) - 2 : 31;
    if (L > EMB_SHORT_RUN) {
        if (lane == 0) lng[atomicAdd(nlng, 1)] = p;
        return;
    }
    int64_t cv = C / N;
    for (int64_t j0 = 0; j0 < cv; j0 += 32 * JB) {
        float acc[JB][N];
#pragma unroll
        for (int b = 0; b < JB; b++) {
            int64_t j = j0 + lane + 32 * b;
            if (j < cv) {
                vec_t<TW, N> w = ((const vec_t<TW, N> *)(dwte + v * C))[j];
#pragma unroll
                for (int k = 0; k < N; k++)
                    acc[b][k] = ldf(w.v[k]);
            }
        }
        for (int k0 = 0; k0 < L; k0 += U) {
            vec_t<TD, N> d[U][JB];
#pragma unroll
            for (int u = 0; u < U; u++) {
                int64_t tok = __shfl_sync(0xffffffffu, tq, k0 + u);
#pragma unroll
                for (int b = 0; b < JB; b++) {
                    int64_t j = j0 + lane + 32 * b;
                    if (k0 + u < L && j < cv) d[u][b] = ((const vec_t<TD, N> *)(dout + tok * C))[j];
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) /* token order */
#pragma unroll
                for (int b = 0; b < JB; b++)
                    if (k0 + u < L && j0 + lane + 32 * b < cv)
#pragma unroll
                        for (int k = 0; k < N; k++)
                            acc[b][k] += ldf(d[u][b].v[k]);
        }
#pragma unroll
        for (int b = 0; b < JB; b++) {
            int64_t j = j0 + lane + 32 * b;
            if (j < cv) {
                vec_t<TW, N> w;
#pragma unroll
                for (int k = 0; k < N; k++)
                    w.v[k] = stf<TW>(acc[b][k]);
                ((vec_t<TW, N> *)(dwte + v * C))[j] = w;
            }
        }
    }
}

/* The long runs (sorted start positions in lng[0, *nlng)), as tasks (run, slab of S column
 * vectors) over a grid of blocks of 256 threads: the block loads TT rows of its slab at a time
 * into shared memory, then S threads add them in token order. */
template <typename TD, typename TW, int N>
static __global__ void __launch_bounds__(256)
    embedding_wte_long_kernel(TW *dwte, const TD *dout, const int *keys, const int *vals, int n,
                              int64_t C, const int *lng, const int *nlng) {
    const int S = 8, TT = 256;
    __shared__ vec_t<TD, N> tile[TT][S];
    __shared__ int len;
    int64_t cv = C / N, nslab = (cv + S - 1) / S, ntask = (int64_t)*nlng * nslab;
    int tid = threadIdx.x;
    for (int64_t task = blockIdx.x; task < ntask; task += gridDim.x) {
        int p = lng[task / nslab], v = keys[p];
        int64_t j0 = task % nslab * S;
        if (tid == 0) len = n - p;
        __syncthreads();
        for (int q0 = p;; q0 += blockDim.x) { /* the run's length: the first other key */
            int q = q0 + tid, other = q < n && keys[q] != v;
            if (other) atomicMin(&len, q - p);
            if (__syncthreads_or(other || q0 + (int)blockDim.x >= n)) break;
        }
        int L = len;
        int64_t j = j0 + tid % S;
        float acc[N];
        if (tid < S && j < cv) {
            vec_t<TW, N> w = ((const vec_t<TW, N> *)(dwte + v * C))[j];
#pragma unroll
            for (int k = 0; k < N; k++)
                acc[k] = ldf(w.v[k]);
        }
        for (int k0 = 0; k0 < L; k0 += TT) {
            int cnt = L - k0 < TT ? L - k0 : TT;
            for (int k = tid / S; k < cnt && j < cv; k += blockDim.x / S)
                tile[k][tid % S] =
                    ((const vec_t<TD, N> *)(dout + (int64_t)vals[p + k0 + k] * C))[j];
            __syncthreads();
            if (tid < S && j < cv)
#pragma unroll 8 // why: the shared-memory loads of 8 rows in flight ahead of the add chain
                for (int k = 0; k < cnt; k++) /* token order */
#pragma unroll
                    for (int e = 0; e < N; e++)
                        acc[e] += ldf(tile[k][tid].v[e]);
            __syncthreads();
        }
        if (tid < S && j < cv) {
            vec_t<TW, N> w;
#pragma unroll
            for (int k = 0; k < N; k++)
                w.v[k] = stf<TW>(acc[k]);
            ((vec_t<TW, N> *)(dwte + v * C))[j] = w;
        }
    }
}

/* dwpe[t] += sum over b of dout[b, t] in order of b. */
template <typename TD, typename TW, int N>
static __global__ void embedding_wpe_bwd_kernel(TW *dwpe, const TD *dout, int64_t B, int64_t T_,
                                                int64_t C) {
    int64_t cv = C / N, total = T_ * cv;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / cv, j = i % cv;
        vec_t<TW, N> w = ((const vec_t<TW, N> *)(dwpe + t * C))[j];
        float acc[N];
#pragma unroll
        for (int k = 0; k < N; k++)
            acc[k] = ldf(w.v[k]);
        int64_t b = 0;
        for (; b + 4 <= B; b += 4) { /* 4 loads in flight, then the adds in order of b */
            vec_t<TD, N> d[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                d[u] = ((const vec_t<TD, N> *)(dout + ((b + u) * T_ + t) * C))[j];
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int k = 0; k < N; k++)
                    acc[k] += ldf(d[u].v[k]);
        }
        for (; b < B; b++) {
            vec_t<TD, N> d = ((const vec_t<TD, N> *)(dout + (b * T_ + t) * C))[j];
#pragma unroll
            for (int k = 0; k < N; k++)
                acc[k] += ldf(d.v[k]);
        }
#pragma unroll
        for (int k = 0; k < N; k++)
            w.v[k] = stf<TW>(acc[k]);
        ((vec_t<TW, N> *)(dwpe + t * C))[j] = w;
    }
}

static int aligned16(const void *p) {
    return (uintptr_t)p % 16 == 0;
}

template <typename T, typename I>
static mt_status fwd(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                     const mt_tensor *wpe, const mt_tensor *pos, int64_t v0, mt_stream stream) {
    int64_t ntok = mt_tensor_numel(ids), T_ = ids->shape[ids->ndim - 1], C = wte->shape[1];
    const int N = 16 / sizeof(T);
    int vec = C % N == 0 && aligned16(out->data) && aligned16(wte->data) &&
              (!wpe || aligned16(wpe->data));
    int64_t total = ntok * (vec ? C / N : C);
    unsigned grid = mt_grid_1d(total, 256);
    const T *pe = wpe ? (const T *)wpe->data : nullptr;
    const I *ps = pos ? (const I *)pos->data : nullptr;
    int64_t P = wpe ? wpe->shape[0] : 0;
    if (vec)
        embedding_fwd_kernel<T, I, N>
            <<<grid, 256, 0, stream>>>((T *)out->data, (const I *)ids->data, (const T *)wte->data,
                                       pe, ps, ntok, T_, C, wte->shape[0], P, v0);
    else
        embedding_fwd_kernel<T, I, 1>
            <<<grid, 256, 0, stream>>>((T *)out->data, (const I *)ids->data, (const T *)wte->data,
                                       pe, ps, ntok, T_, C, wte->shape[0], P, v0);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status embedding_fwd_cuda(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                                        const mt_tensor *wpe, const mt_tensor *pos, int64_t v0,
                                        mt_stream stream) {
    if (mt_tensor_numel(ids) == 0 || wte->shape[1] == 0) return MT_OK;
    if (ids->dtype == MT_I64)
        MT_DISPATCH_FLOAT(out->dtype, T,
                          return fwd<T, int64_t>(out, ids, wte, wpe, pos, v0, stream));
    else
        MT_DISPATCH_FLOAT(out->dtype, T,
                          return fwd<T, int32_t>(out, ids, wte, wpe, pos, v0, stream));
    return MT_OK;
}

static size_t align256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

static int key_bits(int64_t V) {
    int bits = 1;
    while (bits < 31 && (1LL << bits) <= V)
        bits++; // keys go up to V (the sentinel)
    return bits;
}

extern "C" mt_status embedding_bwd_cuda_workspace(int64_t n, int64_t V, size_t *bytes) {
    MT_REQUIRE(n < (1LL << 31) && V < (1LL << 31) - 1, MT_ERR_UNSUPPORTED,
               "embedding backward: %lld tokens, V = %lld (both must fit in int)", (long long)n,
               (long long)V);
    // why: CUB's size query costs host time; it is asked on every backward
    static std::mutex mu;
    static std::map<std::tuple<int, int64_t, int>, size_t> cache;
    int dev = 0;
    MT_CUDA_TRY(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_tuple(dev, n, key_bits(V));
    auto it = cache.find(key);
    if (it == cache.end()) {
        size_t temp = 0;
        MT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const int *)nullptr,
                                                    (int *)nullptr, (const int *)nullptr,
                                                    (int *)nullptr, (int)n, 0, key_bits(V)));
        it = cache.emplace(key, temp).first;
    }
    *bytes = 4 * align256((size_t)n * sizeof(int)) + align256(it->second);
    return MT_OK;
}

template <typename TD, typename TW, typename I>
static mt_status bwd(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout, const mt_tensor *ids,
                     int64_t v0, void *ws, size_t ws_bytes, mt_stream stream) {
    int64_t n = mt_tensor_numel(ids), T_ = ids->shape[ids->ndim - 1], C = dwte->shape[1];
    int64_t V = dwte->shape[0];
    size_t need;
    MT_TRY(embedding_bwd_cuda_workspace(n, V, &need));
    size_t part = align256((size_t)n * sizeof(int)), temp = ws_bytes - 4 * part;
    char *w = (char *)ws;
    int *kin = (int *)w, *vin = (int *)(w + part), *kout = (int *)(w + 2 * part),
        *vout = (int *)(w + 3 * part);
    embedding_keys_kernel<I>
        <<<mt_grid_1d(n, 256), 256, 0, stream>>>(kin, vin, (const I *)ids->data, (int)n, V, v0);
    MT_CUDA_CHECK_LAUNCH();
    MT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(w + 4 * part, temp, kin, kout, vin, vout, (int)n, 0,
                                                key_bits(V), stream));
    const int N = 16 / sizeof(TD);
    size_t wal = sizeof(TW) * N; /* f32 grads of bf16 dout: 32-byte vectors */
    int vec = C % N == 0 && aligned16(dout->data) && (uintptr_t)dwte->data % wal == 0 &&
              (!dwpe || (uintptr_t)dwpe->data % wal == 0);
    int64_t cv = vec ? C / N : C;
    // why: the keys' input buffers are free after the sort: kin lists the long runs, vin[0] counts
    int *lng = kin, *nlng = vin;
    MT_CUDA_TRY(cudaMemsetAsync(nlng, 0, sizeof(int), stream));
    unsigned sgrid = (unsigned)((n + 7) / 8);
    const TD *d = (const TD *)dout->data;
    TW *gw = (TW *)dwte->data;
    if (vec)
        embedding_wte_short_kernel<TD, TW, N>
            <<<sgrid, 256, 0, stream>>>(gw, d, kout, vout, (int)n, C, (int)V, lng, nlng);
    else
        embedding_wte_short_kernel<TD, TW, 1>
            <<<sgrid, 256, 0, stream>>>(gw, d, kout, vout, (int)n, C, (int)V, lng, nlng);
    MT_CUDA_CHECK_LAUNCH();
    int sms = 0;
    MT_TRY(mt_cuda_attr(cudaDevAttrMultiProcessorCount, &sms));
    if (vec)
        embedding_wte_long_kernel<TD, TW, N>
            <<<4 * sms, 256, 0, stream>>>(gw, d, kout, vout, (int)n, C, lng, nlng);
    else
        embedding_wte_long_kernel<TD, TW, 1>
            <<<4 * sms, 256, 0, stream>>>(gw, d, kout, vout, (int)n, C, lng, nlng);
    MT_CUDA_CHECK_LAUNCH();
    if (dwpe) {
        unsigned g = mt_grid_1d(T_ * cv, 256);
        if (vec)
            embedding_wpe_bwd_kernel<TD, TW, N>
                <<<g, 256, 0, stream>>>((TW *)dwpe->data, d, n / T_, T_, C);
        else
            embedding_wpe_bwd_kernel<TD, TW, 1>
                <<<g, 256, 0, stream>>>((TW *)dwpe->data, d, n / T_, T_, C);
        MT_CUDA_CHECK_LAUNCH();
    }
    return MT_OK;
}

template <typename TD, typename TW>
static mt_status bwd_ids(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                         const mt_tensor *ids, int64_t v0, void *ws, size_t ws_bytes,
                         mt_stream stream) {
    if (ids->dtype == MT_I64)
        return bwd<TD, TW, int64_t>(dwte, dwpe, dout, ids, v0, ws, ws_bytes, stream);
    return bwd<TD, TW, int32_t>(dwte, dwpe, dout, ids, v0, ws, ws_bytes, stream);
}

extern "C" mt_status embedding_bwd_cuda(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                                        const mt_tensor *ids, const mt_tensor *pos, int64_t v0,
                                        void *ws, size_t ws_bytes, mt_stream stream) {
    if (mt_tensor_numel(ids) == 0 || dwte->shape[1] == 0) return MT_OK;
    if (pos && dwpe) { /* the position table by the same sorted scatter as the token table */
        MT_TRY(embedding_bwd_cuda(dwte, NULL, dout, ids, NULL, v0, ws, ws_bytes, stream));
        return embedding_bwd_cuda(dwpe, NULL, dout, pos, NULL, 0, ws, ws_bytes, stream);
    }
    if (dwte->dtype == MT_F32)
        MT_DISPATCH_FLOAT(
            dout->dtype, TD,
            return bwd_ids<TD, float>(dwte, dwpe, dout, ids, v0, ws, ws_bytes, stream));
    else
        MT_DISPATCH_FLOAT(dout->dtype, TD,
                          return bwd_ids<TD, TD>(dwte, dwpe, dout, ids, v0, ws, ws_bytes, stream));
    return MT_OK;
}
