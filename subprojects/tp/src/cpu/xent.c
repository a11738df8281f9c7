/* The vocab-parallel cross-entropy's passes, CPU reference: fp32, columns in order. */
#include <math.h>

#include "../tp_impl.h"

static float ld(const mt_tensor *t, int64_t i) {
    return mt_load_f32(t->data, t->dtype, i);
}

static int64_t target_of(const mt_tensor *t, int64_t n) {
    return t->dtype == MT_I64 ? ((const int64_t *)t->data)[n] : ((const int32_t *)t->data)[n];
}

mt_status tp_xent_max_cpu(mt_tensor *stats, const mt_tensor *logits, int64_t v0, int64_t V) {
    int64_t N = logits->shape[0], C = logits->shape[1], R = tp_real_cols(logits, v0, V);
    float *mx = stats->data;
    for (int64_t n = 0; n < N; n++) {
        float m = -INFINITY;
        for (int64_t c = 0; c < R; c++)
            m = fmaxf(m, ld(logits, n * C + c));
        mx[n] = m;
    }
    return MT_OK;
}

mt_status tp_xent_sum_cpu(mt_tensor *stats, const mt_tensor *logits, const mt_tensor *targets,
                          int64_t v0, int64_t V, int64_t ignore_index) {
    int64_t N = logits->shape[0], C = logits->shape[1], R = tp_real_cols(logits, v0, V);
    float *mx = stats->data, *sum = mx + N, *tgt = sum + N;
    for (int64_t n = 0; n < N; n++) {
        int64_t t = target_of(targets, n);
        MT_REQUIRE(t == ignore_index || (t >= 0 && t < V), MT_ERR_INVALID_ARG,
                   "targets[%lld] = %lld is outside [0, %lld)", (long long)n, (long long)t,
                   (long long)V);
        float s = 0.0f;
        for (int64_t c = 0; c < R; c++)
            s += expf(ld(logits, n * C + c) - mx[n]);
        sum[n] = s;
        tgt[n] = t != ignore_index && t >= v0 && t - v0 < R ? ld(logits, n * C + (t - v0)) : 0.0f;
    }
    return MT_OK;
}

mt_status tp_xent_finish_cpu(mt_tensor *losses, mt_tensor *dlogits, const mt_tensor *logits,
                             const mt_tensor *targets, const mt_tensor *dloss,
                             const mt_tensor *stats, int64_t v0, int64_t V, int64_t ignore_index) {
    int64_t N = logits->shape[0], C = logits->shape[1], R = tp_real_cols(logits, v0, V);
    const float *mx = stats->data, *sum = mx + N, *tgt = sum + N;
    float *loss = losses->data;
    for (int64_t n = 0; n < N; n++) {
        int64_t t = target_of(targets, n);
        int ignored = t == ignore_index;
        loss[n] = ignored ? 0.0f : logf(sum[n]) + mx[n] - tgt[n];
        if (!dlogits) continue;
        float g = ignored ? 0.0f : ((const float *)dloss->data)[n];
        for (int64_t c = 0; c < C; c++) {
            float d = 0.0f;
            if (c < R && !ignored) {
                float p = expf(ld(logits, n * C + c) - mx[n]) / sum[n];
                d = (p - (v0 + c == t ? 1.0f : 0.0f)) * g;
            }
            mt_store_f32(dlogits->data, dlogits->dtype, n * C + c, d);
        }
    }
    return MT_OK;
}
