/* functional (CPU) / gpu (test_recompute cuda): full activation recomputation, and selective
 * recomputation of the MLP activation (mlp_act) and the norms' outputs (layernorm), change nothing
 * but memory; the output layer in slices (logits_chunks) changes only the order of its sums. Losses, logits and
 * every gradient of tiny GPT-2 and Llama models, also with per-head q/k norms, and of a Mixtral-style
 * MoE model (with its router losses, counted once) (Philox init) are bitwise those of the model that
 * keeps all activations, for uniform and block methods; the activation arena shrinks by exactly
 * the per-layer sets that the scratch sets replace; Megatron's invalid combinations are refused.
 * Prints the plan for GPT-2 124M at B=16, T=1024. */
#include <mt/model.h>
#include <mt/testkit.h>

#include <string.h>

#include "hf_tiny.h" /* B, T, V and the Llama layer choices */

#define L 5

static mt_device dev; /* the CPU, or CUDA device 0 with argument "cuda" */

static mt_model_config config_for(const char *tag) {
    mt_model_config c = MT_MODEL_CONFIG_INIT;
    c.num_layers = L;
    c.hidden_size = 64;
    c.num_attention_heads = 4;
    c.seq_length = T;
    c.vocab_size = V;
    c.seed = 99;
    c.deterministic = 1; /* bitwise comparisons: no attention atomics, no timed GEMM choice */
    if (strcmp(tag, "llama") == 0 || strcmp(tag, "llama_qk") == 0) tiny_llama_layers(&c);
    if (strcmp(tag, "mixtral") == 0) { /* MoE layers (with router losses: counted once) */
        tiny_llama_layers(&c);
        c.num_moe_experts = 4;
        c.moe_router_topk = 2;
        c.moe_ffn_hidden_size = 48;
        c.moe_aux_loss_coeff = 0.01f;
        c.moe_z_loss_coeff = 0.001f;
    }
    c.qk_layernorm = strstr(tag, "_qk") != NULL; /* per-head q/k norms: RMSNorm, or LayerNorm */
    return c;
}

typedef struct result {
    double loss[2], moe[2]; /* moe: the router losses of the training step (MoE; else NaN) */
    float *logits;
    float **grads;
    size_t bytes;
} result;

/* Two micro-batches of gradient accumulation, then a forward-only pass (as in evaluation). */
/* Micro-batch mb of the host ids as a (B,T) tensor on the model's device. */
static mt_tensor ids_on_dev(mt_arena *a, const int32_t *ids, int mb) {
    mt_tensor t;
    MT_CHECK(mt_tensor_alloc(a, MT_I32, 2, (int64_t[]){ B, T }, &t));
    MT_CHECK(mt_memcpy(t.data, dev, ids + mb * B * T, MT_DEVICE_CPU, B * T * 4, NULL));
    return t;
}

/* A host copy of a model tensor. */
static void *to_host(const mt_tensor *t) {
    void *h = malloc(mt_tensor_nbytes(t));
    MT_CHECK(mt_memcpy(h, MT_DEVICE_CPU, t->data, t->device, mt_tensor_nbytes(t), NULL));
    return h;
}

static result run(const mt_model_config *cfg, const int32_t *tok, const int32_t *tgt) {
    mt_model *m;
    mt_arena *a;
    MT_CHECK(mt_model_create(cfg, B, dev, NULL, NULL, &m));
    MT_CHECK(mt_arena_create(dev, 8 * MT_ARENA_ALIGN + 4 * B * T * 4, &a));
    result r = { { 0, 0 }, { 0, 0 }, NULL, NULL, mt_model_bytes(m) };
    for (int mb = 0; mb < 2; mb++) {
        mt_tensor tk = ids_on_dev(a, tok, mb), tg = ids_on_dev(a, tgt, mb);
        MT_CHECK(mt_model_forward_backward(m, &tk, &tg, 0.5f, NULL));
    }
    MT_CHECK(mt_model_take_loss(m, &r.loss[0], NULL));
    MT_CHECK(mt_model_take_moe_losses(m, &r.moe[0], &r.moe[1], NULL));
    mt_tensor tk = ids_on_dev(a, tok, 0), tg = ids_on_dev(a, tgt, 0);
    MT_CHECK(mt_model_forward(m, &tk, &tg, NULL));
    MT_CHECK(mt_model_take_loss(m, &r.loss[1], NULL));
    mt_tensor lg = mt_model_logits(m);
    r.logits = to_host(&lg);
    int np = mt_model_num_params(m);
    r.grads = calloc((size_t)np + 1, sizeof *r.grads);
    for (int i = 0; i < np; i++)
        r.grads[i] = to_host(&mt_model_param_at(m, i)->grad);
    mt_arena_destroy(a);
    mt_model_destroy(m);
    return r;
}

static void free_result(result *r) {
    for (int i = 0; r->grads[i]; i++)
        free(r->grads[i]);
    free(r->grads);
    free(r->logits);
}

/* Bitwise comparison of everything a training step and an evaluation produce. */
static void compare(const char *what, const mt_model_config *cfg, const result *want,
                    const result *got) {
    mt_model *m; // for the parameter names and sizes
    MT_CHECK(mt_model_create(cfg, B, dev, NULL, NULL, &m));
    MT_EXPECT(memcmp(want->loss, got->loss, sizeof want->loss) == 0,
              "%s: losses %.9g %.9g, want %.9g %.9g", what, got->loss[0], got->loss[1],
              want->loss[0], want->loss[1]);
    MT_EXPECT(memcmp(want->moe, got->moe, sizeof want->moe) == 0,
              "%s: router losses %.9g %.9g, want %.9g %.9g", what, got->moe[0], got->moe[1],
              want->moe[0], want->moe[1]);
    mt_tensor lg = mt_model_logits(m);
    MT_EXPECT(memcmp(want->logits, got->logits, mt_tensor_nbytes(&lg)) == 0, "%s: logits differ",
              what);
    int bad = 0;
    for (int i = 0; i < mt_model_num_params(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        if (memcmp(want->grads[i], got->grads[i], mt_tensor_nbytes(&p->grad)) != 0 && bad++ < 5)
            MT_EXPECT(0, "%s: gradient of %s differs", what, p->name);
    }
    MT_EXPECT(bad == 0, "%s: %d gradients differ", what, bad);
    fprintf(stderr, "%s: loss %.9g, %d gradients bitwise equal, %zu -> %zu bytes\n", what,
            got->loss[0], mt_model_num_params(m) - bad, want->bytes, got->bytes);
    mt_model_destroy(m);
}

static size_t align_up(size_t n) {
    return (n + MT_ARENA_ALIGN - 1) / MT_ARENA_ALIGN * MT_ARENA_ALIGN;
}

static size_t act_bytes(const mt_model_config *c, int b) {
    size_t n = 0;
    MT_CHECK(mt_model_activation_bytes(c, b, dev, &n));
    return n;
}

static mt_model_config with(mt_model_config c, mt_recompute_granularity g, mt_recompute_method m,
                            int n) {
    c.recompute_granularity = g;
    c.recompute_method = m;
    c.recompute_num_layers = n;
    return c;
}

static void test_model(const char *tag) {
    mt_model_config base = config_for(tag);
    int32_t tok[2 * B * T], tgt[2 * B * T];
    uint64_t x = 12345;
    for (int i = 0; i < 2 * B * T; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[i] = (int32_t)((x >> 33) % V);
        tgt[i] = i % 7 == 3 ? -100 : (int32_t)((x >> 17) % V); // a few ignored targets
    }
    result want = run(&base, tok, tgt);
    MT_EXPECT(want.loss[0] > 5.0 && want.loss[0] < 7.0, "%s: loss %.4f not near ln(%d)", tag,
              want.loss[0], V);

    /* the per-layer activation set S and the kept input R, from plans that differ by one layer */
    mt_model_config one = base;
    one.num_layers = 1;
    size_t dS = act_bytes(&base, B) - act_bytes(&one, B), S = dS / (L - 1);
    MT_EXPECT(S * (L - 1) == dS && S > 0, "%s: layers do not add equal activation sets", tag);
    size_t R = ((size_t)B * T * base.hidden_size * 4 + MT_ARENA_ALIGN - 1) / MT_ARENA_ALIGN *
               MT_ARENA_ALIGN;

    struct {
        mt_recompute_granularity g;
        mt_recompute_method m;
        int n;
        int sets, kept; /* scratch sets, kept inputs */
    } cases[] = {
        { MT_RECOMPUTE_FULL, MT_RECOMPUTE_UNIFORM, 1, 1, L },
        { MT_RECOMPUTE_FULL, MT_RECOMPUTE_UNIFORM, 2, 2, 3 }, /* groups 0-1, 2-3, 4 */
        { MT_RECOMPUTE_FULL, MT_RECOMPUTE_UNIFORM, L, L, 1 },
        { MT_RECOMPUTE_FULL, MT_RECOMPUTE_BLOCK, 1, 1, 1 },
        { MT_RECOMPUTE_FULL, MT_RECOMPUTE_BLOCK, 3, 1, 3 },
        { MT_RECOMPUTE_FULL, MT_RECOMPUTE_BLOCK, L, 1, L },
        { MT_RECOMPUTE_SELECTIVE, MT_RECOMPUTE_METHOD_NONE, 0, L, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mt_model_config c = with(base, cases[i].g, cases[i].m, cases[i].n);
        char what[96];
        snprintf(what, sizeof what, "%s %s %s %d", tag,
                 cases[i].g == MT_RECOMPUTE_FULL ? "full" : "selective",
                 cases[i].m == MT_RECOMPUTE_BLOCK     ? "block"
                 : cases[i].m == MT_RECOMPUTE_UNIFORM ? "uniform"
                                                      : "-",
                 cases[i].n);
        result got = run(&c, tok, tgt);
        compare(what, &c, &want, &got);
        /* block n keeps L-n full sets of its own and one scratch set */
        int sets = cases[i].m == MT_RECOMPUTE_BLOCK ? L - cases[i].n + 1 : cases[i].sets;
        size_t expect = want.bytes - (size_t)(L - sets) * S + (size_t)cases[i].kept * R;
        MT_EXPECT(got.bytes == expect, "%s: mt_model_bytes %zu, want %zu (S %zu, R %zu)", what,
                  got.bytes, expect, S, R);
        MT_EXPECT(act_bytes(&c, B) - act_bytes(&base, B) == got.bytes - want.bytes,
                  "%s: mt_model_activation_bytes disagrees with the model", what);
        free_result(&got);
    }
    /* selective mlp_act / layernorm: one shared buffer instead of one per layer (two for the
     * norms) */
    for (int v = 1; v <= 3; v++) { /* (MoE: mlp_act is Megatron's moe_act) */
        mt_model_config sel = with(base, MT_RECOMPUTE_SELECTIVE, MT_RECOMPUTE_METHOD_NONE, 0);
        sel.recompute_mlp_act = v & 1;
        sel.recompute_layernorm = (v & 2) != 0;
        MT_CHECK(mt_model_config_finalize(&sel));
        char what[64];
        snprintf(what, sizeof what, "%s selective%s%s", tag, v & 1 ? " mlp_act" : "",
                 v & 2 ? " layernorm" : "");
        result got = run(&sel, tok, tgt);
        compare(what, &sel, &want, &got);
        const int64_t rows = sel.num_moe_experts ? (int64_t)B * T * sel.moe_router_topk : B * T;
        size_t F = align_up((size_t)rows *
                            (sel.num_moe_experts ? sel.moe_ffn_hidden_size : sel.ffn_hidden_size) *
                            4),
               Cb = align_up((size_t)B * T * sel.hidden_size * 4);
        size_t saved = (v & 1 ? (size_t)(L - 1) * F : 0) + (v & 2 ? (size_t)(2 * L - 1) * Cb : 0);
        MT_EXPECT(got.bytes == want.bytes - saved, "%s: mt_model_bytes %zu, want %zu", what,
                  got.bytes, want.bytes - saved);
        free_result(&got);
    }
    mt_model_config u1 = with(base, MT_RECOMPUTE_FULL, MT_RECOMPUTE_UNIFORM, 1);
    MT_EXPECT(act_bytes(&u1, B) < act_bytes(&base, B), "%s: full uniform 1 does not shrink", tag);
    free_result(&want);
}

/* logits_chunks 3 (slices of 11, 11 and 10 tokens): the same losses and gradients up to the
 * order of the output layer's weight-gradient sums, the last slice's logits, and the arena smaller
 * by all but one slice's logits (plus the per-token loss gradients). */
static void test_logits_chunks(const char *tag) {
    mt_model_config base = config_for(tag), sl = base;
    sl.logits_chunks = 3;
    MT_CHECK(mt_model_config_finalize(&base));
    MT_CHECK(mt_model_config_finalize(&sl));
    int32_t tok[2 * B * T], tgt[2 * B * T];
    for (int i = 0; i < 2 * B * T; i++) {
        tok[i] = (i * 7919 + 13) % V;
        tgt[i] = i % 5 == 2 ? -100 : (i * 104729 + 7) % V;
    }
    result want = run(&base, tok, tgt), got = run(&sl, tok, tgt);
    char what[96];
    snprintf(what, sizeof what, "%s logits_chunks 3", tag);
    mt_test_close_f64(what, got.loss, want.loss, 2, 1e-6, 1e-6);
    const int64_t Vp = base.padded_vocab_size, N = B * T, R = (N + 2) / 3;
    mt_test_close_f32(what, got.logits, want.logits + (N - (N - 2 * R)) * Vp,
                      (size_t)((N - 2 * R) * Vp), 1e-5, 1e-5);
    mt_model *m;
    MT_CHECK(mt_model_create(&base, B, dev, NULL, NULL, &m));
    for (int i = 0; i < mt_model_num_params(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        char w2[160];
        snprintf(w2, sizeof w2, "%s: grad %s", what, p->name);
        mt_test_close_f32(w2, got.grads[i], want.grads[i], (size_t)mt_tensor_numel(&p->grad), 1e-6,
                          1e-4);
    }
    mt_model_destroy(m);
    size_t es = 4, saved = align_up((size_t)(N * Vp) * es) - align_up((size_t)(R * Vp) * es) -
                           align_up((size_t)N * 4);
    MT_EXPECT(got.bytes == want.bytes - saved, "%s: mt_model_bytes %zu, want %zu", what, got.bytes,
              want.bytes - saved);
    /* a forward without targets would return every token's logits: refused */
    MT_CHECK(mt_model_create(&sl, B, dev, NULL, NULL, &m));
    mt_arena *a;
    MT_CHECK(mt_arena_create(dev, 4 * MT_ARENA_ALIGN + B * T * 4, &a));
    mt_tensor tk = ids_on_dev(a, tok, 0);
    MT_EXPECT_STATUS(mt_model_forward(m, &tk, NULL, NULL), MT_ERR_INVALID_ARG);
    mt_arena_destroy(a);
    mt_model_destroy(m);
    free_result(&want), free_result(&got);
}

static void test_invalid(void) {
    mt_model_config c = config_for("gpt2");
    mt_model_config bad[] = {
        with(c, MT_RECOMPUTE_FULL, MT_RECOMPUTE_METHOD_NONE, 1),
        with(c, MT_RECOMPUTE_FULL, MT_RECOMPUTE_UNIFORM, 0),
        with(c, MT_RECOMPUTE_FULL, MT_RECOMPUTE_BLOCK, L + 1),
        with(c, MT_RECOMPUTE_SELECTIVE, MT_RECOMPUTE_UNIFORM, 0),
        with(c, MT_RECOMPUTE_SELECTIVE, MT_RECOMPUTE_METHOD_NONE, 1),
        with(c, (mt_recompute_granularity)7, MT_RECOMPUTE_METHOD_NONE, 0),
        with(c, MT_RECOMPUTE_NONE, MT_RECOMPUTE_METHOD_NONE, 0), /* mlp_act without selective */
        with(c, MT_RECOMPUTE_FULL, MT_RECOMPUTE_UNIFORM, 1),
        with(c, MT_RECOMPUTE_NONE, MT_RECOMPUTE_METHOD_NONE, 0), /* layernorm without selective */
    };
    bad[6].recompute_mlp_act = bad[7].recompute_mlp_act = 1;
    bad[8].recompute_layernorm = 1;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        MT_EXPECT_STATUS(mt_model_config_finalize(&bad[i]), MT_ERR_INVALID_ARG);
}

/* The plan for GPT-2 124M (fp32, B=16, T=1024): activations with and without recomputation. */
static void report_gpt2_124m(void) {
    mt_model_config c = MT_MODEL_CONFIG_INIT;
    c.num_layers = 12;
    c.hidden_size = 768;
    c.num_attention_heads = 12;
    c.seq_length = 1024;
    c.vocab_size = 50257;
    size_t none = act_bytes(&c, 16);
    mt_model_config u1 = with(c, MT_RECOMPUTE_FULL, MT_RECOMPUTE_UNIFORM, 1);
    mt_model_config b6 = with(c, MT_RECOMPUTE_FULL, MT_RECOMPUTE_BLOCK, 6);
    size_t full = act_bytes(&u1, 16), block = act_bytes(&b6, 16);
    fprintf(stderr,
            "GPT-2 124M fp32 B=16 T=1024 activation arena: %.1f MiB; full uniform 1: %.1f MiB "
            "(-%.1f MiB); full block 6: %.1f MiB (-%.1f MiB)\n",
            none / 1048576.0, full / 1048576.0, (none - full) / 1048576.0, block / 1048576.0,
            (none - block) / 1048576.0);
    MT_EXPECT(full < none && block < none && full < block, "124M plans do not shrink");
}

int main(int argc, char **argv) {
    dev = MT_DEVICE_CPU;
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
        mt_test_require_gpus(1);
        dev = mt_device_cuda(0);
    }
    test_model("gpt2");
    test_model("llama");
    test_model("gpt2_qk");
    test_model("llama_qk");
    test_model("mixtral");
    test_logits_chunks("gpt2");
    test_logits_chunks("llama");
    test_logits_chunks("mixtral");
    test_invalid();
    report_gpt2_124m();
    return mt_test_result();
}
