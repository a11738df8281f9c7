/* gpu: RoPE forward/backward on CUDA equal the CPU reference on fresh random input in f32 and bf16:
 * both layouts, full and partial rotary dims (vectorised and scalar paths), default positions and
 * (T)/(B,T) position ids up to 1e5, in place; q and k as strided slices of a fused QKV buffer (in
 * place, and out of place into a contiguous out); Llama 3, YaRN, linear and LongRoPE scaled
 * frequencies (up to MT_ROPE_MAX_PAIRS pairs); and the golden values. */
#include "gpu_common.h"

static const mt_rope_scaling *scaling; /* run's: NULL, or mt_rope_scaled_* */

static mt_status fwd(mt_tensor *o, const mt_tensor *x, const mt_tensor *p, int rot, double theta,
                     int inter) {
    return mt_rope_scaled_fwd(o, x, p, rot, theta, inter, scaling, NULL);
}

static mt_status bwd(mt_tensor *o, const mt_tensor *x, const mt_tensor *p, int rot, double theta,
                     int inter) {
    return mt_rope_scaled_bwd(o, x, p, rot, theta, inter, scaling, NULL);
}

/* pos_kind: 0 default, 1 (T) i32, 2 (B,T) i64 */
static void run(mt_dtype dt, int64_t B, int64_t T, int64_t H, int64_t D, int rot, double theta,
                int inter, int pos_kind, uint64_t seed) {
    mt_arena_reset(ar);
    int64_t sh[4] = { B, T, H, D };
    float *x = uniform(B * T * H * D, seed, -2, 2), *u = uniform(B * T, seed + 1, 0, 1);
    int64_t *p64 = malloc((size_t)(B * T) * 8);
    int32_t *p32 = malloc((size_t)(B * T) * 4);
    for (int64_t i = 0; i < B * T; i++)
        p64[i] = (int64_t)(u[i] * 1e5f), p32[i] = (int32_t)p64[i];
    mt_tensor hpos = pos_kind == 1 ? mt_tensor_1d(p32, MT_I32, T, MT_DEVICE_CPU)
                                   : mt_tensor_2d(p64, MT_I64, B, T, MT_DEVICE_CPU);
    mt_tensor hx = host_as(x, dt, 4, sh), hf = host_as(x, dt, 4, sh), hb = host_as(x, dt, 4, sh);
    const mt_tensor *pp = pos_kind ? &hpos : NULL;
    MT_CHECK(fwd(&hf, &hx, pp, rot, theta, inter));
    MT_CHECK(bwd(&hb, &hx, pp, rot, theta, inter));
    mt_tensor dpos = to_dev(&hpos), dx_ = to_dev(&hx);
    const mt_tensor *dp = pos_kind ? &dpos : NULL;
    mt_tensor df = dev_nan(dt, 4, sh), db = dev_nan(dt, 4, sh);
    MT_CHECK(fwd(&df, &dx_, dp, rot, theta, inter));
    MT_CHECK(bwd(&db, &dx_, dp, rot, theta, inter));
    char what[128];
    snprintf(what, sizeof what, "rope %s %s B=%lld T=%lld H=%lld D=%lld rot=%d pos=%d scaling=%d",
             mt_dtype_name(dt), inter ? "interleaved" : "half", (long long)B, (long long)T,
             (long long)H, (long long)D, rot, pos_kind, scaling ? (int)scaling->type : 0);
    double rtol = dt == MT_F32 ? 1e-5 : 1e-2; /* bf16: one rounding step apart at most */
    close_dev(what, &df, &hf, 1e-6, rtol);
    close_dev(what, &db, &hb, 1e-6, rtol);
    MT_CHECK(fwd(&dx_, &dx_, dp, rot, theta, inter)); /* in place */
    close_dev(what, &dx_, &hf, 1e-6, rtol);
    free(x), free(u), free(p64), free(p32), free(hx.data), free(hf.data), free(hb.data);
}

/* Heads [h0, h0 + nh) of a (B,T,W) buffer as a (B,T,nh,D) view (D innermost, free strides). */
static mt_tensor heads_view(const mt_tensor *all, int64_t B, int64_t T, int64_t W, int64_t D,
                            int64_t h0, int64_t nh) {
    int64_t sh[4] = { B, T, nh, D };
    mt_tensor v = mt_tensor_make((char *)all->data + h0 * D * mt_dtype_size(all->dtype), all->dtype,
                                 4, sh, all->device);
    v.stride[0] = T * W, v.stride[1] = W, v.stride[2] = D, v.stride[3] = 1;
    return v;
}

/* q (H heads, fwd) and k (G heads, bwd) rotated in place as slices along dim 2 of one fused
 * (B,T,H+2G,D) QKV buffer, tokens `pad` elements further apart: CUDA vs the CPU reference on the
 * same layout, whole buffer (v and padding untouched). pad 0 with D % 8 == 0 takes the vectorised
 * path, pad 1 the scalar one. Then out of place: strided x, contiguous (NaN-poisoned) out. */
static void fused(mt_dtype dt, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int pad,
                  int rot, int inter, uint64_t seed) {
    mt_arena_reset(ar);
    int64_t W = (H + 2 * G) * D + pad, n = B * T * W, sh[4] = { B, T, H, D };
    float *f = uniform(n, seed, -2, 2);
    int64_t *p64 = malloc((size_t)(B * T) * 8);
    for (int64_t i = 0; i < B * T; i++)
        p64[i] = (i * 7919) % 100000;
    mt_tensor hpos = mt_tensor_2d(p64, MT_I64, B, T, MT_DEVICE_CPU), dpos = to_dev(&hpos);
    mt_tensor hall = host_as(f, dt, 1, &n), dall = to_dev(&hall);
    mt_tensor hq = heads_view(&hall, B, T, W, D, 0, H), hk = heads_view(&hall, B, T, W, D, H, G);
    mt_tensor dq = heads_view(&dall, B, T, W, D, 0, H), dk = heads_view(&dall, B, T, W, D, H, G);
    mt_tensor hout = host_as(f, dt, 4, sh), dout = dev_nan(dt, 4, sh);
    MT_CHECK(mt_rope_fwd(&hout, &hq, &hpos, rot, 1e4, inter, NULL)); /* before q turns */
    MT_CHECK(mt_rope_fwd(&dout, &dq, &dpos, rot, 1e4, inter, NULL));
    MT_CHECK(mt_rope_fwd(&hq, &hq, &hpos, rot, 1e4, inter, NULL));
    MT_CHECK(mt_rope_bwd(&hk, &hk, &hpos, rot, 1e4, inter, NULL));
    MT_CHECK(mt_rope_fwd(&dq, &dq, &dpos, rot, 1e4, inter, NULL));
    MT_CHECK(mt_rope_bwd(&dk, &dk, &dpos, rot, 1e4, inter, NULL));
    char what[128];
    double rtol = dt == MT_F32 ? 1e-5 : 1e-2;
    snprintf(what, sizeof what, "rope fused QKV in place %s %s H=%lld G=%lld D=%lld pad=%d rot=%d",
             mt_dtype_name(dt), inter ? "interleaved" : "half", (long long)H, (long long)G,
             (long long)D, pad, rot);
    close_dev(what, &dall, &hall, 1e-6, rtol);
    snprintf(what, sizeof what, "rope strided x -> contiguous out %s %s D=%lld pad=%d rot=%d",
             mt_dtype_name(dt), inter ? "interleaved" : "half", (long long)D, pad, rot);
    close_dev(what, &dout, &hout, 1e-6, rtol);
    free(f), free(p64), free(hall.data), free(hout.data);
}

static void golden(const char *name, int rot, double theta, int inter, int with_pos) {
    mt_arena_reset(ar);
    int64_t sh[4] = { 2, 5, 3, 12 };
    char path[64];
    float *x = mt_test_golden_f32("rope_x.npy", NULL, NULL);
    float *pf = mt_test_golden_f32("rope_pos.npy", NULL, NULL);
    snprintf(path, sizeof path, "rope_%s_out.npy", name);
    float *ref = mt_test_golden_f32(path, NULL, NULL);
    int64_t pos[10];
    for (int i = 0; i < 10; i++)
        pos[i] = (int64_t)pf[i];
    mt_tensor hx = mt_tensor_make(x, MT_F32, 4, sh, MT_DEVICE_CPU);
    mt_tensor hr = mt_tensor_make(ref, MT_F32, 4, sh, MT_DEVICE_CPU);
    mt_tensor hp = mt_tensor_2d(pos, MT_I64, 2, 5, MT_DEVICE_CPU);
    mt_tensor dx_ = to_dev(&hx), dp = to_dev(&hp), dout = dev_nan(MT_F32, 4, sh);
    MT_CHECK(mt_rope_fwd(&dout, &dx_, with_pos ? &dp : NULL, rot, theta, inter, NULL));
    snprintf(path, sizeof path, "rope %s golden (cuda)", name);
    close_dev(path, &dout, &hr, 1e-6, 1e-5);
    free(x), free(pf), free(ref);
}

int main(void) {
    mt_test_require_gpus(1);
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)1 << 28, &ar));
    for (int bf = 0; bf < 2; bf++) {
        mt_dtype dt = bf ? MT_BF16 : MT_F32;
        for (int inter = 0; inter < 2; inter++) {
            run(dt, 2, 67, 5, 128, 128, 10000.0, inter, 0, 1 + bf);
            run(dt, 2, 67, 5, 128, 64, 500000.0, inter, 2, 3 + bf);
            run(dt, 3, 33, 4, 72, 40, 10000.0, inter, 1, 5 + bf); /* half: scalar for bf16 */
            run(dt, 1, 9, 2, 10, 6, 10000.0, inter, 2, 7 + bf);   /* D % 4 != 0: scalar */
        }
    }
    for (int bf = 0; bf < 2; bf++)
        for (int inter = 0; inter < 2; inter++)
            for (int pad = 0; pad < 2; pad++) {
                mt_dtype dt = bf ? MT_BF16 : MT_F32;
                fused(dt, 2, 33, 8, 2, 128, pad, 128, inter, 11 + pad);
                fused(dt, 1, 17, 4, 1, 64, pad, 32, inter, 13 + pad);
            }
    /* scaled frequencies (the table and cos/sin factor reach the kernels): CUDA == CPU */
    static mt_rope_scaling sc[4] = {
        { .type = MT_ROPE_SCALING_LLAMA3, .factor = 8, .original_max_position_embeddings = 8192 },
        { .type = MT_ROPE_SCALING_YARN, .factor = 40, .mscale = 0.707, .mscale_all_dim = 0.5 },
        { .type = MT_ROPE_SCALING_LINEAR, .factor = 4 },
        { .type = MT_ROPE_SCALING_LONGROPE,
          .factor = 32,
          .original_max_position_embeddings = 4096 },
    };
    for (int i = 0; i < MT_ROPE_MAX_PAIRS; i++) /* (LongRoPE's divisors, one per pair) */
        sc[3].ext_factors[i] = 1.0 + 0.37 * i;
    for (int k = 0; k < 4; k++) {
        scaling = &sc[k];
        for (int bf = 0; bf < 2; bf++)
            for (int inter = 0; inter < 2; inter++) {
                mt_dtype dt = bf ? MT_BF16 : MT_F32;
                run(dt, 2, 67, 5, 128, 128, 500000.0, inter, 2, 21 + bf);
                run(dt, 2, 19, 3, 192, 64, 10000.0, inter, 1, 23 + bf); /* MLA's rotary part */
                run(dt, 1, 9, 2, 512, 512, 10000.0, inter, 2, 25 + bf); /* MT_ROPE_MAX_PAIRS */
                run(dt, 1, 9, 2, 10, 6, 10000.0, inter, 0, 27 + bf);    /* scalar */
            }
    }
    scaling = NULL;
    golden("half", 8, 10000.0, 0, 0);
    golden("inter", 12, 500000.0, 1, 1);
    mt_arena_destroy(ar);
    return mt_test_result();
}
