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
                const int64_t L = s->kl ? s->kl[b] : s->Tk; /* the row's keys */
                int64_t hk = h / group, n = s->causal ? i + 1 + L - s->T : L;
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

/* The KV cache's append: row b's T tokens into rows len[b] - T .. len[b] - 1. */
mt_status attn_kv_append_cpu(mt_tensor *kc, mt_tensor *vc, const mt_tensor *k, const mt_tensor *v,
                             const int32_t *len) {
    const int64_t B = k->shape[0], T = k->shape[1], Hkv = k->shape[2], D = k->shape[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hkv; h++) {
                const int64_t row = len[b] - T + t;
                for (int64_t d = 0; d < D; d++) {
                    st(kc, at(kc, b, row, h) + d, ld(k, at(k, b, t, h) + d));
                    st(vc, at(vc, b, row, h) + d, ld(v, at(v, b, t, h) + d));
                }
            }
    return MT_OK;
}
