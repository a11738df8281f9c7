/* unit: sampling against transformers' warpers (golden/gen_infer.py: temperature, top-k with ties,
 * top-p, their combinations, greedy): the distribution drawn from, within float rounding; draws
 * are Philox's, reproducible, from that distribution (tokens outside it never come, frequencies
 * near its probabilities), and the first token whose cumulative probability reaches the draw;
 * the generation loop stops at eod and at the model's length; bad settings are refused. */
#include <mt/infer.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_warpers(void) {
    size_t nl, nc, np;
    mt_npy shape;
    float *logits = mt_test_golden_f32("logits.npy", &nl, &shape);
    double *cfg = mt_test_golden_f64("configs.npy", &nc),
           *probs = mt_test_golden_f64("probs.npy", &np);
    const int64_t R = shape.shape[0], V = shape.shape[1];
    const int C = (int)(nc / 3);
    MT_ASSERT(np == (size_t)C * R * V);
    float *got = malloc((size_t)V * 4), *want = malloc((size_t)V * 4);
    for (int c = 0; c < C; c++) {
        mt_infer_sampling s = { (float)cfg[3 * c], (int)cfg[3 * c + 1], (float)cfg[3 * c + 2], 1 };
        for (int64_t r = 0; r < R; r++) {
            MT_CHECK(mt_infer_probs(logits + r * V, V, &s, got));
            for (int64_t i = 0; i < V; i++)
                want[i] = (float)probs[((size_t)c * R + r) * V + i];
            char what[96];
            snprintf(what, sizeof what, "T %g top_k %d top_p %g row %lld", (double)s.temperature,
                     s.top_k, (double)s.top_p, (long long)r);
            /* (ties at top-p's boundary: we keep them all, transformers some, in its sort's
             * order: then every extra token ties the least likely token transformers kept) */
            float lowest = INFINITY;
            int extra = 0, missing = 0, tie = 1;
            for (int64_t i = 0; i < V; i++)
                if (want[i] > 0) lowest = fminf(lowest, logits[r * V + i]);
            for (int64_t i = 0; i < V; i++) {
                extra += got[i] > 0 && want[i] == 0;
                missing += got[i] == 0 && want[i] > 0;
                if (got[i] > 0 && want[i] == 0) tie &= logits[r * V + i] == lowest;
            }
            MT_EXPECT(missing == 0 && (extra == 0 || (tie && s.top_p > 0.0f)),
                      "%s: kept tokens differ from transformers' (%d extra, %d missing)", what,
                      extra, missing);
            if (extra == 0) mt_test_close_f32(what, got, want, (size_t)V, 1e-7, 1e-5);
        }
    }
    /* draws: reproducible, inside the support, frequencies near the probabilities */
    mt_infer_sampling s = { 0.8f, 10, 0.95f, 42 };
    const int n = 20000;
    int *count = calloc((size_t)V, sizeof *count), outside = 0;
    float *scratch = malloc((size_t)V * 4);
    MT_CHECK(mt_infer_probs(logits, V, &s, got));
    for (int k = 0; k < n; k++) {
        int32_t t, t2;
        MT_CHECK(mt_infer_sample(logits, V, &s, (uint64_t)k, scratch, &t));
        MT_CHECK(mt_infer_sample(logits, V, &s, (uint64_t)k, scratch, &t2));
        MT_EXPECT(t == t2 || k > 0, "draw %d not reproducible", k);
        outside += got[t] == 0.0f;
        count[t]++;
    }
    MT_EXPECT(outside == 0, "%d draws outside the kept tokens", outside);
    double worst = 0;
    for (int64_t i = 0; i < V; i++) { /* |freq - p| within 5 standard deviations */
        double p = got[i], sd = sqrt(p * (1 - p) / n) + 1e-9, d = fabs(count[i] / (double)n - p);
        worst = fmax(worst, d / sd);
    }
    MT_EXPECT(worst < 5.0, "a token's frequency is %.1f standard deviations off", worst);
    /* the draw is the first token whose cumulative probability reaches Philox's uniform */
    for (int k = 0; k < 50; k++) {
        int32_t t;
        MT_CHECK(mt_infer_sample(logits, V, &s, (uint64_t)k, scratch, &t));
        const double u = mt_philox_uniform(s.seed, 0, (uint64_t)k);
        double cum = 0;
        int32_t want_t = -1;
        for (int64_t i = 0; i < V && want_t < 0; i++)
            if (got[i] > 0 && (cum += got[i]) >= u) want_t = (int32_t)i;
        MT_EXPECT(t == want_t, "draw %d: token %d, the inverse CDF gives %d", k, t, want_t);
    }
    free(count), free(scratch), free(got), free(want), free(logits), free(cfg), free(probs);
}

/* A model whose next token (greedy) is (last + 1) % V, V = 10. */
static mt_status count_up(void *ctx, const int32_t *tokens, int n, float *logits) {
    int *calls = ctx;
    ++*calls;
    for (int i = 0; i < 10; i++)
        logits[i] = i == (tokens[n - 1] + 1) % 10 ? 5.0f : 0.0f;
    return MT_OK;
}

static void test_generate(void) {
    int calls = 0, n;
    mt_infer_model m = { &calls, count_up, 10, 12, 7 };
    mt_infer_sampling g = { 0.0f, 0, 0.0f, 1 };
    int32_t t[32] = { 3 };
    MT_CHECK(mt_infer_generate(&m, t, 1, 10, &g, &n));
    MT_EXPECT(n == 5 && t[1] == 4 && t[4] == 7, "stops after eod 7: %d tokens", n);
    m.eod = -1;
    MT_CHECK(mt_infer_generate(&m, t, 1, 30, &g, &n));
    MT_EXPECT(n == 12 && t[11] == 4, "stops at the model's 12 tokens: %d", n);
    MT_CHECK(mt_infer_generate(&m, t, 2, 0, &g, &n));
    MT_EXPECT(n == 2, "0 tokens to generate: %d", n);
    MT_EXPECT_STATUS(mt_infer_generate(&m, t, 0, 3, &g, &n), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_infer_generate(&m, t, 13, 3, &g, &n), MT_ERR_INVALID_ARG);
    float l[10] = { 0 }, p[10];
    mt_infer_sampling bad[3] = { { -1.0f, 0, 0.0f, 1 },
                                 { 1.0f, -2, 0.0f, 1 },
                                 { 1.0f, 0, 1.5f, 1 } };
    for (int i = 0; i < 3; i++)
        MT_EXPECT_STATUS(mt_infer_probs(l, 10, &bad[i], p), MT_ERR_INVALID_ARG);
}

/* A batch model of V = 10 whose next-token distribution depends on the row's whole sequence (its
 * sum and length), so that a row fed another row's tokens shows. */
static void seq_logits(const int32_t *t, int n, float *logits) {
    int sum = 0;
    for (int i = 0; i < n; i++)
        sum += t[i];
    for (int i = 0; i < 10; i++)
        logits[i] = (float)((sum * 7 + n * 3 + i * 5) % 11) * 0.4f;
}

static mt_status seq_one(void *ctx, const int32_t *tokens, int n, float *logits) {
    (void)ctx;
    seq_logits(tokens, n, logits);
    return MT_OK;
}

static mt_status seq_batch(void *ctx, int32_t *const *tokens, const int *n, const int *live, int B,
                           float *logits) {
    int *calls = ctx;
    ++*calls;
    for (int b = 0; b < B; b++)
        if (live[b]) seq_logits(tokens[b], n[b], logits + 10 * b);
    return MT_OK;
}

/* mt_infer_generate_batch: each row's continuation is mt_infer_generate's for it alone (sampled
 * and greedy), rows of different prompt lengths, one stopping early at eod or at max_len. */
static void test_generate_batch(void) {
    const int32_t prompts[3][4] = { { 1, 2, 3, 4 }, { 5 }, { 9, 9 } };
    const int np[3] = { 4, 1, 2 };
    const mt_infer_sampling ss[2] = { { 0.9f, 0, 0.0f, 21 }, { 0.0f, 0, 0.0f, 1 } };
    for (int si = 0; si < 2; si++)
        for (int eod = -1; eod < 10; eod += 4) {
            int32_t rows[3][24], *tp[3] = { rows[0], rows[1], rows[2] };
            int n_out[3], calls = 0;
            for (int b = 0; b < 3; b++)
                memcpy(rows[b], prompts[b], sizeof prompts[b]);
            mt_infer_batch_model bm = { &calls, seq_batch, 10, 14, eod };
            MT_CHECK(mt_infer_generate_batch(&bm, tp, np, 3, 12, &ss[si], n_out));
            for (int b = 0; b < 3; b++) {
                int32_t alone[24];
                int n = 0;
                memcpy(alone, prompts[b], sizeof prompts[b]);
                mt_infer_model m = { NULL, seq_one, 10, 14, eod };
                MT_CHECK(mt_infer_generate(&m, alone, np[b], 12, &ss[si], &n));
                MT_EXPECT(n == n_out[b] && !memcmp(alone, rows[b], (size_t)n * 4),
                          "batch row %d (%s, eod %d): %d tokens, alone %d", b,
                          si ? "greedy" : "sampled", eod, n_out[b], n);
            }
            MT_EXPECT(calls <= 12, "%d calls for 12 tokens", calls);
        }
    int32_t r[4] = { 1 }, *rp[1] = { r };
    int n1 = 0, n_out[1];
    mt_infer_batch_model bm = { NULL, seq_batch, 10, 4, -1 };
    MT_EXPECT_STATUS(mt_infer_generate_batch(&bm, rp, &n1, 1, 2, &ss[1], n_out),
                     MT_ERR_INVALID_ARG);
}

/* mt_infer_batch_step: rows of different prompts, lengths, sampling and max_new join two slots as
 * they free up (a row joining while the other is mid-way), each row's continuation
 * mt_infer_generate's for it alone; a live row with nothing left to generate is refused. */
static void test_batch_step(void) {
    const int32_t prompts[4][4] = { { 1, 2, 3, 4 }, { 5 }, { 9, 9 }, { 2, 8, 1 } };
    const int np[4] = { 4, 1, 2, 3 }, most[4] = { 9, 3, 6, 0 };
    const mt_infer_sampling ss[4] = {
        { 0.9f, 0, 0.0f, 21 }, { 0.0f, 0, 0.0f, 1 }, { 1.3f, 4, 0.9f, 7 }, { 0.5f, 0, 0.0f, 3 }
    };
    for (int eod = -1; eod < 10; eod += 5) {
        int32_t rows[4][24], *tok[2] = { NULL, NULL };
        int n[2] = { 0, 0 }, k[2] = { 0, 0 }, mx[2] = { 0, 0 }, live[2] = { 0, 0 };
        int row_of[2] = { -1, -1 }, n_out[4] = { 0 }, next = 0, joined_mid = 0, calls = 0;
        mt_infer_sampling sb[2] = { ss[0], ss[0] };
        float logits[20], scratch[10];
        mt_infer_batch_model bm = { &calls, seq_batch, 10, 14, eod };
        for (int step = 0; step < 40; step++) {
            for (int b = 0; b < 2; b++) /* rows join the free slots */
                while (!live[b] && next < 4) {
                    const int r = next++;
                    memcpy(rows[r], prompts[r], sizeof prompts[r]);
                    tok[b] = rows[r], n[b] = np[r], k[b] = 0, mx[b] = most[r], sb[b] = ss[r];
                    row_of[b] = r, n_out[r] = np[r];
                    live[b] = most[r] > 0;
                    joined_mid |= live[b] && live[1 - b] && k[1 - b] > 0;
                }
            MT_CHECK(mt_infer_batch_step(&bm, tok, n, k, mx, sb, live, 2, logits, scratch));
            for (int b = 0; b < 2; b++)
                if (row_of[b] >= 0) n_out[row_of[b]] = n[b];
        }
        MT_EXPECT(joined_mid, "eod %d: no row joined while the other was mid-way", eod);
        for (int r = 0; r < 4; r++) {
            int32_t alone[24];
            int na = 0;
            memcpy(alone, prompts[r], sizeof prompts[r]);
            mt_infer_model m = { NULL, seq_one, 10, 14, eod };
            MT_CHECK(mt_infer_generate(&m, alone, np[r], most[r], &ss[r], &na));
            MT_EXPECT(na == n_out[r] && !memcmp(alone, rows[r], (size_t)na * 4),
                      "continuous row %d (eod %d): %d tokens, alone %d", r, eod, n_out[r], na);
        }
    }
    int32_t r[4] = { 1 }, *rp[1] = { r };
    int n1 = 1, k1 = 2, m1 = 2, live1 = 1;
    float logits[10], scratch[10];
    mt_infer_batch_model bm = { NULL, seq_batch, 10, 4, -1 };
    MT_EXPECT_STATUS(mt_infer_batch_step(&bm, rp, &n1, &k1, &m1, &(mt_infer_sampling){ 0 }, &live1,
                                         1, logits, scratch),
                     MT_ERR_INVALID_ARG); /* its 2 of 2 tokens made, still live */
}

int main(void) {
    test_warpers();
    test_generate();
    test_generate_batch();
    test_batch_step();
    return mt_test_result();
}
