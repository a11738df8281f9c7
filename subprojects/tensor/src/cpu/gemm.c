/* GEMM CPU reference: plain loops over row-major views, fp64 accumulation, one rounding on store;
 * and the bias gradient (a column sum). */
#include <math.h>

#include "../ops_impl.h"

static float gelu(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

mt_status gemm_cpu(const gemm_args *g) {
    for (int64_t bt = 0; bt < g->batch; bt++) {
        int64_t a0 = bt * g->sa, b0 = bt * g->sb, c0 = bt * g->sc, p0 = bt * g->spre;
        for (int64_t i = 0; i < g->M; i++) {
            for (int64_t j = 0; j < g->N; j++) {
                double acc = 0.0;
                for (int64_t k = 0; k < g->K; k++) {
                    /* op(a)[i][k] and op(b)[k][j] */
                    int64_t ia = g->trans_a ? k * g->lda + i : i * g->lda + k;
                    int64_t ib = g->trans_b ? j * g->ldb + k : k * g->ldb + j;
                    acc += (double)mt_load_f32(g->a, g->ab_dtype, a0 + ia) *
                           (double)mt_load_f32(g->b, g->ab_dtype, b0 + ib);
                }
                int64_t ic = c0 + i * g->ldc + j;
                double v = (double)g->alpha * acc;
                if (g->beta != 0.0f) v += (double)g->beta * mt_load_f32(g->c, g->c_dtype, ic);
                if (g->bias) v += mt_load_f32(g->bias, g->c_dtype, j);
                if (g->gelu) {
                    if (g->pre_gelu)
                        mt_store_f32(g->pre_gelu, g->c_dtype, p0 + i * g->ldpre + j, (float)v);
                    v = gelu((float)v);
                }
                mt_store_f32(g->c, g->c_dtype, ic, (float)v);
            }
        }
    }
    return MT_OK;
}
