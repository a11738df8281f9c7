/* Sampling (transformers' warpers, in their order) and the generation loop. */
#include <mt/infer.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int greedy(const mt_infer_sampling *s) {
    return s->temperature == 0.0f || s->top_k == 1;
}

static int cmp_desc(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

mt_status mt_infer_probs(const float *logits, int64_t V, const mt_infer_sampling *s, float *probs) {
    MT_REQUIRE(logits && probs && s && V > 0, MT_ERR_INVALID_ARG, "NULL argument or V %lld",
               (long long)V);
    MT_REQUIRE(s->temperature >= 0.0f && s->top_k >= 0 && s->top_p >= 0.0f && s->top_p <= 1.0f,
               MT_ERR_INVALID_ARG, "temperature %g, top_k %d, top_p %g out of range",
               (double)s->temperature, s->top_k, (double)s->top_p);
    if (greedy(s)) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            best = logits[i] > logits[best] ? i : best;
        for (int64_t i = 0; i < V; i++)
            probs[i] = i == best ? 1.0f : 0.0f;
        return MT_OK;
    }
    float *sorted = malloc((size_t)V * sizeof *sorted);
    MT_REQUIRE(sorted, MT_ERR_OOM, "%lld logits", (long long)V);
    for (int64_t i = 0; i < V; i++)
        sorted[i] = logits[i] / s->temperature;
    qsort(sorted, (size_t)V, sizeof *sorted, cmp_desc);
    /* top-k: below the k-th largest is out (equal values stay) */
    float cut = s->top_k > 0 && s->top_k < V ? sorted[s->top_k - 1] : -INFINITY;
    int64_t kept = 0;
    while (kept < V && sorted[kept] >= cut)
        kept++;
    /* top-p over what top-k kept: from the least likely up, tokens whose cumulative probability
     * stays <= 1 - top_p go (the most likely always stays) */
    double z = 0;
    for (int64_t i = 0; i < kept; i++)
        z += exp((double)sorted[i] - (double)sorted[0]);
    if (s->top_p > 0.0f && s->top_p < 1.0f) {
        double cum = 0;
        int64_t n = kept;
        for (int64_t i = kept - 1; i > 0; i--) {
            cum += exp((double)sorted[i] - (double)sorted[0]) / z;
            if (cum > 1.0 - (double)s->top_p) break;
            n = i;
        }
        cut = sorted[n - 1] > cut ? sorted[n - 1] : cut;
        kept = n;
        z = 0;
        for (int64_t i = 0; i < kept; i++)
            z += exp((double)sorted[i] - (double)sorted[0]);
    }
    const double top = sorted[0];
    free(sorted);
    for (int64_t i = 0; i < V; i++) {
        const float x = logits[i] / s->temperature;
        probs[i] = x >= cut ? (float)(exp((double)x - top) / z) : 0.0f;
    }
    return MT_OK;
}

mt_status mt_infer_sample(const float *logits, int64_t V, const mt_infer_sampling *s, uint64_t step,
                          float *scratch, int32_t *token) {
    MT_REQUIRE(scratch && token, MT_ERR_INVALID_ARG, "NULL scratch or token");
    MT_TRY(mt_infer_probs(logits, V, s, scratch));
    const double u = mt_philox_uniform(s->seed, 0, step); /* (0, 1] */
    double cum = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < V; i++) {
        if (scratch[i] == 0.0f) continue;
        last = i;
        cum += scratch[i];
        if (cum >= u) break;
    }
    *token = (int32_t)last; /* (rounding short of u: the last token with any probability) */
    return MT_OK;
}

mt_status mt_infer_generate(const mt_infer_model *m, int32_t *tokens, int n_prompt, int max_new,
                            const mt_infer_sampling *s, int *n_out) {
    MT_REQUIRE(m && m->next_logits && tokens && s && n_out, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(n_prompt >= 1 && n_prompt <= m->max_len, MT_ERR_INVALID_ARG,
               "the prompt has %d tokens; the model takes 1 to %d", n_prompt, m->max_len);
    MT_REQUIRE(max_new >= 0, MT_ERR_INVALID_ARG, "%d tokens to generate", max_new);
    float *buf = malloc((size_t)m->vocab * 2 * sizeof *buf);
    MT_REQUIRE(buf, MT_ERR_OOM, "logits of %lld tokens", (long long)m->vocab);
    int n = n_prompt;
    mt_status st = MT_OK;
    for (int k = 0; k < max_new && n < m->max_len; k++) {
        st = m->next_logits(m->ctx, tokens, n, buf);
        if (st == MT_OK)
            st = mt_infer_sample(buf, m->vocab, s, (uint64_t)k, buf + m->vocab, &tokens[n]);
        if (st != MT_OK) break;
        if (tokens[n++] == m->eod) break;
    }
    free(buf);
    *n_out = n;
    return st;
}

mt_status mt_infer_batch_step(const mt_infer_batch_model *m, int32_t *const *tokens, int *n, int *k,
                              const int *max_new, const mt_infer_sampling *s, int *live, int B,
                              float *logits, float *scratch) {
    MT_REQUIRE(m && m->next_logits && tokens && n && k && max_new && s && live && logits &&
                   scratch && B > 0,
               MT_ERR_INVALID_ARG, "NULL argument or a batch of %d", B);
    int any = 0;
    for (int b = 0; b < B; b++) {
        if (!live[b]) continue;
        MT_REQUIRE(tokens[b] && n[b] >= 1 && n[b] < m->max_len && k[b] >= 0 && k[b] < max_new[b],
                   MT_ERR_INVALID_ARG,
                   "row %d: %d tokens (the model takes up to %d) and %d of %d generated", b, n[b],
                   m->max_len, k[b], max_new[b]);
        any = 1;
    }
    if (!any) return MT_OK;
    MT_TRY(m->next_logits(m->ctx, tokens, n, live, B, logits));
    for (int b = 0; b < B; b++) {
        if (!live[b]) continue;
        int32_t *t = &tokens[b][n[b]];
        MT_TRY(mt_infer_sample(logits + (size_t)m->vocab * (size_t)b, m->vocab, &s[b],
                               (uint64_t)k[b], scratch, t));
        n[b]++, k[b]++;
        live[b] = *t != m->eod && n[b] < m->max_len && k[b] < max_new[b];
    }
    return MT_OK;
}

mt_status mt_infer_generate_batch(const mt_infer_batch_model *m, int32_t *const *tokens,
                                  const int *n_prompt, int B, int max_new,
                                  const mt_infer_sampling *s, int *n_out) {
    MT_REQUIRE(m && m->next_logits && tokens && n_prompt && s && n_out && B > 0, MT_ERR_INVALID_ARG,
               "NULL argument or a batch of %d", B);
    MT_REQUIRE(max_new >= 0, MT_ERR_INVALID_ARG, "%d tokens to generate", max_new);
    for (int b = 0; b < B; b++)
        MT_REQUIRE(n_prompt[b] >= 1 && n_prompt[b] <= m->max_len, MT_ERR_INVALID_ARG,
                   "prompt %d has %d tokens; the model takes 1 to %d", b, n_prompt[b], m->max_len);
    float *buf = malloc((size_t)m->vocab * (size_t)(B + 1) * sizeof *buf);
    int *live = malloc((size_t)B * 3 * sizeof *live);
    mt_infer_sampling *sb = malloc((size_t)B * sizeof *sb);
    if (!buf || !live || !sb) {
        free(buf), free(live), free(sb);
        return MT_ERROR(MT_ERR_OOM, "logits of %d rows", B);
    }
    int *k = live + B, *most = live + 2 * B, any = 0;
    for (int b = 0; b < B; b++) {
        n_out[b] = n_prompt[b], k[b] = 0, most[b] = max_new, sb[b] = *s;
        any |= live[b] = max_new > 0 && n_prompt[b] < m->max_len;
    }
    mt_status st = MT_OK;
    while (any && st == MT_OK) {
        st = mt_infer_batch_step(m, tokens, n_out, k, most, sb, live, B, buf,
                                 buf + (size_t)m->vocab * (size_t)B);
        any = 0;
        for (int b = 0; b < B; b++)
            any |= live[b];
    }
    free(buf), free(live), free(sb);
    return st;
}
