/* gpu: CUDA attention forwards (and backwards) over cached keys (Tq queries, the last of Tk positions, as a KV
 * cache's decoding and chunked prefill run them; bottom-right causal) against the torch goldens
 * (f32) and against the CPU reference on the same rounded inputs (f32, bf16, f16; GQA; head dims
 * 40 to 256; k and v the first Tk rows of a longer cache); with per-row lengths on the device
 * (key_len) after mt_attn_kv_append. Outputs are poisoned first. */
#include <mt/attention.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t draw = 1;

static float rounded(float x, mt_dtype dt) {
    return dt == MT_BF16  ? mt_bf16_to_f32(mt_f32_to_bf16(x))
           : dt == MT_F16 ? mt_f16_to_f32(mt_f32_to_f16(x))
                          : x;
}

/* x[0..n) rounded to dt in place (the values the device holds) */
static void round_all(float *x, size_t n, mt_dtype dt) {
    for (size_t i = 0; i < n; i++)
        x[i] = rounded(x[i], dt);
}

/* host f32 -> a new device buffer of dt (n elements) */
static void *upload(const float *x, size_t n, mt_dtype dt) {
    const size_t es = mt_dtype_size(dt);
    void *tmp = malloc(n * es), *dev = NULL;
    mt_tensor src = mt_tensor_1d((void *)x, MT_F32, (int64_t)n, MT_DEVICE_CPU);
    mt_tensor dst = mt_tensor_1d(tmp, dt, (int64_t)n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&dst, &src, NULL));
    MT_CHECK(mt_device_malloc(&dev, n * es));
    MT_CHECK(mt_memcpy(dev, mt_device_cuda(0), tmp, MT_DEVICE_CPU, n * es, NULL));
    free(tmp);
    return dev;
}

/* n elements of dt on the device -> host f32 */
static float *download(const void *dev, size_t n, mt_dtype dt) {
    const size_t es = mt_dtype_size(dt);
    void *tmp = malloc(n * es);
    float *x = malloc(n * 4);
    MT_CHECK(mt_memcpy(tmp, MT_DEVICE_CPU, dev, mt_device_cuda(0), n * es, NULL));
    mt_tensor src = mt_tensor_1d(tmp, dt, (int64_t)n, MT_DEVICE_CPU);
    mt_tensor dst = mt_tensor_1d(x, MT_F32, (int64_t)n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&dst, &src, NULL));
    free(tmp);
    return x;
}

/* One case: q (B,Tq,H,D) and the cache's first Tk of Tmax rows; want_o / want_l the golden (NULL:
 * the CPU reference on the rounded inputs). */
static void run(int B, int Tq, int Tk, int Tmax, int H, int Hkv, int D, int causal, mt_dtype dt,
                const float *q0, const float *k0, const float *v0, const float *want_o,
                const float *want_l) {
    const size_t nq = (size_t)B * Tq * H * D, nc = (size_t)B * Tmax * Hkv * D;
    float *q = malloc(nq * 4), *kc = malloc(nc * 4), *vc = malloc(nc * 4);
    if (q0) { /* the golden's (B,Tk) k, v into the cache's first rows */
        memcpy(q, q0, nq * 4);
        for (int b = 0; b < B; b++) {
            memcpy(kc + (size_t)b * Tmax * Hkv * D, k0 + (size_t)b * Tk * Hkv * D,
                   (size_t)Tk * Hkv * D * 4);
            memcpy(vc + (size_t)b * Tmax * Hkv * D, v0 + (size_t)b * Tk * Hkv * D,
                   (size_t)Tk * Hkv * D * 4);
        }
    } else {
        mt_test_fill_uniform(q, nq, 77, draw++, -1.5f, 1.5f);
        mt_test_fill_uniform(kc, nc, 77, draw++, -1.5f, 1.5f);
        mt_test_fill_uniform(vc, nc, 77, draw++, -1.5f, 1.5f);
    }
    round_all(q, nq, dt);
    round_all(kc, nc, dt);
    round_all(vc, nc, dt);
    /* the reference: golden, or the CPU's on the same values */
    float *ro = malloc(nq * 4), *rl = malloc((size_t)B * H * Tq * 4);
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    cfg.causal = causal;
    if (want_o) {
        memcpy(ro, want_o, nq * 4), memcpy(rl, want_l, (size_t)B * H * Tq * 4);
    } else {
        mt_tensor tq = mt_tensor_4d(q, MT_F32, B, Tq, H, D, MT_DEVICE_CPU), tk, tv;
        mt_tensor ka = mt_tensor_4d(kc, MT_F32, B, Tmax, Hkv, D, MT_DEVICE_CPU);
        mt_tensor va = mt_tensor_4d(vc, MT_F32, B, Tmax, Hkv, D, MT_DEVICE_CPU);
        MT_CHECK(mt_tensor_slice(&ka, 1, 0, Tk, &tk));
        MT_CHECK(mt_tensor_slice(&va, 1, 0, Tk, &tv));
        mt_tensor to = mt_tensor_4d(ro, MT_F32, B, Tq, H, D, MT_DEVICE_CPU);
        mt_tensor tl = mt_tensor_3d(rl, MT_F32, B, H, Tq, MT_DEVICE_CPU);
        MT_CHECK(mt_attn_fwd(&to, &tl, &tq, &tk, &tv, &cfg, NULL));
    }
    /* the GPU's, into poisoned outputs */
    void *dq = upload(q, nq, dt), *dk = upload(kc, nc, dt), *dv = upload(vc, nc, dt);
    float *poison = malloc(nq * 4);
    for (size_t i = 0; i < nq; i++)
        poison[i] = NAN;
    void *dout = upload(poison, nq, dt), *dl = upload(poison, (size_t)B * H * Tq, MT_F32);
    mt_tensor tq = mt_tensor_4d(dq, dt, B, Tq, H, D, mt_device_cuda(0)), tk, tv;
    mt_tensor ka = mt_tensor_4d(dk, dt, B, Tmax, Hkv, D, mt_device_cuda(0));
    mt_tensor va = mt_tensor_4d(dv, dt, B, Tmax, Hkv, D, mt_device_cuda(0));
    MT_CHECK(mt_tensor_slice(&ka, 1, 0, Tk, &tk));
    MT_CHECK(mt_tensor_slice(&va, 1, 0, Tk, &tv));
    mt_tensor to = mt_tensor_4d(dout, dt, B, Tq, H, D, mt_device_cuda(0));
    mt_tensor tl = mt_tensor_3d(dl, MT_F32, B, H, Tq, mt_device_cuda(0));
    MT_CHECK(mt_attn_fwd(&to, &tl, &tq, &tk, &tv, &cfg, NULL));
    MT_CHECK(mt_stream_sync(NULL));
    float *go = download(dout, nq, dt), *gl = download(dl, (size_t)B * H * Tq, MT_F32);
    /* out: the dtype's rounding of values of size ~1; lse: f32 sums */
    const double tol = dt == MT_BF16 ? 1e-2 : dt == MT_F16 ? 2e-3 : 1e-4;
    char msg[160];
    snprintf(msg, sizeof msg, "B%d Tq%d Tk%d (of %d) H%d KV%d D%d %s %s%s out", B, Tq, Tk, Tmax, H,
             Hkv, D, causal ? "causal" : "full", mt_dtype_name(dt), want_o ? " golden" : "");
    mt_test_close_f32(msg, go, ro, nq, tol, tol);
    msg[strlen(msg) - 3] = 0;
    strcat(msg, "lse");
    mt_test_close_f32(msg, gl, rl, (size_t)B * H * Tq, 1e-4, 1e-4);
    mt_device_free(dq), mt_device_free(dk), mt_device_free(dv), mt_device_free(dout);
    mt_device_free(dl);
    free(q), free(kc), free(vc), free(ro), free(rl), free(poison), free(go), free(gl);
}

/* A KV cache's step with lengths on the device: rows of each sequence's cache past its length,
 * and the T rows the step appends, are NaN; the T new keys and values go in by mt_attn_kv_append
 * (GPU and CPU), then attention with key_len over the whole cache. The GPU's appended rows must
 * be the CPU's, its out and lse the CPU's. */
static void run_len(int B, int Tq, int Tmax, int H, int Hkv, int D, int causal, mt_dtype dt,
                    const int32_t *len) {
    const size_t nq = (size_t)B * Tq * H * D, nc = (size_t)B * Tmax * Hkv * D;
    const size_t nn = (size_t)B * Tq * Hkv * D;
    float *q = malloc(nq * 4), *kc = malloc(nc * 4), *vc = malloc(nc * 4);
    float *kn = malloc(nn * 4), *vn = malloc(nn * 4);
    mt_test_fill_uniform(q, nq, 78, draw++, -1.5f, 1.5f);
    mt_test_fill_uniform(kc, nc, 78, draw++, -1.5f, 1.5f);
    mt_test_fill_uniform(vc, nc, 78, draw++, -1.5f, 1.5f);
    mt_test_fill_uniform(kn, nn, 78, draw++, -1.5f, 1.5f);
    mt_test_fill_uniform(vn, nn, 78, draw++, -1.5f, 1.5f);
    round_all(q, nq, dt);
    round_all(kn, nn, dt);
    round_all(vn, nn, dt);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tmax; t++)
            for (int e = 0; e < Hkv * D; e++) {
                const size_t i = ((size_t)b * Tmax + t) * Hkv * D + e;
                const int gone = t >= len[b] - Tq; /* (the appended rows and those past them) */
                kc[i] = gone ? NAN : rounded(kc[i], dt);
                vc[i] = gone ? NAN : rounded(vc[i], dt);
            }
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    cfg.causal = causal;
    /* the GPU's (uploaded before the CPU appends into kc, vc) */
    void *dq = upload(q, nq, dt), *dk = upload(kc, nc, dt), *dv = upload(vc, nc, dt);
    void *dkn = upload(kn, nn, dt), *dvn = upload(vn, nn, dt), *dl = NULL, *dout = NULL;
    int32_t *dlen = NULL;
    MT_CHECK(mt_device_malloc(&dl, (size_t)B * H * Tq * 4));
    MT_CHECK(mt_device_malloc(&dout, nq * mt_dtype_size(dt)));
    MT_CHECK(mt_device_malloc((void **)&dlen, (size_t)B * 4));
    MT_CHECK(mt_memcpy(dlen, mt_device_cuda(0), len, MT_DEVICE_CPU, (size_t)B * 4, NULL));
    const mt_device g = mt_device_cuda(0);
    mt_tensor gq = mt_tensor_4d(dq, dt, B, Tq, H, D, g);
    mt_tensor gk = mt_tensor_4d(dk, dt, B, Tmax, Hkv, D, g);
    mt_tensor gv = mt_tensor_4d(dv, dt, B, Tmax, Hkv, D, g);
    mt_tensor gkn = mt_tensor_4d(dkn, dt, B, Tq, Hkv, D, g);
    mt_tensor gvn = mt_tensor_4d(dvn, dt, B, Tq, Hkv, D, g);
    mt_tensor go = mt_tensor_4d(dout, dt, B, Tq, H, D, g);
    mt_tensor gl = mt_tensor_3d(dl, MT_F32, B, H, Tq, g);
    mt_tensor glen = mt_tensor_1d(dlen, MT_I32, B, g);
    MT_CHECK(mt_attn_kv_append(&gk, &gv, &gkn, &gvn, &glen, NULL));
    cfg.key_len = &glen;
    MT_CHECK(mt_attn_fwd(&go, &gl, &gq, &gk, &gv, &cfg, NULL));
    MT_CHECK(mt_stream_sync(NULL));
    /* the CPU's */
    mt_tensor cq = mt_tensor_4d(q, MT_F32, B, Tq, H, D, MT_DEVICE_CPU);
    mt_tensor ck = mt_tensor_4d(kc, MT_F32, B, Tmax, Hkv, D, MT_DEVICE_CPU);
    mt_tensor cv = mt_tensor_4d(vc, MT_F32, B, Tmax, Hkv, D, MT_DEVICE_CPU);
    mt_tensor ckn = mt_tensor_4d(kn, MT_F32, B, Tq, Hkv, D, MT_DEVICE_CPU);
    mt_tensor cvn = mt_tensor_4d(vn, MT_F32, B, Tq, Hkv, D, MT_DEVICE_CPU);
    float *ro = malloc(nq * 4), *rl = malloc((size_t)B * H * Tq * 4);
    mt_tensor co = mt_tensor_4d(ro, MT_F32, B, Tq, H, D, MT_DEVICE_CPU);
    mt_tensor cl = mt_tensor_3d(rl, MT_F32, B, H, Tq, MT_DEVICE_CPU);
    mt_tensor clen = mt_tensor_1d((void *)len, MT_I32, B, MT_DEVICE_CPU);
    MT_CHECK(mt_attn_kv_append(&ck, &cv, &ckn, &cvn, &clen, NULL));
    cfg.key_len = &clen;
    MT_CHECK(mt_attn_fwd(&co, &cl, &cq, &ck, &cv, &cfg, NULL));
    /* the appended caches: every row below its length equal */
    float *gkc = download(dk, nc, dt), *gvc = download(dv, nc, dt);
    size_t bad = 0;
    for (int b = 0; b < B; b++)
        for (size_t i = (size_t)b * Tmax * Hkv * D; i < ((size_t)b * Tmax + len[b]) * Hkv * D; i++)
            bad += gkc[i] != kc[i] || gvc[i] != vc[i];
    MT_EXPECT(bad == 0, "B%d Tq%d Tmax%d %s: %zu cache values differ after the append", B, Tq, Tmax,
              mt_dtype_name(dt), bad);
    float *o = download(dout, nq, dt), *l = download(dl, (size_t)B * H * Tq, MT_F32);
    const double tol = dt == MT_BF16 ? 1e-2 : dt == MT_F16 ? 2e-3 : 1e-4;
    char msg[160];
    snprintf(msg, sizeof msg, "key_len B%d Tq%d (cache %d, lengths %d..) H%d KV%d D%d %s %s out", B,
             Tq, Tmax, len[0], H, Hkv, D, causal ? "causal" : "full", mt_dtype_name(dt));
    mt_test_close_f32(msg, o, ro, nq, tol, tol);
    msg[strlen(msg) - 3] = 0;
    strcat(msg, "lse");
    mt_test_close_f32(msg, l, rl, (size_t)B * H * Tq, 1e-4, 1e-4);
    mt_device_free(dq), mt_device_free(dk), mt_device_free(dv), mt_device_free(dkn);
    mt_device_free(dvn), mt_device_free(dl), mt_device_free(dout), mt_device_free(dlen);
    free(q), free(kc), free(vc), free(kn), free(vn), free(ro), free(rl), free(gkc), free(gvc);
    free(o), free(l);
}

/* The backward's nine tensors over p (q, k, v, dout, out, lse (f32), dq, dk, dv) of dt on dev. */
static void bwd_views(mt_tensor *t, void *const *p, mt_dtype dt, mt_device dev, int B, int Tq,
                      int Tk, int H, int Hkv, int D) {
    for (int i = 0; i < 9; i++) {
        const int kv = i == 1 || i == 2 || i == 7 || i == 8;
        t[i] = i == 5 ? mt_tensor_3d(p[i], MT_F32, B, H, Tq, dev)
                      : mt_tensor_4d(p[i], dt, B, kv ? Tk : Tq, kv ? Hkv : H, D, dev);
    }
}

/* The backward over a key prefix (context parallelism; CUDA runs it on the square's kernels or
 * pads the queries in front, attention.h): the GPU's
 * out, lse, dq, dk and dv against the CPU reference's on the same rounded inputs (which the
 * kvb_* goldens check in test_attn), or against the golden (f32); outputs poisoned first. */
static void run_bwd(int B, int Tq, int Tk, int H, int Hkv, int D, int causal, mt_dtype dt,
                    float **gold) {
    const size_t nq = (size_t)B * Tq * H * D, nk = (size_t)B * Tk * Hkv * D;
    const size_t nl = (size_t)B * H * Tq;
    float *x[4]; /* q, k, v, dout */
    const size_t n[4] = { nq, nk, nk, nq };
    for (int i = 0; i < 4; i++) {
        x[i] = malloc(n[i] * 4);
        if (gold)
            memcpy(x[i], gold[i], n[i] * 4);
        else
            mt_test_fill_uniform(x[i], n[i], 78, draw++, -1.5f, 1.5f);
        round_all(x[i], n[i], dt);
    }
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    cfg.causal = causal;
    float *r[5]; /* out, lse, dq, dk, dv: the reference */
    const size_t nr[5] = { nq, nl, nq, nk, nk };
    for (int i = 0; i < 5; i++)
        r[i] = malloc(nr[i] * 4);
    mt_tensor c[9];
    bwd_views(c, (void *const[]){ x[0], x[1], x[2], x[3], r[0], r[1], r[2], r[3], r[4] }, MT_F32,
              MT_DEVICE_CPU, B, Tq, Tk, H, Hkv, D);
    if (gold) {
        for (int i = 0; i < 5; i++)
            memcpy(r[i], gold[4 + i], nr[i] * 4);
    } else {
        MT_CHECK(mt_attn_fwd(&c[4], &c[5], &c[0], &c[1], &c[2], &cfg, NULL));
        MT_CHECK(mt_attn_bwd(&c[6], &c[7], &c[8], &c[3], &c[0], &c[1], &c[2], &c[4], &c[5], &cfg,
                             NULL, 0, NULL));
    }
    const mt_device g = mt_device_cuda(0);
    void *d[4], *o[5];
    for (int i = 0; i < 4; i++)
        d[i] = upload(x[i], n[i], dt);
    float *poison = malloc((nq > nk ? nq : nk) * 4);
    for (size_t i = 0; i < (nq > nk ? nq : nk); i++)
        poison[i] = NAN;
    for (int i = 0; i < 5; i++)
        o[i] = upload(poison, nr[i], i == 1 ? MT_F32 : dt);
    mt_tensor gt[9];
    bwd_views(gt, (void *const[]){ d[0], d[1], d[2], d[3], o[0], o[1], o[2], o[3], o[4] }, dt, g, B,
              Tq, Tk, H, Hkv, D);
    size_t wsb = 0;
    void *ws = NULL;
    MT_CHECK(mt_attn_bwd_workspace(&gt[0], &gt[1], &cfg, &wsb));
    MT_CHECK(mt_device_malloc(&ws, wsb + 256));
    MT_CHECK(mt_attn_fwd(&gt[4], &gt[5], &gt[0], &gt[1], &gt[2], &cfg, NULL));
    MT_CHECK(mt_attn_bwd(&gt[6], &gt[7], &gt[8], &gt[3], &gt[0], &gt[1], &gt[2], &gt[4], &gt[5],
                         &cfg, ws, wsb, NULL));
    MT_CHECK(mt_stream_sync(NULL));
    /* f32: sums in another order; bf16/f16: the kernels' roundings (P, dS) of O(1) values */
    const double tol = dt == MT_BF16 ? 5e-2 : dt == MT_F16 ? 1e-2 : 1e-4;
    static const char *what[5] = { "out", "lse", "dq", "dk", "dv" };
    for (int i = 0; i < 5; i++) {
        float *got = download(o[i], nr[i], i == 1 ? MT_F32 : dt);
        char msg[160];
        snprintf(msg, sizeof msg, "backward B%d Tq%d Tk%d H%d KV%d D%d %s %s%s %s", B, Tq, Tk, H,
                 Hkv, D, causal ? "causal" : "full", mt_dtype_name(dt), gold ? " golden" : "",
                 what[i]);
        mt_test_close_f32(msg, got, r[i], nr[i], i == 1 ? 1e-4 : tol, i == 1 ? 1e-4 : tol);
        free(got);
        mt_device_free(o[i]);
    }
    for (int i = 0; i < 4; i++)
        free(x[i]), mt_device_free(d[i]);
    for (int i = 0; i < 5; i++)
        free(r[i]);
    free(poison);
    mt_device_free(ws);
}

static void golden_bwd(const char *name, int causal) {
    const char *keys[9] = { "q", "k", "v", "dout", "out", "lse", "dq", "dk", "dv" };
    float *x[9];
    mt_npy qs, ks;
    for (int i = 0; i < 9; i++) {
        char f[128];
        snprintf(f, sizeof f, "attn_%s_%s.npy", name, keys[i]);
        x[i] = mt_test_golden_f32(f, NULL, i == 0 ? &qs : i == 1 ? &ks : NULL);
    }
    run_bwd((int)qs.shape[0], (int)qs.shape[1], (int)ks.shape[1], (int)qs.shape[2],
            (int)ks.shape[2], (int)qs.shape[3], causal, MT_F32, x);
    for (int i = 0; i < 9; i++)
        free(x[i]);
}

static void golden(const char *name, int causal) {
    const char *keys[5] = { "q", "k", "v", "out", "lse" };
    float *x[5];
    mt_npy qs, ks;
    for (int i = 0; i < 5; i++) {
        char f[128];
        snprintf(f, sizeof f, "attn_%s_%s.npy", name, keys[i]);
        x[i] = mt_test_golden_f32(f, NULL, i == 0 ? &qs : i == 1 ? &ks : NULL);
    }
    const int B = (int)qs.shape[0], Tq = (int)qs.shape[1], H = (int)qs.shape[2];
    const int D = (int)qs.shape[3], Tk = (int)ks.shape[1], Hkv = (int)ks.shape[2];
    run(B, Tq, Tk, Tk + 5, H, Hkv, D, causal, MT_F32, x[0], x[1], x[2], x[3], x[4]);
    run(B, Tq, Tk, Tk + 5, H, Hkv, D, causal, MT_BF16, x[0], x[1], x[2], NULL, NULL);
    for (int i = 0; i < 5; i++)
        free(x[i]);
}

int main(void) {
    mt_test_require_gpus(1);
    golden("kv_mha_q1_k37_d64_causal", 1);
    golden("kv_gqa2_q5_k21_d40_causal", 1);
    golden("kv_mqa_q7_k13_d64", 0);
    golden("kv_gqa2_q70_k300_d128_causal", 1);
    static const struct {
        int B, Tq, Tk, Tmax, H, Hkv, D, causal;
        mt_dtype dt;
    } cases[] = {
        /* decoding: one query over the cache, GPT-2 1.5B's and Llama-like heads */
        { 1, 1, 1, 1024, 25, 25, 64, 1, MT_BF16 },
        { 1, 1, 1000, 1024, 25, 25, 64, 1, MT_BF16 },
        { 2, 1, 517, 600, 8, 2, 128, 1, MT_BF16 },
        { 3, 1, 2049, 4096, 4, 1, 128, 1, MT_F16 },
        { 1, 1, 300, 300, 2, 2, 256, 1, MT_F32 },
        /* chunked prefill: a chunk of queries over everything before it and itself */
        { 1, 64, 64, 1024, 12, 12, 64, 1, MT_BF16 },
        { 1, 64, 700, 1024, 12, 12, 64, 1, MT_BF16 },
        { 2, 33, 90, 128, 6, 3, 40, 1, MT_F32 },
        /* a key prefix in whole tiles (MT_ATTN_PREFIX_ALIGN): the square's kernels */
        { 2, 128, 640, 1024, 12, 4, 64, 1, MT_BF16 },
        { 1, 200, 456, 600, 8, 8, 128, 1, MT_F16 },
        { 1, 72, 328, 328, 4, 2, 128, 1, MT_BF16 },
        /* queries over other keys, unmasked */
        { 2, 9, 300, 300, 4, 4, 96, 0, MT_F16 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run(cases[i].B, cases[i].Tq, cases[i].Tk, cases[i].Tmax, cases[i].H, cases[i].Hkv,
            cases[i].D, cases[i].causal, cases[i].dt, NULL, NULL, NULL, NULL, NULL);
    /* lengths on the device: decoding rows at different positions, a prefill chunk */
    run_len(3, 1, 1024, 12, 12, 64, 1, MT_BF16, (const int32_t[]){ 1, 700, 1024 });
    run_len(2, 1, 300, 8, 2, 128, 1, MT_F16, (const int32_t[]){ 17, 256 });
    run_len(2, 16, 200, 4, 4, 64, 1, MT_BF16, (const int32_t[]){ 16, 133 });
    run_len(1, 5, 40, 4, 2, 40, 1, MT_F32, (const int32_t[]){ 23 });
    /* backwards over a key prefix: the goldens; the tensor-core shapes (D 64 and 128, bf16 and
     * f16), a context-parallel rank's chunks of a 1024 sequence; whole tiles of extra keys (the
     * square's kernels, also with a last query tile part full) and not (padded) */
    golden_bwd("kvb_gqa2_q6_k20_d40_causal", 1);
    golden_bwd("kvb_mha_q16_k48_d64_causal", 1);
    golden_bwd("kvb_mqa_q5_k9_d64", 0);
    run_bwd(2, 256, 256, 12, 12, 64, 1, MT_BF16, NULL); /* (Tk = T: the square path) */
    run_bwd(2, 256, 1024, 12, 12, 64, 1, MT_BF16, NULL);
    run_bwd(1, 128, 384, 8, 2, 128, 1, MT_BF16, NULL);
    run_bwd(1, 64, 200, 4, 4, 64, 1, MT_F16, NULL);
    run_bwd(2, 100, 356, 8, 2, 64, 1, MT_BF16, NULL);
    run_bwd(1, 200, 328, 4, 4, 128, 1, MT_F16, NULL);
    run_bwd(3, 72, 584, 6, 6, 128, 1, MT_BF16, NULL);
    run_bwd(2, 33, 90, 6, 3, 40, 1, MT_F32, NULL);
    return mt_test_result();
}
