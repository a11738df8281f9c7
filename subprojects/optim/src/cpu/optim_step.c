/* AdamW and SGD step and the grad statistics: the CPU reference (the spec). fp32 math in the
 * order torch.optim uses; fp64 accumulation for the norm. */
#include "../optim_impl.h"

#include <mt/tensor.h> /* mt_store_f32 */

#include <math.h>

mt_status optim_step_cpu(const optim_step_args *a) {
    float *w = a->master ? a->master : (float *)a->param;
    for (int64_t i = 0; i < a->n; i++) {
        float g = a->grad[i] * a->inv_scale * a->clip;
        int decay = !a->wd_mask || optim_mask_bit(a->wd_mask, a->start + i);
        float wd = decay ? a->wd : 0.0f;
        float p = w[i];
        if (a->kind == MT_OPTIM_ADAMW) {
            p = p * (1.0f - a->lr * wd); /* decoupled weight decay */
            float m = a->exp_avg[i] + (g - a->exp_avg[i]) * (1.0f - a->beta1); /* torch's lerp */
            float v = a->exp_avg_sq[i] * a->beta2 + (1.0f - a->beta2) * g * g;
            float denom = sqrtf(v) / a->bc2_sqrt + a->eps;
            p = p - a->step_size * (m / denom);
            a->exp_avg[i] = m;
            a->exp_avg_sq[i] = v;
        } else {
            g = g + wd * p; /* SGD: L2 weight decay on the grad */
            float buf = a->momentum * a->exp_avg[i] + g;
            p = p - a->lr * buf;
            a->exp_avg[i] = buf;
        }
        w[i] = p;
        if (a->master) mt_store_f32(a->param, a->param_dtype, i, p);
    }
    return MT_OK;
}

mt_status optim_stats_cpu(const optim_stats_args *a, optim_stats *out) {
    double sumsq = 0.0, zeros = 0.0, nonfinite = 0.0;
    for (int64_t i = 0; i < a->n; i++) {
        float g = a->grad[i];
        if (!isfinite(g)) nonfinite = 1.0;
        if (!optim_mask_bit(a->norm_mask, a->start + i)) continue;
        sumsq += (double)g * g;
        zeros += g == 0.0f;
    }
    out->sumsq = sumsq;
    out->zeros = zeros;
    out->nonfinite = nonfinite;
    return MT_OK;
}
