/* Softmax cross-entropy CPU reference: per row, max and sum over the first V columns (fp64), the
 * loss lse - x[target], then the gradient written over the row (in-place safe: read first). */
#include <math.h>

#include "../ops_impl.h"

static int64_t ld_id(const mt_tensor *t, int64_t i) {
    return t->dtype == MT_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* *count = the targets that are not ignore_index; with V > 0 each must lie in [0, V). */
static mt_status count_targets(const mt_tensor *targets, int64_t ignore_index, int64_t V,
                               int64_t *count) {
    int64_t N = mt_tensor_numel(targets);
    *count = 0;
    for (int64_t n = 0; n < N; n++) {
        int64_t t = ld_id(targets, n);
        if (t == ignore_index) continue;
        MT_REQUIRE(V <= 0 || (t >= 0 && t < V), MT_ERR_INVALID_ARG,
                   "targets[%lld] = %lld is outside [0, %lld)", (long long)n, (long long)t,
                   (long long)V);
        (*count)++;
    }
    return MT_OK;
}

mt_status xent_cpu(mt_tensor *dlogits, mt_tensor *losses, mt_tensor *stats, const mt_tensor *logits,
                   const mt_tensor *targets, const mt_tensor *dloss, float dmean, int64_t V,
                   int64_t ignore_index) {
    int64_t N = logits->shape[0], Vp = logits->shape[1];
    float *loss = losses->data;
    int64_t count;
    MT_TRY(count_targets(targets, ignore_index, V, &count));
    double total = 0.0;
    for (int64_t n = 0; n < N; n++) {
        int64_t t = ld_id(targets, n), o = n * Vp;
        double m = -INFINITY, s = 0.0;
        if (t != ignore_index) {
            for (int64_t v = 0; v < V; v++)
                m = fmax(m, mt_load_f32(logits->data, logits->dtype, o + v));
            for (int64_t v = 0; v < V; v++)
                s += exp(mt_load_f32(logits->data, logits->dtype, o + v) - m);
            double l = m + log(s) - mt_load_f32(logits->data, logits->dtype, o + t);
            loss[n] = (float)l;
            total += l;
        } else {
            loss[n] = 0.0f;
        }
        if (!dlogits) continue;
        /* g: the upstream gradient of this token's loss; ignored tokens have none */
        double g = t == ignore_index ? 0.0
                   : dloss           ? ((const float *)dloss->data)[n]
                                     : (double)dmean / (double)count;
        for (int64_t v = 0; v < Vp; v++) {
            double d = 0.0;
            if (v < V && g != 0.0) {
                double p = exp(mt_load_f32(logits->data, logits->dtype, o + v) - m) / s;
                d = (p - (v == t ? 1.0 : 0.0)) * g;
            }
            mt_store_f32(dlogits->data, dlogits->dtype, o + v, (float)d);
        }
    }
    if (stats) {
        ((float *)stats->data)[0] = (float)(total / (double)count); /* 0/0: NaN, as torch */
        ((float *)stats->data)[1] = (float)count;
    }
    return MT_OK;
}

mt_status xent_stats_cpu(mt_tensor *stats, mt_tensor *dloss, const mt_tensor *losses,
                         const mt_tensor *targets, float dmean, int64_t ignore_index) {
    int64_t N = mt_tensor_numel(targets), count;
    MT_TRY(count_targets(targets, ignore_index, 0, &count));
    double total = 0.0;
    for (int64_t n = 0; losses && n < N; n++)
        if (ld_id(targets, n) != ignore_index) total += ((const float *)losses->data)[n];
    for (int64_t n = 0; dloss && n < N; n++) /* as the mean mode's g, rounded to f32 */
        ((float *)dloss->data)[n] =
            ld_id(targets, n) == ignore_index ? 0.0f : (float)((double)dmean / (double)count);
    if (losses) ((float *)stats->data)[0] = (float)(total / (double)count);
    ((float *)stats->data)[1] = (float)count;
    return MT_OK;
}
