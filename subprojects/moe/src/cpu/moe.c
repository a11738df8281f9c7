/* The CPU reference: plain loops in fp32, the spec of the CUDA kernels. */
#include <math.h>
#include <string.h>

#include "../moe_impl.h"

/* softmax(l)[e] for one row of E logits, and its logsumexp */
static float row_softmax(const float *l, int64_t E, float *s) {
    float mx, sum;
    moe_row_stats(l, E, &mx, &sum);
    for (int64_t e = 0; e < E; e++)
        s[e] = expf(l[e] - mx) / sum;
    return mx + logf(sum);
}

mt_status moe_topk_cpu(const moe_args *a) {
    memset(a->counts, 0, (size_t)((a->seq ? a->N / a->seq : 1) * a->E) * sizeof(int32_t));
    for (int64_t n = 0; n < a->N; n++) {
        const float *l = a->logits + n * a->E;
        int32_t *id = a->idx + n * a->k;
        float *p = a->probs + n * a->k, mx = 0.0f, sum = 1.0f;
        if (a->pre_softmax) moe_row_stats(l, a->E, &mx, &sum); /* (the softmax over all E) */
        const uint64_t groups = moe_group_mask(a, l, mx, sum);
        for (int64_t j = 0; j < a->k; j++) {
            id[j] = moe_pick(a, l, groups, id, j);
            a->counts[(a->seq ? n / a->seq * a->E : 0) + id[j]]++;
        }
        if (a->sigmoid) {
            moe_sigmoid_probs(a, l, id, p);
            continue;
        }
        if (a->pre_softmax) {
            for (int64_t j = 0; j < a->k; j++)
                p[j] = expf(l[id[j]] - mx) / sum * a->scaling;
            continue;
        }
        sum = 0.0f;
        for (int64_t j = 0; j < a->k; j++) /* (id[0] holds the largest of the k) */
            sum += p[j] = expf(l[id[j]] - l[id[0]]);
        for (int64_t j = 0; j < a->k; j++)
            p[j] = p[j] / sum * a->scaling;
    }
    return MT_OK;
}

mt_status moe_expert_bias_tokens_cpu(const moe_args *a) {
    for (int64_t e = 0; e < a->E; e++)
        a->probs[e] += (float)a->counts_in[e];
    return MT_OK;
}

mt_status moe_expert_bias_update_cpu(const moe_args *a) {
    for (int64_t r = 0; r < a->N; r++) { /* (one router a row) */
        float *b = a->probs + r * a->E, *t = a->dlogits + r * a->E, mean = 0.0f;
        for (int64_t e = 0; e < a->E; e++)
            mean += t[e];
        mean /= (float)a->E;
        for (int64_t e = 0; e < a->E; e++) {
            const float off = mean - t[e];
            b[e] += (off > 0.0f ? a->rate : off < 0.0f ? -a->rate : 0.0f);
            t[e] = 0.0f;
        }
    }
    return MT_OK;
}

mt_status moe_dispatch_map_cpu(const moe_args *a) {
    int64_t off = 0;
    for (int64_t e = 0; e < a->E; e++) /* expert by expert, its tokens in order */
        for (int64_t n = 0; n < a->N; n++)
            for (int64_t j = 0; j < a->k; j++)
                if (a->idx_in[n * a->k + j] == e) {
                    a->rows[off] = (int32_t)n;
                    a->pos[n * a->k + j] = (int32_t)off++;
                }
    return MT_OK;
}

/* Whether candidate (n, j) of expert e stays under the capacity: the first `capacity` in token
 * order (by_position), else those whose probability fewer than `capacity` others beat (ties: the
 * earlier token). */
static int keeps(const moe_args *a, int64_t e, int64_t n, int64_t j) {
    if (a->counts_in[e] <= a->capacity) return 1;
    int64_t before = 0;
    const float p = a->probs_in[n * a->k + j];
    for (int64_t m = 0; m < a->N; m++)
        for (int64_t i = 0; i < a->k; i++) {
            if (a->idx_in[m * a->k + i] != e || m == n) continue;
            const float q = a->probs_in[m * a->k + i];
            before += a->by_position ? m < n : q > p || (q == p && m < n);
        }
    return before < a->capacity;
}

mt_status moe_capacity_map_cpu(const moe_args *a) {
    for (int64_t i = 0; i < a->R; i++)
        a->rows[i] = -1;
    for (int64_t i = 0; i < a->N * a->k; i++)
        a->pos[i] = -1;
    int64_t off = 0;
    for (int64_t e = 0; e < a->E; e++) { /* expert by expert, its kept tokens in order */
        int64_t r = off;
        for (int64_t n = 0; n < a->N; n++)
            for (int64_t j = 0; j < a->k; j++)
                if (a->idx_in[n * a->k + j] == e && keeps(a, e, n, j)) {
                    a->rows[r] = (int32_t)n;
                    a->pos[n * a->k + j] = (int32_t)r++;
                }
        a->counts[e] = (int32_t)(r - off);
        off = a->region ? off + a->region : r;
    }
    return MT_OK;
}

mt_status moe_permute_cpu(const moe_args *a) {
    const size_t es = mt_dtype_size(a->dtype), row = (size_t)a->C * es;
    for (int64_t r = 0; r < a->R; r++)
        if (a->rows_in[r] < 0)
            memset((char *)a->y + r * row, 0, row);
        else
            memcpy((char *)a->y + r * row, (const char *)a->x + a->rows_in[r] * row, row);
    return MT_OK;
}

mt_status moe_permute_bwd_cpu(const moe_args *a) {
    for (int64_t n = 0; n < a->N; n++)
        for (int64_t c = 0; c < a->C; c++) {
            float v = a->accumulate ? mt_load_f32(a->y, a->dtype, n * a->C + c) : 0.0f;
            for (int64_t j = 0; j < a->k; j++)
                if (a->pos_in[n * a->k + j] >= 0)
                    v += mt_load_f32(a->x, a->dtype, a->pos_in[n * a->k + j] * a->C + c);
            mt_store_f32(a->y, a->dtype, n * a->C + c, v);
        }
    return MT_OK;
}

mt_status moe_unpermute_cpu(const moe_args *a) {
    for (int64_t n = 0; n < a->N; n++)
        for (int64_t c = 0; c < a->C; c++) {
            float v = a->resid ? mt_load_f32(a->resid, a->dtype, n * a->C + c) : 0.0f;
            for (int64_t j = 0; j < a->k; j++)
                if (a->pos_in[n * a->k + j] >= 0)
                    v += a->probs_in[n * a->k + j] *
                         mt_load_f32(a->x, a->dtype, a->pos_in[n * a->k + j] * a->C + c);
            mt_store_f32(a->y, a->dtype, n * a->C + c, v);
        }
    return MT_OK;
}

mt_status moe_unpermute_bwd_cpu(const moe_args *a) {
    for (int64_t n = 0; n < a->N; n++)
        for (int64_t j = 0; j < a->k; j++) {
            const int64_t r = a->pos_in[n * a->k + j];
            const float p = a->probs_in[n * a->k + j];
            float dot = 0.0f;
            if (r < 0) { /* dropped */
                a->dprobs_out[n * a->k + j] = 0.0f;
                continue;
            }
            for (int64_t c = 0; c < a->C; c++) {
                const float dy = mt_load_f32(a->x, a->dtype, n * a->C + c);
                dot += dy * mt_load_f32(a->x2, a->dtype, r * a->C + c);
                mt_store_f32(a->y2, a->dtype, r * a->C + c, p * dy);
            }
            a->dprobs_out[n * a->k + j] = dot;
        }
    return MT_OK;
}

/* The aux loss's scores of one row into s (softmax, or the sigmoids over their sum); returns the
 * row's logsumexp (the z loss's). */
static float aux_scores(const moe_args *a, const float *l, float *s) {
    const float lse = row_softmax(l, a->E, s);
    if (!a->sigmoid) return lse;
    const float t = moe_sigmoid_sum(a, l);
    for (int64_t e = 0; e < a->E; e++)
        s[e] = moe_score(a, l, e) / t;
    return lse;
}

mt_status moe_router_losses_cpu(const moe_args *a) {
    float s[a->E];
    double aux = 0.0, z = 0.0;
    for (int64_t n = 0; n < a->N; n++) {
        const float lse = aux_scores(a, a->logits + n * a->E, s);
        const int32_t *cnt = moe_aux_row(a, n);
        for (int64_t e = 0; e < a->E; e++)
            aux += (double)s[e] * cnt[e];
        z += (double)lse * lse;
    }
    a->losses[0] += (float)(aux * (double)a->E / moe_aux_den(a));
    a->losses[1] += (float)(z / a->N);
    return MT_OK;
}

/* dl[e] of the softmax over the chosen k: q_j (g_j - sum_i q_i g_i) at e = idx[j], q the
 * probabilities before the scaling, g = dp times it (so q_j g_j = p_j dp_j); pre_softmax
 * (q_j = s at idx[j]): q_j g_j at the chosen e and - s_e sum_i q_i g_i at every e; the aux loss's
 * c s_e (counts_e - sum_i s_i counts_i), c = aux_scale E / (k N^2); the z loss's
 * z_scale 2 lse s_e / N. Sigmoid scores: moe_sigmoid_bwd_row. */
mt_status moe_router_bwd_cpu(const moe_args *a) {
    float s[a->E];
    const float c = a->aux_scale * (float)a->E / (float)moe_aux_den(a);
    for (int64_t n = 0; n < a->N; n++) {
        float *dl = a->dlogits + n * a->E;
        const int32_t *cnt = moe_aux_row(a, n);
        const float *l = a->logits + n * a->E;
        const float *p = a->probs_in + n * a->k, *dp = a->dprobs + n * a->k;
        const int32_t *id = a->idx_in + n * a->k;
        if (a->sigmoid) {
            float mx, sum;
            moe_row_stats(l, a->E, &mx, &sum);
            moe_sigmoid_bwd_row(a, l, dp, id, mx, sum, dl);
            continue;
        }
        const float lse = row_softmax(l, a->E, s);
        float pdp = 0.0f, sc = 0.0f;
        for (int64_t j = 0; j < a->k; j++)
            pdp += p[j] * dp[j];
        for (int64_t e = 0; e < a->E; e++)
            sc += s[e] * (float)cnt[e];
        for (int64_t e = 0; e < a->E; e++)
            dl[e] = c * s[e] * ((float)cnt[e] - sc) + a->z_scale * 2.0f * lse * s[e] / (float)a->N -
                    (a->pre_softmax ? s[e] * pdp : 0.0f);
        for (int64_t j = 0; j < a->k; j++) /* (not pre: q_j (g_j - sum) = p_j (dp_j - sum)) */
            dl[id[j]] += a->pre_softmax ? p[j] * dp[j] : p[j] * (dp[j] - pdp / a->scaling);
    }
    return MT_OK;
}
