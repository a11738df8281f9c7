/* unit: AdamW and SGD (CPU reference) over 20 steps against torch.optim in float64
 * (golden/gen_adamw.py): f32 params, bf16/f16 params with fp32 master weights, clipping, loss
 * scales, the grad norm and zero count, a NaN step that is skipped and counted, and the
 * hyperparameters torch.optim refuses refused at creation. */
#include <mt/optim.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 20
#define N     94

static const char *names[4] = { "l1.weight", "l1.bias", "norm.weight", "l2.weight" };
static const int64_t shapes[4][2] = { { 6, 8 }, { 8, 0 }, { 8, 0 }, { 5, 6 } };
static const int ndims[4] = { 2, 1, 1, 2 };

typedef struct {
    const char *golden; /* <golden>_params.npy, <golden>_norm.npy */
    mt_optim_kind kind;
    mt_dtype dt;
    float grad_mul, clip, wd;
    int scaler; /* 0 none, 1 constant 1024, 2 dynamic from 1024 */
    int64_t bucket;
} opt_case;

static double lr_of(const opt_case *c, int t) {
    return c->kind == MT_OPTIM_SGD ? 0.05 : 1e-2 * (1 - t / 40.0);
}

typedef struct {
    mt_optim_buffer *b;
    mt_optim *o;
    mt_arena *ar;
} rig;

static rig make(const opt_case *c, int log_zeros, int check_nan) {
    rig r;
    mt_optim_buffer_config bc = MT_OPTIM_BUFFER_CONFIG_INIT;
    bc.param_dtype = c->dt;
    bc.bucket_numel = c->bucket;
    MT_CHECK(mt_optim_buffer_create(&bc, &r.b));
    for (int i = 0; i < 4; i++)
        MT_CHECK(mt_optim_buffer_add(r.b, names[i], ndims[i], shapes[i], 0, NULL));
    size_t bytes, sbytes;
    MT_CHECK(mt_optim_buffer_finalize(r.b, &bytes));
    mt_optim_config oc = MT_OPTIM_CONFIG_INIT;
    oc.kind = c->kind;
    oc.clip_grad = c->clip;
    oc.log_num_zeros_in_grad = log_zeros;
    oc.check_for_nan_in_grad = check_nan;
    MT_CHECK(mt_optim_state_bytes(&oc, r.b, &sbytes));
    MT_CHECK(mt_arena_create(MT_DEVICE_CPU, bytes + sbytes, &r.ar));
    MT_CHECK(mt_optim_buffer_bind(r.b, r.ar));
    float *p0 = mt_test_golden_f32("p0.npy", NULL, NULL);
    int64_t off = 0;
    for (int i = 0; i < 4; i++) { /* load the initial params (rounded to the param dtype) */
        mt_tensor p;
        MT_CHECK(mt_optim_buffer_param(r.b, i, &p));
        mt_tensor src = mt_tensor_1d(p0 + off, MT_F32, mt_tensor_numel(&p), MT_DEVICE_CPU);
        mt_tensor dst = mt_tensor_1d(p.data, c->dt, mt_tensor_numel(&p), MT_DEVICE_CPU);
        MT_CHECK(mt_cast(&dst, &src, NULL));
        off += mt_tensor_numel(&p);
    }
    MT_CHECK(mt_optim_create(&oc, r.b, r.ar, &r.o));
    if (c->dt != MT_F32) { /* exact fp32 master weights, as loaded from a checkpoint */
        mt_tensor master;
        MT_CHECK(mt_optim_state(r.o, &master, NULL, NULL));
        off = 0;
        for (int i = 0; i < 4; i++) {
            mt_optim_param_info in;
            MT_CHECK(mt_optim_buffer_info(r.b, i, &in));
            memcpy((float *)master.data + in.offset, p0 + off, (size_t)in.numel * 4);
            off += in.numel;
        }
    }
    free(p0);
    return r;
}

static void load_grads(rig *r, const float *g, float mul) {
    int64_t off = 0;
    for (int i = 0; i < 4; i++) {
        mt_tensor t;
        MT_CHECK(mt_optim_buffer_grad(r->b, i, &t));
        for (int64_t j = 0; j < mt_tensor_numel(&t); j++)
            ((float *)t.data)[j] = g[off + j] * mul;
        off += mt_tensor_numel(&t);
    }
}

/* The fp32 weights in registration order (master weights for bf16/f16 params); 1 if the params
 * in their dtype are exactly the rounded master weights. */
static int gather(rig *r, float *out) {
    mt_tensor master;
    MT_CHECK(mt_optim_state(r->o, &master, NULL, NULL));
    int64_t off = 0;
    int exact = 1;
    for (int i = 0; i < 4; i++) {
        mt_tensor p;
        mt_optim_param_info in;
        MT_CHECK(mt_optim_buffer_param(r->b, i, &p));
        MT_CHECK(mt_optim_buffer_info(r->b, i, &in));
        for (int64_t j = 0; j < in.numel; j++) {
            if (p.dtype == MT_F32) {
                out[off + j] = ((float *)p.data)[j];
                continue;
            }
            float m = ((float *)master.data)[in.offset + j];
            uint16_t bits = ((uint16_t *)p.data)[j];
            exact &= bits == (p.dtype == MT_BF16 ? mt_f32_to_bf16(m) : mt_f32_to_f16(m));
            out[off + j] = m;
        }
        off += in.numel;
    }
    return exact;
}

static void run(const opt_case *c) {
    float *grads = mt_test_golden_f32("grads.npy", NULL, NULL);
    char file[64], what[96];
    snprintf(file, sizeof file, "%s_params.npy", c->golden);
    float *ref = mt_test_golden_f32(file, NULL, NULL);
    snprintf(file, sizeof file, "%s_norm.npy", c->golden);
    double *ref_norm = mt_test_golden_f64(file, NULL);
    double *ref_zeros = mt_test_golden_f64("zeros.npy", NULL);
    rig r = make(c, 1, 1);
    mt_optim_scaler sc;
    if (c->scaler == 1) MT_CHECK(mt_optim_scaler_constant(&sc, 1024.0f));
    if (c->scaler == 2) MT_CHECK(mt_optim_scaler_dynamic(&sc, 1024.0f, 1.0f, 1000, 2));
    float got[N];
    double norm[STEPS], zeros[STEPS];
    int exact = 1;
    for (int t = 0; t < STEPS; t++) {
        load_grads(&r, grads + t * N, c->grad_mul * (c->scaler ? 1024.0f : 1.0f));
        mt_optim_step_info info;
        MT_CHECK(mt_optim_step(r.o, lr_of(c, t), c->wd, c->scaler ? &sc : NULL, &info, NULL));
        MT_EXPECT(!info.skipped, "%s step %d skipped", c->golden, t);
        norm[t] = info.grad_norm;
        zeros[t] = (double)info.num_zeros;
        exact &= gather(&r, got);
        snprintf(what, sizeof what, "%s %s step %d", c->golden, mt_dtype_name(c->dt), t + 1);
        mt_test_close_f32(what, got, ref + t * N, N, 1e-6, 1e-5);
    }
    MT_EXPECT(exact, "%s: %s params are not the rounded master weights", c->golden,
              mt_dtype_name(c->dt));
    snprintf(what, sizeof what, "%s grad norm", c->golden);
    mt_test_close_f64(what, norm, ref_norm, STEPS, 0.0, 1e-6);
    snprintf(what, sizeof what, "%s zeros", c->golden);
    mt_test_close_f64(what, zeros, ref_zeros, STEPS, 0.0, 0.0);
    MT_EXPECT(mt_optim_num_steps(r.o) == STEPS, "steps %lld", (long long)mt_optim_num_steps(r.o));
    mt_optim_destroy(r.o);
    mt_optim_buffer_destroy(r.b);
    mt_arena_destroy(r.ar);
    free(grads), free(ref), free(ref_norm), free(ref_zeros);
}

/* A NaN grad between golden steps 1 and 2: skipped, counted, nothing changes, the scale backs off
 * (hysteresis 1), and the next step continues the golden trajectory. */
static void nan_skip(void) {
    opt_case c = { "adamw", MT_OPTIM_ADAMW, MT_F32, 1.0f, 0.0f, 0.1f, 0, 0 };
    float *grads = mt_test_golden_f32("grads.npy", NULL, NULL);
    float *ref = mt_test_golden_f32("adamw_params.npy", NULL, NULL);
    rig r = make(&c, 0, 1);
    mt_optim_scaler sc;
    MT_CHECK(mt_optim_scaler_dynamic(&sc, 1024.0f, 1.0f, 1000, 1));
    mt_optim_step_info info;
    float got[N], kept[N];
    load_grads(&r, grads, 1024.0f);
    MT_CHECK(mt_optim_step(r.o, lr_of(&c, 0), 0.1, &sc, &info, NULL));
    gather(&r, kept);
    load_grads(&r, grads + N, 1024.0f);
    mt_tensor g;
    MT_CHECK(mt_optim_buffer_grad(r.b, 3, &g));
    ((float *)g.data)[7] = NAN;
    MT_CHECK(mt_optim_step(r.o, lr_of(&c, 1), 0.1, &sc, &info, NULL));
    MT_EXPECT(info.skipped && info.num_skipped == 1 && isnan(info.grad_norm),
              "NaN step: skipped %d, count %lld", info.skipped, (long long)info.num_skipped);
    MT_EXPECT(info.loss_scale == 1024.0f && sc.scale == 512.0f, "scale %g -> %g", info.loss_scale,
              sc.scale);
    gather(&r, got);
    mt_test_close_f32("after skipped step", got, kept, N, 0.0, 0.0);
    load_grads(&r, grads + N, 512.0f);
    MT_CHECK(mt_optim_step(r.o, lr_of(&c, 1), 0.1, &sc, &info, NULL));
    MT_EXPECT(!info.skipped && info.num_skipped == 1 && mt_optim_num_steps(r.o) == 2,
              "step after the skip");
    gather(&r, got);
    mt_test_close_f32("step after skip", got, ref + N, N, 1e-6, 1e-5);
    mt_optim_destroy(r.o);
    mt_optim_buffer_destroy(r.b);
    mt_arena_destroy(r.ar);

    /* no NaN check, clipping, scaler or zero count: no statistics pass, the NaN goes through */
    r = make(&c, 0, 0);
    load_grads(&r, grads, 1.0f);
    MT_CHECK(mt_optim_buffer_grad(r.b, 3, &g));
    ((float *)g.data)[7] = NAN;
    MT_CHECK(mt_optim_step(r.o, lr_of(&c, 0), 0.1, NULL, &info, NULL));
    gather(&r, got);
    MT_EXPECT(!info.skipped && isnan(info.grad_norm) && isnan(got[N - 30 + 7]),
              "unchecked step: skipped %d, norm %g, param %g", info.skipped, info.grad_norm,
              got[N - 30 + 7]);
    mt_optim_destroy(r.o);
    mt_optim_buffer_destroy(r.b);
    mt_arena_destroy(r.ar);
    free(grads), free(ref);
}

/* Hyperparameters torch.optim refuses are refused at creation, by torch's messages. */
static void bad_config(void) {
    mt_optim_buffer_config bc = MT_OPTIM_BUFFER_CONFIG_INIT;
    mt_optim_buffer *b;
    mt_arena *ar;
    size_t bytes;
    MT_CHECK(mt_optim_buffer_create(&bc, &b));
    MT_CHECK(mt_optim_buffer_add(b, names[0], ndims[0], shapes[0], 0, NULL));
    MT_CHECK(mt_optim_buffer_finalize(b, &bytes));
    MT_CHECK(mt_arena_create(MT_DEVICE_CPU, bytes + (1 << 16), &ar));
    MT_CHECK(mt_optim_buffer_bind(b, ar));
    struct {
        float beta1, beta2, eps, momentum;
        const char *msg;
    } bad[] = { { 1.0f, 0.999f, 1e-8f, 0.9f, "Invalid beta parameter at index 0: 1" },
                { 0.9f, -0.5f, 1e-8f, 0.9f, "Invalid beta parameter at index 1: -0.5" },
                { 0.9f, 0.999f, -1e-8f, 0.9f, "Invalid epsilon value: -1e-08" },
                { 0.9f, 0.999f, 1e-8f, -0.25f, "Invalid momentum value: -0.25" } };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mt_optim_config oc = MT_OPTIM_CONFIG_INIT;
        oc.adam_beta1 = bad[i].beta1, oc.adam_beta2 = bad[i].beta2;
        oc.adam_eps = bad[i].eps, oc.sgd_momentum = bad[i].momentum;
        mt_optim *o = NULL;
        MT_EXPECT_STATUS(mt_optim_create(&oc, b, ar, &o), MT_ERR_INVALID_ARG);
        MT_EXPECT(!o && strstr(mt_last_error(), bad[i].msg), "want '%s', got '%s'", bad[i].msg,
                  mt_last_error());
        mt_error_clear();
    }
    mt_optim_buffer_destroy(b);
    mt_arena_destroy(ar);
}

int main(void) {
    const opt_case cases[] = {
        { "adamw", MT_OPTIM_ADAMW, MT_F32, 1.0f, 0.0f, 0.1f, 0, 0 },
        { "adamw_clip", MT_OPTIM_ADAMW, MT_F32, 3.0f, 1.0f, 0.1f, 0, 0 },
        { "sgd", MT_OPTIM_SGD, MT_F32, 1.0f, 0.0f, 0.01f, 0, 0 },
        { "adamw", MT_OPTIM_ADAMW, MT_BF16, 1.0f, 0.0f, 0.1f, 0, 0 },
        { "adamw", MT_OPTIM_ADAMW, MT_F16, 1.0f, 0.0f, 0.1f, 1, 40 },
        { "adamw_clip", MT_OPTIM_ADAMW, MT_F32, 3.0f, 1.0f, 0.1f, 2, 40 },
        { "sgd", MT_OPTIM_SGD, MT_BF16, 1.0f, 0.0f, 0.01f, 0, 100 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run(&cases[i]);
    nan_skip();
    bad_config();
    return mt_test_result();
}
