/* Elementwise CPU reference: fp32 math, one rounding on store. */
#include "../ops_impl.h"

mt_status elementwise_cpu(ew_op op, mt_tensor *out, const mt_tensor *a, const mt_tensor *b,
                          float alpha) {
    int64_t n = mt_tensor_numel(out);
    for (int64_t i = 0; i < n; i++) {
        float v = 0.0f;
        switch (op) {
        case EW_ADD:
            v = mt_load_f32(a->data, a->dtype, i) + mt_load_f32(b->data, b->dtype, i);
            break;
        case EW_SCALE:
            v = alpha * mt_load_f32(a->data, a->dtype, i);
            break;
        case EW_AXPY:
            v = mt_load_f32(out->data, out->dtype, i) + alpha * mt_load_f32(a->data, a->dtype, i);
            break;
        case EW_CAST:
            v = mt_load_f32(a->data, a->dtype, i);
            break;
        case EW_FILL:
            v = alpha;
            break;
        }
        mt_store_f32(out->data, out->dtype, i, v);
    }
    return MT_OK;
}

mt_status fill_normal_cpu(mt_tensor *x, float mean, float std, uint64_t seed, uint64_t stream_id) {
    int64_t n = mt_tensor_numel(x);
    for (int64_t i = 0; i < n; i++)
        mt_store_f32(x->data, x->dtype, i,
                     mean + std * mt_philox_normal(seed, stream_id, (uint64_t)i));
    return MT_OK;
}
