/* Embedding CUDA kernels. Forward: 16-byte row gathers. Backward without float atomics (llm.c's
 * encoder_backward idea on the device): token ids are stably radix-sorted (CUB) with their token
 * index, then one block per run of equal ids adds its dout rows in token order. */
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"

template <typename T, int N> struct alignas(sizeof(T) * N) vec_t { T v[N]; };

template <typename T, typename I, int N>
static __global__ void embedding_fwd_kernel(T *out, const I *ids, const T *wte, const T *wpe,
                                            int64_t ntok, int64_t T_, int64_t C, int64_t V) {
    typedef vec_t<T, N> VT;
    int64_t cv = C / N, total = ntok * cv;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / cv, j = i % cv, v = (int64_t)ids[n];
        VT e;
        if (v >= 0 && v < V) {
            e = ((const VT *)(wte + v * C))[j];
        } else {
#pragma unroll
            for (int k = 0; k < N; k++)
                e.v[k] = stf<T>(0.0f);
        }
        if (wpe) {
            VT p = ((const VT *)(wpe + (n % T_) * C))[j];
#pragma unroll
            for (int k = 0; k < N; k++)
                e.v[k] = stf<T>(ldf(e.v[k]) + ldf(p.v[k]));
        }
        ((VT *)(out + n * C))[j] = e;
    }
}

/* keys = id (V for ids outside [0, V): sorted last, skipped), vals = token index. */
template <typename I>
static __global__ void embedding_keys_kernel(int *keys, int *vals, const I *ids, int n, int64_t V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t v = (int64_t)ids[i];
    keys[i] = v >= 0 && v < V ? (int)v : (int)V;
    vals[i] = i;
}

/* Block x = sorted position p; runs start where the key changes. Threads cover N-wide column
 * vectors (blockIdx.y * blockDim.x + threadIdx.x). */
template <typename TD, typename TW, int N>
static __global__ void embedding_wte_bwd_kernel(TW *dwte, const TD *dout, const int *keys,
                                                const int *vals, int n, int64_t C, int V) {
    int p = blockIdx.x, v = keys[p];
    if (v >= V || (p > 0 && keys[p - 1] == v)) return;
    int64_t j = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
    if (j >= C / N) return;
    vec_t<TW, N> w = ((const vec_t<TW, N> *)(dwte + v * C))[j];
    float acc[N];
#pragma unroll
    for (int k = 0; k < N; k++)
        acc[k] = ldf(w.v[k]);
    for (int q = p; q < n && keys[q] == v; q++) {
        vec_t<TD, N> d = ((const vec_t<TD, N> *)(dout + (int64_t)vals[q] * C))[j];
#pragma unroll
        for (int k = 0; k < N; k++)
            acc[k] += ldf(d.v[k]);
    }
#pragma unroll
    for (int k = 0; k < N; k++)
        w.v[k] = stf<TW>(acc[k]);
    ((vec_t<TW, N> *)(dwte + v * C))[j] = w;
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
        for (int64_t b = 0; b < B; b++) {
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
                     const mt_tensor *wpe, mt_stream stream) {
    int64_t ntok = mt_tensor_numel(ids), T_ = ids->shape[ids->ndim - 1], C = wte->shape[1];
    const int N = 16 / sizeof(T);
    int vec = C % N == 0 && aligned16(out->data) && aligned16(wte->data) &&
              (!wpe || aligned16(wpe->data));
    int64_t total = ntok * (vec ? C / N : C);
    unsigned grid = mt_grid_1d(total, 256);
    const T *pe = wpe ? (const T *)wpe->data : nullptr;
    if (vec)
        embedding_fwd_kernel<T, I, N>
            <<<grid, 256, 0, stream>>>((T *)out->data, (const I *)ids->data, (const T *)wte->data,
                                       pe, ntok, T_, C, wte->shape[0]);
    else
        embedding_fwd_kernel<T, I, 1>
            <<<grid, 256, 0, stream>>>((T *)out->data, (const I *)ids->data, (const T *)wte->data,
                                       pe, ntok, T_, C, wte->shape[0]);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status embedding_fwd_cuda(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                                        const mt_tensor *wpe, mt_stream stream) {
    if (mt_tensor_numel(ids) == 0 || wte->shape[1] == 0) return MT_OK;
    if (ids->dtype == MT_I64)
        MT_DISPATCH_FLOAT(out->dtype, T, return fwd<T, int64_t>(out, ids, wte, wpe, stream));
    else
        MT_DISPATCH_FLOAT(out->dtype, T, return fwd<T, int32_t>(out, ids, wte, wpe, stream));
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
    size_t temp = 0;
    MT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const int *)nullptr, (int *)nullptr,
                                                (const int *)nullptr, (int *)nullptr, (int)n, 0,
                                                key_bits(V)));
    *bytes = 4 * align256((size_t)n * sizeof(int)) + align256(temp);
    return MT_OK;
}

template <typename TD, typename TW, typename I>
static mt_status bwd(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout, const mt_tensor *ids,
                     void *ws, size_t ws_bytes, mt_stream stream) {
    int64_t n = mt_tensor_numel(ids), T_ = ids->shape[ids->ndim - 1], C = dwte->shape[1];
    int64_t V = dwte->shape[0];
    size_t need;
    MT_TRY(embedding_bwd_cuda_workspace(n, V, &need));
    size_t part = align256((size_t)n * sizeof(int)), temp = ws_bytes - 4 * part;
    char *w = (char *)ws;
    int *kin = (int *)w, *vin = (int *)(w + part), *kout = (int *)(w + 2 * part),
        *vout = (int *)(w + 3 * part);
    embedding_keys_kernel<I>
        <<<mt_grid_1d(n, 256), 256, 0, stream>>>(kin, vin, (const I *)ids->data, (int)n, V);
    MT_CUDA_CHECK_LAUNCH();
    MT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(w + 4 * part, temp, kin, kout, vin, vout, (int)n, 0,
                                                key_bits(V), stream));
    const int N = 16 / sizeof(TD);
    size_t wal = sizeof(TW) * N; /* f32 grads of bf16 dout: 32-byte vectors */
    int vec = C % N == 0 && aligned16(dout->data) && (uintptr_t)dwte->data % wal == 0 &&
              (!dwpe || (uintptr_t)dwpe->data % wal == 0);
    int64_t cv = vec ? C / N : C;
    int threads = 32;
    while (threads < cv && threads < 256)
        threads *= 2;
    dim3 grid((unsigned)n, (unsigned)((cv + threads - 1) / threads));
    const TD *d = (const TD *)dout->data;
    if (vec)
        embedding_wte_bwd_kernel<TD, TW, N>
            <<<grid, threads, 0, stream>>>((TW *)dwte->data, d, kout, vout, (int)n, C, (int)V);
    else
        embedding_wte_bwd_kernel<TD, TW, 1>
            <<<grid, threads, 0, stream>>>((TW *)dwte->data, d, kout, vout, (int)n, C, (int)V);
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
                         const mt_tensor *ids, void *ws, size_t ws_bytes, mt_stream stream) {
    if (ids->dtype == MT_I64)
        return bwd<TD, TW, int64_t>(dwte, dwpe, dout, ids, ws, ws_bytes, stream);
    return bwd<TD, TW, int32_t>(dwte, dwpe, dout, ids, ws, ws_bytes, stream);
}

extern "C" mt_status embedding_bwd_cuda(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                                        const mt_tensor *ids, void *ws, size_t ws_bytes,
                                        mt_stream stream) {
    if (mt_tensor_numel(ids) == 0 || dwte->shape[1] == 0) return MT_OK;
    if (dwte->dtype == MT_F32)
        MT_DISPATCH_FLOAT(dout->dtype, TD,
                          return bwd_ids<TD, float>(dwte, dwpe, dout, ids, ws, ws_bytes, stream));
    else
        MT_DISPATCH_FLOAT(dout->dtype, TD,
                          return bwd_ids<TD, TD>(dwte, dwpe, dout, ids, ws, ws_bytes, stream));
    return MT_OK;
}
