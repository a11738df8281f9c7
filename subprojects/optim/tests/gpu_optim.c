/* gpu: the CUDA step and grad statistics equal the CPU reference over 5 steps on seeded random
 * params and grads (AdamW and SGD; f32, bf16 and f16 params; clipping; loss scale; several
 * buckets; awkward sizes), and a NaN grad is skipped on the GPU too. */
#include <mt/optim.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NP 6
static const char *names[NP] = { "emb.weight",    "l.fc.weight", "l.fc.bias",
                                 "l.norm.weight", "tiny.bias",   "out.weight" };
static const int64_t shapes[NP][2] = { { 1531, 517 }, { 64, 96 }, { 511, 0 },
                                       { 96, 0 },     { 3, 0 },   { 7, 1001 } };
static const int ndims[NP] = { 2, 2, 1, 1, 1, 2 };

typedef struct {
    mt_optim_buffer *b;
    mt_optim *o;
    mt_arena *ar;
} rig;

static rig make(mt_device dev, mt_optim_kind kind, mt_dtype dt, float clip) {
    rig r;
    mt_optim_buffer_config bc = MT_OPTIM_BUFFER_CONFIG_INIT;
    bc.param_dtype = dt;
    bc.device = dev;
    bc.bucket_numel = 300000;
    MT_CHECK(mt_optim_buffer_create(&bc, &r.b));
    for (int i = 0; i < NP; i++)
        MT_CHECK(mt_optim_buffer_add(r.b, names[i], ndims[i], shapes[i],
                                     i == 5 ? MT_OPTIM_PARAM_SHARED : 0, NULL));
    size_t bytes, sbytes;
    MT_CHECK(mt_optim_buffer_finalize(r.b, &bytes));
    mt_optim_config oc = MT_OPTIM_CONFIG_INIT;
    oc.kind = kind;
    oc.clip_grad = clip;
    oc.log_num_zeros_in_grad = 1;
    MT_CHECK(mt_optim_state_bytes(&oc, r.b, &sbytes));
    MT_CHECK(mt_arena_create(dev, bytes + sbytes, &r.ar));
    MT_CHECK(mt_optim_buffer_bind(r.b, r.ar));
    /* the same params on both devices: seeded f32, cast to the param dtype on the host */
    for (int i = 0; i < NP; i++) {
        mt_tensor p;
        MT_CHECK(mt_optim_buffer_param(r.b, i, &p));
        int64_t n = mt_tensor_numel(&p);
        float *x = malloc((size_t)n * 4);
        void *h = malloc((size_t)n * 4);
        mt_test_fill_uniform(x, (size_t)n, 7, (uint64_t)i, -1, 1);
        mt_tensor tx = mt_tensor_1d(x, MT_F32, n, MT_DEVICE_CPU);
        mt_tensor th = mt_tensor_1d(h, dt, n, MT_DEVICE_CPU);
        mt_tensor dst = mt_tensor_1d(p.data, dt, n, dev);
        MT_CHECK(mt_cast(&th, &tx, NULL));
        MT_CHECK(mt_tensor_copy(&dst, &th, NULL));
        free(x), free(h);
    }
    MT_CHECK(mt_optim_create(&oc, r.b, r.ar, &r.o));
    return r;
}

static void destroy(rig *r) {
    mt_optim_destroy(r->o);
    mt_optim_buffer_destroy(r->b);
    mt_arena_destroy(r->ar);
}

static void set_grads(rig *r, int step, float mul, int with_nan) {
    mt_tensor g;
    MT_CHECK(mt_optim_buffer_grads(r->b, &g));
    int64_t n = mt_tensor_numel(&g);
    float *x = calloc((size_t)n, 4);
    for (int i = 0; i < NP; i++) { /* only real elements: padding stays zero */
        mt_optim_param_info in;
        MT_CHECK(mt_optim_buffer_info(r->b, i, &in));
        mt_test_fill_uniform(x + in.offset, (size_t)in.numel, 11 + step, (uint64_t)i, -mul, mul);
        for (int64_t j = 0; j < in.numel; j += 97)
            x[in.offset + j] = 0.0f; /* some zeros */
    }
    if (with_nan) x[n / 3] = NAN;
    mt_tensor h = mt_tensor_1d(x, MT_F32, n, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&g, &h, NULL));
    free(x);
}

/* 1-D f32 host copy of a (device or host) tensor of any float dtype. */
static float *to_host(const mt_tensor *t) {
    int64_t n = mt_tensor_numel(t);
    size_t es = mt_dtype_size(t->dtype);
    void *raw = malloc((size_t)n * es + 1);
    float *out = malloc((size_t)n * 4 + 4);
    mt_tensor h = mt_tensor_1d(raw, t->dtype, n, MT_DEVICE_CPU);
    mt_tensor src = mt_tensor_1d(t->data, t->dtype, n, t->device);
    mt_tensor f = mt_tensor_1d(out, MT_F32, n, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&h, &src, NULL));
    MT_CHECK(mt_cast(&f, &h, NULL));
    free(raw);
    return out;
}

static void compare(const char *what, const mt_tensor *gpu, const mt_tensor *cpu, double tol) {
    float *a = to_host(gpu), *b = to_host(cpu);
    mt_test_close_f32(what, a, b, (size_t)mt_tensor_numel(cpu), tol, tol);
    free(a), free(b);
}

static void run(mt_optim_kind kind, mt_dtype dt, float clip, float scale) {
    rig c = make(MT_DEVICE_CPU, kind, dt, clip), g = make(mt_device_cuda(0), kind, dt, clip);
    char what[128];
    const char *kn = kind == MT_OPTIM_ADAMW ? "adamw" : "sgd";
    for (int t = 0; t < 5; t++) {
        set_grads(&c, t, scale, 0);
        set_grads(&g, t, scale, 0);
        mt_optim_scaler sc, sg;
        MT_CHECK(mt_optim_scaler_constant(&sc, scale));
        sg = sc;
        mt_optim_step_info ic, ig;
        MT_CHECK(mt_optim_step(c.o, 1e-3 * (t + 1), 0.1, &sc, &ic, NULL));
        MT_CHECK(mt_optim_step(g.o, 1e-3 * (t + 1), 0.1, &sg, &ig, NULL));
        snprintf(what, sizeof what, "%s %s clip %g step %d: norm %.9g vs %.9g, zeros %lld vs %lld",
                 kn, mt_dtype_name(dt), clip, t, ig.grad_norm, ic.grad_norm,
                 (long long)ig.num_zeros, (long long)ic.num_zeros);
        MT_EXPECT(fabs(ig.grad_norm - ic.grad_norm) <= 1e-9 * ic.grad_norm &&
                      ig.num_zeros == ic.num_zeros && ic.num_zeros > 0,
                  "%s", what);
    }
    mt_tensor pc, pg, mc, mg, m1c, m1g, m2c, m2g;
    MT_CHECK(mt_optim_buffer_params(c.b, &pc));
    MT_CHECK(mt_optim_buffer_params(g.b, &pg));
    MT_CHECK(mt_optim_state(c.o, &mc, &m1c, &m2c));
    MT_CHECK(mt_optim_state(g.o, &mg, &m1g, &m2g));
    double tol = dt == MT_F32 ? 1e-6 : dt == MT_BF16 ? 8e-3 : 1e-3; /* one rounding of the dtype */
    snprintf(what, sizeof what, "%s %s clip %g params", kn, mt_dtype_name(dt), clip);
    compare(what, &pg, &pc, tol);
    if (dt != MT_F32) {
        snprintf(what, sizeof what, "%s %s clip %g master", kn, mt_dtype_name(dt), clip);
        compare(what, &mg, &mc, 1e-6);
    }
    snprintf(what, sizeof what, "%s %s clip %g exp_avg", kn, mt_dtype_name(dt), clip);
    compare(what, &m1g, &m1c, 1e-6);
    if (kind == MT_OPTIM_ADAMW) {
        snprintf(what, sizeof what, "%s %s clip %g exp_avg_sq", kn, mt_dtype_name(dt), clip);
        compare(what, &m2g, &m2c, 1e-6);
    }
    /* NaN: skipped on both, nothing changes */
    float *before = to_host(&pg);
    set_grads(&g, 9, scale, 1);
    mt_optim_step_info ig;
    MT_CHECK(mt_optim_step(g.o, 1e-3, 0.1, NULL, &ig, NULL));
    MT_EXPECT(ig.skipped && ig.num_skipped == 1, "GPU NaN step not skipped");
    float *after = to_host(&pg);
    mt_test_close_f32("params after a skipped GPU step", after, before,
                      (size_t)mt_tensor_numel(&pg), 0.0, 0.0);
    free(before), free(after);
    destroy(&c);
    destroy(&g);
}

int main(void) {
    mt_test_require_gpus(1);
    MT_CHECK(mt_device_set(mt_device_cuda(0)));
    run(MT_OPTIM_ADAMW, MT_F32, 0.0f, 1.0f);
    run(MT_OPTIM_ADAMW, MT_F32, 1.0f, 1.0f);
    run(MT_OPTIM_ADAMW, MT_BF16, 1.0f, 1.0f);
    run(MT_OPTIM_ADAMW, MT_F16, 1.0f, 4096.0f);
    run(MT_OPTIM_SGD, MT_F32, 0.0f, 1.0f);
    run(MT_OPTIM_SGD, MT_BF16, 1.0f, 1.0f);
    return mt_test_result();
}
