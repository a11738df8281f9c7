/* functional (CPU) / gpu (test_kv_cache cuda f32|bf16): inference over a KV cache gives the
 * logits of the whole-sequence forward. A model of T = 40 tokens (2 sequences) runs once over
 * everything; views of its weights (mt_model_create_view) of 8 tokens (prefill chunks) and of 1
 * (decoding) then run the same tokens in pieces over one cache: positions 0-7 as a chunk, 8-10
 * one at a time, 11-18 as a chunk, 19-39 one at a time. Every piece's logits must be the whole
 * forward's rows of those positions (which test_hf_golden checks against transformers), for
 * GPT-2 (learned positions, biases, LayerNorm), Llama (RoPE, GQA, SwiGLU), Qwen3 (qk norms),
 * Mixtral-style MoE layers (f32) and DeepSeek's multi-latent attention. On CUDA the views run as CUDA graphs (captured at their second
 * call, replayed at later positions: the cache's length is read on the device). In f32 a token
 * run at the wrong position must differ by far more than the tolerance. Also: the inference models have no gradients, views share the weights, and bad
 * positions or caches are refused. */
#include <mt/model.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define B 2
#define T 40
#define V 300

static mt_device dev;
static mt_dtype dtype = MT_F32;

/* The (B, n) tokens at [pos, pos+n) of each sequence into a device tensor (arena a). */
static mt_tensor tokens_at(mt_arena *a, const int32_t *tok, int pos, int n) {
    int32_t h[B * T];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++)
            h[b * n + t] = tok[b * T + pos + t];
    mt_tensor x;
    MT_CHECK(mt_tensor_alloc(a, MT_I32, 2, (int64_t[]){ B, n }, &x));
    MT_CHECK(mt_memcpy(x.data, dev, h, MT_DEVICE_CPU, (size_t)B * n * 4, NULL));
    return x;
}

/* The model's logits (B*n rows of Vp) as host f32. */
static float *logits_of(mt_model *m) {
    mt_tensor lg = mt_model_logits(m);
    const size_t n = (size_t)mt_tensor_numel(&lg), es = mt_dtype_size(lg.dtype);
    void *raw = malloc(n * es);
    float *f = malloc(n * 4);
    MT_CHECK(mt_memcpy(raw, MT_DEVICE_CPU, lg.data, dev, n * es, NULL));
    mt_tensor h = mt_tensor_1d(raw, lg.dtype, (int64_t)n, MT_DEVICE_CPU);
    mt_tensor o = mt_tensor_1d(f, MT_F32, (int64_t)n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&o, &h, NULL));
    free(raw);
    return f;
}

/* max over the piece's rows of |got - want| / max |want|: got (B*n, Vp) against the whole
 * forward's rows b*T + pos + t. */
static double piece_err(const float *got, const float *whole, int pos, int n, int64_t vp) {
    double d = 0.0, mx = 0.0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++)
            for (int64_t j = 0; j < V; j++) {
                const double w = whole[(size_t)(b * T + pos + t) * vp + j];
                d = fmax(d, fabs(got[(size_t)(b * n + t) * vp + j] - w));
                mx = fmax(mx, fabs(w));
            }
    return d / mx;
}

/* Row b's n tokens at [pos, pos+n) into a (1, n) device tensor. */
static mt_tensor row_tokens_at(mt_arena *a, const int32_t *tok, int b, int pos, int n) {
    mt_tensor x;
    MT_CHECK(mt_tensor_alloc(a, MT_I32, 2, (int64_t[]){ 1, n }, &x));
    MT_CHECK(mt_memcpy(x.data, dev, tok + b * T + pos, MT_DEVICE_CPU, (size_t)n * 4, NULL));
    return x;
}

/* max |got - want| / max |want| over one row of logits: got's row r against the whole forward's
 * row b*T + pos. */
static double row_err(const float *got, int r, const float *whole, int b, int pos, int64_t vp) {
    double d = 0.0, mx = 0.0;
    for (int64_t j = 0; j < V; j++) {
        const double w = whole[(size_t)(b * T + pos) * vp + j];
        d = fmax(d, fabs(got[(size_t)r * vp + j] - w));
        mx = fmax(mx, fabs(w));
    }
    return d / mx;
}

/* Sequences at different positions in one forward: each row of a 2-row cache prefilled alone
 * (mt_model_kv_cache_row: one-sequence views of chunks of 8 and single tokens; row 0 to position
 * 13, row 1 to 19), then both decoded together by a 2-row one-token view at their own positions
 * (mt_model_set_kv_cache_rows) for 10 steps: each row's logits the whole forward's. */
static void test_rows(const char *tag, mt_model *whole, mt_arena *a, const int32_t *tok,
                      const float *want, int64_t vp, double tol) {
    mt_model *chunk1, *one1, *both;
    mt_model_kv_cache *kv, *row[2];
    MT_CHECK(mt_model_create_view(whole, 1, 8, &chunk1));
    MT_CHECK(mt_model_create_view(whole, 1, 1, &one1));
    MT_CHECK(mt_model_create_view(whole, B, 1, &both));
    mt_model_set_cuda_graphs(both, 1);
    MT_CHECK(mt_model_kv_cache_create(whole, 48, &kv));
    const int upto[2] = { 13, 19 };
    double worst = 0.0;
    for (int b = 0; b < 2; b++) {
        MT_CHECK(mt_model_kv_cache_row(kv, b, &row[b]));
        for (int p = 0; p < upto[b];) {
            const int n = upto[b] - p >= 8 ? 8 : 1;
            mt_model *m = n == 8 ? chunk1 : one1;
            MT_CHECK(mt_model_set_kv_cache(m, row[b], p));
            mt_tensor x = row_tokens_at(a, tok, b, p, n);
            MT_CHECK(mt_model_forward(m, &x, NULL, NULL));
            float *got = logits_of(m);
            worst = fmax(worst, row_err(got, n - 1, want, b, p + n - 1, vp));
            free(got);
            p += n;
        }
    }
    int pos[2] = { upto[0], upto[1] };
    for (int step = 0; step < 10; step++, pos[0]++, pos[1]++) {
        MT_CHECK(mt_model_set_kv_cache_rows(both, kv, pos));
        int32_t h[B] = { tok[pos[0]], tok[T + pos[1]] };
        mt_tensor x;
        MT_CHECK(mt_tensor_alloc(a, MT_I32, 2, (int64_t[]){ B, 1 }, &x));
        MT_CHECK(mt_memcpy(x.data, dev, h, MT_DEVICE_CPU, sizeof h, NULL));
        MT_CHECK(mt_model_forward(both, &x, NULL, NULL));
        float *got = logits_of(both);
        for (int b = 0; b < 2; b++)
            worst = fmax(worst, row_err(got, b, want, b, pos[b], vp));
        free(got);
    }
    MT_EXPECT(worst <= tol, "%s %s: rows at their own positions: logits off by %.3g (tol %g)", tag,
              mt_dtype_name(dtype), worst, tol);
    printf("ok %s %s: a batch's rows prefilled alone, decoded together at positions 13.. and "
           "19.. (worst %.3g)\n",
           tag, mt_dtype_name(dtype), worst);
    MT_EXPECT_STATUS(mt_model_kv_cache_row(kv, 2, &row[0]), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_model_set_kv_cache(both, row[1], 0), MT_ERR_INVALID_ARG); /* 1 row */
    mt_error_clear();
    mt_model_kv_cache_destroy(row[0]);
    mt_model_kv_cache_destroy(row[1]);
    mt_model_kv_cache_destroy(kv);
    mt_model_destroy(both);
    mt_model_destroy(one1);
    mt_model_destroy(chunk1);
}

static void config_of(const char *tag, mt_model_config *c) {
    *c = (mt_model_config)MT_MODEL_CONFIG_INIT;
    c->num_layers = 2, c->hidden_size = 128, c->num_attention_heads = 2; /* head dim 64 */
    c->seq_length = T, c->max_position_embeddings = 64, c->vocab_size = V;
    c->seed = 11, c->dtype = dtype;
    if (strcmp(tag, "gpt2") != 0) { /* Llama's layers */
        c->num_attention_heads = 4, c->num_query_groups = 2, c->hidden_size = 256;
        c->ffn_hidden_size = 192, c->normalization = MT_NORM_RMSNORM;
        c->position_embedding_type = MT_POS_ROPE, c->swiglu = 1, c->add_bias_linear = 0;
        c->untie_embeddings_and_output_weights = 1;
    }
    if (!strcmp(tag, "qwen3")) c->qk_layernorm = 1;
    if (!strcmp(tag, "mixtral")) c->num_moe_experts = 4, c->moe_router_topk = 2;
    if (!strcmp(tag, "deepseek")) { /* multi-latent attention: the cache holds its heads */
        c->num_query_groups = 0, c->multi_latent_attention = 1, c->q_lora_rank = 32;
        c->kv_lora_rank = 48, c->qk_head_dim = 32, c->qk_pos_emb_head_dim = 16;
        c->v_head_dim = 24;
    }
}

static void test_model(const char *tag) {
    mt_model_config c;
    config_of(tag, &c);
    if (c.num_moe_experts && dtype != MT_F32) { /* (f32 covers MoE) */
        printf("skip %s %s: the pieces' bf16 roundings differ from the whole forward's and flip "
               "near-tied expert choices, which moves a token's logits by far more than rounding\n",
               tag, mt_dtype_name(dtype));
        return;
    }
    int32_t tok[B * T];
    uint64_t x = 99;
    for (int i = 0; i < B * T; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[i] = (int32_t)((x >> 33) % V);
    }
    mt_model *whole, *chunk, *one;
    mt_arena *a;
    MT_CHECK(mt_model_create_inference(&c, B, dev, &whole));
    MT_CHECK(mt_arena_create(dev, 64 * MT_ARENA_ALIGN + 8 * B * T * 4, &a));
    mt_tensor all = tokens_at(a, tok, 0, T);
    MT_CHECK(mt_model_forward(whole, &all, NULL, NULL));
    float *want = logits_of(whole);
    const int64_t vp = mt_model_logits(whole).shape[1];
    MT_CHECK(mt_model_create_view(whole, B, 8, &chunk));
    MT_CHECK(mt_model_create_view(whole, B, 1, &one));
    mt_model_set_cuda_graphs(chunk, 1); /* (CUDA: each replays one graph at its later positions) */
    mt_model_set_cuda_graphs(one, 1);
    MT_EXPECT(mt_model_param_at(chunk, 3)->weight.data == mt_model_param_at(whole, 3)->weight.data,
              "%s: a view shares the weights", tag);
    mt_model_kv_cache *kv;
    MT_CHECK(mt_model_kv_cache_create(whole, 48, &kv));
    /* the pieces: (position, tokens) */
    static const int pieces[][2] = { { 0, 8 }, { 8, 1 }, { 9, 1 }, { 10, 1 }, { 11, 8 } };
    const double tol = dtype == MT_F32 ? (mt_device_is_cuda(dev) ? 1e-4 : 1e-5) : 2e-2;
    double worst = 0.0;
    for (int p = 0; p < 5 + (T - 19); p++) {
        const int pos = p < 5 ? pieces[p][0] : 19 + (p - 5), n = p < 5 ? pieces[p][1] : 1;
        mt_model *m = n == 8 ? chunk : one;
        MT_CHECK(mt_model_set_kv_cache(m, kv, pos));
        mt_tensor tk = tokens_at(a, tok, pos, n);
        MT_CHECK(mt_model_forward(m, &tk, NULL, NULL));
        float *got = logits_of(m);
        const double e = piece_err(got, want, pos, n, vp);
        worst = fmax(worst, e);
        MT_EXPECT(e <= tol, "%s %s: positions %d..%d over the cache: logits off by %.3g (tol %g)",
                  tag, mt_dtype_name(dtype), pos, pos + n - 1, e, tol);
        free(got);
    }
    /* the last token again at the wrong position (39 as 38): not the same logits */
    MT_CHECK(mt_model_set_kv_cache(one, kv, T - 2));
    mt_tensor last = tokens_at(a, tok, T - 1, 1);
    MT_CHECK(mt_model_forward(one, &last, NULL, NULL));
    float *off = logits_of(one);
    const double e_off = piece_err(off, want, T - 1, 1, vp);
    if (dtype == MT_F32) /* (bf16's tolerance is within a small random model's position effect) */
        MT_EXPECT(e_off > 20 * tol, "%s: the wrong position gives the right logits (%.3g)", tag,
                  e_off);
    free(off);
    printf("ok %s %s: pieces over the KV cache = the whole forward (worst %.3g of %g; wrong "
           "position %.3g)\n",
           tag, mt_dtype_name(dtype), worst, tol, e_off);
    /* refusals: past the cache, past the position table, training, another shape's cache */
    MT_EXPECT_STATUS(mt_model_set_kv_cache(chunk, kv, 41), MT_ERR_INVALID_ARG);
    mt_tensor tg = tokens_at(a, tok, 0, 8);
    MT_EXPECT_STATUS(mt_model_forward_backward(chunk, &tg, &tg, 1.0f, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_model_zero_grad(whole, NULL), MT_ERR_INVALID_ARG);
    mt_model_config c2 = c;
    c2.num_layers = 3;
    mt_model *other;
    MT_CHECK(mt_model_create_inference(&c2, B, dev, &other));
    MT_EXPECT_STATUS(mt_model_set_kv_cache(other, kv, 0), MT_ERR_INVALID_ARG);
    mt_model_destroy(other);
    if (c.position_embedding_type == MT_POS_LEARNED) {
        mt_model_kv_cache *big;
        MT_CHECK(mt_model_kv_cache_create(whole, 100, &big));
        MT_EXPECT(mt_model_set_kv_cache(chunk, big, 60) == MT_ERR_INVALID_ARG &&
                      strstr(mt_last_error(), "position embeddings"),
                  "positions 60..67 of 64: %s", mt_last_error());
        mt_model_kv_cache_destroy(big);
    }
    mt_error_clear();
    test_rows(tag, whole, a, tok, want, vp, tol);
    mt_model_kv_cache_destroy(kv);
    mt_model_destroy(one);
    mt_model_destroy(chunk);
    mt_model_destroy(whole);
    mt_arena_destroy(a);
    free(want);
}

int main(int argc, char **argv) {
    dev = MT_DEVICE_CPU;
    if (argc > 1 && !strcmp(argv[1], "cuda")) {
        mt_test_require_gpus(1);
        dev = mt_device_cuda(0);
        MT_CHECK(mt_device_set(dev));
    }
    if (argc > 2) dtype = !strcmp(argv[2], "bf16") ? MT_BF16 : MT_F32;
    const char *tags[] = { "gpt2", "llama", "qwen3", "mixtral", "deepseek" };
    for (int i = 0; i < 5; i++)
        test_model(tags[i]);
    return mt_test_result();
}
