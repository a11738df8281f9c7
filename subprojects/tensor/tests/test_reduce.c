/* unit: sum, sum of squares, L2 norm, zero count and column sum (CPU reference) against PyTorch;
 * bf16 vs float64 sums of the same rounded inputs. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>

#define R 14 /* (2, 7) leading dims */
#define C 37

int main(void) {
    size_t n;
    float *x = mt_test_golden_f32("reduce_x.npy", &n, NULL);
    float *all = mt_test_golden_f32("reduce_all.npy", NULL, NULL);
    float *col = mt_test_golden_f32("reduce_colsum.npy", NULL, NULL);
    MT_EXPECT(n == R * C, "reduce_x has %zu elements", n);
    mt_tensor tx = mt_tensor_3d(x, MT_F32, 2, 7, C, MT_DEVICE_CPU);
    uint16_t xb[R * C];
    mt_tensor tb = mt_tensor_3d(xb, MT_BF16, 2, 7, C, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&tb, &tx, NULL));
    double ball[4] = { 0 }, bcol[C] = { 0 };
    for (int i = 0; i < R * C; i++) {
        double v = mt_bf16_to_f32(xb[i]);
        ball[0] += v, ball[1] += v * v, ball[3] += v == 0.0, bcol[i % C] += v;
    }
    ball[2] = sqrt(ball[1]);
    const char *names[] = { "sum", "sumsq", "norm2", "count_zero" };
    for (int op = 0; op < 4; op++) {
        float got;
        mt_tensor to = mt_tensor_1d(&got, MT_F32, 1, MT_DEVICE_CPU);
        char what[64];
        snprintf(what, sizeof what, "reduce %s f32", names[op]);
        MT_CHECK(mt_reduce(&to, &tx, (mt_reduce_op)op, NULL, 0, NULL));
        mt_test_close_f32(what, &got, &all[op], 1, 1e-5, 1e-6);
        snprintf(what, sizeof what, "reduce %s bf16", names[op]);
        MT_CHECK(mt_reduce(&to, &tb, (mt_reduce_op)op, NULL, 0, NULL));
        float want = (float)ball[op];
        mt_test_close_f32(what, &got, &want, 1, 1e-5, 1e-6);
    }
    int64_t zeros = 0;
    mt_tensor ti = mt_tensor_1d(&zeros, MT_I64, 1, MT_DEVICE_CPU);
    MT_CHECK(mt_reduce(&ti, &tx, MT_REDUCE_COUNT_ZERO, NULL, 0, NULL));
    MT_EXPECT(zeros == 9, "count_zero i64: %lld, want 9", (long long)zeros);

    float out[C], want[C], bw[C];
    mt_tensor tc = mt_tensor_1d(out, MT_F32, C, MT_DEVICE_CPU);
    MT_CHECK(mt_colsum(&tc, &tx, 0, NULL, 0, NULL));
    mt_test_close_f32("colsum f32", out, col, C, 1e-5, 1e-5);
    MT_CHECK(mt_colsum(&tc, &tx, 1, NULL, 0, NULL)); /* accumulate: twice the sum */
    for (int c = 0; c < C; c++)
        want[c] = 2 * col[c];
    mt_test_close_f32("colsum accumulate", out, want, C, 1e-5, 1e-5);
    MT_CHECK(mt_colsum(&tc, &tb, 0, NULL, 0, NULL));
    for (int c = 0; c < C; c++)
        bw[c] = (float)bcol[c];
    mt_test_close_f32("colsum bf16 -> f32", out, bw, C, 1e-5, 1e-6);
    uint16_t ob[C];
    mt_tensor tob = mt_tensor_1d(ob, MT_BF16, C, MT_DEVICE_CPU);
    MT_CHECK(mt_colsum(&tob, &tb, 0, NULL, 0, NULL));
    MT_CHECK(mt_cast(&tc, &tob, NULL));
    mt_test_close_f32("colsum bf16 -> bf16", out, bw, C, 1e-5, 4e-3);

    /* bad input gets a clear error */
    float two[2];
    mt_tensor t2 = mt_tensor_1d(two, MT_F32, 2, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_reduce(&t2, &tx, MT_REDUCE_SUM, NULL, 0, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_reduce(&ti, &tx, MT_REDUCE_SUM, NULL, 0, NULL), MT_ERR_UNSUPPORTED);
    mt_tensor tw = mt_tensor_1d(out, MT_F32, C - 1, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_colsum(&tw, &tx, 0, NULL, 0, NULL), MT_ERR_INVALID_ARG);
    mt_tensor txi = mt_tensor_1d(x, MT_I32, C, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_colsum(&tc, &txi, 0, NULL, 0, NULL), MT_ERR_UNSUPPORTED);
    free(x), free(all), free(col);
    return mt_test_result();
}
