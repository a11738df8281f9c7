/* CPU reference of the attention backward: P recomputed from lse, Di = rowsum(dout*out),
 * dS = P (dP - Di); dk and dv summed over the query heads of their group. fp64 accumulation.
 * With attention dropout (factor f of each weight: 1/(1-p) or 0): dV = (P f)^T dout and
 * dS = P (dP f - Di); Di is still rowsum(dout*out). */
#include "cpu_util.h"

#include <math.h>
#include <stdlib.h>

static mt_status grads(const attn_shape *s, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                       const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                       const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse) {
    int64_t group = s->H / s->Hkv, D = s->D;
    size_t nkv = (size_t)(s->B * s->Tk * s->Hkv * D); /* (Tk >= T: the last T are the queries) */
    double *gk = calloc(nkv, sizeof *gk), *gv = calloc(nkv, sizeof *gv);
    double *gq = malloc((size_t)D * sizeof *gq);
    if (!gk || !gv || !gq) {
        free(gk), free(gv), free(gq);
        return MT_ERROR(MT_ERR_OOM, "attention backward scratch of %zu doubles", 2 * nkv);
    }
    const float *lse_f = lse->data;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->H; h++)
            for (int64_t i = 0; i < s->T; i++) {
                int64_t hk = h / group, n = s->causal ? i + 1 + s->Tk - s->T : s->Tk;
                const int64_t j0 = s->ks ? s->ks[b * s->T + i] : 0; /* document masks */
                int64_t qo = at(q, b, i, h), go = at(dout, b, i, h), oo = at(out, b, i, h);
                double L = lse_f[(b * s->H + h) * s->T + i], Di = 0.0;
                for (int64_t d = 0; d < D; d++)
                    Di += ld(dout, go + d) * ld(out, oo + d);
                for (int64_t d = 0; d < D; d++)
                    gq[d] = 0.0;
                for (int64_t j = j0; j < n; j++) {
                    int64_t ko = at(k, b, j, hk), vo = at(v, b, j, hk);
                    double p = exp(score(s, q, k, b, i, h, j, hk) - L), dp = 0.0, f = 1.0;
                    if (s->drop.ids) f = attn_drop_factor(&s->drop, s->drop.ids[b], h, s->T, i, j);
                    for (int64_t d = 0; d < D; d++)
                        dp += ld(dout, go + d) * ld(v, vo + d);
                    double ds = p * (dp * f - Di) * s->scale;
                    double *gkj = gk + ((b * s->Tk + j) * s->Hkv + hk) * D;
                    double *gvj = gv + ((b * s->Tk + j) * s->Hkv + hk) * D;
                    for (int64_t d = 0; d < D; d++) {
                        gq[d] += ds * ld(k, ko + d);
                        gkj[d] += ds * ld(q, qo + d);
                        gvj[d] += p * f * ld(dout, go + d);
                    }
                }
                int64_t dqo = at(dq, b, i, h);
                for (int64_t d = 0; d < D; d++)
                    st(dq, dqo + d, gq[d]);
            }
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t j = 0; j < s->Tk; j++)
            for (int64_t hk = 0; hk < s->Hkv; hk++) {
                const double *gkj = gk + ((b * s->Tk + j) * s->Hkv + hk) * D;
                const double *gvj = gv + ((b * s->Tk + j) * s->Hkv + hk) * D;
                int64_t ko = at(dk, b, j, hk), vo = at(dv, b, j, hk);
                for (int64_t d = 0; d < D; d++) {
                    st(dk, ko + d, gkj[d]);
                    st(dv, vo + d, gvj[d]);
                }
            }
    free(gk), free(gv), free(gq);
    return MT_OK;
}

/* sum[h * D + d] (+)= the sum over b and t of x[b,t,h,d], in double. */
static void colsum(mt_tensor *sum, int accumulate, const attn_shape *s, const mt_tensor *x) {
    if (!sum) return;
    float *o = sum->data;
    const int64_t heads = x->shape[2], D = s->D;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t d = 0; d < D; d++) {
            double acc = 0.0;
            for (int64_t b = 0; b < s->B; b++)
                for (int64_t t = 0; t < x->shape[1]; t++)
                    acc += ld(x, at(x, b, t, h) + d);
            o[h * D + d] = (float)(accumulate ? o[h * D + d] + acc : acc);
        }
}

/* The grads, then the bias sums as defined: the column sums of dq, dk and dv. */
mt_status attn_bwd_cpu(const attn_shape *s, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                       const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                       const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse,
                       const attn_bias *bias) {
    MT_TRY(grads(s, dq, dk, dv, dout, q, k, v, out, lse));
    if (!bias) return MT_OK;
    colsum(bias->dq, bias->accumulate, s, dq);
    colsum(bias->dk, bias->accumulate, s, dk);
    colsum(bias->dv, bias->accumulate, s, dv);
    return MT_OK;
}
