/* Private: element access for the CPU references (any float dtype, (B,T,H,D) strided views). */
#ifndef MT_ATTN_CPU_UTIL_H
#define MT_ATTN_CPU_UTIL_H

#include "../attn_impl.h"

static inline int64_t at(const mt_tensor *t, int64_t b, int64_t i, int64_t h) {
    return b * t->stride[0] + i * t->stride[1] + h * t->stride[2];
}

static inline double ld(const mt_tensor *t, int64_t off) {
    switch (t->dtype) {
    case MT_BF16:
        return mt_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case MT_F16:
        return mt_f16_to_f32(((const uint16_t *)t->data)[off]);
    default:
        return ((const float *)t->data)[off];
    }
}

static inline void st(mt_tensor *t, int64_t off, double v) {
    switch (t->dtype) {
    case MT_BF16:
        ((uint16_t *)t->data)[off] = mt_f32_to_bf16((float)v);
        break;
    case MT_F16:
        ((uint16_t *)t->data)[off] = mt_f32_to_f16((float)v);
        break;
    default:
        ((float *)t->data)[off] = (float)v;
    }
}

/* scale * q[b,i,h,:] . k[b,j,hk,:] in fp64 */
static inline double score(const attn_shape *s, const mt_tensor *q, const mt_tensor *k, int64_t b,
                           int64_t i, int64_t h, int64_t j, int64_t hk) {
    int64_t qo = at(q, b, i, h), ko = at(k, b, j, hk);
    double acc = 0.0;
    for (int64_t d = 0; d < s->D; d++)
        acc += ld(q, qo + d) * ld(k, ko + d);
    return acc * s->scale;
}

#endif /* MT_ATTN_CPU_UTIL_H */
