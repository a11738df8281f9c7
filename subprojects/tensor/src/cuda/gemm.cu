/* Bias gradient for nn.Linear's backward: dbias(N) = sum over rows of dy(rows, N), in two fixed-order
 * passes (per-row-group partials in the cuBLASLt workspace, then a sum over the groups): no atomics,
 * so the result is the same on every run. */
#include "common.cuh"

template <typename T, int W> struct alignas(sizeof(T) * W) bg_pack { T v[W]; };

/* partial[g][c] = sum over rows r = g, g + G, ... of dy[r][c]; W columns per thread. */
template <typename T, int W>
static __global__ void bias_grad_partial_kernel(float *partial, const T *dy, int64_t rows,
                                                int64_t N) {
    int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (c >= N) return;
    float acc[W];
#pragma unroll
    for (int j = 0; j < W; j++)
        acc[j] = 0.0f;
#pragma unroll 4
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        bg_pack<T, W> p = *reinterpret_cast<const bg_pack<T, W> *>(dy + r * N + c);
#pragma unroll
        for (int j = 0; j < W; j++)
            acc[j] += ldf(p.v[j]);
    }
#pragma unroll
    for (int j = 0; j < W; j++)
        partial[(int64_t)blockIdx.y * N + c + j] = acc[j];
}

/* dbias[c] (+)= sum over g of partial[g][c]: 32 columns per block, warp y adds groups y, y+32, ...,
 * then a fixed-order sum over the warps. */
template <typename TB>
static __global__ void bias_grad_finish_kernel(TB *dbias, const float *partial, int groups,
                                               int64_t N, int accumulate) {
    __shared__ float sm[32][33];
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float a = 0.0f;
    if (c < N)
        for (int g = threadIdx.y; g < groups; g += 32)
            a += partial[(int64_t)g * N + c];
    sm[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y != 0 || c >= N) return;
    for (int y = 1; y < 32; y++)
        a += sm[y][threadIdx.x];
    dbias[c] = stf<TB>(a + (accumulate ? ldf(dbias[c]) : 0.0f));
}

template <typename T>
static mt_status partial_launch(float *partial, const void *dy, int64_t rows, int64_t N, int groups,
                                mt_stream stream) {
    const int W = 16 / sizeof(T), block = 128;
    if (N % W == 0 && (uintptr_t)dy % 16 == 0) {
        dim3 grid((unsigned)((N / W + block - 1) / block), (unsigned)groups);
        bias_grad_partial_kernel<T, W><<<grid, block, 0, stream>>>(partial, (const T *)dy, rows, N);
    } else {
        dim3 grid((unsigned)((N + block - 1) / block), (unsigned)groups);
        bias_grad_partial_kernel<T, 1><<<grid, block, 0, stream>>>(partial, (const T *)dy, rows, N);
    }
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status bias_grad_launch(void *dbias, mt_dtype db_dtype, const void *dy,
                                      mt_dtype dy_dtype, int64_t rows, int64_t N, int accumulate,
                                      float *scratch, size_t scratch_bytes, mt_stream stream) {
    if (N == 0) return MT_OK;
    int64_t groups = (int64_t)(scratch_bytes / ((size_t)N * sizeof(float)));
    if (groups > 256) groups = 256;
    if (groups > rows) groups = rows;
    MT_REQUIRE(groups >= 1 || rows == 0, MT_ERR_UNSUPPORTED,
               "bias gradient: N=%lld columns do not fit the workspace", (long long)N);
    if (rows > 0) {
        if (dy_dtype == MT_F32)
            MT_TRY(partial_launch<float>(scratch, dy, rows, N, (int)groups, stream));
        else if (dy_dtype == MT_BF16)
            MT_TRY(partial_launch<__nv_bfloat16>(scratch, dy, rows, N, (int)groups, stream));
        else if (dy_dtype == MT_F16)
            MT_TRY(partial_launch<__half>(scratch, dy, rows, N, (int)groups, stream));
        else
            return MT_ERROR(MT_ERR_UNSUPPORTED, "bias gradient: dtype %s", mt_dtype_name(dy_dtype));
    }
    unsigned grid = (unsigned)((N + 31) / 32);
    if (db_dtype == MT_F32)
        bias_grad_finish_kernel<float><<<grid, dim3(32, 32), 0, stream>>>(
            (float *)dbias, scratch, (int)groups, N, accumulate);
    else if (db_dtype == MT_BF16)
        bias_grad_finish_kernel<__nv_bfloat16><<<grid, dim3(32, 32), 0, stream>>>(
            (__nv_bfloat16 *)dbias, scratch, (int)groups, N, accumulate);
    else
        bias_grad_finish_kernel<__half><<<grid, dim3(32, 32), 0, stream>>>(
            (__half *)dbias, scratch, (int)groups, N, accumulate);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}
