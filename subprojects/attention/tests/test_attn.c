/* unit: CPU attention forward/backward against torch SDPA (float64) golden values, also through
 * strided q/k/v views of one fused QKV buffer, and argument validation. */
#include <mt/attention.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int causal;
    float scale;
} golden_case;

static const golden_case cases[] = {
    { "mha_t16_d64_causal", 1, 0.0f },  { "mqa_t1_d64", 0, 0.0f },
    { "gqa4_t70_d40_causal", 1, 0.0f }, { "gqa8_t33_d96", 0, 0.0f },
    { "gqa2_t67_d64_s0.3", 0, 0.3f },   { "gqa2_t67_d64_causal", 1, 0.0f },
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
    free(q), free(k), free(v), free(dout), free(qkv), free(out), free(lse), free(dq), free(dk),
        free(dv);
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
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run(&cases[i], 0);
        run(&cases[i], 1);
    }
    check_errors();
    return mt_test_result();
}
