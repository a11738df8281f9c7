/* Element types and the bf16/f16 <-> f32 conversions shared by CPU and CUDA code (round to nearest
 * even, as PyTorch and the CUDA intrinsics do). */
#ifndef MT_TENSOR_DTYPE_H
#define MT_TENSOR_DTYPE_H

#include <mt/core.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mt_dtype {
    MT_F32 = 0,
    MT_BF16,
    MT_F16,
    MT_I32,
    MT_I64,
    MT_U16,
    MT_U8,
    MT_DTYPE_COUNT
} mt_dtype;

/* Bytes per element; 0 for an invalid dtype. */
MT_API size_t mt_dtype_size(mt_dtype dt);
/* Short name: "f32", "bf16", ... ("?" when invalid). */
MT_API const char *mt_dtype_name(mt_dtype dt);
/* safetensors names: "F32", "BF16", "F16", "I32", "I64", "U16", "U8". */
MT_API const char *mt_dtype_st_name(mt_dtype dt);
/* Parses either spelling (case-insensitive); MT_ERR_UNSUPPORTED for types we do not handle. */
MT_API mt_status mt_dtype_parse(const char *name, mt_dtype *out);
/* 1 for f32/bf16/f16. */
MT_API int mt_dtype_is_float(mt_dtype dt);

typedef uint16_t mt_bf16_bits; /* raw bfloat16 */
typedef uint16_t mt_f16_bits;  /* raw IEEE half */

MT_HOSTDEV static inline uint32_t mt_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
MT_HOSTDEV static inline float mt_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
MT_HOSTDEV static inline float mt_bf16_to_f32(mt_bf16_bits h) {
    return mt_bits_f32((uint32_t)h << 16);
}
MT_HOSTDEV static inline mt_bf16_bits mt_f32_to_bf16(float f) {
    uint32_t u = mt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (mt_bf16_bits)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
    return (mt_bf16_bits)(u >> 16);
}
MT_HOSTDEV static inline float mt_f16_to_f32(mt_f16_bits h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    if (exp == 31) return mt_bits_f32(sign | 0x7f800000u | (man << 13));
    return mt_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
MT_HOSTDEV static inline mt_f16_bits mt_f32_to_f16(float f) {
    uint32_t u = mt_f32_bits(f), sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (mt_f16_bits)(sign | 0x7e00u);  /* NaN */
    if (a >= 0x477ff000u) return (mt_f16_bits)(sign | 0x7c00u); /* overflow -> inf */
    if (a < 0x38800000u) {                                      /* subnormal or zero */
        float v = mt_bits_f32(a) * 16777216.0f;                 /* scale by 2^24 */
        uint32_t m = (uint32_t)v;
        float frac = v - (float)m;
        if (frac > 0.5f || (frac == 0.5f && (m & 1))) m++; /* nearest even */
        return (mt_f16_bits)(sign | m);
    }
    uint32_t e = ((a >> 23) - 112u) << 10, m = (a >> 13) & 0x3ffu;
    uint32_t h = e | m, rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++; /* nearest even, may carry */
    return (mt_f16_bits)(sign | h);
}

/* Element i of a float buffer of dtype dt (f32, bf16 or f16) as a float, and a float stored there
 * (one rounding to nearest even): the CPU references' element access. */
static inline float mt_load_f32(const void *p, mt_dtype dt, int64_t i) {
    switch (dt) {
    case MT_BF16:
        return mt_bf16_to_f32(((const uint16_t *)p)[i]);
    case MT_F16:
        return mt_f16_to_f32(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}
static inline void mt_store_f32(void *p, mt_dtype dt, int64_t i, float v) {
    switch (dt) {
    case MT_BF16:
        ((uint16_t *)p)[i] = mt_f32_to_bf16(v);
        break;
    case MT_F16:
        ((uint16_t *)p)[i] = mt_f32_to_f16(v);
        break;
    default:
        ((float *)p)[i] = v;
    }
}

#ifdef __cplusplus
}
#endif

#endif /* MT_TENSOR_DTYPE_H */
