/* CPU reference of the attention forward: plain loops, fp64 accumulation. It is the spec. With
 * attention dropout, out = (P * mask / (1-p)) V for the softmax P; lse is P's. Over cached keys
 * (Tk > T) the queries are the last T positions: causal query i sees keys j <= i + Tk - T. */
#include "cpu_util.h"

#include <math.h>
#include <stdlib.h>

mt_status attn_fwd_cpu(const attn_shape *s, mt_tensor *out, mt_tensor *lse, const mt_tensor *q,
                       const mt_tensor *k, const mt_tensor *v) {
    int64_t group = s->H / s->Hkv;
    double *p = malloc((size_t)s->Tk * sizeof *p), *o = malloc((size_t)s->D * sizeof *o);
    if (!p || !o) {
        free(p), free(o);
        return MT_ERROR(MT_ERR_OOM, "attention scratch of %lld doubles", (long long)(s->Tk + s->D));
    }
    float *lse_f = lse->data;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t h = 0; h < s->H; h++)
            for (int64_t i = 0; i < s->T; i++) {
                int64_t hk = h / group, n = s->causal ? i + 1 + s->Tk - s->T : s->Tk;
                const int64_t j0 = s->ks ? s->ks[b * s->T + i] : 0; /* document masks */
                double m = -INFINITY, l = 0.0;
                for (int64_t j = j0; j < n; j++) {
                    p[j] = score(s, q, k, b, i, h, j, hk);
                    if (p[j] > m) m = p[j];
                }
                for (int64_t d = 0; d < s->D; d++)
                    o[d] = 0.0;
                for (int64_t j = j0; j < n; j++) {
                    double e = exp(p[j] - m), f = 1.0; /* f: attention dropout's factor */
                    if (s->drop.ids) f = attn_drop_factor(&s->drop, s->drop.ids[b], h, s->T, i, j);
                    int64_t vo = at(v, b, j, hk);
                    l += e; /* the softmax's sum is over every weight, kept or dropped */
                    for (int64_t d = 0; d < s->D; d++)
                        o[d] += e * f * ld(v, vo + d);
                }
                int64_t oo = at(out, b, i, h);
                for (int64_t d = 0; d < s->D; d++)
                    st(out, oo + d, o[d] / l);
                lse_f[(b * s->H + h) * s->T + i] = (float)(m + log(l));
            }
    free(p), free(o);
    return MT_OK;
}
