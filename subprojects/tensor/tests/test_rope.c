/* unit: RoPE forward and backward (CPU reference) against PyTorch: Hugging Face rotate_half with a
 * partial rotary dim, and Meta's interleaved complex form with given position ids (i32 and i64);
 * Llama 3, YaRN (rounded and not) and linear scaled frequencies against transformers';
 * in place; bf16 vs the f32 path on the same rounded inputs; q and k as strided slices of a fused
 * QKV buffer, in place and out of place, equal to the same data made contiguous. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

#define B   2
#define T   5
#define H   3
#define D   12
#define NEL (B * T * H * D)

static float *x, *dout;
static int64_t pos64[B * T];
static int32_t pos32[B * T];

static const mt_rope_scaling *scaling; /* run's, NULL: mt_rope_fwd / mt_rope_bwd */

/* rope in dtype dt on src -> got (f32). bwd: mt_rope_bwd. */
static void run(float *got, const float *src, mt_dtype dt, const mt_tensor *pos, int rot,
                double theta, int inter, int bwd) {
    uint16_t buf[NEL];
    float f[NEL];
    memcpy(f, src, sizeof f);
    mt_tensor t32 = mt_tensor_4d(f, MT_F32, B, T, H, D, MT_DEVICE_CPU), t = t32;
    if (dt == MT_BF16) {
        t = mt_tensor_4d(buf, MT_BF16, B, T, H, D, MT_DEVICE_CPU);
        MT_CHECK(mt_cast(&t, &t32, NULL));
    }
    /* in place: out aliases x */
    if (scaling)
        MT_CHECK(bwd ? mt_rope_scaled_bwd(&t, &t, pos, rot, theta, inter, scaling, NULL)
                     : mt_rope_scaled_fwd(&t, &t, pos, rot, theta, inter, scaling, NULL));
    else
        MT_CHECK(bwd ? mt_rope_bwd(&t, &t, pos, rot, theta, inter, NULL)
                     : mt_rope_fwd(&t, &t, pos, rot, theta, inter, NULL));
    mt_tensor g = mt_tensor_4d(got, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&g, &t, NULL));
}

static void check(const char *name, const mt_tensor *pos, int rot, double theta, int inter) {
    char path[64], what[64];
    snprintf(path, sizeof path, "rope_%s_out.npy", name);
    float *out_ref = mt_test_golden_f32(path, NULL, NULL);
    snprintf(path, sizeof path, "rope_%s_dx.npy", name);
    float *dx_ref = mt_test_golden_f32(path, NULL, NULL);
    float got[NEL], ref[NEL], xr[NEL];
    snprintf(what, sizeof what, "rope %s fwd f32", name);
    run(got, x, MT_F32, pos, rot, theta, inter, 0);
    mt_test_close_f32(what, got, out_ref, NEL, 1e-6, 1e-5);
    snprintf(what, sizeof what, "rope %s bwd f32", name);
    run(got, dout, MT_F32, pos, rot, theta, inter, 1);
    mt_test_close_f32(what, got, dx_ref, NEL, 1e-6, 1e-5);
    for (int i = 0; i < NEL; i++)
        xr[i] = mt_bf16_to_f32(mt_f32_to_bf16(x[i]));
    run(ref, xr, MT_F32, pos, rot, theta, inter, 0);
    run(got, x, MT_BF16, pos, rot, theta, inter, 0);
    snprintf(what, sizeof what, "rope %s fwd bf16", name);
    mt_test_close_f32(what, got, ref, NEL, 1e-6, 4e-3);
    free(out_ref), free(dx_ref);
}

/* Scaled frequencies: mt_rope_inv_freq's table and cos/sin factor equal transformers' (its fp32
 * frequencies: 1e-6 relative), then the rotation with them as check() does. */
static void check_scaled(const char *name, const mt_tensor *pos, int rot, int inter,
                         mt_rope_scaling sc) {
    char path[64], what[64];
    snprintf(path, sizeof path, "rope_%s_invf.npy", name);
    float *invf = mt_test_golden_f32(path, NULL, NULL);
    snprintf(path, sizeof path, "rope_%s_attn.npy", name);
    float *attn = mt_test_golden_f32(path, NULL, NULL);
    double inv[16], a;
    float got[16], fa;
    MT_CHECK(mt_rope_inv_freq(inv, &a, rot, 10000.0, &sc));
    for (int i = 0; i < rot / 2; i++)
        got[i] = (float)inv[i];
    fa = (float)a;
    snprintf(what, sizeof what, "rope %s inv_freq", name);
    mt_test_close_f32(what, got, invf, (size_t)rot / 2, 0, 1e-6);
    snprintf(what, sizeof what, "rope %s attn factor", name);
    mt_test_close_f32(what, &fa, attn, 1, 0, 1e-6);
    scaling = &sc;
    check(name, pos, rot, 10000.0, inter);
    scaling = NULL;
    free(invf), free(attn);
}

/* Heads [h0, h0 + nh) of a (B,T,W) buffer, W >= (h0 + nh) * D, as a (B,T,nh,D) view. */
static mt_tensor heads_view(void *base, mt_dtype dt, int64_t W, int64_t h0, int64_t nh) {
    int64_t sh[4] = { B, T, nh, D };
    mt_tensor v =
        mt_tensor_make((char *)base + h0 * D * mt_dtype_size(dt), dt, 4, sh, MT_DEVICE_CPU);
    v.stride[0] = T * W, v.stride[1] = W, v.stride[2] = D, v.stride[3] = 1;
    return v;
}

/* Copies the rows of view v into (to = 0) or out of (to = 1) the contiguous (B,T,nh,D) array c. */
static void gather(void *c, const mt_tensor *v, int to) {
    size_t es = mt_dtype_size(v->dtype), row = (size_t)D * es;
    int64_t nh = v->shape[2];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < nh; h++) {
                char *pc = (char *)c + (size_t)((b * T + t) * nh + h) * row;
                char *pv = (char *)v->data +
                           (size_t)(b * v->stride[0] + t * v->stride[1] + h * v->stride[2]) * es;
                memcpy(to ? pv : pc, to ? pc : pv, row);
            }
}

/* q (H heads, fwd) and k (G heads, bwd) rotated in place as slices along dim 2 of one fused
 * (B,T,H+2G,D) QKV buffer whose tokens are `pad` elements apart beyond that: bit-identical to the
 * same rows made contiguous, with v and the padding untouched; then out of place from a strided x
 * into a contiguous out. */
static void strided(mt_dtype dt, int pad, int rot, int inter) {
    enum {
        G = 1
    };
    const int64_t W = (H + 2 * G) * D + pad, n = B * T * W;
    size_t es = mt_dtype_size(dt);
    float *f = malloc((size_t)n * 4), *got = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
    mt_test_fill_uniform(f, (size_t)n, 77 + pad, 0, -2, 2);
    mt_tensor f32 = mt_tensor_1d(f, MT_F32, n, MT_DEVICE_CPU);
    mt_tensor all = mt_tensor_1d(malloc((size_t)n * es), dt, n, MT_DEVICE_CPU);
    mt_tensor ref = mt_tensor_1d(malloc((size_t)n * es), dt, n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&all, &f32, NULL));
    memcpy(ref.data, all.data, (size_t)n * es);
    mt_tensor q = heads_view(all.data, dt, W, 0, H), k = heads_view(all.data, dt, W, H, G);
    mt_tensor rq = heads_view(ref.data, dt, W, 0, H), rk = heads_view(ref.data, dt, W, H, G);
    void *qc = malloc((size_t)(B * T * H * D) * es), *kc = malloc((size_t)(B * T * G * D) * es);
    mt_tensor tq = mt_tensor_4d(qc, dt, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor tk = mt_tensor_4d(kc, dt, B, T, G, D, MT_DEVICE_CPU);
    gather(qc, &rq, 0), gather(kc, &rk, 0);
    MT_CHECK(mt_rope_fwd(&tq, &tq, NULL, rot, 1e4, inter, NULL));
    MT_CHECK(mt_rope_bwd(&tk, &tk, NULL, rot, 1e4, inter, NULL));
    gather(qc, &rq, 1), gather(kc, &rk, 1);
    MT_CHECK(mt_rope_fwd(&q, &q, NULL, rot, 1e4, inter, NULL));
    MT_CHECK(mt_rope_bwd(&k, &k, NULL, rot, 1e4, inter, NULL));
    mt_tensor tg = mt_tensor_1d(got, MT_F32, n, MT_DEVICE_CPU);
    mt_tensor tw = mt_tensor_1d(want, MT_F32, n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&tg, &all, NULL));
    MT_CHECK(mt_cast(&tw, &ref, NULL));
    char what[96];
    snprintf(what, sizeof what, "rope fused QKV in place %s pad=%d rot=%d %s", mt_dtype_name(dt),
             pad, rot, inter ? "interleaved" : "half");
    mt_test_close_f32(what, got, want, (size_t)n, 0, 0);
    /* out of place: strided x (the rotated q), contiguous out, vs contiguous x */
    void *oc = malloc((size_t)(B * T * H * D) * es);
    mt_tensor to = mt_tensor_4d(oc, dt, B, T, H, D, MT_DEVICE_CPU);
    gather(qc, &q, 0);
    MT_CHECK(mt_rope_fwd(&to, &q, NULL, rot, 1e4, inter, NULL));
    MT_CHECK(mt_rope_fwd(&tq, &tq, NULL, rot, 1e4, inter, NULL));
    int64_t nq = B * T * H * D;
    mt_tensor a = mt_tensor_1d(oc, dt, nq, MT_DEVICE_CPU),
              r = mt_tensor_1d(qc, dt, nq, MT_DEVICE_CPU);
    tg = mt_tensor_1d(got, MT_F32, nq, MT_DEVICE_CPU),
    tw = mt_tensor_1d(want, MT_F32, nq, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&tg, &a, NULL));
    MT_CHECK(mt_cast(&tw, &r, NULL));
    snprintf(what, sizeof what, "rope strided x -> contiguous out %s pad=%d rot=%d %s",
             mt_dtype_name(dt), pad, rot, inter ? "interleaved" : "half");
    mt_test_close_f32(what, got, want, (size_t)nq, 0, 0);
    free(f), free(got), free(want), free(all.data), free(ref.data), free(qc), free(kc), free(oc);
}

int main(void) {
    x = mt_test_golden_f32("rope_x.npy", NULL, NULL);
    dout = mt_test_golden_f32("rope_dout.npy", NULL, NULL);
    float *p = mt_test_golden_f32("rope_pos.npy", NULL, NULL);
    for (int i = 0; i < B * T; i++)
        pos64[i] = (int64_t)p[i], pos32[i] = (int32_t)p[i];
    free(p);
    check("half", NULL, 8, 10000.0, 0);
    mt_tensor tp64 = mt_tensor_2d(pos64, MT_I64, B, T, MT_DEVICE_CPU);
    mt_tensor tp32 = mt_tensor_2d(pos32, MT_I32, B, T, MT_DEVICE_CPU);
    check("inter", &tp64, 12, 500000.0, 1);
    check("inter", &tp32, 12, 500000.0, 1);
    /* positions 0..T-1 given explicitly as (T) equal the default */
    int32_t ar[T] = { 0, 1, 2, 3, 4 };
    mt_tensor tar = mt_tensor_1d(ar, MT_I32, T, MT_DEVICE_CPU);
    float a[NEL], b[NEL];
    run(a, x, MT_F32, NULL, 8, 10000.0, 0, 0);
    run(b, x, MT_F32, &tar, 8, 10000.0, 0, 0);
    mt_test_close_f32("rope pos (T) == default", b, a, NEL, 0, 0);

    /* scaled frequencies, against transformers' */
    check_scaled("llama3", NULL, 12, 0,
                 (mt_rope_scaling){ .type = MT_ROPE_SCALING_LLAMA3,
                                    .factor = 8,
                                    .original_max_position_embeddings = 256 });
    int32_t p16[B * T];
    for (int i = 0; i < B * T; i++)
        p16[i] = pos32[i] % 16;
    mt_tensor tp16 = mt_tensor_2d(p16, MT_I32, B, T, MT_DEVICE_CPU);
    check_scaled("yarn", &tp16, 8, 1,
                 (mt_rope_scaling){ .type = MT_ROPE_SCALING_YARN,
                                    .factor = 40,
                                    .mscale = 0.707,
                                    .mscale_all_dim = 0.5,
                                    .original_max_position_embeddings = 64 });
    check_scaled("yarnnt", NULL, 12, 0,
                 (mt_rope_scaling){ .type = MT_ROPE_SCALING_YARN,
                                    .factor = 4,
                                    .mscale = 1,
                                    .no_truncate = 1,
                                    .original_max_position_embeddings = 512 });
    check_scaled("linear", NULL, 10, 0,
                 (mt_rope_scaling){ .type = MT_ROPE_SCALING_LINEAR, .factor = 2.5 });
    { /* LongRoPE: the short factors below the original positions, the long above */
        mt_rope_scaling lr = { .type = MT_ROPE_SCALING_LONGROPE,
                               .factor = 4,
                               .original_max_position_embeddings = 16 };
        const double sh[5] = { 1.0, 1.5, 2.0, 3.0, 5.0 }, lg[5] = { 1.0, 2.0, 4.0, 8.0, 16.0 };
        memcpy(lr.ext_factors, sh, sizeof sh);
        check_scaled("longrope_short", NULL, 10, 0, lr);
        memcpy(lr.ext_factors, lg, sizeof lg);
        check_scaled("longrope_long", NULL, 10, 0, lr);
        double inv[5], at;
        lr.ext_factors[3] = 0.0;
        MT_EXPECT_STATUS(mt_rope_inv_freq(inv, &at, 10, 1e4, &lr), MT_ERR_INVALID_ARG);
    }
    /* NONE (and factor 1 linear) is mt_rope_fwd bit for bit */
    {
        float u[NEL];
        run(a, x, MT_F32, &tp64, 12, 500000.0, 1, 0);
        mt_rope_scaling none = { 0 }, lin1 = { .type = MT_ROPE_SCALING_LINEAR, .factor = 1 };
        scaling = &none;
        run(u, x, MT_F32, &tp64, 12, 500000.0, 1, 0);
        mt_test_close_f32("rope scaling NONE == unscaled", u, a, NEL, 0, 0);
        scaling = &lin1;
        run(u, x, MT_F32, &tp64, 12, 500000.0, 1, 0);
        mt_test_close_f32("rope linear factor 1 == unscaled", u, a, NEL, 0, 0);
        scaling = NULL;
    }

    for (int bf = 0; bf < 2; bf++)
        for (int pad = 0; pad < 2; pad++) {
            strided(bf ? MT_BF16 : MT_F32, pad, 8, 0);
            strided(bf ? MT_BF16 : MT_F32, pad, 12, 1);
        }

    /* bad input gets a clear error */
    mt_tensor tx = mt_tensor_4d(x, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor to = mt_tensor_4d(a, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_rope_fwd(&to, &tx, NULL, 7, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_rope_fwd(&to, &tx, NULL, D + 2, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    mt_tensor tpb = mt_tensor_1d(ar, MT_I32, T - 1, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_rope_fwd(&to, &tx, &tpb, 8, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    mt_tensor t3 = mt_tensor_3d(x, MT_F32, B * T, H, D, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_rope_fwd(&t3, &t3, NULL, 8, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    mt_tensor td = tx; /* D not innermost: a (B,T,D,H) buffer viewed as (B,T,H,D) */
    td.stride[2] = 1, td.stride[3] = H;
    MT_EXPECT_STATUS(mt_rope_fwd(&to, &td, NULL, 8, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    mt_tensor tsh = mt_tensor_4d(a, MT_F32, B, T, H - 1, D, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_rope_fwd(&tsh, &tx, NULL, 8, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    double inv[8], at;
    mt_rope_scaling bad = { .type = MT_ROPE_SCALING_YARN }; /* factor 0 */
    MT_EXPECT_STATUS(mt_rope_inv_freq(inv, &at, 8, 1e4, &bad), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_rope_scaled_fwd(&to, &tx, NULL, 8, 1e4, 0, &bad, NULL), MT_ERR_INVALID_ARG);
    bad = (mt_rope_scaling){
        .type = MT_ROPE_SCALING_LLAMA3, .factor = 8, .low_freq_factor = 4, .high_freq_factor = 4
    };
    MT_EXPECT_STATUS(mt_rope_inv_freq(inv, &at, 8, 1e4, &bad), MT_ERR_INVALID_ARG);
    bad = (mt_rope_scaling){ .type = (mt_rope_scaling_type)7, .factor = 8 };
    MT_EXPECT_STATUS(mt_rope_inv_freq(inv, &at, 8, 1e4, &bad), MT_ERR_INVALID_ARG);
    free(x), free(dout);
    return mt_test_result();
}
