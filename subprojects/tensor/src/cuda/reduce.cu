/* Deterministic reduction CUDA kernels: a fixed grid (a function of the size and, for column sums,
 * of the device's resident blocks) writes per-block partials to the workspace, then a second
 * kernel adds them in order. No atomics. */
#include "common.cuh"

static __device__ double term(float v, mt_reduce_op op) {
    return op == MT_REDUCE_SUM          ? (double)v
           : op == MT_REDUCE_COUNT_ZERO ? (double)(v == 0.0f)
                                        : (double)v * (double)v;
}

/* Sum over a block of 256 threads in a fixed tree order; thread 0 gets the total. */
static __device__ double block_sum_d(double v) {
    __shared__ double sv[32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        v = 0.0;
        for (int i = 0; i < (int)blockDim.x / 32; i++)
            v += sv[i];
    }
    return v;
}

template <typename T, int N>
static __global__ void reduce_partial_kernel(double *part, const T *x, int64_t n, mt_reduce_op op) {
    typedef vec_t<T, N> VT;
    int64_t nv = n / N;
    double acc = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
         i += (int64_t)gridDim.x * blockDim.x) {
        VT p = ((const VT *)x)[i];
#pragma unroll
        for (int k = 0; k < N; k++)
            acc += term(ldf(p.v[k]), op);
    }
    if (blockIdx.x == 0 && threadIdx.x < n - nv * N) acc += term(ldf(x[nv * N + threadIdx.x]), op);
    acc = block_sum_d(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

static __global__ void reduce_final_kernel(void *out, int out_i64, const double *part, int nb,
                                           mt_reduce_op op) {
    double v = 0.0;
    for (int i = threadIdx.x; i < nb; i += blockDim.x)
        v += part[i];
    v = block_sum_d(v);
    if (threadIdx.x != 0) return;
    if (op == MT_REDUCE_NORM2) v = sqrt(v);
    if (out_i64)
        *(long long *)out = (long long)v;
    else
        *(float *)out = (float)v;
}

/* Column sums: block (32, 8) covers 32 column vectors of N; blockIdx.y is a chunk of `rpc` rows. */
template <typename T, int N>
static __global__ void colsum_partial_kernel(float *part, const T *x, int64_t R, int64_t C,
                                             int64_t rpc) {
    __shared__ float sh[8][32][N + 1];
    int64_t j = blockIdx.x * 32 + threadIdx.x, cv = C / N;
    int64_t r0 = blockIdx.y * rpc, r1 = r0 + rpc < R ? r0 + rpc : R;
    float acc[N];
#pragma unroll
    for (int k = 0; k < N; k++)
        acc[k] = 0.0f;
    const int U = 8; /* rows in flight per thread; then added in row order */
    if (j < cv)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8 * U) {
            vec_t<T, N> p[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (r + 8 * u < r1) p[u] = ((const vec_t<T, N> *)(x + (r + 8 * u) * C))[j];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (r + 8 * u < r1)
#pragma unroll
                    for (int k = 0; k < N; k++)
                        acc[k] += ldf(p[u].v[k]);
        }
#pragma unroll
    for (int k = 0; k < N; k++)
        sh[threadIdx.y][threadIdx.x][k] = acc[k];
    __syncthreads();
    if (threadIdx.y != 0 || j >= cv) return;
    for (int y = 1; y < 8; y++)
#pragma unroll
        for (int k = 0; k < N; k++)
            acc[k] += sh[y][threadIdx.x][k];
#pragma unroll
    for (int k = 0; k < N; k++)
        part[blockIdx.y * C + j * N + k] = acc[k];
}

/* out[c] = (accumulate ? out[c] : 0) + sum over chunks of part[g][c]: block (32, 32). */
template <typename TO>
static __global__ void colsum_final_kernel(TO *out, const float *part, int64_t nchunks, int64_t C,
                                           int accumulate) {
    __shared__ float sh[32][33];
    int64_t c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    for (int64_t g = threadIdx.y; c < C && g < nchunks; g += 32)
        acc += part[g * C + c];
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    acc = accumulate ? ldf(out[c]) : 0.0f;
    for (int y = 0; y < 32; y++)
        acc += sh[y][threadIdx.x];
    out[c] = stf<TO>(acc);
}

template <typename T>
static mt_status reduce_launch(mt_tensor *out, const mt_tensor *x, mt_reduce_op op, double *part,
                               mt_stream stream) {
    int64_t n = mt_tensor_numel(x), nb = reduce_blocks(n);
    const int N = 16 / sizeof(T);
    if ((uintptr_t)x->data % 16 == 0)
        reduce_partial_kernel<T, N>
            <<<(unsigned)nb, 256, 0, stream>>>(part, (const T *)x->data, n, op);
    else
        reduce_partial_kernel<T, 1>
            <<<(unsigned)nb, 256, 0, stream>>>(part, (const T *)x->data, n, op);
    MT_CUDA_CHECK_LAUNCH();
    reduce_final_kernel<<<1, 256, 0, stream>>>(out->data, out->dtype == MT_I64, part, (int)nb, op);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status reduce_cuda(mt_tensor *out, const mt_tensor *x, mt_reduce_op op, void *ws,
                                 mt_stream stream) {
    MT_DISPATCH_FLOAT(x->dtype, T, return reduce_launch<T>(out, x, op, (double *)ws, stream));
    return MT_OK;
}

template <typename T, typename TO>
static mt_status colsum_launch(mt_tensor *out, const mt_tensor *x, int accumulate, float *part,
                               mt_stream stream) {
    int64_t C = x->shape[x->ndim - 1], R = C ? mt_tensor_numel(x) / C : 0, rpc;
    if (C == 0) return MT_OK;
    int64_t nchunks = colsum_chunks(R, &rpc);
    const int N = 16 / sizeof(T);
    int vec = C % N == 0 && (uintptr_t)x->data % 16 == 0;
    int64_t cv = vec ? C / N : C, cb = (cv + 31) / 32;
    auto kernel = vec ? colsum_partial_kernel<T, N> : colsum_partial_kernel<T, 1>;
    int sms = 0, per_sm = 0;
    MT_TRY(mt_cuda_attr(cudaDevAttrMultiProcessorCount, &sms));
    MT_TRY(mt_cuda_occupancy(kernel, 256, 0, &per_sm));
    // why: at most one wave of blocks (longer chunks): a ragged second wave idles most SMs
    if (cb * nchunks > (int64_t)sms * per_sm && (int64_t)sms * per_sm >= cb) {
        int64_t want = (int64_t)sms * per_sm / cb;
        rpc = (R + want - 1) / want;
        nchunks = (R + rpc - 1) / rpc;
    }
    dim3 grid((unsigned)cb, (unsigned)nchunks);
    kernel<<<grid, dim3(32, 8), 0, stream>>>(part, (const T *)x->data, R, C, rpc);
    MT_CUDA_CHECK_LAUNCH();
    colsum_final_kernel<TO><<<(unsigned)((C + 31) / 32), dim3(32, 32), 0, stream>>>(
        (TO *)out->data, part, nchunks, C, accumulate);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status colsum_cuda(mt_tensor *out, const mt_tensor *x, int accumulate, void *ws,
                                 mt_stream stream) {
    if (out->dtype == MT_F32)
        MT_DISPATCH_FLOAT(x->dtype, T,
                          return colsum_launch<T, float>(out, x, accumulate, (float *)ws, stream));
    else
        MT_DISPATCH_FLOAT(x->dtype, T,
                          return colsum_launch<T, T>(out, x, accumulate, (float *)ws, stream));
    return MT_OK;
}
