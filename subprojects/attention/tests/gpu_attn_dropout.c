/* gpu: attention dropout on CUDA (bf16/f16 with D 64 or 128 on the tensor-core kernels: the wgmma
 * ones at D64 on Hopper, the mma.sync ones otherwise and in deterministic mode; the generic ones
 * for other shapes) against the CPU reference (which matches the golden's independent
 * Philox): out, lse, dq, dk, dv and the bias sums; f32, bf16 and f16; causal and full, GQA,
 * document masks, odd T, q/k/v as slices of one buffer; and without dropout the same inputs
 * give other outputs. */
#include <mt/attention.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int B, T, H, Hkv, D, causal, docs;
    mt_dtype dt;
    float p;
    int det; /* mt_attn_config.deterministic */
} shape;

static double rel_rms(const float *got, const float *ref, size_t n) {
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++)
        e += (got[i] - ref[i]) * (double)(got[i] - ref[i]), r += ref[i] * (double)ref[i];
    return sqrt(e / (r > 0 ? r : 1));
}

static void to_dev(mt_arena *ar, const float *h, mt_dtype dt, int ndim, const int64_t *shp,
                   mt_tensor *out) {
    MT_CHECK(mt_tensor_alloc(ar, dt, ndim, shp, out));
    mt_tensor hf = { 0 };
    hf.data = (void *)h, hf.dtype = MT_F32, hf.ndim = ndim, hf.device = MT_DEVICE_CPU;
    for (int i = ndim - 1, st = 1; i >= 0; st *= (int)shp[i], i--)
        hf.shape[i] = shp[i], hf.stride[i] = st;
    mt_tensor dh;
    void *buf = malloc((size_t)mt_tensor_numel(&hf) * mt_dtype_size(dt));
    dh = hf, dh.data = buf, dh.dtype = dt;
    MT_CHECK(mt_cast(&dh, &hf, NULL));
    MT_CHECK(mt_tensor_copy(out, &dh, NULL));
    MT_CHECK(mt_stream_sync(NULL));
    free(buf);
}

static float *to_host(const mt_tensor *t) {
    const size_t n = (size_t)mt_tensor_numel(t);
    void *raw = malloc(n * mt_dtype_size(t->dtype));
    float *f = malloc(n * 4);
    mt_tensor h = *t;
    h.data = raw, h.device = MT_DEVICE_CPU;
    for (int i = h.ndim - 1, st = 1; i >= 0; st *= (int)h.shape[i], i--)
        h.stride[i] = st;
    MT_CHECK(mt_tensor_copy(&h, t, NULL));
    MT_CHECK(mt_stream_sync(NULL));
    mt_tensor hf = h;
    hf.data = f, hf.dtype = MT_F32;
    MT_CHECK(mt_cast(&hf, &h, NULL));
    free(raw);
    return f;
}

static void run(const shape *s) {
    const int64_t B = s->B, T = s->T, H = s->H, G = s->Hkv, D = s->D;
    const size_t nq = (size_t)(B * T * H * D), nk = (size_t)(B * T * G * D);
    float *x[4];
    for (int i = 0; i < 4; i++) {
        const size_t n = i == 1 || i == 2 ? nk : nq;
        x[i] = malloc(n * 4);
        mt_test_fill_uniform(x[i], n, 5, (uint64_t)i, -1.5f, 1.5f);
        for (size_t e = 0; e < n && s->dt == MT_BF16; e++) /* the CPU sees the rounded inputs */
            x[i][e] = mt_bf16_to_f32(mt_f32_to_bf16(x[i][e]));
    }
    int64_t ids[4] = { 5, 900000001, 42, 7 };
    int32_t *ks = malloc((size_t)(B * T) * 4);
    for (int64_t b = 0; b < B; b++) /* documents of 1 + (b + t) % 13 tokens-ish */
        for (int64_t t = 0, st = 0; t < T; t++) {
            if (s->docs && t > 0 && mt_philox_u32(3, (uint64_t)b, (uint64_t)t) % 9 == 0) st = t;
            ks[b * T + t] = (int32_t)st;
        }
    mt_arena *ar;
    MT_CHECK(mt_arena_create(mt_device_cuda(0), 16 * (nq + nk) * 4 + (8 << 20), &ar));
    int64_t shq[4] = { B, T, H, D }, shk[4] = { B, T, G, D }, shl[3] = { B, H, T };
    mt_tensor q, k, v, g, o, l, dq, dk, dv, tids, tks, dids;
    /* q, k, v: slices of one (B,T,H+2G,D) buffer, as the model's */
    float *f = malloc((size_t)(B * T * (H + 2 * G) * D) * 4);
    for (int64_t bt = 0; bt < B * T; bt++) {
        const int64_t W = H + 2 * G;
        memcpy(f + bt * W * D, x[0] + bt * H * D, (size_t)(H * D) * 4);
        memcpy(f + (bt * W + H) * D, x[1] + bt * G * D, (size_t)(G * D) * 4);
        memcpy(f + (bt * W + H + G) * D, x[2] + bt * G * D, (size_t)(G * D) * 4);
    }
    mt_tensor all;
    to_dev(ar, f, s->dt, 4, (int64_t[]){ B, T, H + 2 * G, D }, &all);
    MT_CHECK(mt_tensor_slice(&all, 2, 0, H, &q));
    MT_CHECK(mt_tensor_slice(&all, 2, H, G, &k));
    MT_CHECK(mt_tensor_slice(&all, 2, H + G, G, &v));
    to_dev(ar, x[3], s->dt, 4, shq, &g);
    MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shq, &o));
    MT_CHECK(mt_tensor_alloc(ar, MT_F32, 3, shl, &l));
    MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shq, &dq));
    MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shk, &dk));
    MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shk, &dv));
    MT_CHECK(mt_tensor_alloc(ar, MT_I64, 1, &B, &dids));
    MT_CHECK(mt_tensor_alloc(ar, MT_I32, 2, (int64_t[]){ B, T }, &tks));
    tids = mt_tensor_1d(ids, MT_I64, B, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&dids, &tids, NULL));
    MT_CHECK(mt_memcpy(tks.data, tks.device, ks, MT_DEVICE_CPU, (size_t)(B * T) * 4, NULL));
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    cfg.causal = s->causal, cfg.deterministic = s->det;
    cfg.key_start = s->docs ? &tks : NULL;
    cfg.dropout = (mt_dropout_config){ s->p, 77, 9, &dids, 0, 0 };
    size_t wsb;
    void *ws = NULL;
    MT_CHECK(mt_attn_bwd_workspace(&q, &k, &cfg, &wsb));
    if (wsb) MT_CHECK(mt_arena_alloc(ar, wsb, &ws));
    mt_tensor sums[3];
    for (int i = 0; i < 3; i++) {
        const int64_t n = (i ? G : H) * D;
        MT_CHECK(mt_tensor_alloc(ar, MT_F32, 1, &n, &sums[i]));
    }
    MT_CHECK(mt_attn_fwd(&o, &l, &q, &k, &v, &cfg, NULL));
    MT_CHECK(mt_attn_bwd_bias(&dq, &dk, &dv, &sums[0], &sums[1], &sums[2], 0, &g, &q, &k, &v, &o,
                              &l, &cfg, ws, wsb, NULL));
    float *go = to_host(&o), *gl = to_host(&l), *gdq = to_host(&dq), *gdk = to_host(&dk),
          *gdv = to_host(&dv), *gs[3];
    for (int i = 0; i < 3; i++)
        gs[i] = to_host(&sums[i]);

    /* the CPU reference on the same inputs (the GPU's out feeds Di, as on the GPU) */
    float *co = malloc(nq * 4), *cl = malloc((size_t)(B * H * T) * 4), *cdq = malloc(nq * 4),
          *cdk = malloc(nk * 4), *cdv = malloc(nk * 4);
    mt_tensor hq = mt_tensor_4d(x[0], MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor hk = mt_tensor_4d(x[1], MT_F32, B, T, G, D, MT_DEVICE_CPU);
    mt_tensor hv = mt_tensor_4d(x[2], MT_F32, B, T, G, D, MT_DEVICE_CPU);
    mt_tensor hg = mt_tensor_4d(x[3], MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor ho = mt_tensor_4d(co, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor hgo = mt_tensor_4d(go, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor hl = mt_tensor_3d(cl, MT_F32, B, H, T, MT_DEVICE_CPU);
    mt_tensor hdq = mt_tensor_4d(cdq, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor hdk = mt_tensor_4d(cdk, MT_F32, B, T, G, D, MT_DEVICE_CPU);
    mt_tensor hdv = mt_tensor_4d(cdv, MT_F32, B, T, G, D, MT_DEVICE_CPU);
    mt_tensor hks = mt_tensor_2d(ks, MT_I32, B, T, MT_DEVICE_CPU);
    mt_attn_config ccfg = cfg;
    ccfg.key_start = s->docs ? &hks : NULL;
    ccfg.dropout.sample = &tids;
    MT_CHECK(mt_attn_fwd(&ho, &hl, &hq, &hk, &hv, &ccfg, NULL));
    MT_CHECK(mt_attn_bwd(&hdq, &hdk, &hdv, &hg, &hq, &hk, &hv, &hgo, &hl, &ccfg, NULL, 0, NULL));
    const double tol = s->dt == MT_F32 ? 2e-5 : 2e-2;
    const float *got[5] = { go, gl, gdq, gdk, gdv }, *ref[5] = { co, cl, cdq, cdk, cdv };
    const size_t ns[5] = { nq, (size_t)(B * H * T), nq, nk, nk };
    static const char *names[5] = { "out", "lse", "dq", "dk", "dv" };
    for (int i = 0; i < 5; i++) {
        const double e = rel_rms(got[i], ref[i], ns[i]);
        MT_EXPECT(e < tol,
                  "dropout B%d T%d H%d/%d D%d causal %d docs %d det %d %s p %g: %s rel rms %.3g",
                  s->B, s->T, s->H, s->Hkv, s->D, s->causal, s->docs, s->det, mt_dtype_name(s->dt),
                  (double)s->p, names[i], e);
    }
    /* the bias sums: dq's, dk's and dv's column sums (dv's no longer dout's: rows of dropped
     * weights do not sum to 1; dk's still zero up to rounding), within gpu_attn's bounds: per
     * column, 1e-2 (f32: 1e-5) of the column's magnitude, plus 1e-6 per row */
    const double stol = s->dt == MT_F32 ? 1e-5 : 1e-2;
    for (int i = 0; i < 3; i++) {
        const int64_t heads = i ? G : H;
        const float *src = i == 0 ? gdq : i == 1 ? gdk : gdv;
        int bad = 0;
        double worst = 0;
        for (int64_t c = 0; c < heads * D; c++) {
            double want = 0, mag = 0;
            for (int64_t r = 0; r < B * T; r++)
                want += src[r * heads * D + c], mag += fabs(src[r * heads * D + c]);
            const double err = fabs(gs[i][c] - want);
            bad += !(err <= stol * mag + 1e-6 * (double)(B * T));
            if (mag > 0) worst = fmax(worst, err / mag);
        }
        MT_EXPECT(bad == 0,
                  "dropout B%d T%d H%d/%d D%d %s det %d: bias sums of %s: %d columns off, "
                  "worst %.3g",
                  s->B, s->T, s->H, s->Hkv, s->D, mt_dtype_name(s->dt), s->det, names[2 + i], bad,
                  worst);
    }
    /* without dropout (the tensor-core kernels where they apply) the outputs differ */
    cfg.dropout.p = 0.0f;
    MT_CHECK(mt_attn_fwd(&o, &l, &q, &k, &v, &cfg, NULL));
    float *o0 = to_host(&o);
    MT_EXPECT(rel_rms(o0, go, nq) > 0.05, "dropout changed out by %.3g only", rel_rms(o0, go, nq));
    free(o0);
    for (int i = 0; i < 3; i++)
        free(gs[i]);
    for (int i = 0; i < 4; i++)
        free(x[i]);
    free(f), free(ks), free(go), free(gl), free(gdq), free(gdk), free(gdv), free(co), free(cl),
        free(cdq), free(cdk), free(cdv);
    mt_arena_destroy(ar);
}

int main(void) {
    mt_test_require_gpus(1);
    static const shape shapes[] = {
        /* B  T   H  KV  D  causal docs dtype p */
        { 2, 64, 4, 4, 64, 1, 0, MT_F32, 0.1f, 0 },
        { 2, 64, 4, 4, 64, 1, 0, MT_BF16, 0.1f, 0 },
        { 1, 97, 4, 2, 128, 0, 0, MT_BF16, 0.5f, 0 },
        { 3, 70, 4, 1, 40, 1, 0, MT_F32, 0.3f, 0 },
        { 2, 130, 4, 2, 64, 1, 1, MT_BF16, 0.1f, 0 },
        { 1, 33, 2, 2, 64, 0, 0, MT_F16, 0.2f, 0 },
        { 2, 255, 4, 4, 128, 1, 0, MT_BF16, 0.1f, 0 },
        { 1, 300, 8, 2, 64, 1, 1, MT_F16, 0.1f, 0 },
        { 2, 1024, 12, 12, 64, 1, 0, MT_BF16, 0.1f, 0 }, /* GPT-2's heads: many tiles a block */
        { 2, 512, 8, 8, 64, 0, 0, MT_BF16, 0.2f, 0 },    /* full: the wgmma grid's split tiles */
        /* the deterministic backward's kernels */
        { 2, 130, 4, 2, 64, 1, 1, MT_BF16, 0.1f, 1 },
        { 1, 200, 4, 4, 128, 0, 0, MT_F16, 0.3f, 1 },
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run(&shapes[i]);
    return mt_test_result();
}
