/* GELU (tanh), SiLU, sigmoid, SwiGLU CPU reference: fp32 math per element, one rounding on store. */
#include <math.h>

#include "../ops_impl.h"

static float gelu(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static float gelu_grad(float x) {
    const float k = 0.7978845608028654f;
    float t = tanhf(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

static float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

mt_status act_cpu(const act_args *a) {
    mt_dtype dt = a->dtype;
    for (int64_t r = 0; r < a->rows; r++) {
        for (int64_t c = 0; c < a->cols; c++) {
            int64_t o0 = r * a->ld_out0 + c, i0 = r * a->ld_in0 + c, i1 = r * a->ld_in1 + c;
            float v0 = mt_load_f32(a->in0, dt, i0);
            switch (a->op) {
            case ACT_GELU_FWD:
                mt_store_f32(a->out0, dt, o0, gelu(v0));
                break;
            case ACT_GELU_BWD:
                mt_store_f32(a->out0, dt, o0, v0 * gelu_grad(mt_load_f32(a->in1, dt, i1)));
                break;
            case ACT_SILU_FWD:
                mt_store_f32(a->out0, dt, o0, v0 * sigmoid(v0));
                break;
            case ACT_SILU_BWD: {
                float x = mt_load_f32(a->in1, dt, i1), s = sigmoid(x);
                mt_store_f32(a->out0, dt, o0, v0 * s * (1.0f + x * (1.0f - s)));
            } break;
            case ACT_SIGMOID_FWD:
                mt_store_f32(a->out0, dt, o0, sigmoid(v0));
                break;
            case ACT_SIGMOID_BWD: { /* in1 = y, the forward's output */
                float y = mt_load_f32(a->in1, dt, i1);
                mt_store_f32(a->out0, dt, o0, v0 * y * (1.0f - y));
            } break;
            case ACT_SWIGLU_FWD: /* in0 = gate, in1 = up */
                mt_store_f32(a->out0, dt, o0, v0 * sigmoid(v0) * mt_load_f32(a->in1, dt, i1));
                break;
            case ACT_SWIGLU_BWD: { /* in0 = dout, in1 = gate, in2 = up */
                float g = mt_load_f32(a->in1, dt, i1),
                      u = mt_load_f32(a->in2, dt, r * a->ld_in2 + c);
                float s = sigmoid(g);
                mt_store_f32(a->out0, dt, o0, v0 * u * s * (1.0f + g * (1.0f - s)));
                mt_store_f32(a->out1, dt, r * a->ld_out1 + c, v0 * g * s);
            } break;
            }
        }
    }
    return MT_OK;
}
