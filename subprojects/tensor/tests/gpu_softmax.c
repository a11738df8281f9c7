/* gpu: softmax forward/backward on CUDA equal the CPU reference on fresh random input in f32 and
 * bf16 (vectorised and scalar row paths, rows up to 50304), in place, and the golden values. */
#include "gpu_common.h"

static void run(mt_dtype dt, int64_t R, int64_t C, uint64_t seed) {
    mt_arena_reset(ar);
    int64_t sh[2] = { R, C };
    float *x = uniform(R * C, seed, -6, 6), *dy = uniform(R * C, seed + 1, -1, 1);
    mt_tensor hx = host_as(x, dt, 2, sh), hdy = host_as(dy, dt, 2, sh);
    mt_tensor hy = host_as(x, dt, 2, sh), hdx = host_as(x, dt, 2, sh);
    MT_CHECK(mt_softmax_fwd(&hy, &hx, NULL));
    MT_CHECK(mt_softmax_bwd(&hdx, &hy, &hdy, NULL));
    mt_tensor dx_ = to_dev(&hx), ddy = to_dev(&hdy), dyv = to_dev(&hy);
    mt_tensor dout = dev_nan(dt, 2, sh), dgrad = dev_nan(dt, 2, sh);
    MT_CHECK(mt_softmax_fwd(&dout, &dx_, NULL));
    MT_CHECK(mt_softmax_bwd(&dgrad, &dyv, &ddy, NULL));
    char what[96];
    double rtol = dt == MT_F32 ? 2e-5 : 1e-2; /* bf16: one rounding step apart at most */
    snprintf(what, sizeof what, "softmax fwd %s %lldx%lld", mt_dtype_name(dt), (long long)R,
             (long long)C);
    close_dev(what, &dout, &hy, 1e-8, rtol);
    snprintf(what, sizeof what, "softmax bwd %s %lldx%lld", mt_dtype_name(dt), (long long)R,
             (long long)C);
    close_dev(what, &dgrad, &hdx, 1e-7, rtol);
    MT_CHECK(mt_softmax_fwd(&dx_, &dx_, NULL)); /* in place */
    snprintf(what, sizeof what, "softmax fwd in place %s %lldx%lld", mt_dtype_name(dt),
             (long long)R, (long long)C);
    close_dev(what, &dx_, &hy, 1e-8, rtol);
    free(x), free(dy), free(hx.data), free(hdy.data), free(hy.data), free(hdx.data);
}

int main(void) {
    mt_test_require_gpus(1);
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)1 << 28, &ar));
    const int64_t shapes[][2] = { { 1, 1 }, { 3, 37 },    { 64, 1024 },
                                  { 5, 8 }, { 7, 50304 }, { 1000, 96 } };
    for (int s = 0; s < 6; s++) {
        run(MT_F32, shapes[s][0], shapes[s][1], 10 + s);
        run(MT_BF16, shapes[s][0], shapes[s][1], 20 + s);
    }
    /* golden values on the GPU */
    mt_arena_reset(ar);
    int64_t sh[2] = { 5, 37 };
    float *x = mt_test_golden_f32("softmax_x.npy", NULL, NULL);
    float *y = mt_test_golden_f32("softmax_y.npy", NULL, NULL);
    mt_tensor hx = mt_tensor_make(x, MT_F32, 2, sh, MT_DEVICE_CPU);
    mt_tensor hy = mt_tensor_make(y, MT_F32, 2, sh, MT_DEVICE_CPU);
    mt_tensor dx_ = to_dev(&hx), dout = dev_nan(MT_F32, 2, sh);
    MT_CHECK(mt_softmax_fwd(&dout, &dx_, NULL));
    close_dev("softmax fwd golden (cuda)", &dout, &hy, 1e-7, 2e-5);
    free(x), free(y);
    mt_arena_destroy(ar);
    return mt_test_result();
}
