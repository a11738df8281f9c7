/* Softmax CUDA kernels: 16-byte loads, fp32. Forward of rows up to 256 x 8 vectors: the row
 * stays in registers (one read, one write), one warp per row up to 32 x 8 vectors, else one block;
 * wider rows: one block, online max/sum, then one pass that writes the result (rows stay in L2
 * between the two reads). */
#include "common.cuh"

static __device__ float block_sum(float v) {
    __shared__ float sv[32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads();
    if (threadIdx.x % 32 == 0) sv[w] = v;
    __syncthreads();
    v = 0.0f;
    for (int i = 0; i < nw; i++)
        v += sv[i];
    return v;
}

template <typename T, int N>
static __global__ void softmax_fwd_kernel(T *out, const T *x, int64_t C) {
    typedef vec_t<T, N> V;
    const V *xr = (const V *)(x + blockIdx.x * C);
    V *orow = (V *)(out + blockIdx.x * C);
    int64_t nv = C / N;
    float m = -INFINITY, s = 0.0f;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        V p = xr[i];
        float f[N], vm = -INFINITY, add = 0.0f;
#pragma unroll
        for (int k = 0; k < N; k++)
            f[k] = ldf(p.v[k]), vm = fmaxf(vm, f[k]);
        float M = fmaxf(m, vm);
        if (M == -INFINITY) continue; // why: all -inf so far (masked); exp(-inf - -inf) is NaN
#pragma unroll
        for (int k = 0; k < N; k++)
            add += __expf(f[k] - M);
        s = s * exp_scale(m, M) + add;
        m = M;
    }
    block_max_sum(m, s);
    float inv = 1.0f / s;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        V p = xr[i];
#pragma unroll
        for (int k = 0; k < N; k++)
            p.v[k] = stf<T>(__expf(ldf(p.v[k]) - m) * inv);
        orow[i] = p;
    }
}

/* Rows of up to 32 NV vectors: one warp per row (8 rows per block), the row in registers (lane l
 * holds vectors l + 32 i), shuffle-only max and sum. */
template <typename T, int N, int NV>
static __global__ void __launch_bounds__(256)
    softmax_fwd_warp_kernel(T *out, const T *x, int C, int64_t rows) {
    typedef vec_t<T, N> V;
    int64_t r = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    if (r >= rows) return;
    const V *xr = (const V *)(x + r * C);
    V *orow = (V *)(out + r * C);
    int nv = C / N, lane = threadIdx.x % 32;
    float f[NV][N], m = -INFINITY, s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        V p;
        if (lane + 32 * i < nv) p = xr[lane + 32 * i];
#pragma unroll
        for (int k = 0; k < N; k++) {
            f[i][k] = lane + 32 * i < nv ? ldf(p.v[k]) : -INFINITY;
            m = fmaxf(m, f[i][k]);
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (m != -INFINITY) // why: all -inf (masked); exp(-inf - -inf) is NaN
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int k = 0; k < N; k++)
                s += __expf(f[i][k] - m);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    float inv = 1.0f / s;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        if (lane + 32 * i < nv) {
            V p;
#pragma unroll
            for (int k = 0; k < N; k++)
                p.v[k] = stf<T>(__expf(f[i][k] - m) * inv);
            orow[lane + 32 * i] = p;
        }
    }
}

/* The row in registers: thread t holds vectors t + blockDim.x * i, i < NV. */
template <typename T, int N, int NV>
static __global__ void __launch_bounds__(256) softmax_fwd_reg_kernel(T *out, const T *x, int C) {
    typedef vec_t<T, N> V;
    const V *xr = (const V *)(x + blockIdx.x * (int64_t)C);
    V *orow = (V *)(out + blockIdx.x * (int64_t)C);
    int nv = C / N;
    float f[NV][N], m = -INFINITY, s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int j = threadIdx.x + blockDim.x * i;
        V p;
        if (j < nv) p = xr[j];
#pragma unroll
        for (int k = 0; k < N; k++) {
            f[i][k] = j < nv ? ldf(p.v[k]) : -INFINITY;
            m = fmaxf(m, f[i][k]);
        }
    }
    if (m != -INFINITY) // why: all -inf (masked); exp(-inf - -inf) is NaN
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int k = 0; k < N; k++)
                s += __expf(f[i][k] - m);
    block_max_sum(m, s);
    float inv = 1.0f / s;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int j = threadIdx.x + blockDim.x * i;
        if (j < nv) {
            V p;
#pragma unroll
            for (int k = 0; k < N; k++)
                p.v[k] = stf<T>(__expf(f[i][k] - m) * inv);
            orow[j] = p;
        }
    }
}

template <typename T, int N>
static __global__ void softmax_bwd_kernel(T *dx, const T *y, const T *dy, int64_t C) {
    typedef vec_t<T, N> V;
    const V *yr = (const V *)(y + blockIdx.x * C), *dyr = (const V *)(dy + blockIdx.x * C);
    V *dxr = (V *)(dx + blockIdx.x * C);
    int64_t nv = C / N;
    float d = 0.0f;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        V a = yr[i], b = dyr[i];
#pragma unroll
        for (int k = 0; k < N; k++)
            d += ldf(a.v[k]) * ldf(b.v[k]);
    }
    d = block_sum(d);
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        V a = yr[i], b = dyr[i];
#pragma unroll
        for (int k = 0; k < N; k++)
            a.v[k] = stf<T>(ldf(a.v[k]) * (ldf(b.v[k]) - d));
        dxr[i] = a;
    }
}

static int row_threads(int64_t nv) {
    int t = 32;
    while (t < nv && t < 1024)
        t *= 2;
    return t;
}

template <typename T>
static mt_status launch(mt_tensor *out, const mt_tensor *x, const mt_tensor *dy, int64_t rows,
                        int64_t C, mt_stream stream) {
    const int N = 16 / sizeof(T);
    int vec = C % N == 0 && (uintptr_t)out->data % 16 == 0 && (uintptr_t)x->data % 16 == 0 &&
              (!dy || (uintptr_t)dy->data % 16 == 0);
    int threads = row_threads(vec ? C / N : C);
    int64_t nv = C / N;
    if (!dy && vec && nv <= 32 * 8) { /* one warp per row, NV vectors per lane */
        int NV = nv <= 32 ? 1 : nv <= 64 ? 2 : nv <= 128 ? 4 : 8;
        T *o = (T *)out->data;
        const T *a = (const T *)x->data;
        unsigned g = (unsigned)((rows + 7) / 8);
        if (NV == 1) softmax_fwd_warp_kernel<T, N, 1><<<g, 256, 0, stream>>>(o, a, (int)C, rows);
        if (NV == 2) softmax_fwd_warp_kernel<T, N, 2><<<g, 256, 0, stream>>>(o, a, (int)C, rows);
        if (NV == 4) softmax_fwd_warp_kernel<T, N, 4><<<g, 256, 0, stream>>>(o, a, (int)C, rows);
        if (NV == 8) softmax_fwd_warp_kernel<T, N, 8><<<g, 256, 0, stream>>>(o, a, (int)C, rows);
        MT_CUDA_CHECK_LAUNCH();
        return MT_OK;
    }
    if (!dy && vec && nv <= 256 * 8) { /* the row in registers: NV vectors per thread */
        int NV = nv <= 128 ? 1 : nv <= 256 ? 2 : nv <= 512 ? 4 : 8;
        int t = (int)((nv + NV - 1) / NV + 31) / 32 * 32;
        T *o = (T *)out->data;
        const T *a = (const T *)x->data;
        for (int64_t r0 = 0; r0 < rows; r0 += 65535LL * 32) {
            unsigned g = (unsigned)(rows - r0 < 65535LL * 32 ? rows - r0 : 65535LL * 32);
            int64_t off = r0 * C;
            if (NV == 1)
                softmax_fwd_reg_kernel<T, N, 1><<<g, t, 0, stream>>>(o + off, a + off, (int)C);
            if (NV == 2)
                softmax_fwd_reg_kernel<T, N, 2><<<g, t, 0, stream>>>(o + off, a + off, (int)C);
            if (NV == 4)
                softmax_fwd_reg_kernel<T, N, 4><<<g, t, 0, stream>>>(o + off, a + off, (int)C);
            if (NV == 8)
                softmax_fwd_reg_kernel<T, N, 8><<<g, t, 0, stream>>>(o + off, a + off, (int)C);
            MT_CUDA_CHECK_LAUNCH();
        }
        return MT_OK;
    }
    T *o = (T *)out->data;
    const T *a = (const T *)x->data, *b = dy ? (const T *)dy->data : nullptr;
    for (int64_t r0 = 0; r0 < rows; r0 += 65535LL * 32) { // why: gridDim.x limit per launch
        unsigned g = (unsigned)(rows - r0 < 65535LL * 32 ? rows - r0 : 65535LL * 32);
        int64_t off = r0 * C;
        if (!dy && vec) softmax_fwd_kernel<T, N><<<g, threads, 0, stream>>>(o + off, a + off, C);
        if (!dy && !vec) softmax_fwd_kernel<T, 1><<<g, threads, 0, stream>>>(o + off, a + off, C);
        if (dy && vec)
            softmax_bwd_kernel<T, N><<<g, threads, 0, stream>>>(o + off, a + off, b + off, C);
        if (dy && !vec)
            softmax_bwd_kernel<T, 1><<<g, threads, 0, stream>>>(o + off, a + off, b + off, C);
        MT_CUDA_CHECK_LAUNCH();
    }
    return MT_OK;
}

extern "C" mt_status softmax_cuda(mt_tensor *out, const mt_tensor *x, const mt_tensor *dy,
                                  mt_stream stream) {
    int64_t C = x->shape[x->ndim - 1], rows = C ? mt_tensor_numel(x) / C : 0;
    if (rows == 0) return MT_OK;
    MT_DISPATCH_FLOAT(x->dtype, T, return launch<T>(out, x, dy, rows, C, stream));
    return MT_OK;
}
