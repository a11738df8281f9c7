/* unit: mt_dropout (CPU reference) against goldens from an independent Philox (randomgen) and
 * PyTorch's float32 arithmetic; p = 0, the drop rate, distinct masks per site and sample, and the
 * refusals. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const uint64_t SEED = 0x123456789ABCull;

static void golden(int64_t E, float p, const char *tag) {
    size_t n, nid;
    char name[64];
    snprintf(name, sizeof name, "drop_x_%lld.npy", (long long)E);
    float *x = mt_test_golden_f32(name, &n, NULL);
    snprintf(name, sizeof name, "drop_resid_%lld.npy", (long long)E);
    float *r = mt_test_golden_f32(name, NULL, NULL);
    double *idd = mt_test_golden_f64("drop_ids.npy", &nid);
    int64_t ids[8];
    for (size_t i = 0; i < nid; i++)
        ids[i] = (int64_t)idd[i];
    mt_tensor ts = mt_tensor_1d(ids, MT_I64, (int64_t)nid, MT_DEVICE_CPU);
    mt_dropout_config dc = { p, SEED, 5, &ts, 0, 0 };
    float *out = malloc(n * 4);
    mt_tensor tx = mt_tensor_2d(x, MT_F32, (int64_t)nid, E, MT_DEVICE_CPU);
    mt_tensor tr = mt_tensor_2d(r, MT_F32, (int64_t)nid, E, MT_DEVICE_CPU);
    mt_tensor to = mt_tensor_2d(out, MT_F32, (int64_t)nid, E, MT_DEVICE_CPU);
    for (int with_resid = 0; with_resid < 2; with_resid++) {
        snprintf(name, sizeof name, "drop_%s%s_%lld.npy", tag, with_resid ? "_resid" : "",
                 (long long)E);
        float *want = mt_test_golden_f32(name, NULL, NULL);
        MT_CHECK(mt_dropout(&to, &tx, with_resid ? &tr : NULL, &dc, NULL));
        mt_test_close_f32(name, out, want, n, 0.0, 0.0);
        /* in place over x (a copy) */
        float *xc = malloc(n * 4);
        memcpy(xc, x, n * 4);
        mt_tensor txc = mt_tensor_2d(xc, MT_F32, (int64_t)nid, E, MT_DEVICE_CPU);
        MT_CHECK(mt_dropout(&txc, &txc, with_resid ? &tr : NULL, &dc, NULL));
        mt_test_close_f32("in place", xc, want, n, 0.0, 0.0);
        /* windows of the tensor (a sequence-parallel rank's rows): [0, k) and [k, n) with their
         * offsets give the whole tensor's masks, also across a row's end */
        const int64_t cuts[2] = { 13, E + 3 };
        for (int c = 0; c < 2; c++) {
            const int64_t k = cuts[c];
            memset(out, 0, n * 4);
            for (int part = 0; part < 2; part++) {
                const int64_t o0 = part ? k : 0, len = part ? (int64_t)n - k : k;
                mt_tensor wx = mt_tensor_1d(x + o0, MT_F32, len, MT_DEVICE_CPU);
                mt_tensor wr = mt_tensor_1d(r + o0, MT_F32, len, MT_DEVICE_CPU);
                mt_tensor wo = mt_tensor_1d(out + o0, MT_F32, len, MT_DEVICE_CPU);
                mt_dropout_config wc = dc;
                wc.offset = o0, wc.row = E;
                MT_CHECK(mt_dropout(&wo, &wx, with_resid ? &wr : NULL, &wc, NULL));
            }
            mt_test_close_f32("two windows", out, want, n, 0.0, 0.0);
        }
        free(xc), free(want);
    }
    free(x), free(r), free(idd), free(out);
}

/* p = 0 is out = resid + x with no ids needed; the drop rate of a large tensor is p; masks differ
 * between sites and between samples; the refusals name the problem. */
static void rules(void) {
    enum {
        B = 4,
        E = 50000
    };
    float *x = malloc(B * E * 4), *o = malloc(B * E * 4), *o2 = malloc(B * E * 4);
    for (int i = 0; i < B * E; i++)
        x[i] = 1.0f;
    mt_tensor tx = mt_tensor_2d(x, MT_F32, B, E, MT_DEVICE_CPU);
    mt_tensor to = mt_tensor_2d(o, MT_F32, B, E, MT_DEVICE_CPU);
    mt_tensor to2 = mt_tensor_2d(o2, MT_F32, B, E, MT_DEVICE_CPU);
    mt_dropout_config none = { 0.0f, SEED, 0, NULL, 0, 0 };
    MT_CHECK(mt_dropout(&to, &tx, &tx, &none, NULL));
    MT_EXPECT(o[0] == 2.0f && o[B * E - 1] == 2.0f, "p = 0: resid + x (%g)", (double)o[0]);
    int64_t ids[B] = { 0, 1, 2, 3 }, ids2[B] = { 0, 1, 2, 5 };
    mt_tensor ts = mt_tensor_1d(ids, MT_I64, B, MT_DEVICE_CPU);
    mt_tensor ts2 = mt_tensor_1d(ids2, MT_I64, B, MT_DEVICE_CPU);
    const float ps[3] = { 0.1f, 0.5f, 0.9f };
    for (int k = 0; k < 3; k++) {
        mt_dropout_config dc = { ps[k], SEED, 1, &ts, 0, 0 };
        MT_CHECK(mt_dropout(&to, &tx, NULL, &dc, NULL));
        int64_t zeros = 0, bad = 0;
        const float keep = (float)(1.0 / (1.0 - (double)ps[k]));
        for (int i = 0; i < B * E; i++)
            zeros += o[i] == 0.0f, bad += o[i] != 0.0f && o[i] != keep;
        const double rate = (double)zeros / (B * E), sd = sqrt(ps[k] * (1 - ps[k]) / (B * E));
        MT_EXPECT(fabs(rate - ps[k]) < 5 * sd && bad == 0, "p %g: drop rate %.5f, %lld not 1/(1-p)",
                  (double)ps[k], rate, (long long)bad);
    }
    mt_dropout_config a = { 0.5f, SEED, 1, &ts, 0, 0 }, b = { 0.5f, SEED, 2, &ts, 0, 0 },
                      c = { 0.5f, SEED, 1, &ts2, 0, 0 };
    MT_CHECK(mt_dropout(&to, &tx, NULL, &a, NULL));
    MT_CHECK(mt_dropout(&to2, &tx, NULL, &b, NULL));
    int64_t same = 0;
    for (int i = 0; i < B * E; i++)
        same += o[i] == o2[i];
    MT_EXPECT(same < B * E * 0.55, "sites 1 and 2 agree on %lld of %d elements", (long long)same,
              B * E);
    MT_CHECK(mt_dropout(&to2, &tx, NULL, &c, NULL));
    int64_t same3 = 0, diff3 = 0;
    for (int i = 0; i < B * E; i++) {
        if (i < 3 * E)
            same3 += o[i] == o2[i];
        else
            diff3 += o[i] != o2[i];
    }
    MT_EXPECT(same3 == 3 * E && diff3 > E / 4,
              "samples 0..2 alike (%lld of %d), sample 3 against 5 different (%lld)",
              (long long)same3, 3 * E, (long long)diff3);
    /* refusals */
    mt_dropout_config one = { 1.0f, SEED, 1, &ts, 0, 0 }, neg = { -0.1f, SEED, 1, &ts, 0, 0 },
                      noids = { 0.1f, SEED, 1, NULL, 0, 0 };
    MT_EXPECT(mt_dropout(&to, &tx, NULL, &one, NULL) == MT_ERR_INVALID_ARG &&
                  strstr(mt_last_error(), "outside [0, 1)"),
              "p = 1: %s", mt_last_error());
    MT_EXPECT(mt_dropout(&to, &tx, NULL, &neg, NULL) == MT_ERR_INVALID_ARG, "p < 0 refused");
    MT_EXPECT(mt_dropout(&to, &tx, NULL, &noids, NULL) == MT_ERR_INVALID_ARG &&
                  strstr(mt_last_error(), "sample ids"),
              "no sample ids: %s", mt_last_error());
    int64_t ids3[3] = { 0, 1, 2 };
    mt_tensor ts3 = mt_tensor_1d(ids3, MT_I64, 3, MT_DEVICE_CPU);
    mt_dropout_config rows = { 0.1f, SEED, 1, &ts3, 0, 0 };
    MT_EXPECT(mt_dropout(&to, &tx, NULL, &rows, NULL) == MT_ERR_INVALID_ARG &&
                  strstr(mt_last_error(), "not 3 equal rows"),
              "rows: %s", mt_last_error());
    mt_dropout_config past = a, norow = a;
    past.offset = 5, past.row = E; /* 5 elements past the 4 rows' end */
    MT_EXPECT(mt_dropout(&to, &tx, NULL, &past, NULL) == MT_ERR_INVALID_ARG &&
                  strstr(mt_last_error(), "dropout window"),
              "window past the end: %s", mt_last_error());
    norow.offset = 8;
    MT_EXPECT(mt_dropout(&to, &tx, NULL, &norow, NULL) == MT_ERR_INVALID_ARG &&
                  strstr(mt_last_error(), "needs row"),
              "window without row: %s", mt_last_error());
    mt_tensor small = mt_tensor_2d(o, MT_F32, B, E - 1, MT_DEVICE_CPU);
    MT_EXPECT(mt_dropout(&small, &tx, NULL, &a, NULL) == MT_ERR_INVALID_ARG, "shape mismatch");
    mt_error_clear();
    free(x), free(o), free(o2);
}

int main(void) {
    golden(40, 0.1f, "p10");
    golden(40, 0.5f, "p50");
    golden(37, 0.1f, "p10");
    golden(37, 0.5f, "p50");
    rules();
    return mt_test_result();
}
