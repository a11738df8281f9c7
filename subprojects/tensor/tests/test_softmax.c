/* unit: softmax forward and backward (CPU reference) against PyTorch golden values, f32 and bf16. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdlib.h>

#define R 5
#define C 37

/* Runs fwd (dy == NULL) or bwd in dtype dt on f32 host data; result back in f32. */
static void run(mt_dtype dt, float *got, const float *x, const float *dy) {
    mt_tensor tx = mt_tensor_2d((void *)x, MT_F32, R, C, MT_DEVICE_CPU);
    mt_tensor tdy = mt_tensor_2d((void *)dy, MT_F32, R, C, MT_DEVICE_CPU);
    mt_tensor tg = mt_tensor_2d(got, MT_F32, R, C, MT_DEVICE_CPU);
    uint16_t *bx = malloc(R * C * 2), *bdy = malloc(R * C * 2), *bo = malloc(R * C * 2);
    mt_tensor cx = mt_tensor_2d(bx, dt, R, C, MT_DEVICE_CPU);
    mt_tensor cdy = mt_tensor_2d(bdy, dt, R, C, MT_DEVICE_CPU);
    mt_tensor co = mt_tensor_2d(bo, dt, R, C, MT_DEVICE_CPU);
    if (dt == MT_F32) {
        MT_CHECK(dy ? mt_softmax_bwd(&tg, &tx, &tdy, NULL) : mt_softmax_fwd(&tg, &tx, NULL));
    } else {
        MT_CHECK(mt_cast(&cx, &tx, NULL));
        if (dy) MT_CHECK(mt_cast(&cdy, &tdy, NULL));
        MT_CHECK(dy ? mt_softmax_bwd(&co, &cx, &cdy, NULL) : mt_softmax_fwd(&co, &cx, NULL));
        MT_CHECK(mt_cast(&tg, &co, NULL));
    }
    free(bx), free(bdy), free(bo);
}

int main(void) {
    float *x = mt_test_golden_f32("softmax_x.npy", NULL, NULL);
    float *y = mt_test_golden_f32("softmax_y.npy", NULL, NULL);
    float *dy = mt_test_golden_f32("softmax_dy.npy", NULL, NULL);
    float *dx = mt_test_golden_f32("softmax_dx.npy", NULL, NULL);
    float got[R * C];
    run(MT_F32, got, x, NULL);
    mt_test_close_f32("softmax fwd f32", got, y, R * C, 1e-7, 1e-5);
    run(MT_F32, got, y, dy);
    mt_test_close_f32("softmax bwd f32", got, dx, R * C, 1e-7, 1e-5);
    /* bf16 vs the f32 path on the same bf16-rounded inputs (the rounding of x alone moves the
     * result more than any kernel error) */
    float xr[R * C], yr[R * C], dyr[R * C], ref[R * C];
    for (int i = 0; i < R * C; i++) {
        xr[i] = mt_bf16_to_f32(mt_f32_to_bf16(x[i]));
        yr[i] = mt_bf16_to_f32(mt_f32_to_bf16(y[i]));
        dyr[i] = mt_bf16_to_f32(mt_f32_to_bf16(dy[i]));
    }
    run(MT_F32, ref, xr, NULL);
    run(MT_BF16, got, x, NULL);
    mt_test_close_f32("softmax fwd bf16", got, ref, R * C, 1e-6, 8e-3);
    run(MT_F32, ref, yr, dyr);
    run(MT_BF16, got, y, dy);
    mt_test_close_f32("softmax bwd bf16", got, ref, R * C, 1e-6, 8e-3);

    /* in place: out aliases x */
    float xi[R * C];
    for (int i = 0; i < R * C; i++)
        xi[i] = x[i];
    mt_tensor ti = mt_tensor_2d(xi, MT_F32, R, C, MT_DEVICE_CPU);
    MT_CHECK(mt_softmax_fwd(&ti, &ti, NULL));
    mt_test_close_f32("softmax fwd in place", xi, y, R * C, 1e-7, 1e-5);

    /* bad input gets a clear error */
    mt_tensor tx = mt_tensor_2d(x, MT_F32, R, C, MT_DEVICE_CPU);
    mt_tensor t3 = mt_tensor_2d(got, MT_F32, C, R, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_softmax_fwd(&t3, &tx, NULL), MT_ERR_INVALID_ARG);
    mt_tensor tint = mt_tensor_2d(got, MT_I32, R, C, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_softmax_fwd(&tint, &tint, NULL), MT_ERR_UNSUPPORTED);
    mt_tensor tb = mt_tensor_2d(got, MT_BF16, R, C, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_softmax_bwd(&tb, &tx, &tx, NULL), MT_ERR_INVALID_ARG);
    free(x), free(y), free(dy), free(dx);
    return mt_test_result();
}
