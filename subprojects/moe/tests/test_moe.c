/* mt-moe against megatron-core's MoE functions (golden/gen_moe.py): routing, dispatch map,
 * permute / unpermute and their backwards, the aux and z losses and the router's backward. With
 * argument "cuda": the same on the GPU (exit 77 without one), the rows also in bf16. */
#include <math.h>
#include <mt/moe.h>
#include <mt/testkit.h>
#include <stdlib.h>
#include <string.h>

static mt_device dev;

/* A tensor on dev holding host values v (n of them) as dtype dt. */
static mt_tensor put(const void *v, mt_dtype src_dt, mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor t = mt_tensor_make(NULL, dt, ndim, shape, dev);
    const int64_t n = mt_tensor_numel(&t);
    void *host = malloc(mt_tensor_nbytes(&t) + 1);
    for (int64_t i = 0; i < n; i++) {
        if (dt == MT_I32)
            ((int32_t *)host)[i] = src_dt == MT_I32 ? ((const int32_t *)v)[i] : 0;
        else
            mt_store_f32(host, dt, i, v ? mt_load_f32(v, src_dt, i) : 0.0f);
    }
    if (mt_device_is_cuda(dev)) {
        MT_ASSERT(mt_device_malloc(&t.data, mt_tensor_nbytes(&t) + 1) == MT_OK);
        MT_ASSERT(mt_memcpy(t.data, dev, host, mt_device_cpu(), mt_tensor_nbytes(&t), NULL) ==
                  MT_OK);
        free(host);
    } else {
        t.data = host;
    }
    return t;
}
#define PUT(v, sdt, dt, ...)                                              \
    put(v, sdt, dt, sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t), \
        (int64_t[]){ __VA_ARGS__ })

/* t's values as floats (or int32 for I32) in a malloc'd host buffer. */
static void *get(const mt_tensor *t) {
    const int64_t n = mt_tensor_numel(t);
    void *raw = malloc(mt_tensor_nbytes(t) + 1);
    MT_ASSERT(mt_memcpy(raw, mt_device_cpu(), t->data, t->device, mt_tensor_nbytes(t), NULL) ==
              MT_OK);
    if (t->dtype == MT_I32) return raw;
    float *f = malloc(sizeof(float) * (size_t)n + 1);
    for (int64_t i = 0; i < n; i++)
        f[i] = mt_load_f32(raw, t->dtype, i);
    free(raw);
    return f;
}

static void drop(mt_tensor *t) {
    if (mt_device_is_cuda(dev))
        mt_device_free(t->data);
    else
        free(t->data);
}

static char name_buf[64];
static const char *nm(const char *tag, const char *what) {
    snprintf(name_buf, sizeof name_buf, "%s_%s.npy", tag, what);
    return name_buf;
}

/* Rounds v[0..n) to bf16 in place. */
static void round_bf16(float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        v[i] = mt_bf16_to_f32(mt_f32_to_bf16(v[i]));
}

/* The row results for inputs rounded to bf16, in float64 from megatron-core's permutation
 * (counts_g: each expert's rows; rows_g: the token of each permuted row) and dense probabilities: xp, dx (of DXP), y (of yp),
 * dyp and dense dprobs (of DY). */
static void bf16_reference(int64_t N, int64_t E, int64_t C, const float *counts_g,
                           const float *rows_g, const float *probs_g, const float *x,
                           const float *DXP, const float *yp, const float *DY, float *xp, float *dx,
                           float *y, float *dyp, float *dprobs) {
    memset(dx, 0, sizeof(float) * (size_t)(N * C));
    memset(y, 0, sizeof(float) * (size_t)(N * C));
    memset(dprobs, 0, sizeof(float) * (size_t)(N * E));
    for (int64_t e = 0, r = 0; e < E; e++)
        for (int64_t i = 0; i < (int64_t)counts_g[e]; i++, r++) { /* expert e's rows */
            const int64_t t = (int64_t)rows_g[r];
            const double p = probs_g[t * E + e];
            double dot = 0.0;
            for (int64_t c = 0; c < C; c++) {
                xp[r * C + c] = x[t * C + c];
                dx[t * C + c] = (float)((double)dx[t * C + c] + DXP[r * C + c]);
                y[t * C + c] = (float)((double)y[t * C + c] + p * yp[r * C + c]);
                dyp[r * C + c] = (float)(p * DY[t * C + c]);
                dot += (double)DY[t * C + c] * yp[r * C + c];
            }
            dprobs[t * E + e] = (float)dot;
        }
}

/* One golden case with the rows in `rt` (f32: golden tolerances; bf16: the inputs rounded, so
 * the row results within bf16's). */
/* The routing's probabilities p (N,k) at experts id, spread into a dense (N,E) matrix, against the
 * golden's dense ones; with `descending`, each token's in descending order. */
static void expect_dense_probs(const float *p, const int32_t *id, int64_t N, int64_t E, int64_t k,
                               const float *want, int descending) {
    float *dense = calloc((size_t)(N * E), sizeof(float));
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++) {
            dense[t * E + id[t * k + j]] = p[t * k + j];
            if (j && descending)
                MT_EXPECT(p[t * k + j] <= p[t * k + j - 1], "token %lld: not descending",
                          (long long)t);
        }
    mt_test_close_f32("routing probs (dense)", dense, want, (size_t)(N * E), 1e-7, 1e-6);
    free(dense);
}

/* n token counts against the golden's (stored as floats), exactly. */
static void expect_counts(const char *what, const int32_t *got, const float *want, int64_t n) {
    int64_t *g = malloc(sizeof(int64_t) * (size_t)n), *w = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        g[i] = got[i], w[i] = (int64_t)want[i];
    mt_test_equal_i64(what, g, w, (size_t)n);
    free(g), free(w);
}

/* The probabilities' gradient of sum(G * probs): G (N,E) at each token's experts id (N,k). */
static float *dprobs_of(const float *G, const int32_t *id, int64_t N, int64_t E, int64_t k) {
    float *dp = malloc(sizeof(float) * (size_t)(N * k));
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++)
            dp[t * k + j] = G[t * E + id[t * k + j]];
    return dp;
}

static void run_case(const char *tag, mt_dtype rt) {
    size_t n;
    float *meta = mt_test_golden_f32(nm(tag, "meta"), &n, NULL);
    const int64_t N = (int64_t)meta[0], E = (int64_t)meta[1], k = (int64_t)meta[2],
                  C = (int64_t)meta[3];
    float *coeffs = mt_test_golden_f32(nm(tag, "coeffs"), &n, NULL);
    float *logits_h = mt_test_golden_f32(nm(tag, "logits"), &n, NULL);
    float *probs_g = mt_test_golden_f32(nm(tag, "probs"), &n, NULL);
    float *counts_g = mt_test_golden_f32(nm(tag, "counts"), &n, NULL);
    float *G = mt_test_golden_f32(nm(tag, "G"), &n, NULL);
    double *losses_g = mt_test_golden_f64(nm(tag, "losses"), &n);
    float *dlogits_g = mt_test_golden_f32(nm(tag, "dlogits"), &n, NULL);
    float *router_g = mt_test_golden_f32(nm(tag, "router"), &n, NULL);
    /* (pre-softmax, scaling, the groups and groups a token, sigmoid scores, an expert bias) */
    MT_ASSERT(n == 6);
    float *bias_h = router_g[5] != 0.0f ? mt_test_golden_f32(nm(tag, "bias"), &n, NULL) : NULL;
    mt_tensor bias = PUT(bias_h, MT_F32, MT_F32, E);
    const mt_moe_router ro = { router_g[0] != 0.0f,
                               router_g[1],
                               (int)router_g[2],
                               (int)router_g[3],
                               router_g[4] != 0.0f,
                               bias_h ? &bias : NULL,
                               0 };
    float *aux_counts_g = mt_test_golden_f32(nm(tag, "aux_counts"), &n, NULL);
    printf("-- %s: N %lld E %lld top-%lld C %lld, rows %s on %s\n", tag, (long long)N, (long long)E,
           (long long)k, (long long)C, mt_dtype_name(rt), mt_device_is_cuda(dev) ? "cuda" : "cpu");

    /* routing */
    mt_tensor logits = PUT(logits_h, MT_F32, MT_F32, N, E);
    mt_tensor probs = PUT(NULL, MT_F32, MT_F32, N, k), idx = PUT(NULL, MT_F32, MT_I32, N, k);
    mt_tensor counts = PUT(NULL, MT_F32, MT_I32, E);
    MT_EXPECT(mt_moe_topk(&probs, &idx, &counts, &logits, &ro, NULL) == MT_OK, "topk: %s",
              mt_last_error());
    float *p = get(&probs);
    int32_t *id = get(&idx), *cnt = get(&counts);
    /* (with a bias, the order is the scores' plus the bias, not the probabilities') */
    expect_dense_probs(p, id, N, E, k, probs_g, !bias_h);
    expect_counts("tokens per expert", cnt, counts_g, E);
    /* the aux loss's tokens per expert: each token's plain top k, whatever the routing chose */
    mt_tensor aux_counts = PUT(NULL, MT_F32, MT_I32, E), sp = PUT(NULL, MT_F32, MT_F32, N, k);
    mt_tensor sid = PUT(NULL, MT_F32, MT_I32, N, k);
    MT_CHECK(mt_moe_aux_counts(&aux_counts, &sp, &sid, &logits, 0, NULL));
    int32_t *acnt = get(&aux_counts);
    expect_counts("the aux loss's tokens per expert", acnt, aux_counts_g, E);

    /* losses and the router's backward */
    mt_tensor losses = PUT(NULL, MT_F32, MT_F32, 2);
    MT_EXPECT(mt_moe_router_losses(&losses, &logits, &aux_counts, (int)k, &ro, NULL) == MT_OK,
              "losses: %s", mt_last_error());
    float *lo = get(&losses);
    const float lg[2] = { (float)losses_g[0], (float)losses_g[1] };
    mt_test_close_f32("aux and z losses", lo, lg, 2, 0.0, 1e-5);
    float *dp_h = dprobs_of(G, id, N, E, k);
    mt_tensor dprobs = PUT(dp_h, MT_F32, MT_F32, N, k), dlogits = PUT(NULL, MT_F32, MT_F32, N, E);
    MT_EXPECT(mt_moe_router_bwd(&dlogits, &dprobs, &probs, &idx, &logits, &aux_counts, &ro,
                                coeffs[0], coeffs[1], NULL) == MT_OK,
              "router bwd: %s", mt_last_error());
    float *dl = get(&dlogits);
    mt_test_close_f32("logits' gradient", dl, dlogits_g, (size_t)(N * E), 1e-6, 1e-5);

    /* dispatch map and permute */
    float *rows_g = mt_test_golden_f32(nm(tag, "rows"), &n, NULL);
    mt_tensor rows = PUT(NULL, MT_F32, MT_I32, N * k), pos = PUT(NULL, MT_F32, MT_I32, N, k);
    MT_EXPECT(mt_moe_dispatch_map(&rows, &pos, &idx, &counts, NULL) == MT_OK, "map: %s",
              mt_last_error());
    int32_t *rw = get(&rows), *ps = get(&pos);
    int64_t *a = malloc(sizeof(int64_t) * (size_t)(N * k)), *b = malloc(sizeof(int64_t) * N * k);
    for (int64_t r = 0; r < N * k; r++)
        a[r] = rw[r], b[r] = (int64_t)rows_g[r];
    mt_test_equal_i64("permuted rows' tokens", a, b, (size_t)(N * k));
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++)
            MT_EXPECT(rw[ps[t * k + j]] == t, "pos of token %lld choice %lld", (long long)t,
                      (long long)j);

    float *x_h = mt_test_golden_f32(nm(tag, "x"), &n, NULL);
    float *xp_g = mt_test_golden_f32(nm(tag, "xp"), &n, NULL);
    float *DXP = mt_test_golden_f32(nm(tag, "DXP"), &n, NULL);
    float *dx_g = mt_test_golden_f32(nm(tag, "dx"), &n, NULL);
    float *yp_h = mt_test_golden_f32(nm(tag, "yp"), &n, NULL);
    float *y_g = mt_test_golden_f32(nm(tag, "y"), &n, NULL);
    float *DY = mt_test_golden_f32(nm(tag, "DY"), &n, NULL);
    float *dyp_g = mt_test_golden_f32(nm(tag, "dyp"), &n, NULL);
    float *dprobs_g = mt_test_golden_f32(nm(tag, "dprobs"), &n, NULL);
    /* bf16 rows: the inputs rounded, the expected values megatron-core's permutation of them in
     * float64; ours are rounded to bf16 once (the dot products stay f32) */
    const double atol = rt == MT_F32 ? 1e-6 : 1e-6, rtol = rt == MT_F32 ? 1e-5 : 1.0 / 256;
    if (rt == MT_BF16) {
        round_bf16(x_h, (size_t)(N * C)), round_bf16(DXP, (size_t)(N * k * C));
        round_bf16(yp_h, (size_t)(N * k * C)), round_bf16(DY, (size_t)(N * C));
        bf16_reference(N, E, C, counts_g, rows_g, probs_g, x_h, DXP, yp_h, DY, xp_g, dx_g, y_g,
                       dyp_g, dprobs_g);
    }
    mt_tensor x = PUT(x_h, MT_F32, rt, N, C), xp = PUT(NULL, MT_F32, rt, N * k, C);
    MT_EXPECT(mt_moe_permute(&xp, &x, &rows, NULL) == MT_OK, "permute: %s", mt_last_error());
    float *xpv = get(&xp);
    mt_test_close_f32("permuted x", xpv, xp_g, (size_t)(N * k * C), atol, rtol);
    mt_tensor dxp = PUT(DXP, MT_F32, rt, N * k, C), dx = PUT(NULL, MT_F32, rt, N, C);
    MT_EXPECT(mt_moe_permute_bwd(&dx, &dxp, &pos, 0, NULL) == MT_OK, "permute bwd: %s",
              mt_last_error());
    float *dxv = get(&dx);
    mt_test_close_f32("permute's dx", dxv, dx_g, (size_t)(N * C), atol, rtol);
    MT_EXPECT(mt_moe_permute_bwd(&dx, &dxp, &pos, 1, NULL) == MT_OK, "permute bwd acc");
    float *dx2 = get(&dx);
    for (size_t i = 0; i < (size_t)(N * C); i++)
        dx_g[i] *= 2.0f;
    mt_test_close_f32("permute's dx, accumulated", dx2, dx_g, (size_t)(N * C), atol, 2 * rtol);

    /* combine and its backward */
    mt_tensor yp = PUT(yp_h, MT_F32, rt, N * k, C), y = PUT(NULL, MT_F32, rt, N, C);
    MT_EXPECT(mt_moe_unpermute(&y, &yp, &probs, &pos, NULL, NULL) == MT_OK, "unpermute: %s",
              mt_last_error());
    float *yv = get(&y);
    mt_test_close_f32("combined y", yv, y_g, (size_t)(N * C), atol, rtol);
    mt_tensor resid = PUT(x_h, MT_F32, rt, N, C);
    MT_EXPECT(mt_moe_unpermute(&y, &yp, &probs, &pos, &resid, NULL) == MT_OK, "unpermute resid");
    float *yr = get(&y);
    for (size_t i = 0; i < (size_t)(N * C); i++)
        y_g[i] += x_h[i];
    mt_test_close_f32("combined y + residual", yr, y_g, (size_t)(N * C), atol, 2 * rtol);
    mt_tensor dy = PUT(DY, MT_F32, rt, N, C), dyp = PUT(NULL, MT_F32, rt, N * k, C);
    mt_tensor dpr = PUT(NULL, MT_F32, MT_F32, N, k);
    MT_EXPECT(mt_moe_unpermute_bwd(&dyp, &dpr, &dy, &yp, &probs, &pos, NULL) == MT_OK,
              "unpermute bwd: %s", mt_last_error());
    float *dypv = get(&dyp), *dprv = get(&dpr), *dpr_g = malloc(sizeof(float) * N * k);
    mt_test_close_f32("combine's dyp", dypv, dyp_g, (size_t)(N * k * C), atol, rtol);
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++)
            dpr_g[t * k + j] = dprobs_g[t * E + id[t * k + j]];
    mt_test_close_f32("combine's dprobs", dprv, dpr_g, (size_t)(N * k), 1e-5, 1e-5);

    /* refusals */
    mt_tensor idx1 = PUT(NULL, MT_F32, MT_I32, N, E + 1), p1 = PUT(NULL, MT_F32, MT_F32, N, E + 1);
    MT_EXPECT_STATUS(mt_moe_topk(&p1, &idx1, &counts, &logits, NULL, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_moe_permute(&xp, &x, &pos, NULL), MT_ERR_INVALID_ARG); /* 2-D rows */
    MT_EXPECT_STATUS(mt_moe_unpermute(&y, &yp, &dlogits, &pos, NULL, NULL), MT_ERR_INVALID_ARG);
    mt_tensor *all[] = { &logits, &probs, &idx, &counts, &losses, &dprobs, &dlogits,
                         &rows,   &pos,   &x,   &xp,     &dxp,    &dx,     &yp,
                         &y,      &resid, &dy,  &dyp,    &dpr,    &idx1,   &p1 };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        drop(all[i]);
    void *host[] = { router_g,  meta, coeffs, logits_h, probs_g, counts_g,     G,     losses_g,
                     dlogits_g, p,    id,     cnt,      lo,      dp_h,         dl,    rows_g,
                     rw,        ps,   a,      b,        x_h,     xp_g,         xpv,   DXP,
                     dx_g,      dxv,  dx2,    yp_h,     y_g,     DY,           dyp_g, dprobs_g,
                     yv,        yr,   dypv,   dprv,     dpr_g,   aux_counts_g, acnt,  bias_h };
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* Token dropping (golden drop_*: megatron-core's apply_router_token_dropping, then permute and
 * unpermute with the final map): which choices stay, the permuted order (Megatron's, without
 * padding; with it, Megatron fills each expert's region with tokens of probability 0 where ours
 * has zero rows, so the rows are matched by token), the combine and its gradients, the logits'
 * gradient through the dropping. f32 rows. */
static void run_drop(const char *tag) {
    size_t n;
    float *meta = mt_test_golden_f32(nm(tag, "meta"), &n, NULL);
    const int64_t N = (int64_t)meta[0], E = (int64_t)meta[1], k = (int64_t)meta[2],
                  C = (int64_t)meta[3], cap = (int64_t)meta[4];
    const int by_pos = meta[5] != 0.0f, pad = meta[6] != 0.0f;
    const int64_t region = cap < N ? cap : N, R = pad ? E * region : N * k;
    printf("-- %s: N %lld E %lld top-%lld capacity %lld%s on %s\n", tag, (long long)N, (long long)E,
           (long long)k, (long long)cap, pad ? " padded" : "",
           mt_device_is_cuda(dev) ? "cuda" : "cpu");
    float *logits_h = mt_test_golden_f32(nm(tag, "logits"), &n, NULL);
    float *G = mt_test_golden_f32(nm(tag, "G"), &n, NULL);
    float *dlogits_g = mt_test_golden_f32(nm(tag, "dlogits"), &n, NULL);
    float *kept_g = mt_test_golden_f32(nm(tag, "kept"), &n, NULL);
    float *rows_g = mt_test_golden_f32(nm(tag, "rows"), &n, NULL);
    const int64_t Rg = (int64_t)n;
    mt_tensor logits = PUT(logits_h, MT_F32, MT_F32, N, E);
    mt_tensor probs = PUT(NULL, MT_F32, MT_F32, N, k), idx = PUT(NULL, MT_F32, MT_I32, N, k);
    mt_tensor counts = PUT(NULL, MT_F32, MT_I32, E), kept = PUT(NULL, MT_F32, MT_I32, E);
    mt_tensor rows = PUT(NULL, MT_F32, MT_I32, R), pos = PUT(NULL, MT_F32, MT_I32, N, k);
    mt_tensor work = PUT(NULL, MT_F32, MT_I32, N * k);
    MT_CHECK(mt_moe_topk(&probs, &idx, &counts, &logits, NULL, NULL));
    MT_EXPECT(mt_moe_capacity_map(&rows, &pos, &kept, &work, &idx, &probs, &counts, cap, by_pos,
                                  pad, NULL) == MT_OK,
              "capacity map: %s", mt_last_error());
    int32_t *id = get(&idx), *rw = get(&rows), *ps = get(&pos), *kp = get(&kept);
    int bad = 0;
    int64_t total = 0;
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++)
            bad += (ps[t * k + j] >= 0) != (kept_g[t * E + id[t * k + j]] != 0.0f);
    MT_EXPECT(bad == 0, "%s: %d choices kept or dropped unlike megatron-core", tag, bad);
    for (int64_t e = 0; e < E; e++) {
        int64_t want = 0;
        for (int64_t t = 0; t < N; t++)
            want += kept_g[t * E + e] != 0.0f;
        MT_EXPECT(kp[e] == want, "%s: expert %lld keeps %d, want %lld", tag, (long long)e, kp[e],
                  (long long)want);
        total += kp[e];
    }
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++)
            if (ps[t * k + j] >= 0)
                MT_EXPECT(rw[ps[t * k + j]] == t, "%s: pos of token %lld", tag, (long long)t);
    /* our row r's golden row (the same expert region, the same token) */
    int64_t *grow = malloc(sizeof(int64_t) * (size_t)R);
    for (int64_t r = 0, e = 0, off = 0; r < R; r++) {
        while (!pad && e < E && r >= off + kp[e])
            off += kp[e++];
        if (pad) e = r / region, off = e * region;
        grow[r] = -1;
        if (rw[r] < 0) continue;
        const int64_t g0 = pad ? e * region : off, g1 = pad ? g0 + region : off + kp[e];
        for (int64_t g = g0; g < g1 && g < Rg; g++)
            if ((int64_t)rows_g[g] == rw[r]) grow[r] = g;
        MT_EXPECT(grow[r] >= 0, "%s: row %lld (token %d) not in megatron-core's", tag, (long long)r,
                  rw[r]);
        if (!pad)
            MT_EXPECT(grow[r] == r, "%s: row %lld out of megatron-core's order", tag, (long long)r);
    }
    MT_EXPECT(pad ? R == Rg : total == Rg, "%s: %lld rows, megatron-core %lld", tag,
              (long long)(pad ? R : total), (long long)Rg);
    /* the combine over our layout of the golden expert outputs, and its gradients */
    float *yp_g = mt_test_golden_f32(nm(tag, "yp"), &n, NULL);
    float *y_g = mt_test_golden_f32(nm(tag, "y"), &n, NULL);
    float *DY = mt_test_golden_f32(nm(tag, "DY"), &n, NULL);
    float *dyp_g = mt_test_golden_f32(nm(tag, "dyp"), &n, NULL);
    float *dprobs_g = mt_test_golden_f32(nm(tag, "dprobs"), &n, NULL);
    float *yp_h = calloc((size_t)(R * C), sizeof(float)), *dyp_w = calloc((size_t)(R * C), 4);
    for (int64_t r = 0; r < R; r++)
        if (grow[r] >= 0)
            for (int64_t c = 0; c < C; c++) {
                yp_h[r * C + c] = yp_g[grow[r] * C + c];
                dyp_w[r * C + c] = dyp_g[grow[r] * C + c];
            }
    mt_tensor yp = PUT(yp_h, MT_F32, MT_F32, R, C), y = PUT(NULL, MT_F32, MT_F32, N, C);
    MT_CHECK(mt_moe_unpermute(&y, &yp, &probs, &pos, NULL, NULL));
    float *yv = get(&y);
    mt_test_close_f32("combine with dropped choices", yv, y_g, (size_t)(N * C), 1e-6, 1e-5);
    mt_tensor dy = PUT(DY, MT_F32, MT_F32, N, C), dyp = PUT(NULL, MT_F32, MT_F32, R, C);
    mt_tensor dpr = PUT(NULL, MT_F32, MT_F32, N, k);
    MT_CHECK(mt_fill(&dyp, 0.0f, NULL)); /* (padding rows are not written) */
    MT_CHECK(mt_moe_unpermute_bwd(&dyp, &dpr, &dy, &yp, &probs, &pos, NULL));
    float *dypv = get(&dyp), *dprv = get(&dpr), *dpr_g = malloc(sizeof(float) * (size_t)(N * k));
    mt_test_close_f32("combine's dyp", dypv, dyp_w, (size_t)(R * C), 1e-6, 1e-5);
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++)
            dpr_g[t * k + j] = dprobs_g[t * E + id[t * k + j]];
    mt_test_close_f32("combine's dprobs (0 where dropped)", dprv, dpr_g, (size_t)(N * k), 1e-5,
                      1e-5);
    /* the logits' gradient of sum(G * final probs): the kept choices' G, 0 for the dropped */
    float *dp_h = malloc(sizeof(float) * (size_t)(N * k));
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++)
            dp_h[t * k + j] = ps[t * k + j] >= 0 ? G[t * E + id[t * k + j]] : 0.0f;
    mt_tensor dprobs = PUT(dp_h, MT_F32, MT_F32, N, k), dlogits = PUT(NULL, MT_F32, MT_F32, N, E);
    MT_CHECK(mt_moe_router_bwd(&dlogits, &dprobs, &probs, &idx, &logits, &counts, NULL, 0.0f, 0.0f,
                               NULL));
    float *dl = get(&dlogits);
    mt_test_close_f32("logits' gradient through the dropping", dl, dlogits_g, (size_t)(N * E), 1e-6,
                      1e-5);
    mt_tensor *all[] = { &logits, &probs, &idx, &counts, &kept, &rows,   &pos,    &work,
                         &yp,     &y,     &dy,  &dyp,    &dpr,  &dprobs, &dlogits };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        drop(all[i]);
    void *host[] = { meta, logits_h, G,    dlogits_g, kept_g, rows_g, id,    rw,
                     ps,   kp,       grow, yp_g,      y_g,    DY,     dyp_g, dprobs_g,
                     yp_h, dyp_w,    yv,   dypv,      dprv,   dpr_g,  dp_h,  dl };
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* A golden int array as int64 (n: its length). */
static int64_t *golden_i64(const char *tag, const char *what, size_t *n) {
    float *f = mt_test_golden_f32(nm(tag, what), n, NULL);
    int64_t *v = malloc(sizeof(int64_t) * (*n + 1));
    for (size_t i = 0; i < *n; i++)
        v[i] = (int64_t)f[i];
    free(f);
    return v;
}

/* Expert parallelism's plan (host) against MoEAlltoAllTokenDispatcher's for every rank: the rows
 * sent to and received from each rank, each local expert's, and the sort of the received rows
 * and its inverse (sort_chunks_by_idxs); then refusals. */
static void run_ep(const char *tag, int ep, int E) {
    size_t nc;
    int64_t *c64 = golden_i64(tag, "counts", &nc);
    MT_EXPECT(nc == (size_t)(ep * E), "%s: %zu counts", tag, nc);
    int32_t counts[64];
    for (size_t i = 0; i < nc; i++)
        counts[i] = (int32_t)c64[i];
    for (int r = 0; r < ep; r++) {
        char t[32], w[64];
        snprintf(t, sizeof t, "%s_r%d", tag, r);
        size_t n1, n2, n3, ns, nu;
        int64_t *send = golden_i64(t, "send", &n1), *recv = golden_i64(t, "recv", &n2);
        int64_t *local = golden_i64(t, "local", &n3), *srt = golden_i64(t, "sort", &ns);
        int64_t *uns = golden_i64(t, "unsort", &nu);
        int64_t gs[16], gr[16], gl[16], rows = 0;
        MT_CHECK(mt_moe_ep_counts(counts, ep, r, E, gs, gr, gl));
        snprintf(w, sizeof w, "%s send", t);
        mt_test_equal_i64(w, gs, send, n1);
        snprintf(w, sizeof w, "%s recv", t);
        mt_test_equal_i64(w, gr, recv, n2);
        snprintf(w, sizeof w, "%s local", t);
        mt_test_equal_i64(w, gl, local, n3);
        for (int j = 0; j < ep; j++)
            rows += gr[j];
        MT_EXPECT((size_t)rows == ns && ns == nu, "%s: %lld rows received, golden %zu", t,
                  (long long)rows, ns);
        int32_t *ix = malloc(sizeof(int32_t) * (ns + 1));
        int64_t *ix64 = malloc(sizeof(int64_t) * (ns + 1));
        for (int inv = 0; inv < 2; inv++) {
            MT_CHECK(mt_moe_ep_sort(counts, ep, r, E, inv, ix, (int64_t)ns));
            for (size_t i = 0; i < ns; i++)
                ix64[i] = ix[i];
            snprintf(w, sizeof w, "%s %s", t, inv ? "unsort" : "sort");
            mt_test_equal_i64(w, ix64, inv ? uns : srt, ns);
        }
        MT_EXPECT(mt_moe_ep_sort(counts, ep, r, E, 0, ix, (int64_t)ns + 1) == MT_ERR_INVALID_ARG,
                  "%s: a wrong row count was taken", t);
        mt_error_clear();
        free(ix), free(ix64), free(send), free(recv), free(local), free(srt), free(uns);
    }
    int64_t x[16];
    MT_EXPECT(mt_moe_ep_counts(counts, ep, 0, E + 1, x, x, x) == MT_ERR_INVALID_ARG,
              "%d experts over %d ranks taken", E + 1, ep);
    MT_EXPECT(mt_moe_ep_counts(counts, ep, ep, E, x, x, x) == MT_ERR_INVALID_ARG,
              "rank %d of %d taken", ep, ep);
    counts[1] = -1;
    MT_EXPECT(mt_moe_ep_counts(counts, ep, 0, E, x, x, x) == MT_ERR_INVALID_ARG,
              "a negative count taken");
    mt_error_clear();
    free(c64);
}

/* seq_aux_loss (golden seq*: TopKRouter._apply_seq_aux_loss): each sequence's aux counts, the
 * per-sequence load-balancing loss and its gradient (with the z loss's and the routing's). */
static void run_seq_case(const char *tag) {
    size_t n;
    float *meta = mt_test_golden_f32(nm(tag, "meta"), &n, NULL);
    const int64_t S = (int64_t)meta[1], E = (int64_t)meta[2], k = (int64_t)meta[3];
    const int64_t Bs = (int64_t)meta[0], N = Bs * S;
    float *coeffs = mt_test_golden_f32(nm(tag, "coeffs"), &n, NULL);
    float *logits_h = mt_test_golden_f32(nm(tag, "logits"), &n, NULL);
    float *probs_g = mt_test_golden_f32(nm(tag, "probs"), &n, NULL);
    float *seq_g = mt_test_golden_f32(nm(tag, "seq_counts"), &n, NULL);
    float *G = mt_test_golden_f32(nm(tag, "G"), &n, NULL);
    double *losses_g = mt_test_golden_f64(nm(tag, "losses"), &n);
    float *dlogits_g = mt_test_golden_f32(nm(tag, "dlogits"), &n, NULL);
    const mt_moe_router ro = { 0, 0.0f, 0, 0, meta[4] != 0.0f, NULL, S };
    printf("-- %s: %lld sequences of %lld, E %lld top-%lld on %s\n", tag, (long long)Bs,
           (long long)S, (long long)E, (long long)k, mt_device_is_cuda(dev) ? "cuda" : "cpu");
    mt_tensor logits = PUT(logits_h, MT_F32, MT_F32, N, E);
    mt_tensor probs = PUT(NULL, MT_F32, MT_F32, N, k), idx = PUT(NULL, MT_F32, MT_I32, N, k);
    mt_tensor counts = PUT(NULL, MT_F32, MT_I32, E), seqc = PUT(NULL, MT_F32, MT_I32, Bs, E);
    mt_tensor sp = PUT(NULL, MT_F32, MT_F32, N, k), sid = PUT(NULL, MT_F32, MT_I32, N, k);
    MT_CHECK(mt_moe_topk(&probs, &idx, &counts, &logits, &ro, NULL));
    MT_CHECK(mt_moe_aux_counts(&seqc, &sp, &sid, &logits, S, NULL));
    float *p = get(&probs);
    int32_t *id = get(&idx), *sc = get(&seqc);
    expect_dense_probs(p, id, N, E, k, probs_g, 0);
    expect_counts("each sequence's aux counts", sc, seq_g, Bs * E);
    mt_tensor losses = PUT(NULL, MT_F32, MT_F32, 2);
    MT_CHECK(mt_moe_router_losses(&losses, &logits, &seqc, (int)k, &ro, NULL));
    float *lo = get(&losses);
    const float lg[2] = { (float)losses_g[0], (float)losses_g[1] };
    mt_test_close_f32("seq aux and z losses", lo, lg, 2, 0.0, 1e-5);
    float *dp_h = dprobs_of(G, id, N, E, k);
    mt_tensor dprobs = PUT(dp_h, MT_F32, MT_F32, N, k), dlogits = PUT(NULL, MT_F32, MT_F32, N, E);
    MT_CHECK(mt_moe_router_bwd(&dlogits, &dprobs, &probs, &idx, &logits, &seqc, &ro, coeffs[0],
                               coeffs[1], NULL));
    float *dl = get(&dlogits);
    mt_test_close_f32("logits' gradient (seq aux)", dl, dlogits_g, (size_t)(N * E), 1e-6, 1e-5);
    void *host[] = { meta,      coeffs, logits_h, probs_g, seq_g, G,    losses_g,
                     dlogits_g, p,      id,       sc,      lo,    dp_h, dl };
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* The expert bias's update (golden bias_update: megatron-core's get_updated_expert_bias) and its
 * bookkeeping of the tokens per expert. */
static void test_bias_update(void) {
    size_t n;
    float *tok_g = mt_test_golden_f32("bias_update_tokens.npy", &n, NULL);
    float *bias_g = mt_test_golden_f32("bias_update_bias.npy", &n, NULL);
    float *rate = mt_test_golden_f32("bias_update_rate.npy", &n, NULL);
    float *out_g = mt_test_golden_f32("bias_update_out.npy", &n, NULL);
    const int64_t L = 3, E = (int64_t)n / 3;
    mt_tensor bias = PUT(bias_g, MT_F32, MT_F32, L, E), tok = PUT(NULL, MT_F32, MT_F32, L, E);
    MT_CHECK(mt_memset_zero(tok.data, tok.device, (size_t)(L * E) * 4, NULL));
    /* the tokens arrive as counts, router by router, in two micro-batches */
    for (int64_t r = 0; r < L; r++)
        for (int half = 0; half < 2; half++) {
            int32_t c[64];
            for (int64_t e = 0; e < E; e++) {
                const int32_t v = (int32_t)tok_g[r * E + e];
                c[e] = half ? v - v / 2 : v / 2;
            }
            mt_tensor counts = PUT(c, MT_I32, MT_I32, E), rows, row;
            MT_CHECK(mt_tensor_slice(&tok, 0, r, 1, &rows));
            MT_CHECK(mt_tensor_reshape(&rows, 1, (int64_t[]){ E }, &row));
            MT_CHECK(mt_moe_expert_bias_tokens(&row, &counts, NULL));
        }
    float *t = get(&tok);
    mt_test_close_f32("tokens per expert, accumulated", t, tok_g, (size_t)(L * E), 0.0, 0.0);
    MT_CHECK(mt_moe_expert_bias_update(&bias, &tok, rate[0], NULL));
    float *b = get(&bias), *t2 = get(&tok), zero[64 * 3] = { 0 };
    mt_test_close_f32("updated expert bias", b, out_g, (size_t)(L * E), 1e-9, 1e-6);
    mt_test_close_f32("tokens zeroed", t2, zero, (size_t)(L * E), 0.0, 0.0);
    free(tok_g), free(bias_g), free(rate), free(out_g), free(t), free(b), free(t2);
}

/* Group-limited routing's limits, with Megatron's names in the messages. */
static void test_group_args(void) {
    mt_tensor logits = PUT(NULL, MT_F32, MT_F32, 3, 16);
    mt_tensor probs = PUT(NULL, MT_F32, MT_F32, 3, 4), idx = PUT(NULL, MT_F32, MT_I32, 3, 4);
    mt_tensor counts = PUT(NULL, MT_F32, MT_I32, 16);
    const mt_moe_router bad[] = {
        { 0, 0.0f, 3, 1, 0, NULL, 0 },    /* 16 experts in 3 groups */
        { 0, 0.0f, 4, 5, 0, NULL, 0 },    /* 5 of 4 groups */
        { 0, 0.0f, 4, 0, 0, NULL, 0 },    /* groups without a group count a token */
        { 0, 0.0f, 8, 1, 0, NULL, 0 },    /* top 4 from the 2 experts of 1 group */
        { 0, 0.0f, 16, 8, 0, NULL, 0 },   /* top 4 from 8 groups: fewer choices than groups */
        { 1, 0.0f, 0, 0, 1, NULL, 0 },    /* pre-softmax sigmoid scores */
        { 0, 0.0f, 0, 0, 0, &logits, 0 }, /* an expert bias without sigmoid scores */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        MT_EXPECT_STATUS(mt_moe_topk(&probs, &idx, &counts, &logits, &bad[i], NULL),
                         MT_ERR_INVALID_ARG);
}

int main(int argc, char **argv) {
    const int cuda = argc > 1 && strcmp(argv[1], "cuda") == 0;
    if (cuda) {
        mt_test_require_gpus(1);
        dev = mt_device_cuda(0);
    } else {
        dev = mt_device_cpu();
    }
    run_case("top2", MT_F32);
    run_case("top3", MT_F32);
    run_case("top2pre", MT_F32);    /* pre-softmax probabilities, scaled by 2.5 */
    run_case("top3scaled", MT_F32); /* the softmax over the k, scaled by 2 */
    run_case("top2", MT_BF16);
    run_case("group4", MT_F32);    /* 16 experts in 4 groups, the top 4 of a token's best 2 */
    run_case("group4pre", MT_F32); /* the same, the groups by their softmax scores */
    run_case("sig3", MT_F32);      /* sigmoid scores over the chosen ones' sum, scaled by 2.5 */
    run_case("sig1", MT_F32);      /* sigmoid top-1: the score itself */
    run_case("sig4group", MT_F32); /* sigmoid scores, 4 of 16 from 2 of 4 groups */
    run_case("sig4bias", MT_F32);  /* the same with an expert bias in the choice */
    run_case("sig2bias", MT_F32);  /* an expert bias, top-2, scaled */
    test_bias_update();
    run_seq_case("seq2");    /* seq_aux_loss: 3 sequences of 13 tokens, softmax top-2 */
    run_seq_case("seqsig3"); /* the same with sigmoid scores, top-3 */
    test_group_args();
    run_drop("drop_probs");
    run_drop("drop_probs_pad");
    run_drop("drop_big");
    run_ep("ep2", 2, 6);
    run_ep("ep4", 4, 8);
    return mt_test_result();
}
