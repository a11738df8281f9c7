/* Bias gradient for nn.Linear's backward: dbias(N) = sum over rows of dy(rows, N), in two fixed-order
 * passes (per-row-group partials in the cuBLASLt workspace, then a sum over the groups): no atomics,
 * so the result is the same on every run. */
#include "common.cuh"

template <typename T, int W> struct alignas(sizeof(T) * W) bg_pack { T v[W]; };

/* partial[g][c] = sum over rows [g R, g R + R) of dy[r][c]. A block is 32 x 8 threads and 32 W
 * columns: thread (x, y) adds W columns from x W over rows y, y + 8, ... of the group; the 8 row
 * sums then meet in shared memory (fixed order) and each thread writes one column. */
template <typename T, int W>
static __global__ void __launch_bounds__(256)
    bias_grad_partial_kernel(float *partial, const T *dy, int64_t rows, int64_t N, int64_t R) {
    __shared__ float sm[8][32 * W];
    const int x = threadIdx.x, y = threadIdx.y;
    const int64_t c0 = (int64_t)blockIdx.x * 32 * W, c = c0 + x * W;
    const int64_t r0 = (int64_t)blockIdx.y * R, r1 = min(rows, r0 + R);
    float acc[W];
#pragma unroll
    for (int j = 0; j < W; j++)
        acc[j] = 0.0f;
    if (c < N) {
#pragma unroll 4
        for (int64_t r = r0 + y; r < r1; r += 8) {
            bg_pack<T, W> p = *reinterpret_cast<const bg_pack<T, W> *>(dy + r * N + c);
#pragma unroll
            for (int j = 0; j < W; j++)
                acc[j] += ldf(p.v[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < W; j++) /* column x W + j at j 32 + x: conflict-free */
        sm[y][j * 32 + x] = acc[j];
    __syncthreads();
    for (int q = y * 32 + x; q < 32 * W; q += 256) { /* column c0 + q */
        const int at = (q % W) * 32 + q / W;
        float s = 0.0f;
#pragma unroll
        for (int yy = 0; yy < 8; yy++)
            s += sm[yy][at];
        if (c0 + q < N) partial[(int64_t)blockIdx.y * N + c0 + q] = s;
    }
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

/* Row groups: about 1024 blocks in all (enough loads in flight to reach DRAM bandwidth), at least
 * 8 rows each, as many as the scratch holds; *groups is how many there are. */
template <typename T>
static mt_status partial_launch(float *partial, const void *dy, int64_t rows, int64_t N,
                                int64_t max_groups, int *groups, mt_stream stream) {
    const int W = 16 / sizeof(T);
    const bool vec = N % W == 0 && (uintptr_t)dy % 16 == 0;
    const int64_t bx = (N + 32 * (vec ? W : 1) - 1) / (32 * (vec ? W : 1));
    int64_t G = (1024 + bx - 1) / bx;
    G = G < (rows + 7) / 8 ? G : (rows + 7) / 8;
    G = G < max_groups ? G : max_groups;
    const int64_t R = (rows + G - 1) / G;
    G = (rows + R - 1) / R;
    *groups = (int)G;
    dim3 grid((unsigned)bx, (unsigned)G), block(32, 8);
    if (vec)
        bias_grad_partial_kernel<T, 16 / sizeof(T)>
            <<<grid, block, 0, stream>>>(partial, (const T *)dy, rows, N, R);
    else
        bias_grad_partial_kernel<T, 1>
            <<<grid, block, 0, stream>>>(partial, (const T *)dy, rows, N, R);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status bias_grad_launch(void *dbias, mt_dtype db_dtype, const void *dy,
                                      mt_dtype dy_dtype, int64_t rows, int64_t N, int accumulate,
                                      float *scratch, size_t scratch_bytes, mt_stream stream) {
    if (N == 0) return MT_OK;
    const int64_t max_groups = (int64_t)(scratch_bytes / ((size_t)N * sizeof(float)));
    MT_REQUIRE(max_groups >= 1 || rows == 0, MT_ERR_UNSUPPORTED,
               "bias gradient: N=%lld columns do not fit the workspace", (long long)N);
    int groups = 0;
    if (rows > 0) {
        if (dy_dtype == MT_F32)
            MT_TRY(partial_launch<float>(scratch, dy, rows, N, max_groups, &groups, stream));
        else if (dy_dtype == MT_BF16)
            MT_TRY(
                partial_launch<__nv_bfloat16>(scratch, dy, rows, N, max_groups, &groups, stream));
        else if (dy_dtype == MT_F16)
            MT_TRY(partial_launch<__half>(scratch, dy, rows, N, max_groups, &groups, stream));
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
