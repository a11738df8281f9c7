/* unit: fused softmax cross-entropy over a padded vocab (CPU reference) against PyTorch's
 * F.cross_entropy (ignore_index -100): per-token losses, mean and count, gradients for a per-token
 * upstream and for the mean (also over two row slices with mt_xent_stats), i32 and i64 targets, in
 * place, f32 and bf16. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

#define N  7
#define V  37
#define VP 40

static float *logits, *dloss, *losses_ref, *stats_ref, *dtok_ref, *dmean_ref;
static int64_t tg64[N];
static int32_t tg32[N];

/* One fused call in dtype dt on the f32 logits `lg`; gradient, losses and stats back in f32. */
static void run(float *dgot, float *losses, float *stats, const float *lg, mt_dtype dt,
                mt_dtype tdt, int mean, int in_place) {
    mt_tensor tl = mt_tensor_2d((void *)lg, MT_F32, N, VP, MT_DEVICE_CPU);
    uint16_t lb[N * VP], db[N * VP];
    float xsrc[N * VP], dout[N * VP];
    mt_tensor x, d;
    if (dt == MT_BF16) {
        x = mt_tensor_2d(lb, MT_BF16, N, VP, MT_DEVICE_CPU);
        MT_CHECK(mt_cast(&x, &tl, NULL));
        d = in_place ? x : mt_tensor_2d(db, MT_BF16, N, VP, MT_DEVICE_CPU);
    } else {
        memcpy(xsrc, lg, sizeof xsrc);
        x = mt_tensor_2d(xsrc, MT_F32, N, VP, MT_DEVICE_CPU);
        d = in_place ? x : mt_tensor_2d(dout, MT_F32, N, VP, MT_DEVICE_CPU);
    }
    mt_tensor tt = tdt == MT_I64 ? mt_tensor_1d(tg64, MT_I64, N, MT_DEVICE_CPU)
                                 : mt_tensor_1d(tg32, MT_I32, N, MT_DEVICE_CPU);
    mt_tensor tlo = mt_tensor_1d(losses, MT_F32, N, MT_DEVICE_CPU);
    mt_tensor ts = mt_tensor_1d(stats, MT_F32, 2, MT_DEVICE_CPU);
    mt_tensor tdl = mt_tensor_1d(dloss, MT_F32, N, MT_DEVICE_CPU);
    MT_CHECK(mt_xent_fwd_bwd(&d, &tlo, &ts, &x, &tt, mean ? NULL : &tdl, 1.0f, V,
                             MT_XENT_IGNORE_INDEX, NULL));
    mt_tensor t32 = mt_tensor_2d(dgot, MT_F32, N, VP, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&t32, &d, NULL));
}

/* f32 vs torch; bf16 vs the f32 path on the same bf16-rounded logits (rounding the inputs moves
 * the loss by more than any kernel error, so torch's float64 values are not the reference). */
static void check(mt_dtype tdt, int mean, int in_place) {
    float d[N * VP], l[N], s[2], dr[N * VP], lr[N], sr[2], rounded[N * VP];
    char what[96];
    snprintf(what, sizeof what, "xent f32 targets %s%s%s", mt_dtype_name(tdt),
             mean ? " mean" : " per-token", in_place ? " in place" : "");
    run(d, l, s, logits, MT_F32, tdt, mean, in_place);
    mt_test_close_f32(what, l, losses_ref, N, 1e-5, 1e-5);
    mt_test_close_f32(what, s, stats_ref, 2, 1e-5, 1e-5);
    mt_test_close_f32(what, d, mean ? dmean_ref : dtok_ref, N * VP, 1e-7, 1e-5);
    for (int i = 0; i < N * VP; i++)
        rounded[i] = mt_bf16_to_f32(mt_f32_to_bf16(logits[i]));
    run(dr, lr, sr, rounded, MT_F32, tdt, mean, 0);
    run(d, l, s, logits, MT_BF16, tdt, mean, in_place);
    snprintf(what, sizeof what, "xent bf16 targets %s%s%s", mt_dtype_name(tdt),
             mean ? " mean" : " per-token", in_place ? " in place" : "");
    mt_test_close_f32(what, l, lr, N, 1e-6, 1e-6);
    mt_test_close_f32(what, s, sr, 2, 1e-6, 1e-6);
    mt_test_close_f32(what, d, dr, N * VP, 1e-6, 8e-3);
}

int main(void) {
    logits = mt_test_golden_f32("xent_logits.npy", NULL, NULL);
    dloss = mt_test_golden_f32("xent_dloss.npy", NULL, NULL);
    losses_ref = mt_test_golden_f32("xent_losses.npy", NULL, NULL);
    stats_ref = mt_test_golden_f32("xent_stats.npy", NULL, NULL);
    dtok_ref = mt_test_golden_f32("xent_dlogits_tok.npy", NULL, NULL);
    dmean_ref = mt_test_golden_f32("xent_dlogits_mean.npy", NULL, NULL);
    float *t = mt_test_golden_f32("xent_targets.npy", NULL, NULL);
    for (int i = 0; i < N; i++)
        tg64[i] = (int64_t)t[i], tg32[i] = (int32_t)t[i];
    free(t);
    for (int mean = 0; mean < 2; mean++) {
        check(MT_I64, mean, 0);
        check(MT_I32, mean, 1);
    }

    /* forward only */
    float losses[N], stats[2];
    mt_tensor tl = mt_tensor_2d(logits, MT_F32, N, VP, MT_DEVICE_CPU);
    mt_tensor tt = mt_tensor_1d(tg64, MT_I64, N, MT_DEVICE_CPU);
    mt_tensor tlo = mt_tensor_1d(losses, MT_F32, N, MT_DEVICE_CPU);
    mt_tensor ts = mt_tensor_1d(stats, MT_F32, 2, MT_DEVICE_CPU);
    mt_tensor tshort_ids = mt_tensor_1d(tg64, MT_I64, N - 1, MT_DEVICE_CPU); /* dloss is N long */
    MT_CHECK(mt_xent_fwd(&tlo, &ts, &tl, &tt, V, MT_XENT_IGNORE_INDEX, NULL));
    mt_test_close_f32("xent fwd losses", losses, losses_ref, N, 1e-5, 1e-5);
    mt_test_close_f32("xent fwd stats", stats, stats_ref, 2, 1e-5, 1e-5);

    /* the mean in two row slices (mt_xent_stats before and after): PyTorch's mean gradient */
    {
        float lg[N * VP], g[N], s2[2], lo2[N];
        memcpy(lg, logits, sizeof lg);
        mt_tensor tg = mt_tensor_1d(g, MT_F32, N, MT_DEVICE_CPU);
        mt_tensor ts2 = mt_tensor_1d(s2, MT_F32, 2, MT_DEVICE_CPU);
        mt_tensor tlo2 = mt_tensor_1d(lo2, MT_F32, N, MT_DEVICE_CPU);
        MT_CHECK(mt_xent_stats(&ts2, &tg, NULL, &tt, 1.0f, MT_XENT_IGNORE_INDEX, NULL));
        const int cut = 3;
        for (int c = 0; c < 2; c++) {
            int r0 = c ? cut : 0, n = c ? N - cut : cut;
            mt_tensor x = mt_tensor_2d(lg + r0 * VP, MT_F32, n, VP, MT_DEVICE_CPU);
            mt_tensor t1 = mt_tensor_1d(tg64 + r0, MT_I64, n, MT_DEVICE_CPU);
            mt_tensor l1 = mt_tensor_1d(lo2 + r0, MT_F32, n, MT_DEVICE_CPU);
            mt_tensor g1 = mt_tensor_1d(g + r0, MT_F32, n, MT_DEVICE_CPU);
            MT_CHECK(
                mt_xent_fwd_bwd(&x, &l1, NULL, &x, &t1, &g1, 0.0f, V, MT_XENT_IGNORE_INDEX, NULL));
        }
        MT_CHECK(mt_xent_stats(&ts2, NULL, &tlo2, &tt, 0.0f, MT_XENT_IGNORE_INDEX, NULL));
        mt_test_close_f32("xent sliced mean: dlogits", lg, dmean_ref, N * VP, 1e-7, 1e-5);
        mt_test_close_f32("xent sliced mean: stats", s2, stats_ref, 2, 1e-5, 1e-5);
        mt_test_close_f32("xent sliced mean: losses", lo2, losses_ref, N, 1e-5, 1e-5);
        MT_EXPECT_STATUS(mt_xent_stats(&ts2, &tlo, NULL, &tshort_ids, 1.0f, -100, NULL),
                         MT_ERR_INVALID_ARG);
    }

    /* bad input gets a clear error */
    MT_EXPECT_STATUS(mt_xent_fwd(&tlo, &ts, &tl, &tt, VP + 1, -100, NULL), MT_ERR_INVALID_ARG);
    mt_tensor tshort = mt_tensor_1d(tg64, MT_I64, N - 1, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_xent_fwd(&tlo, &ts, &tl, &tshort, V, -100, NULL), MT_ERR_INVALID_ARG);
    mt_tensor tf = mt_tensor_1d(losses, MT_F32, N, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_xent_fwd(&tlo, &ts, &tl, &tf, V, -100, NULL), MT_ERR_UNSUPPORTED);
    float dl[N * VP];
    mt_tensor td = mt_tensor_2d(dl, MT_F32, N, VP, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_xent_fwd_bwd(&td, &tlo, NULL, &tl, &tt, NULL, 1.0f, V, -100, NULL),
                     MT_ERR_INVALID_ARG);
    int64_t bad[N];
    memcpy(bad, tg64, sizeof bad);
    bad[3] = V; /* a padded column is not a valid target */
    mt_tensor tbad = mt_tensor_1d(bad, MT_I64, N, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_xent_fwd(&tlo, &ts, &tl, &tbad, V, -100, NULL), MT_ERR_INVALID_ARG);
    free(logits), free(dloss), free(losses_ref), free(stats_ref), free(dtok_ref), free(dmean_ref);
    return mt_test_result();
}
