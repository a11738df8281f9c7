/* For the CUDA sources of libraries built on mt-tensor: fp32 loads and stores of f32, bf16 and
 * f16 elements (one rounding on store) and a switch over the float dtypes. Include only from CUDA
 * (.cu) files. */
#ifndef MT_TENSOR_CUDA_CUH
#define MT_TENSOR_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mt/tensor.h>

template <typename T> struct mt_cuda_t;
template <> struct mt_cuda_t<float> {
    static __device__ __forceinline__ float ld(float v) {
        return v;
    }
    static __device__ __forceinline__ float st(float v) {
        return v;
    }
};
template <> struct mt_cuda_t<__nv_bfloat16> {
    // why: exact like __bfloat162float, but plain C (its inline asm pins where the compiler puts it)
    static __device__ __forceinline__ float ld(__nv_bfloat16 v) {
        return __uint_as_float((unsigned)__bfloat16_as_ushort(v) << 16);
    }
    static __device__ __forceinline__ __nv_bfloat16 st(float v) {
        return __float2bfloat16_rn(v);
    }
};
template <> struct mt_cuda_t<__half> {
    static __device__ __forceinline__ float ld(__half v) {
        return __half2float(v);
    }
    static __device__ __forceinline__ __half st(float v) {
        return __float2half_rn(v);
    }
};

template <typename T> __device__ __forceinline__ float ldf(T v) {
    return mt_cuda_t<T>::ld(v);
}
template <typename T> __device__ __forceinline__ T stf(float v) {
    return mt_cuda_t<T>::st(v);
}

/* Calls F<T>() with T the C++ type of float dtype `dt`. */
#define MT_DISPATCH_FLOAT(dt, T, ...)                                           \
    do {                                                                        \
        switch (dt) {                                                           \
        case MT_F32: {                                                          \
            typedef float T;                                                    \
            __VA_ARGS__;                                                        \
        } break;                                                                \
        case MT_BF16: {                                                         \
            typedef __nv_bfloat16 T;                                            \
            __VA_ARGS__;                                                        \
        } break;                                                                \
        case MT_F16: {                                                          \
            typedef __half T;                                                   \
            __VA_ARGS__;                                                        \
        } break;                                                                \
        default:                                                                \
            return MT_ERROR(MT_ERR_UNSUPPORTED, "dtype %s", mt_dtype_name(dt)); \
        }                                                                       \
    } while (0)

#endif /* MT_TENSOR_CUDA_CUH */
