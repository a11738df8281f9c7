/* unit: elementwise ops and casts (CPU reference) against PyTorch golden values. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void check_op(const char *what, const char *golden, int op, float alpha) {
    size_t n;
    float *x = mt_test_golden_f32("ew_x.npy", &n, NULL);
    float *y = mt_test_golden_f32("ew_y.npy", NULL, NULL);
    float *ref = mt_test_golden_f32(golden, NULL, NULL);
    float *out = malloc(n * sizeof *out);
    mt_tensor tx = mt_tensor_2d(x, MT_F32, 7, 13, MT_DEVICE_CPU);
    mt_tensor ty = mt_tensor_2d(y, MT_F32, 7, 13, MT_DEVICE_CPU);
    mt_tensor to = mt_tensor_2d(out, MT_F32, 7, 13, MT_DEVICE_CPU);
    if (op == 0) MT_CHECK(mt_add(&to, &tx, &ty, NULL));
    if (op == 1) MT_CHECK(mt_scale(&to, &tx, alpha, NULL));
    if (op == 2) {
        memcpy(out, y, n * sizeof *out);
        MT_CHECK(mt_axpy(&to, alpha, &tx, NULL));
    }
    mt_test_close_f32(what, out, ref, n, 1e-6, 1e-6);
    /* bf16: inputs rounded to bf16, math in fp32, result rounded once */
    uint16_t *xb = malloc(n * 2), *yb = malloc(n * 2), *ob = malloc(n * 2);
    mt_tensor txb = mt_tensor_2d(xb, MT_BF16, 7, 13, MT_DEVICE_CPU);
    mt_tensor tyb = mt_tensor_2d(yb, MT_BF16, 7, 13, MT_DEVICE_CPU);
    mt_tensor tob = mt_tensor_2d(ob, MT_BF16, 7, 13, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&txb, &tx, NULL));
    MT_CHECK(mt_cast(&tyb, &ty, NULL));
    if (op == 0) MT_CHECK(mt_add(&tob, &txb, &tyb, NULL));
    if (op == 1) MT_CHECK(mt_scale(&tob, &txb, alpha, NULL));
    if (op == 2) {
        memcpy(ob, yb, n * 2);
        MT_CHECK(mt_axpy(&tob, alpha, &txb, NULL));
    }
    MT_CHECK(mt_cast(&to, &tob, NULL));
    char name[64];
    snprintf(name, sizeof name, "%s bf16", what);
    mt_test_close_f32(name, out, ref, n, 2e-2, 2e-2);
    free(x), free(y), free(ref), free(out), free(xb), free(yb), free(ob);
}

static void check_cast(mt_dtype dt, const char *golden) {
    size_t n;
    float *f = mt_test_golden_f32("cast_f32.npy", &n, NULL);
    double *want = mt_test_golden_f64(golden, NULL);
    uint16_t *got = malloc(n * 2);
    mt_tensor tf = mt_tensor_1d(f, MT_F32, (int64_t)n, MT_DEVICE_CPU);
    mt_tensor tg = mt_tensor_1d(got, dt, (int64_t)n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&tg, &tf, NULL));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t w = (uint16_t)want[i];
        int nan_ok = (w & 0x7fff) > (dt == MT_BF16 ? 0x7f80 : 0x7c00) &&
                     (got[i] & 0x7fff) > (dt == MT_BF16 ? 0x7f80 : 0x7c00);
        if (got[i] != w && !nan_ok) {
            if (bad++ < 5)
                fprintf(stderr, "  %s cast of %.9g: got %04x want %04x\n", mt_dtype_name(dt), f[i],
                        got[i], w);
        }
    }
    MT_EXPECT(bad == 0, "%zu %s casts differ from torch", bad, mt_dtype_name(dt));
    /* and back: f32 -> dt -> f32 equals the exact value of the dt bits */
    float *back = malloc(n * 4);
    mt_tensor tb = mt_tensor_1d(back, MT_F32, (int64_t)n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&tb, &tg, NULL));
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float w = dt == MT_BF16 ? mt_bf16_to_f32(got[i]) : mt_f16_to_f32(got[i]);
        bad += !(back[i] == w || (back[i] != back[i] && w != w));
    }
    MT_EXPECT(bad == 0, "%zu %s -> f32 casts inexact", bad, mt_dtype_name(dt));
    free(f), free(want), free(got), free(back);
}

int main(void) {
    check_op("add", "ew_add.npy", 0, 0);
    check_op("scale", "ew_scale_0.37.npy", 1, 0.37f);
    check_op("axpy", "ew_axpy_m1.5.npy", 2, -1.5f);
    check_cast(MT_BF16, "cast_bf16_bits.npy");
    check_cast(MT_F16, "cast_f16_bits.npy");

    /* bad input gets a clear error */
    float a[4], b[5];
    mt_tensor ta = mt_tensor_1d(a, MT_F32, 4, MT_DEVICE_CPU);
    mt_tensor tb = mt_tensor_1d(b, MT_F32, 5, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_add(&ta, &ta, &tb, NULL), MT_ERR_INVALID_ARG);
    mt_tensor ti = mt_tensor_1d(a, MT_I32, 4, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_scale(&ti, &ti, 2.0f, NULL), MT_ERR_UNSUPPORTED);
    /* Philox normals: element i is mean + std * N(seed, stream, i); the sample moments fit */
    enum {
        NN = 100000
    };
    static float z[NN];
    mt_tensor tz = mt_tensor_1d(z, MT_F32, NN, MT_DEVICE_CPU);
    MT_CHECK(mt_fill_normal(&tz, 1.0f, 0.5f, 42, 7, NULL));
    double m1 = 0, m2 = 0;
    for (int i = 0; i < NN; i++)
        m1 += z[i], m2 += (double)z[i] * z[i];
    m1 /= NN;
    m2 = m2 / NN - m1 * m1;
    MT_EXPECT(fabs(m1 - 1.0) < 5 * 0.5 / sqrt(NN) && fabs(m2 - 0.25) < 0.01, "moments %g %g", m1,
              m2);
    MT_EXPECT(z[12345] == 1.0f + 0.5f * mt_philox_normal(42, 7, 12345),
              "element = its Philox draw");
    MT_CHECK(mt_fill(&ta, 2.5f, NULL));
    MT_EXPECT(a[0] == 2.5f && a[3] == 2.5f, "fill");
    return mt_test_result();
}
