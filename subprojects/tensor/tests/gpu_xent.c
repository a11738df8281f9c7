/* gpu: fused softmax cross-entropy on CUDA equals the CPU reference on fresh random logits in f32
 * and bf16 (padded vocab 50257 -> 50304 and an odd unpadded one), i32 and i64 targets with ignored
 * tokens, per-token and mean gradients (the mean also over two row slices with mt_xent_stats,
 * bitwise the one call), in place, more rows than resident blocks; and the golden values. */
#include "gpu_common.h"

static void run(mt_dtype dt, mt_dtype tdt, int64_t N, int64_t V, int64_t Vp, int mean, int in_place,
                uint64_t seed) {
    mt_arena_reset(ar);
    int64_t sh[2] = { N, Vp }, one[1] = { N }, two[1] = { 2 };
    float *x = uniform(N * Vp, seed, -8, 8), *g = uniform(N, seed + 1, -1, 1);
    float *u = uniform(N, seed + 2, 0, 1);
    int64_t *t64 = malloc((size_t)N * 8);
    int32_t *t32 = malloc((size_t)N * 4);
    for (int64_t n = 0; n < N; n++) {
        t64[n] = n % 5 == 3 ? MT_XENT_IGNORE_INDEX : (int64_t)(u[n] * (float)V) % V;
        if (n == 1) t64[n] = V - 1;
        t32[n] = (int32_t)t64[n];
    }
    mt_tensor ht = tdt == MT_I64 ? mt_tensor_1d(t64, MT_I64, N, MT_DEVICE_CPU)
                                 : mt_tensor_1d(t32, MT_I32, N, MT_DEVICE_CPU);
    mt_tensor hx = host_as(x, dt, 2, sh), hd = host_as(x, dt, 2, sh);
    mt_tensor hg = mt_tensor_1d(g, MT_F32, N, MT_DEVICE_CPU);
    float *hl = malloc((size_t)N * 4), hs[2];
    mt_tensor hlo = mt_tensor_1d(hl, MT_F32, N, MT_DEVICE_CPU);
    mt_tensor hst = mt_tensor_1d(hs, MT_F32, 2, MT_DEVICE_CPU);
    MT_CHECK(mt_xent_fwd_bwd(&hd, &hlo, &hst, &hx, &ht, mean ? NULL : &hg, 0.75f, V,
                             MT_XENT_IGNORE_INDEX, NULL));
    mt_tensor dx_ = to_dev(&hx), dt_ = to_dev(&ht), dg = to_dev(&hg);
    mt_tensor dd = in_place ? dx_ : dev_nan(dt, 2, sh);
    mt_tensor dlo = dev_nan(MT_F32, 1, one), dst = dev_nan(MT_F32, 1, two);
    MT_CHECK(mt_xent_fwd_bwd(&dd, &dlo, &dst, &dx_, &dt_, mean ? NULL : &dg, 0.75f, V,
                             MT_XENT_IGNORE_INDEX, NULL));
    char what[128];
    snprintf(what, sizeof what, "xent %s targets %s N=%lld V=%lld Vp=%lld%s%s", mt_dtype_name(dt),
             mt_dtype_name(tdt), (long long)N, (long long)V, (long long)Vp,
             mean ? " mean" : " per-token", in_place ? " in place" : "");
    close_dev(what, &dlo, &hlo, 1e-4, 1e-5);
    close_dev(what, &dst, &hst, 1e-4, 1e-5);
    close_dev(what, &dd, &hd, 1e-9, dt == MT_F32 ? 2e-5 : 1e-2);
    if (mean) { /* the same mean over two row slices (mt_xent_stats): the same bits on the GPU */
        mt_tensor sx = to_dev(&hx), sg = dev_nan(MT_F32, 1, one), slo = dev_nan(MT_F32, 1, one);
        mt_tensor sst = dev_nan(MT_F32, 1, two);
        MT_CHECK(mt_xent_stats(&sst, &sg, NULL, &dt_, 0.75f, MT_XENT_IGNORE_INDEX, NULL));
        for (int c = 0; c < 2; c++) {
            int64_t r0 = c ? N / 3 : 0, n = c ? N - N / 3 : N / 3;
            mt_tensor x1, t1, l1, g1;
            MT_CHECK(mt_tensor_slice(&sx, 0, r0, n, &x1));
            MT_CHECK(mt_tensor_slice(&dt_, 0, r0, n, &t1));
            MT_CHECK(mt_tensor_slice(&slo, 0, r0, n, &l1));
            MT_CHECK(mt_tensor_slice(&sg, 0, r0, n, &g1));
            MT_CHECK(mt_xent_fwd_bwd(&x1, &l1, NULL, &x1, &t1, &g1, 0.0f, V, MT_XENT_IGNORE_INDEX,
                                     NULL));
        }
        MT_CHECK(mt_xent_stats(&sst, NULL, &slo, &dt_, 0.0f, MT_XENT_IGNORE_INDEX, NULL));
        char w2[160];
        snprintf(w2, sizeof w2, "%s, two slices", what);
        close_dev(w2, &sx, &hd, 1e-9, dt == MT_F32 ? 2e-5 : 1e-2);
        float *a = malloc((size_t)mt_tensor_nbytes(&sx)),
              *b = malloc((size_t)mt_tensor_nbytes(&dd));
        MT_CHECK(mt_memcpy(a, MT_DEVICE_CPU, sx.data, sx.device, mt_tensor_nbytes(&sx), NULL));
        MT_CHECK(mt_memcpy(b, MT_DEVICE_CPU, dd.data, dd.device, mt_tensor_nbytes(&dd), NULL));
        MT_EXPECT(memcmp(a, b, mt_tensor_nbytes(&dd)) == 0, "%s: dlogits differ from one call", w2);
        float s1[2], s2[2];
        MT_CHECK(mt_memcpy(s1, MT_DEVICE_CPU, dst.data, dst.device, 8, NULL));
        MT_CHECK(mt_memcpy(s2, MT_DEVICE_CPU, sst.data, sst.device, 8, NULL));
        MT_EXPECT(memcmp(s1, s2, 8) == 0, "%s: stats %g %g, one call %g %g", w2, s2[0], s2[1],
                  s1[0], s1[1]);
        free(a), free(b);
    }
    /* forward only */
    mt_tensor hx2 = to_dev(&hx), dlo2 = dev_nan(MT_F32, 1, one), dst2 = dev_nan(MT_F32, 1, two);
    MT_CHECK(mt_xent_fwd(&dlo2, &dst2, &hx2, &dt_, V, MT_XENT_IGNORE_INDEX, NULL));
    close_dev(what, &dlo2, &hlo, 1e-4, 1e-5);
    close_dev(what, &dst2, &hst, 1e-4, 1e-5);
    free(x), free(g), free(u), free(t64), free(t32), free(hx.data), free(hd.data), free(hl);
}

int main(void) {
    mt_test_require_gpus(1);
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)1 << 28, &ar));
    for (int bf = 0; bf < 2; bf++) {
        mt_dtype dt = bf ? MT_BF16 : MT_F32;
        run(dt, MT_I64, 64, 50257, 50304, 0, 0, 100 + bf);
        run(dt, MT_I32, 64, 50257, 50304, 1, 1, 110 + bf);
        run(dt, MT_I64, 33, 1000, 1003, 1, 0, 120 + bf); /* Vp not a multiple of 8: scalar */
        run(dt, MT_I32, 17, 37, 40, 0, 1, 130 + bf);
    }
    run(MT_BF16, MT_I32, 300, 50257, 50304, 1, 1, 140); /* more rows than resident blocks */
    /* golden values on the GPU (f32, per-token and mean) */
    mt_arena_reset(ar);
    int64_t N = 7, V = 37, sh[2] = { 7, 40 }, two[1] = { 2 }, one[1] = { 7 };
    float *lg = mt_test_golden_f32("xent_logits.npy", NULL, NULL);
    float *tf = mt_test_golden_f32("xent_targets.npy", NULL, NULL);
    float *dl = mt_test_golden_f32("xent_dloss.npy", NULL, NULL);
    float *lref = mt_test_golden_f32("xent_losses.npy", NULL, NULL);
    float *sref = mt_test_golden_f32("xent_stats.npy", NULL, NULL);
    float *dtok = mt_test_golden_f32("xent_dlogits_tok.npy", NULL, NULL);
    float *dmean = mt_test_golden_f32("xent_dlogits_mean.npy", NULL, NULL);
    int64_t tg[7];
    for (int i = 0; i < 7; i++)
        tg[i] = (int64_t)tf[i];
    mt_tensor hx = mt_tensor_make(lg, MT_F32, 2, sh, MT_DEVICE_CPU);
    mt_tensor ht = mt_tensor_1d(tg, MT_I64, N, MT_DEVICE_CPU);
    mt_tensor hdl = mt_tensor_1d(dl, MT_F32, N, MT_DEVICE_CPU);
    mt_tensor rl = mt_tensor_1d(lref, MT_F32, N, MT_DEVICE_CPU);
    mt_tensor rs = mt_tensor_1d(sref, MT_F32, 2, MT_DEVICE_CPU);
    mt_tensor rtok = mt_tensor_make(dtok, MT_F32, 2, sh, MT_DEVICE_CPU);
    mt_tensor rmean = mt_tensor_make(dmean, MT_F32, 2, sh, MT_DEVICE_CPU);
    for (int mean = 0; mean < 2; mean++) {
        mt_tensor dx_ = to_dev(&hx), dt_ = to_dev(&ht), ddl = to_dev(&hdl);
        mt_tensor dd = dev_nan(MT_F32, 2, sh), dlo = dev_nan(MT_F32, 1, one);
        mt_tensor dst = dev_nan(MT_F32, 1, two);
        MT_CHECK(
            mt_xent_fwd_bwd(&dd, &dlo, &dst, &dx_, &dt_, mean ? NULL : &ddl, 1.0f, V, -100, NULL));
        close_dev("xent golden losses (cuda)", &dlo, &rl, 1e-5, 1e-5);
        close_dev("xent golden stats (cuda)", &dst, &rs, 1e-5, 1e-5);
        close_dev(mean ? "xent golden dlogits mean (cuda)" : "xent golden dlogits tok (cuda)", &dd,
                  mean ? &rmean : &rtok, 1e-7, 2e-5);
    }
    free(lg), free(tf), free(dl), free(lref), free(sref), free(dtok), free(dmean);
    mt_arena_destroy(ar);
    return mt_test_result();
}
