/* functional (CPU) / gpu (test_moe_dense cuda): a mixture of experts with one expert and top-1
 * routing is the dense MLP (its probability is 1, its router's gradient 0): with the dense model's
 * fc1/fc2 weights copied into expert 0, a GPT-2-shaped (GELU experts) and a Llama-shaped (SwiGLU)
 * model give the dense model's losses, every shared parameter's gradient and the experts' fc1/fc2
 * gradients equal to the dense ones (with biases too); the router's gradient is 0. Also under
 * Megatron's moe_act recomputation and with padding to a capacity. With shared experts, one expert
 * of width F - Fs and a shared expert of Fs (no gate) are the dense MLP of width F, its fc1 rows
 * and fc2 columns split between them (SwiGLU: gate and up alike), for GELU and SwiGLU. (The dense
 * path is checked against Hugging Face in test_hf_golden.) */
#include <mt/model.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hf_tiny.h" /* B, T, V and the Llama layer choices */

static mt_device dev;

static float *host_f32(const mt_tensor *t) {
    const int64_t n = mt_tensor_numel(t);
    void *raw = malloc(mt_tensor_nbytes(t));
    float *f = malloc(sizeof(float) * (size_t)n);
    MT_CHECK(mt_memcpy(raw, MT_DEVICE_CPU, t->data, t->device, mt_tensor_nbytes(t), NULL));
    mt_tensor hr = mt_tensor_1d(raw, t->dtype, n, MT_DEVICE_CPU);
    mt_tensor hf = mt_tensor_1d(f, MT_F32, n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&hf, &hr, NULL));
    free(raw);
    return f;
}

/* The MoE model's name for dense parameter `name` (its expert 0's fc1/fc2; else the same). */
static void moe_name(const char *name, char *out, size_t len) {
    int l, n = 0;
    char which[32];
    if (sscanf(name, "decoder.layers.%d.mlp.%31[a-z_0-9.]%n", &l, which, &n) == 2 &&
        n == (int)strlen(name))
        snprintf(out, len, "decoder.layers.%d.mlp.experts.local_experts.0.%s", l, which);
    else
        snprintf(out, len, "%s", name);
}

/* One training step of the dense model d and the MoE model m on the same batch: their losses
 * equal within tol (relative). Returns the batch's arena (the caller destroys it). */
static mt_arena *same_step(const char *tag, mt_model *d, mt_model *m, double tol) {
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)((i * 37 + 11) % V), tgt[i] = (int32_t)((i * 53 + 7) % V);
    mt_arena *ar;
    MT_CHECK(mt_arena_create(dev, 4 * MT_ARENA_ALIGN + 2 * B * T * 4, &ar));
    mt_tensor tk, tg;
    MT_CHECK(mt_tensor_alloc(ar, MT_I32, 2, (int64_t[]){ B, T }, &tk));
    MT_CHECK(mt_tensor_alloc(ar, MT_I32, 2, (int64_t[]){ B, T }, &tg));
    MT_CHECK(mt_memcpy(tk.data, dev, tok, MT_DEVICE_CPU, sizeof tok, NULL));
    MT_CHECK(mt_memcpy(tg.data, dev, tgt, MT_DEVICE_CPU, sizeof tgt, NULL));
    double ld, lm;
    MT_CHECK(mt_model_forward_backward(d, &tk, &tg, 1.0f, NULL));
    MT_CHECK(mt_model_forward_backward(m, &tk, &tg, 1.0f, NULL));
    MT_CHECK(mt_model_take_loss(d, &ld, NULL));
    MT_CHECK(mt_model_take_loss(m, &lm, NULL));
    MT_EXPECT(fabs(ld - lm) <= tol * fabs(ld), "%s: loss %.9f, dense %.9f", tag, lm, ld);
    fprintf(stderr, "%s: loss %.9f, dense %.9f\n", tag, lm, ld);
    return ar;
}

static void check(const char *tag, int llama, int act, int pad, int bias) {
    mt_model_config dc = MT_MODEL_CONFIG_INIT;
    dc.num_layers = 2, dc.hidden_size = 64, dc.num_attention_heads = 4, dc.seq_length = T;
    dc.vocab_size = V, dc.seed = 5, dc.deterministic = 1;
    if (llama) tiny_llama_layers(&dc);
    dc.add_bias_linear = bias;
    if (act) dc.recompute_granularity = MT_RECOMPUTE_SELECTIVE, dc.recompute_mlp_act = 1;
    mt_model_config mc = dc;
    mc.num_moe_experts = 1, mc.moe_router_topk = 1;
    if (pad) mc.moe_expert_capacity_factor = 1.0f, mc.moe_pad_expert_input_to_capacity = 1;
    mt_model *d, *m;
    MT_CHECK(mt_model_create(&dc, B, dev, NULL, NULL, &d));
    MT_CHECK(mt_model_create(&mc, B, dev, NULL, NULL, &m));
    for (int i = 0; i < mt_model_num_params(d); i++) { /* the dense weights into the MoE model */
        mt_model_param *p = mt_model_param_at(d, i);
        if (strstr(p->name, ".bias")) /* (zeros at init: drawn so that their adds show) */
            MT_CHECK(mt_fill_normal(&p->weight, 0.0f, 0.1f, 77, (uint64_t)i, NULL));
        char nm[160];
        moe_name(p->name, nm, sizeof nm);
        mt_model_param *q = mt_model_param_find(m, nm);
        MT_EXPECT(q != NULL, "%s: the MoE model has no %s", tag, nm);
        if (q) MT_CHECK(mt_tensor_copy(&q->weight, &p->weight, NULL));
    }
    const double tol = mt_device_is_cuda(dev) ? 1e-5 : 1e-6;
    mt_arena *ar = same_step(tag, d, m, tol);
    for (int i = 0; i < mt_model_num_params(d); i++) {
        mt_model_param *p = mt_model_param_at(d, i);
        char nm[160], what[200];
        moe_name(p->name, nm, sizeof nm);
        mt_model_param *q = mt_model_param_find(m, nm);
        if (!q) continue;
        float *gd = host_f32(&p->grad), *gm = host_f32(&q->grad);
        double mx = 0;
        for (int64_t j = 0; j < mt_tensor_numel(&p->grad); j++)
            mx = fmax(mx, fabs(gd[j]));
        snprintf(what, sizeof what, "%s: %s", tag, nm);
        mt_test_close_f32(what, gm, gd, (size_t)mt_tensor_numel(&p->grad), tol * mx, tol);
        free(gd);
        free(gm);
    }
    for (int l = 0; l < 2; l++) {
        char nm[96];
        snprintf(nm, sizeof nm, "decoder.layers.%d.mlp.router.weight", l);
        mt_model_param *r = mt_model_param_find(m, nm);
        MT_EXPECT(r != NULL, "%s: no %s", tag, nm);
        if (!r) continue;
        float *g = host_f32(&r->grad);
        double mx = 0;
        for (int64_t j = 0; j < mt_tensor_numel(&r->grad); j++)
            mx = fmax(mx, fabs(g[j]));
        MT_EXPECT(mx == 0.0, "%s: router gradient %g, want 0 (one expert, top-1)", tag, mx);
        free(g);
    }
    mt_arena_destroy(ar);
    mt_model_destroy(d);
    mt_model_destroy(m);
}

/* Rows [r0, r0 + n) of fc1 (SwiGLU: of its gate and of its up halves, each F rows) or columns of
 * fc2 (of width F): the part of a dense MLP's weight (values w, host) that an MLP of width n
 * holds, into out. */
static void mlp_part(const float *w, int fc1, int swiglu, int64_t F, int64_t C, int64_t r0,
                     int64_t n, float *out) {
    if (fc1) {
        for (int h = 0; h < (swiglu ? 2 : 1); h++)
            memcpy(out + h * n * C, w + (h * F + r0) * C, sizeof(float) * (size_t)(n * C));
        return;
    }
    for (int64_t i = 0; i < C; i++)
        memcpy(out + i * n, w + i * F + r0, sizeof(float) * (size_t)n);
}

/* One expert (top-1) of width F - Fs beside a shared expert of Fs: the dense MLP of width F. */
static void check_shared(const char *tag, int llama, int act) {
    mt_model_config dc = MT_MODEL_CONFIG_INIT;
    dc.num_layers = 2, dc.hidden_size = 64, dc.num_attention_heads = 4, dc.seq_length = T;
    dc.vocab_size = V, dc.seed = 6, dc.deterministic = 1, dc.add_bias_linear = 0;
    if (llama) tiny_llama_layers(&dc);
    if (act) dc.recompute_granularity = MT_RECOMPUTE_SELECTIVE, dc.recompute_mlp_act = 1;
    mt_model *d, *m;
    MT_CHECK(mt_model_create(&dc, B, dev, NULL, NULL, &d));
    const int64_t F = mt_model_get_config(d)->ffn_hidden_size, Fs = F / 4, C = 64;
    mt_model_config mc = dc;
    mc.num_moe_experts = 1, mc.moe_router_topk = 1;
    mc.moe_ffn_hidden_size = (int)(F - Fs), mc.moe_shared_expert_intermediate_size = (int)Fs;
    MT_CHECK(mt_model_create(&mc, B, dev, NULL, NULL, &m));
    /* each dense parameter into the MoE model: the MLPs' split between the two */
    const char *part[2] = { "experts.local_experts.0.", "shared_experts." };
    const int64_t r0[2] = { 0, F - Fs }, n[2] = { F - Fs, Fs };
    for (int i = 0; i < mt_model_num_params(d); i++) {
        mt_model_param *p = mt_model_param_at(d, i);
        int l, fc = 0;
        char nm[160];
        if (sscanf(p->name, "decoder.layers.%d.mlp.linear_fc%d.weight", &l, &fc) != 2) {
            mt_model_param *q = mt_model_param_find(m, p->name);
            MT_EXPECT(q != NULL, "%s: the MoE model has no %s", tag, p->name);
            if (q) MT_CHECK(mt_tensor_copy(&q->weight, &p->weight, NULL));
            continue;
        }
        float *w = host_f32(&p->weight);
        for (int k = 0; k < 2; k++) {
            snprintf(nm, sizeof nm, "decoder.layers.%d.mlp.%slinear_fc%d.weight", l, part[k], fc);
            mt_model_param *q = mt_model_param_find(m, nm);
            MT_EXPECT(q != NULL, "%s: the MoE model has no %s", tag, nm);
            if (!q) continue;
            const int64_t cnt = mt_tensor_numel(&q->weight);
            float *x = malloc(sizeof(float) * (size_t)cnt);
            mlp_part(w, fc == 1, llama, F, C, r0[k], n[k], x);
            mt_tensor hx = mt_tensor_1d(x, MT_F32, cnt, MT_DEVICE_CPU), flat = q->weight;
            MT_CHECK(mt_tensor_reshape(&q->weight, 1, &cnt, &flat));
            MT_CHECK(mt_tensor_copy(&flat, &hx, NULL));
            free(x);
        }
        free(w);
    }
    const double tol = mt_device_is_cuda(dev) ? 1e-5 : 1e-6;
    mt_arena *ar = same_step(tag, d, m, tol);
    for (int i = 0; i < mt_model_num_params(d); i++) { /* every gradient, the MLPs' split */
        mt_model_param *p = mt_model_param_at(d, i);
        float *gd = host_f32(&p->grad);
        double mx = 0;
        for (int64_t j = 0; j < mt_tensor_numel(&p->grad); j++)
            mx = fmax(mx, fabs(gd[j]));
        int l, fc = 0;
        char nm[160], what[200];
        const int mlp = sscanf(p->name, "decoder.layers.%d.mlp.linear_fc%d.weight", &l, &fc) == 2;
        for (int k = 0; k < (mlp ? 2 : 1); k++) {
            if (mlp)
                snprintf(nm, sizeof nm, "decoder.layers.%d.mlp.%slinear_fc%d.weight", l, part[k],
                         fc);
            else
                snprintf(nm, sizeof nm, "%s", p->name);
            mt_model_param *q = mt_model_param_find(m, nm);
            if (!q) continue;
            const int64_t cnt = mt_tensor_numel(&q->grad);
            float *want = malloc(sizeof(float) * (size_t)cnt), *gm = host_f32(&q->grad);
            if (mlp)
                mlp_part(gd, fc == 1, llama, F, C, r0[k], n[k], want);
            else
                memcpy(want, gd, sizeof(float) * (size_t)cnt);
            snprintf(what, sizeof what, "%s: %s", tag, nm);
            mt_test_close_f32(what, gm, want, (size_t)cnt, tol * mx, tol);
            free(want);
            free(gm);
        }
        free(gd);
    }
    mt_arena_destroy(ar);
    mt_model_destroy(d);
    mt_model_destroy(m);
}

int main(int argc, char **argv) {
    dev = MT_DEVICE_CPU;
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
        mt_test_require_gpus(1);
        dev = mt_device_cuda(0);
    }
    check("gpt2 (GELU experts)", 0, 0, 0, 0);
    check("gpt2 (GELU experts) moe_act", 0, 1, 0, 0);
    check("gpt2 (GELU experts) padded", 0, 0, 1, 0);
    check("gpt2 with biases (GELU experts)", 0, 0, 0, 1);
    check("gpt2 with biases (GELU experts) moe_act, padded", 0, 1, 1, 1);
    check("llama (SwiGLU experts)", 1, 0, 0, 0);
    check("llama (SwiGLU experts) moe_act", 1, 1, 0, 0);
    check("llama with biases (SwiGLU experts)", 1, 0, 0, 1);
    check_shared("gpt2 (a GELU expert and a shared one)", 0, 0);
    check_shared("gpt2 (a GELU expert and a shared one) moe_act", 0, 1);
    check_shared("llama (a SwiGLU expert and a shared one)", 1, 0);
    return mt_test_result();
}
