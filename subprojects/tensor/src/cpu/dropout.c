/* Dropout CPU reference: the mask element by element, fp32 math, one rounding. */
#include "../ops_impl.h"

mt_status dropout_cpu(mt_tensor *out, const mt_tensor *x, const mt_tensor *resid,
                      const mt_dropout_config *cfg) {
    const int64_t n = mt_tensor_numel(x);
    const int64_t B = cfg->p > 0.0f ? cfg->sample->shape[0] : 1;
    const int64_t E = cfg->row ? cfg->row : n / B; /* the whole tensor's row */
    const int64_t *ids = cfg->p > 0.0f ? cfg->sample->data : NULL;
    const uint32_t thr = mt_dropout_threshold(cfg->p);
    const float scale = mt_dropout_scale(cfg->p);
    for (int64_t i = 0; i < n; i++) {
        const int64_t g = cfg->offset + i, b = g / E, e = g - b * E; /* in the whole tensor */
        float v = mt_load_f32(x->data, x->dtype, i);
        if (ids)
            v *= mt_philox_u32(cfg->seed, mt_dropout_stream(ids[b], cfg->site), (uint64_t)e) < thr
                     ? scale
                     : 0.0f;
        if (resid) v = mt_load_f32(resid->data, resid->dtype, i) + v;
        mt_store_f32(out->data, out->dtype, i, v);
    }
    return MT_OK;
}
