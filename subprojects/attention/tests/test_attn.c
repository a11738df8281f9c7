/* unit: CPU attention forward/backward against torch SDPA (float64) golden values (causal, full,
 * and with document masks: SDPA given the boolean mask; with attention dropout: softmax, the mask
 * from an independent Philox and P V by hand), also through strided q/k/v views of one fused QKV
 * buffer; forwards over more keys than queries (a KV cache's, bottom-right causal); and argument
 * validation. */
#include <mt/attention.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int causal;
    float scale;
    int docs;   /* 1: document masks from the golden's ks */
    float drop; /* attention dropout p (the golden's ids, DROP_SEED, DROP_SITE) */
} golden_case;

enum {
    DROP_SITE = 3
};
static const uint64_t DROP_SEED = 0x123456789ABCull;

static const golden_case cases[] = {
    { "mha_t16_d64_causal", 1, 0.0f, 0, 0.0f },     { "mqa_t1_d64", 0, 0.0f, 0, 0.0f },
    { "gqa4_t70_d40_causal", 1, 0.0f, 0, 0.0f },    { "gqa8_t33_d96", 0, 0.0f, 0, 0.0f },
    { "gqa2_t67_d64_s0.3", 0, 0.3f, 0, 0.0f },      { "gqa2_t67_d64_causal", 1, 0.0f, 0, 0.0f },
    { "gqa2_t67_d64_docs", 1, 0.0f, 1, 0.0f },      { "mha_t40_d40_docs", 1, 0.0f, 1, 0.0f },
    { "mha_t40_d64_drop", 1, 0.0f, 0, 0.2f },       { "gqa2_t33_d40_drop", 0, 0.0f, 0, 0.5f },
    { "gqa2_t67_d64_docs_drop", 1, 0.0f, 1, 0.1f },
};

static float *load(const golden_case *c, const char *key, mt_npy *shape) {
    char name[128];
    snprintf(name, sizeof name, "attn_%s_%s.npy", c->name, key);
    return mt_test_golden_f32(name, NULL, shape);
}

static void check(const char *what, const golden_case *c, const float *got, const char *key,
                  size_t n) {
    float *ref = load(c, key, NULL);
    char msg[160];
    snprintf(msg, sizeof msg, "%s %s %s", c->name, key, what);
    mt_test_close_f32(msg, got, ref, n, 2e-5, 1e-4);
    free(ref);
}

/* Column sums over (b, t) of x (B,T,heads,D), folding `fold` consecutive heads into one, in
 * double; mag gets the sums of magnitudes. */
static void colsums(double *sum, double *mag, const float *x, int64_t rows, int64_t heads,
                    int64_t D, int64_t fold) {
    for (int64_t j = 0; j < heads / fold * D; j++)
        sum[j] = mag[j] = 0.0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t d = 0; d < D; d++) {
                const double e = x[(r * heads + h) * D + d];
                sum[h / fold * D + d] += e, mag[h / fold * D + d] += fabs(e);
            }
}

/* |got - want| <= tol * mag per column. */
static void close_sums(const char *what, const golden_case *c, const float *got, const double *want,
                       const double *mag, int64_t n, double tol) {
    int bad = 0;
    for (int64_t j = 0; j < n; j++)
        /* (the golden's zero gradients come as noise of about 1e-16) */
        if (!(fabs((got ? got[j] : 0.0) - want[j]) <= tol * mag[j] + 1e-12)) bad++;
    MT_EXPECT(bad == 0, "%s %s: %d of %lld columns off", c->name, what, bad, (long long)n);
}

/* mt_attn_bwd_bias's sums against the torch gradients' column sums, and the identities the fused
 * CUDA path uses, on the torch gradients: dv's sums are dout's summed over each kv head's query
 * heads, dk's are zero. */
static void check_bias_sums(const golden_case *c, mt_tensor *tdq, mt_tensor *tdk, mt_tensor *tdv,
                            const mt_tensor *tdo, const mt_tensor *tq, const mt_tensor *tk,
                            const mt_tensor *tv, const mt_tensor *tout, const mt_tensor *tlse,
                            const mt_attn_config *cfg) {
    const int64_t B = tq->shape[0], T = tq->shape[1], H = tq->shape[2], D = tq->shape[3];
    const int64_t Hkv = tk->shape[2], rows = B * T;
    float *got[3], *ref[3] = { load(c, "dq", NULL), load(c, "dk", NULL), load(c, "dv", NULL) };
    float *dout = load(c, "dout", NULL);
    double *want = malloc((size_t)(H * D) * 8), *mag = malloc((size_t)(H * D) * 8);
    mt_tensor tb[3];
    for (int i = 0; i < 3; i++) {
        got[i] = malloc((size_t)((i ? Hkv : H) * D) * 4);
        tb[i] = mt_tensor_1d(got[i], MT_F32, (i ? Hkv : H) * D, MT_DEVICE_CPU);
    }
    for (int acc = 0; acc < 2; acc++) /* the second call adds: twice the sums */
        MT_CHECK(mt_attn_bwd_bias(tdq, tdk, tdv, &tb[0], &tb[1], &tb[2], acc, tdo, tq, tk, tv, tout,
                                  tlse, cfg, NULL, 0, NULL));
    static const char *names[3] = { "bias sums dq (x2)", "bias sums dk (x2)", "bias sums dv (x2)" };
    for (int i = 0; i < 3; i++) {
        const int64_t heads = i ? Hkv : H;
        colsums(want, mag, ref[i], rows, heads, D, 1);
        for (int64_t j = 0; j < heads * D; j++)
            want[j] *= 2.0, mag[j] *= 2.0;
        close_sums(names[i], c, got[i], want, mag, heads * D, 1e-5);
    }
    colsums(want, mag, ref[1], rows, Hkv, D, 1); /* dk's sums: zero */
    for (int64_t j = 0; j < Hkv * D; j++)
        want[j] = -want[j];
    close_sums("identity: dk's sums are zero", c, NULL, want, mag, Hkv * D, 1e-5);
    double *vs = malloc((size_t)(Hkv * D) * 8), *vm = malloc((size_t)(Hkv * D) * 8);
    colsums(vs, vm, ref[2], rows, Hkv, D, 1);
    if (c->drop > 0.0f) { /* dropped weights: a row of P's no longer sums to 1 */
        for (int i = 0; i < 3; i++)
            free(got[i]), free(ref[i]);
        free(dout), free(want), free(mag), free(vs), free(vm);
        return;
    }
    colsums(want, mag, dout, rows, H, D, H / Hkv);
    for (int64_t j = 0; j < Hkv * D; j++)
        want[j] -= vs[j], mag[j] += vm[j];
    close_sums("identity: dv's sums are dout's", c, NULL, want, mag, Hkv * D, 1e-5);
    for (int i = 0; i < 3; i++)
        free(got[i]), free(ref[i]);
    free(dout), free(want), free(mag), free(vs), free(vm);
}

/* fused = 0: contiguous q, k, v; 1: slices of one (B,T,H+2Hkv,D) buffer. */
static void run(const golden_case *c, int fused) {
    mt_npy qs, ks;
    float *q = load(c, "q", &qs), *k = load(c, "k", &ks), *v = load(c, "v", NULL);
    float *dout = load(c, "dout", NULL);
    int64_t B = qs.shape[0], T = qs.shape[1], H = qs.shape[2], D = qs.shape[3], Hkv = ks.shape[2];
    size_t nq = (size_t)(B * T * H * D), nk = (size_t)(B * T * Hkv * D);
    mt_tensor tq = mt_tensor_4d(q, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor tk = mt_tensor_4d(k, MT_F32, B, T, Hkv, D, MT_DEVICE_CPU);
    mt_tensor tv = mt_tensor_4d(v, MT_F32, B, T, Hkv, D, MT_DEVICE_CPU);
    float *qkv = NULL;
    if (fused) { /* (B,T,H+2Hkv,D): copy in, then view the three slices */
        int64_t W = H + 2 * Hkv;
        qkv = malloc((size_t)(B * T * W * D) * sizeof *qkv);
        for (int64_t bt = 0; bt < B * T; bt++) {
            memcpy(qkv + (bt * W) * D, q + bt * H * D, (size_t)(H * D) * 4);
            memcpy(qkv + (bt * W + H) * D, k + bt * Hkv * D, (size_t)(Hkv * D) * 4);
            memcpy(qkv + (bt * W + H + Hkv) * D, v + bt * Hkv * D, (size_t)(Hkv * D) * 4);
        }
        mt_tensor all = mt_tensor_4d(qkv, MT_F32, B, T, W, D, MT_DEVICE_CPU);
        MT_CHECK(mt_tensor_slice(&all, 2, 0, H, &tq));
        MT_CHECK(mt_tensor_slice(&all, 2, H, Hkv, &tk));
        MT_CHECK(mt_tensor_slice(&all, 2, H + Hkv, Hkv, &tv));
    }
    float *out = malloc(nq * 4), *lse = malloc((size_t)(B * H * T) * 4);
    float *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
    mt_tensor tout = mt_tensor_4d(out, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor tlse = mt_tensor_3d(lse, MT_F32, B, H, T, MT_DEVICE_CPU);
    mt_tensor tdo = mt_tensor_4d(dout, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor tdq = mt_tensor_4d(dq, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor tdk = mt_tensor_4d(dk, MT_F32, B, T, Hkv, D, MT_DEVICE_CPU);
    mt_tensor tdv = mt_tensor_4d(dv, MT_F32, B, T, Hkv, D, MT_DEVICE_CPU);
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    cfg.causal = c->causal;
    cfg.scale = c->scale;
    int32_t *ksi = NULL;
    mt_tensor tks;
    if (c->docs) { /* the golden's key starts (stored as f32) */
        float *ksf = load(c, "ks", NULL);
        ksi = malloc((size_t)(B * T) * 4);
        for (int64_t i = 0; i < B * T; i++)
            ksi[i] = (int32_t)ksf[i];
        free(ksf);
        tks = mt_tensor_2d(ksi, MT_I32, B, T, MT_DEVICE_CPU);
        cfg.key_start = &tks;
    }
    int64_t ids[8];
    mt_tensor tids;
    if (c->drop > 0.0f) { /* the golden's sample ids */
        char name[128];
        snprintf(name, sizeof name, "attn_%s_ids.npy", c->name);
        size_t nid;
        double *idd = mt_test_golden_f64(name, &nid);
        for (size_t i = 0; i < nid && i < 8; i++)
            ids[i] = (int64_t)idd[i];
        free(idd);
        tids = mt_tensor_1d(ids, MT_I64, B, MT_DEVICE_CPU);
        cfg.dropout = (mt_dropout_config){ c->drop, DROP_SEED, DROP_SITE, &tids, 0, 0 };
    }
    size_t ws = 1;
    MT_CHECK(mt_attn_bwd_workspace(&tq, &tk, &cfg, &ws));
    MT_EXPECT(ws == 0, "CPU workspace %zu", ws);
    MT_CHECK(mt_attn_fwd(&tout, &tlse, &tq, &tk, &tv, &cfg, NULL));
    MT_CHECK(mt_attn_bwd(&tdq, &tdk, &tdv, &tdo, &tq, &tk, &tv, &tout, &tlse, &cfg, NULL, 0, NULL));
    const char *what = fused ? "fused" : "cpu";
    check(what, c, out, "out", nq);
    check(what, c, lse, "lse", (size_t)(B * H * T));
    check(what, c, dq, "dq", nq);
    check(what, c, dk, "dk", nk);
    check(what, c, dv, "dv", nk);
    if (!fused) check_bias_sums(c, &tdq, &tdk, &tdv, &tdo, &tq, &tk, &tv, &tout, &tlse, &cfg);
    free(q), free(k), free(v), free(dout), free(qkv), free(out), free(lse), free(dq), free(dk),
        free(dv), free(ksi);
}

/* A forward over cached keys (Tq queries, the last of Tk positions) against the golden, with k and
 * v as the first Tk rows of a longer cache (B, Tk + 9, Hkv, D), as a KV cache holds them. */
static void run_kv(const char *name, int causal) {
    golden_case c = { name, causal, 0.0f, 0, 0.0f };
    mt_npy qs, ks;
    float *q = load(&c, "q", &qs), *k = load(&c, "k", &ks), *v = load(&c, "v", NULL);
    const int64_t B = qs.shape[0], T = qs.shape[1], H = qs.shape[2], D = qs.shape[3];
    const int64_t Tk = ks.shape[1], Hkv = ks.shape[2], Tmax = Tk + 9;
    float *kc = calloc((size_t)(B * Tmax * Hkv * D), 4),
          *vc = calloc((size_t)(B * Tmax * Hkv * D), 4);
    for (int64_t b = 0; b < B; b++) {
        memcpy(kc + b * Tmax * Hkv * D, k + b * Tk * Hkv * D, (size_t)(Tk * Hkv * D) * 4);
        memcpy(vc + b * Tmax * Hkv * D, v + b * Tk * Hkv * D, (size_t)(Tk * Hkv * D) * 4);
    }
    mt_tensor tq = mt_tensor_4d(q, MT_F32, B, T, H, D, MT_DEVICE_CPU), tk, tv;
    mt_tensor kall = mt_tensor_4d(kc, MT_F32, B, Tmax, Hkv, D, MT_DEVICE_CPU);
    mt_tensor vall = mt_tensor_4d(vc, MT_F32, B, Tmax, Hkv, D, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_slice(&kall, 1, 0, Tk, &tk));
    MT_CHECK(mt_tensor_slice(&vall, 1, 0, Tk, &tv));
    float *out = malloc((size_t)(B * T * H * D) * 4), *lse = malloc((size_t)(B * H * T) * 4);
    mt_tensor tout = mt_tensor_4d(out, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor tlse = mt_tensor_3d(lse, MT_F32, B, H, T, MT_DEVICE_CPU);
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    cfg.causal = causal;
    MT_CHECK(mt_attn_fwd(&tout, &tlse, &tq, &tk, &tv, &cfg, NULL));
    check("cached keys", &c, out, "out", (size_t)(B * T * H * D));
    check("cached keys", &c, lse, "lse", (size_t)(B * H * T));
    /* the same keys appended in two pieces (mt_attn_kv_append) to a cache of NaN rows, then the
     * whole cache with key_len = Tk (the rows past it, NaN, must not be read) */
    const size_t nc = (size_t)(B * Tmax * Hkv * D);
    float *kn = malloc(nc * 4), *vn = malloc(nc * 4);
    for (size_t i = 0; i < nc; i++)
        kn[i] = vn[i] = NAN;
    mt_tensor kna = mt_tensor_4d(kn, MT_F32, B, Tmax, Hkv, D, MT_DEVICE_CPU);
    mt_tensor vna = mt_tensor_4d(vn, MT_F32, B, Tmax, Hkv, D, MT_DEVICE_CPU);
    int32_t len[8];
    mt_tensor tlen = mt_tensor_1d(len, MT_I32, B, MT_DEVICE_CPU);
    const int64_t half = Tk / 2;
    for (int piece = 0; piece < 2; piece++) {
        const int64_t r0 = piece ? half : 0, r1 = piece ? Tk : half;
        mt_tensor kp, vp;
        MT_CHECK(mt_tensor_slice(&kall, 1, r0, r1 - r0, &kp));
        MT_CHECK(mt_tensor_slice(&vall, 1, r0, r1 - r0, &vp));
        for (int64_t b = 0; b < B; b++)
            len[b] = (int32_t)r1;
        MT_CHECK(mt_attn_kv_append(&kna, &vna, &kp, &vp, &tlen, NULL));
    }
    int same = 1;
    for (int64_t b = 0; b < B; b++)
        same &=
            !memcmp(kn + b * Tmax * Hkv * D, kc + b * Tmax * Hkv * D, (size_t)(Tk * Hkv * D) * 4) &&
            !memcmp(vn + b * Tmax * Hkv * D, vc + b * Tmax * Hkv * D, (size_t)(Tk * Hkv * D) * 4);
    MT_EXPECT(same, "%s: mt_attn_kv_append's rows differ from the keys and values", name);
    cfg.key_len = &tlen; /* (len = Tk from the last piece) */
    memset(out, 0, (size_t)(B * T * H * D) * 4);
    MT_CHECK(mt_attn_fwd(&tout, &tlse, &tq, &kna, &vna, &cfg, NULL));
    check("key_len", &c, out, "out", (size_t)(B * T * H * D));
    check("key_len", &c, lse, "lse", (size_t)(B * H * T));
    len[0] = (int32_t)Tmax + 1; /* past the cache */
    MT_EXPECT_STATUS(mt_attn_fwd(&tout, &tlse, &tq, &kna, &vna, &cfg, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_attn_kv_append(&kna, &vna, &tk, &tv, &tlen, NULL), MT_ERR_INVALID_ARG);
    free(kn), free(vn);
    /* the backward keeps T keys */
    size_t ws;
    MT_EXPECT_STATUS(mt_attn_bwd_workspace(&tq, &tk, &cfg, &ws), MT_ERR_INVALID_ARG);
    free(q), free(k), free(v), free(kc), free(vc), free(out), free(lse);
}

/* The backward over a key prefix (context parallelism: the queries the last Tq of Tk positions):
 * out, lse, dq, dk and dv against torch's autograd of the bottom-right mask; also with the q, k
 * and v of one fused buffer, and refused with fewer keys than queries. */
static void run_kvb(const char *name, int causal) {
    golden_case c = { name, causal, 0.0f, 0, 0.0f };
    mt_npy qs, ks;
    float *q = load(&c, "q", &qs), *k = load(&c, "k", &ks), *v = load(&c, "v", NULL);
    float *dout = load(&c, "dout", NULL);
    const int64_t B = qs.shape[0], T = qs.shape[1], H = qs.shape[2], D = qs.shape[3];
    const int64_t Tk = ks.shape[1], Hkv = ks.shape[2];
    const size_t nq = (size_t)(B * T * H * D), nk = (size_t)(B * Tk * Hkv * D);
    float *out = malloc(nq * 4), *lse = malloc((size_t)(B * H * T) * 4), *dq = malloc(nq * 4);
    float *dk = malloc(nk * 4), *dv = malloc(nk * 4);
    mt_tensor tq = mt_tensor_4d(q, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor tk = mt_tensor_4d(k, MT_F32, B, Tk, Hkv, D, MT_DEVICE_CPU);
    mt_tensor tv = mt_tensor_4d(v, MT_F32, B, Tk, Hkv, D, MT_DEVICE_CPU);
    mt_tensor tdo = mt_tensor_4d(dout, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor to = mt_tensor_4d(out, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor tl = mt_tensor_3d(lse, MT_F32, B, H, T, MT_DEVICE_CPU);
    mt_tensor tdq = mt_tensor_4d(dq, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor tdk = mt_tensor_4d(dk, MT_F32, B, Tk, Hkv, D, MT_DEVICE_CPU);
    mt_tensor tdv = mt_tensor_4d(dv, MT_F32, B, Tk, Hkv, D, MT_DEVICE_CPU);
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    cfg.causal = causal;
    MT_CHECK(mt_attn_fwd(&to, &tl, &tq, &tk, &tv, &cfg, NULL));
    check("key prefix", &c, out, "out", nq);
    check("key prefix", &c, lse, "lse", (size_t)(B * H * T));
    size_t ws = 1;
    MT_CHECK(mt_attn_bwd_workspace(&tq, &tk, &cfg, &ws));
    MT_EXPECT(ws == 0, "%s: a CPU workspace of %zu bytes", name, ws);
    MT_CHECK(mt_attn_bwd(&tdq, &tdk, &tdv, &tdo, &tq, &tk, &tv, &to, &tl, &cfg, NULL, 0, NULL));
    check("key prefix", &c, dq, "dq", nq);
    check("key prefix", &c, dk, "dk", nk);
    check("key prefix", &c, dv, "dv", nk);
    /* fewer keys than queries: the forward takes it when not causal, the backward never */
    if (T > 1) {
        mt_tensor k1, v1, dk1, dv1;
        MT_CHECK(mt_tensor_slice(&tk, 1, 0, T - 1, &k1));
        MT_CHECK(mt_tensor_slice(&tv, 1, 0, T - 1, &v1));
        MT_CHECK(mt_tensor_slice(&tdk, 1, 0, T - 1, &dk1));
        MT_CHECK(mt_tensor_slice(&tdv, 1, 0, T - 1, &dv1));
        MT_EXPECT_STATUS(
            mt_attn_bwd(&tdq, &dk1, &dv1, &tdo, &tq, &k1, &v1, &to, &tl, &cfg, NULL, 0, NULL),
            MT_ERR_INVALID_ARG);
    }
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv);
}

static void check_errors(void) {
    float buf[2 * 4 * 8 * 16] = { 0 }, lse[64];
    mt_tensor q = mt_tensor_4d(buf, MT_F32, 2, 4, 6, 16, MT_DEVICE_CPU);
    mt_tensor k = mt_tensor_4d(buf, MT_F32, 2, 4, 4, 16, MT_DEVICE_CPU);
    mt_tensor o = mt_tensor_4d(lse, MT_F32, 2, 4, 6, 16, MT_DEVICE_CPU);
    mt_tensor l = mt_tensor_3d(lse, MT_F32, 2, 6, 4, MT_DEVICE_CPU);
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    MT_EXPECT_STATUS(mt_attn_fwd(&o, &l, &q, &k, &k, &cfg, NULL), MT_ERR_INVALID_ARG); /* 6 % 4 */
    mt_tensor q3 = mt_tensor_3d(buf, MT_F32, 2, 4, 16, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_attn_fwd(&o, &l, &q3, &k, &k, &cfg, NULL), MT_ERR_INVALID_ARG);
    mt_tensor big = mt_tensor_4d(buf, MT_F32, 1, 1, 1, 300, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_attn_fwd(&o, &l, &big, &big, &big, &cfg, NULL), MT_ERR_UNSUPPORTED);
    mt_attn_config bad = { 0 };
    MT_EXPECT_STATUS(mt_attn_fwd(&o, &l, &q, &k, &k, &bad, NULL), MT_ERR_INVALID_ARG);
    mt_tensor ks = mt_tensor_4d(buf, MT_F32, 2, 4, 2, 16, MT_DEVICE_CPU);
    ks.stride[3] = 2; /* D not innermost */
    MT_EXPECT_STATUS(mt_attn_fwd(&o, &l, &q, &ks, &ks, &cfg, NULL), MT_ERR_INVALID_ARG);
    /* bias sums: f32 of H*D (dbq) or Hkv*D elements */
    mt_tensor q4 = mt_tensor_4d(buf, MT_F32, 2, 4, 4, 16, MT_DEVICE_CPU);
    mt_tensor o4 = mt_tensor_4d(buf, MT_F32, 2, 4, 4, 16, MT_DEVICE_CPU);
    mt_tensor l4 = mt_tensor_3d(lse, MT_F32, 2, 4, 4, MT_DEVICE_CPU);
    float sums[64];
    mt_tensor short_sum = mt_tensor_1d(sums, MT_F32, 63, MT_DEVICE_CPU);
    mt_tensor bf_sum = mt_tensor_1d(sums, MT_BF16, 64, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_attn_bwd_bias(&q4, &q4, &q4, &short_sum, NULL, NULL, 0, &o4, &q4, &q4, &q4,
                                      &o4, &l4, &cfg, NULL, 0, NULL),
                     MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_attn_bwd_bias(&q4, &q4, &q4, NULL, NULL, &bf_sum, 0, &o4, &q4, &q4, &q4,
                                      &o4, &l4, &cfg, NULL, 0, NULL),
                     MT_ERR_INVALID_ARG);
    /* document masks: causal only; i32 (B,T); each row's starts nondecreasing and <= the query */
    int32_t st[2][4] = { { 0, 0, 2, 2 }, { 0, 1, 1, 3 } };
    mt_tensor tks = mt_tensor_2d(st, MT_I32, 2, 4, MT_DEVICE_CPU);
    static float ob[2 * 4 * 4 * 16];
    o4 = mt_tensor_4d(ob, MT_F32, 2, 4, 4, 16, MT_DEVICE_CPU); /* (not aliasing q) */
    cfg.key_start = &tks;
    MT_EXPECT_STATUS(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL), MT_ERR_INVALID_ARG);
    cfg.causal = 1;
    MT_CHECK(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL));
    st[1][2] = 0; /* decreasing */
    MT_EXPECT_STATUS(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL), MT_ERR_INVALID_ARG);
    st[1][2] = 3; /* past its query */
    MT_EXPECT_STATUS(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL), MT_ERR_INVALID_ARG);
    st[1][2] = 1;
    mt_tensor short_ks = mt_tensor_2d(st, MT_I32, 2, 3, MT_DEVICE_CPU);
    mt_tensor f32_ks = mt_tensor_2d(st, MT_F32, 2, 4, MT_DEVICE_CPU);
    cfg.key_start = &short_ks;
    MT_EXPECT_STATUS(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL), MT_ERR_INVALID_ARG);
    cfg.key_start = &f32_ks;
    MT_EXPECT_STATUS(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL), MT_ERR_INVALID_ARG);
    /* attention dropout: p in [0, 1); (B) i64 sample ids */
    cfg.key_start = NULL;
    int64_t ids[2] = { 0, 1 };
    mt_tensor tids = mt_tensor_1d(ids, MT_I64, 2, MT_DEVICE_CPU);
    mt_tensor short_ids = mt_tensor_1d(ids, MT_I64, 1, MT_DEVICE_CPU);
    cfg.dropout = (mt_dropout_config){ 0.1f, 1, 0, &tids, 0, 0 };
    MT_CHECK(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL));
    cfg.dropout.p = 1.0f;
    MT_EXPECT(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL) == MT_ERR_INVALID_ARG &&
                  strstr(mt_last_error(), "outside [0, 1)"),
              "dropout p = 1: %s", mt_last_error());
    cfg.dropout.p = 0.1f;
    cfg.dropout.sample = &short_ids;
    MT_EXPECT(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL) == MT_ERR_INVALID_ARG &&
                  strstr(mt_last_error(), "sample ids"),
              "dropout ids of 1 row for B = 2: %s", mt_last_error());
    cfg.dropout.sample = NULL;
    MT_EXPECT_STATUS(mt_attn_fwd(&o4, &l4, &q4, &q4, &q4, &cfg, NULL), MT_ERR_INVALID_ARG);
    /* over cached keys: causal needs at least as many keys as queries; no masks or dropout */
    mt_tensor k2 = mt_tensor_4d(buf, MT_F32, 2, 2, 4, 16, MT_DEVICE_CPU);
    mt_tensor k8 = mt_tensor_4d(buf, MT_F32, 2, 8, 4, 16, MT_DEVICE_CPU);
    cfg = (mt_attn_config)MT_ATTN_CONFIG_INIT;
    cfg.causal = 1;
    MT_EXPECT(mt_attn_fwd(&o4, &l4, &q4, &k2, &k2, &cfg, NULL) == MT_ERR_INVALID_ARG &&
                  strstr(mt_last_error(), "at least as many keys"),
              "causal, 4 queries over 2 keys: %s", mt_last_error());
    cfg.causal = 0;
    MT_CHECK(mt_attn_fwd(&o4, &l4, &q4, &k2, &k2, &cfg, NULL));
    MT_EXPECT_STATUS(mt_attn_fwd(&o4, &l4, &q4, &k8, &k2, &cfg, NULL), MT_ERR_INVALID_ARG);
    cfg.dropout = (mt_dropout_config){ 0.1f, 1, 0, &tids, 0, 0 };
    MT_EXPECT_STATUS(mt_attn_fwd(&o4, &l4, &q4, &k8, &k8, &cfg, NULL), MT_ERR_UNSUPPORTED);
    mt_error_clear();
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run(&cases[i], 0);
        run(&cases[i], 1);
    }
    run_kv("kv_mha_q1_k37_d64_causal", 1);
    run_kv("kv_gqa2_q5_k21_d40_causal", 1);
    run_kv("kv_mqa_q7_k13_d64", 0);
    run_kv("kv_gqa2_q70_k300_d128_causal", 1);
    run_kvb("kvb_gqa2_q6_k20_d40_causal", 1);
    run_kvb("kvb_mha_q16_k48_d64_causal", 1);
    run_kvb("kvb_mqa_q5_k9_d64", 0);
    check_errors();
    return mt_test_result();
}
