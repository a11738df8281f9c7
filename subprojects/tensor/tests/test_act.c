/* unit: GELU (tanh), SiLU, sigmoid and SwiGLU forward/backward (CPU reference) against PyTorch float64
 * golden values, in f32, bf16 and f16, plus SwiGLU on separate gate/up views and bad input. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include "test_common.h"

#include <stdlib.h>
#include <string.h>

#define R 7
#define C 24

/* (rows, cols) tensors from goldens, poisoned outputs, and the comparison at act's tolerances
 * (f16: bf16's divided by 8, the ratio of their unit roundoffs 2^-11 and 2^-8) */
#define load(name, dt, rows, cols) golden_tensor(name, dt, 2, (int64_t[]){ rows, cols })
#define empty(dt, rows, cols)      poison_tensor(dt, 2, (int64_t[]){ rows, cols })
#define half_tol(dt, f32, bf16)    ((dt) == MT_F32 ? (f32) : (dt) == MT_F16 ? (bf16) / 8 : (bf16))
#define expect(what, dt, t, name) \
    expect_golden(what, dt, t, name, half_tol(dt, 1e-5, 3e-2), half_tol(dt, 1e-5, 2e-2), 1.0f)

static void run(mt_dtype dt) {
    mt_tensor x = load("act_x.npy", dt, R, C), dout = load("act_dout.npy", dt, R, C);
    mt_tensor y = empty(dt, R, C), dx = empty(dt, R, C);
    MT_CHECK(mt_gelu_fwd(&y, &x, NULL));
    expect("gelu", dt, &y, "act_gelu.npy");
    MT_CHECK(mt_gelu_bwd(&dx, &dout, &x, NULL));
    expect("gelu dx", dt, &dx, "act_gelu_dx.npy");
    MT_CHECK(mt_silu_fwd(&y, &x, NULL));
    expect("silu", dt, &y, "act_silu.npy");
    MT_CHECK(mt_silu_bwd(&dx, &dout, &x, NULL));
    expect("silu dx", dt, &dx, "act_silu_dx.npy");
    /* in place: dx = dout, then dx = dx * silu'(x) */
    memcpy(dx.data, dout.data, (size_t)(R * C) * mt_dtype_size(dt));
    MT_CHECK(mt_silu_bwd(&dx, &dx, &x, NULL));
    expect("silu dx in place", dt, &dx, "act_silu_dx.npy");

    /* sigmoid; its backward reads the forward's output (the golden's), also in place */
    mt_tensor sy = load("act_sigmoid.npy", dt, R, C);
    MT_CHECK(mt_sigmoid_fwd(&y, &x, NULL));
    expect("sigmoid", dt, &y, "act_sigmoid.npy");
    MT_CHECK(mt_sigmoid_bwd(&dx, &dout, &sy, NULL));
    expect("sigmoid dx", dt, &dx, "act_sigmoid_dx.npy");
    memcpy(dx.data, dout.data, (size_t)(R * C) * mt_dtype_size(dt));
    MT_CHECK(mt_sigmoid_bwd(&dx, &dx, &sy, NULL));
    expect("sigmoid dx in place", dt, &dx, "act_sigmoid_dx.npy");
    free(sy.data);

    /* SwiGLU: fused (R, 2F) input, then the same halves as two strided views */
    mt_tensor gd = load("act_swiglu_dout.npy", dt, R, C / 2), o = empty(dt, R, C / 2);
    MT_CHECK(mt_swiglu_fwd(&o, &x, NULL, NULL));
    expect("swiglu", dt, &o, "act_swiglu.npy");
    MT_CHECK(mt_swiglu_bwd(&dx, NULL, &gd, &x, NULL, NULL));
    expect("swiglu dx", dt, &dx, "act_swiglu_dx.npy");
    mt_tensor gate, up, dgate, dup;
    MT_CHECK(mt_tensor_slice(&x, 1, 0, C / 2, &gate));
    MT_CHECK(mt_tensor_slice(&x, 1, C / 2, C / 2, &up));
    mt_tensor o2 = empty(dt, R, C / 2), dx2 = empty(dt, R, C);
    MT_CHECK(mt_swiglu_fwd(&o2, &gate, &up, NULL));
    expect("swiglu gate/up", dt, &o2, "act_swiglu.npy");
    MT_CHECK(mt_tensor_slice(&dx2, 1, 0, C / 2, &dgate));
    MT_CHECK(mt_tensor_slice(&dx2, 1, C / 2, C / 2, &dup));
    MT_CHECK(mt_swiglu_bwd(&dgate, &dup, &gd, &gate, &up, NULL));
    expect("swiglu gate/up dx", dt, &dx2, "act_swiglu_dx.npy");
    free(x.data), free(dout.data), free(y.data), free(dx.data), free(gd.data), free(o.data);
    free(o2.data), free(dx2.data);
}

int main(void) {
    run(MT_F32);
    run(MT_BF16);
    run(MT_F16);

    /* bad input gets a clear error */
    float a[12], b[10];
    mt_tensor ta = mt_tensor_2d(a, MT_F32, 3, 4, MT_DEVICE_CPU);
    mt_tensor tb = mt_tensor_2d(b, MT_F32, 2, 5, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_gelu_fwd(&tb, &ta, NULL), MT_ERR_INVALID_ARG);
    mt_tensor ti = mt_tensor_2d(a, MT_I32, 3, 4, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_silu_fwd(&ti, &ti, NULL), MT_ERR_UNSUPPORTED);
    mt_tensor odd = mt_tensor_2d(b, MT_F32, 2, 5, MT_DEVICE_CPU),
              half = mt_tensor_2d(a, MT_F32, 2, 2, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_swiglu_fwd(&half, &odd, NULL, NULL), MT_ERR_INVALID_ARG);
    mt_tensor th = mt_tensor_2d(a, MT_BF16, 3, 4, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_gelu_fwd(&th, &ta, NULL), MT_ERR_INVALID_ARG);
    return mt_test_result();
}
