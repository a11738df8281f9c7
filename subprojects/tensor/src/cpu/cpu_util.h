/* Private: element load/store as float for the CPU references (any float dtype). */
#ifndef MT_TENSOR_CPU_UTIL_H
#define MT_TENSOR_CPU_UTIL_H

#include <mt/tensor.h>

static inline float ld_f32(const void *p, mt_dtype dt, int64_t i) {
    switch (dt) {
    case MT_BF16:
        return mt_bf16_to_f32(((const uint16_t *)p)[i]);
    case MT_F16:
        return mt_f16_to_f32(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

static inline void st_f32(void *p, mt_dtype dt, int64_t i, float v) {
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

#endif /* MT_TENSOR_CPU_UTIL_H */
