/* Strided copy on CUDA: one element (or one 16-byte pack of a contiguous innermost dim) a
 * thread. */
#include <string.h>

#include "common.cuh"

template <typename E>
static __global__ void copy_kernel(E *dst, const E *src, int64_t n, int64_t s1, int64_t s2,
                                   int64_t s3, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                                   int64_t r0, int64_t r1, int64_t r2, int64_t r3) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t d = i % s3, c = i / s3 % s2, b = i / (s3 * s2) % s1, a = i / (s3 * s2 * s1);
        dst[a * d0 + b * d1 + c * d2 + d * d3] = src[a * r0 + b * r1 + c * r2 + d * r3];
    }
}

extern "C" mt_status copy_cuda(mt_tensor *dst, const mt_tensor *src, mt_stream stream) {
    int64_t sh[4], ds[4], ss[4], n = mt_tensor_numel(dst);
    copy_dims4(dst, sh, ds);
    copy_dims4(src, sh, ss);
    size_t es = mt_dtype_size(dst->dtype);
    /* 16-byte elements when the innermost dim is contiguous on both sides and every row starts
     * 16-byte aligned (a head of 64 bf16 values: 8 loads instead of 64) */
    int wide = ds[3] == 1 && ss[3] == 1 && sh[3] * es % 16 == 0 && (uintptr_t)dst->data % 16 == 0 &&
               (uintptr_t)src->data % 16 == 0;
    for (int d = 0; d < 3; d++)
        wide = wide && ds[d] * es % 16 == 0 && ss[d] * es % 16 == 0;
    if (wide) {
        for (int d = 0; d < 3; d++)
            ds[d] = ds[d] * (int64_t)es / 16, ss[d] = ss[d] * (int64_t)es / 16;
        sh[3] = sh[3] * (int64_t)es / 16;
        n = sh[0] * sh[1] * sh[2] * sh[3];
        es = 16;
    }
    unsigned g = mt_grid_1d(n, 256);
    switch (es) {
#define CASE(BYTES, E)                                                                         \
    case BYTES:                                                                                \
        copy_kernel<E><<<g, 256, 0, stream>>>((E *)dst->data, (const E *)src->data, n, sh[1],  \
                                              sh[2], sh[3], ds[0], ds[1], ds[2], ds[3], ss[0], \
                                              ss[1], ss[2], ss[3]);                            \
        break;
        CASE(1, uint8_t)
        CASE(2, uint16_t)
        CASE(4, uint32_t)
        CASE(8, uint64_t)
        CASE(16, uint4)
#undef CASE
    default:
        return MT_ERROR(MT_ERR_UNSUPPORTED, "copy of %zu-byte elements", mt_dtype_size(dst->dtype));
    }
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

struct gemm_ptrs {
    const void *p[GEMM_PTRS_MAX];
};

static __global__ void gemm_ptrs_kernel(void **dst, gemm_ptrs src, int n) {
    if ((int)threadIdx.x < n) dst[threadIdx.x] = (void *)src.p[threadIdx.x];
}

extern "C" mt_status gemm_ptrs_cuda(void **dst, const void *const *src, int n, mt_stream stream) {
    MT_REQUIRE(n > 0 && n <= GEMM_PTRS_MAX, MT_ERR_INVALID_ARG, "gemm_ptrs: %d pointers", n);
    gemm_ptrs a;
    memcpy(a.p, src, (size_t)n * sizeof *src);
    gemm_ptrs_kernel<<<1, GEMM_PTRS_MAX, 0, (cudaStream_t)stream>>>(dst, a, n);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}
