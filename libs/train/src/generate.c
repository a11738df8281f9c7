/* mt-generate's runtime: a checkpoint's model (the Hugging Face config its args keep: GPT-2- and
 * Llama-shaped models of mt-pretrain and of mt-convert's import) on one device, the tokenizer, and
 * mt-infer's generation loop around the model's forward. */
#define _POSIX_C_SOURCE 200809L
#include <mt/ckpt.h>
#include <mt/data.h>
#include <mt/infer.h>
#include <mt/model.h>
#include <mt/train.h>

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MT_REQUIRE_GOTO(cond, code, st, label, ...) \
    do {                                            \
        if (!(cond)) {                              \
            (st) = MT_ERROR((code), __VA_ARGS__);   \
            goto label;                             \
        }                                           \
    } while (0)

static int geti(json_t *o, const char *k, int dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

static double getf(json_t *o, const char *k, double dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

mt_status mt_train_model_config_from_hf(const char *args_json, mt_model_config *c) {
    MT_REQUIRE(args_json && c, MT_ERR_INVALID_ARG, "NULL args or config");
    json_t *args = json_loads(args_json, JSON_DECODE_ANY, NULL);
    json_t *hf = json_object_get(args, "hf"), *h = json_object_get(hf, "config");
    const char *type = json_string_value(json_object_get(h, "model_type"));
    mt_status st = MT_OK;
    *c = (mt_model_config)MT_MODEL_CONFIG_INIT;
    if (!type || (strcmp(type, "gpt2") && strcmp(type, "llama") && strcmp(type, "qwen3"))) {
        st = MT_ERROR(MT_ERR_FORMAT,
                      "the checkpoint's args have no GPT-2, Llama or Qwen3 config (hf.config, "
                      "kept by mt-pretrain for models of those shapes and by mt-convert)");
        goto done;
    }
    c->vocab_size = geti(h, "vocab_size", 0);
    c->make_vocab_size_divisible_by = geti(hf, "make_vocab_size_divisible_by", 0);
    c->padded_vocab_size = geti(hf, "padded_vocab_size", 0);
    json_t *tie = json_object_get(h, "tie_word_embeddings");
    if (!strcmp(type, "gpt2")) {
        const char *act = json_string_value(json_object_get(h, "activation_function"));
        if (act && strcmp(act, "gelu_new") != 0) {
            st = MT_ERROR(MT_ERR_UNSUPPORTED, "GPT-2 activation %s (gelu_new only)", act);
            goto done;
        }
        c->num_layers = geti(h, "n_layer", 0);
        c->hidden_size = geti(h, "n_embd", 0);
        c->num_attention_heads = geti(h, "n_head", 0);
        c->ffn_hidden_size = geti(h, "n_inner", 0);
        c->max_position_embeddings = geti(h, "n_positions", 0);
        c->norm_epsilon = (float)getf(h, "layer_norm_epsilon", 1e-5);
        c->untie_embeddings_and_output_weights = tie && !json_is_true(tie);
    } else {
        c->qk_layernorm = !strcmp(type, "qwen3"); /* q_norm, k_norm per head */
        c->num_layers = geti(h, "num_hidden_layers", 0);
        c->hidden_size = geti(h, "hidden_size", 0);
        c->num_attention_heads = geti(h, "num_attention_heads", 0);
        c->num_query_groups = geti(h, "num_key_value_heads", 0);
        c->kv_channels = geti(h, "head_dim", 0);
        c->ffn_hidden_size = geti(h, "intermediate_size", 0);
        c->max_position_embeddings = geti(h, "max_position_embeddings", 0);
        c->norm_epsilon = (float)getf(h, "rms_norm_eps", 1e-6);
        json_t *rp = json_object_get(h, "rope_parameters"); /* transformers 5; 4: rope_theta */
        c->rotary_base = getf(rp ? rp : h, "rope_theta", 10000.0);
        c->normalization = MT_NORM_RMSNORM;
        c->position_embedding_type = MT_POS_ROPE;
        c->swiglu = 1;
        c->add_bias_linear = 0;
        c->untie_embeddings_and_output_weights = !(tie && json_is_true(tie));
    }
    c->seq_length = c->max_position_embeddings;
done:
    json_decref(args);
    return st;
}

/* The model, its tokens buffer and a logits row, for mt-infer's callback. */
typedef struct gen {
    mt_model *m;
    mt_device dev;
    int T;
    int64_t V;
    mt_tensor tok, row; /* (1,T) i32; (1,Vp) f32 on the device */
    int32_t *htok;
} gen;

/* The logits after tokens[0..n): the forward over the n tokens (the rest of the window zeros,
 * which a causal model's position n - 1 does not see). */
static mt_status next_logits(void *ctx, const int32_t *tokens, int n, float *logits) {
    gen *g = ctx;
    memset(g->htok, 0, (size_t)g->T * 4);
    memcpy(g->htok, tokens, (size_t)n * 4);
    MT_TRY(mt_memcpy(g->tok.data, g->dev, g->htok, MT_DEVICE_CPU, (size_t)g->T * 4, NULL));
    MT_TRY(mt_model_forward(g->m, &g->tok, NULL, NULL));
    mt_tensor lg = mt_model_logits(g->m), last;
    MT_TRY(mt_tensor_slice(&lg, 0, n - 1, 1, &last));
    MT_TRY(mt_cast(&g->row, &last, NULL));
    return mt_memcpy(logits, MT_DEVICE_CPU, g->row.data, g->dev, (size_t)g->V * 4, NULL);
}

/* Every parameter of m from checkpoint ck (unsharded, as mt-pretrain and mt-convert write). */
static mt_status load_params(mt_model *m, mt_ckpt *ck) {
    for (int i = 0; i < mt_model_num_params(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        mt_tensor h =
            mt_tensor_make(NULL, p->weight.dtype, p->weight.ndim, p->weight.shape, MT_DEVICE_CPU);
        h.data = malloc(mt_tensor_nbytes(&h) + 1);
        MT_REQUIRE(h.data, MT_ERR_OOM, "%s", p->name);
        mt_status st = mt_ckpt_read(ck, p->name, &h, NULL);
        if (st == MT_OK) st = mt_tensor_copy(&p->weight, &h, NULL);
        free(h.data);
        MT_TRY(st);
    }
    return MT_OK;
}

static mt_status tokenizer_of(const mt_generate_args *g, mt_data_tokenizer **t) {
    if (!strcmp(g->tokenizer_type, "NullTokenizer")) return MT_OK; /* ids in, ids out */
    if (!strcmp(g->tokenizer_type, "HuggingFaceTokenizer"))
        return mt_data_tokenizer_hf_create(g->tokenizer_model, t);
    MT_REQUIRE(!strcmp(g->tokenizer_type, "GPT2BPETokenizer"), MT_ERR_INVALID_ARG,
               "--tokenizer-type %s (GPT2BPETokenizer, HuggingFaceTokenizer or NullTokenizer)",
               g->tokenizer_type);
    char vb[1024], mb[1024];
    const char *vf =
        g->vocab_file ? g->vocab_file : mt_data_gpt2_file("encoder.json", vb, sizeof vb);
    const char *mf = g->merge_file ? g->merge_file : mt_data_gpt2_file("vocab.bpe", mb, sizeof mb);
    return mt_data_tokenizer_gpt2_create(vf, mf, t);
}

/* "1,2,3" into ids (at most cap). */
static mt_status parse_ids(const char *s, int32_t *ids, int cap, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        MT_REQUIRE(end != p && v >= 0 && v <= INT32_MAX, MT_ERR_INVALID_ARG,
                   "--prompt-ids '%s': not comma-separated token ids", s);
        MT_REQUIRE(*n < cap, MT_ERR_INVALID_ARG, "--prompt-ids: more than %d ids", cap);
        ids[(*n)++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
        MT_REQUIRE(*end == ',' || *end == 0, MT_ERR_INVALID_ARG,
                   "--prompt-ids '%s': not comma-separated token ids", s);
    }
    return MT_OK;
}

mt_status mt_generate_run(const mt_generate_args *a) {
    MT_REQUIRE(a && a->load, MT_ERR_INVALID_ARG, "--load (a checkpoint directory) is required");
    MT_REQUIRE(!a->prompt != !a->prompt_ids, MT_ERR_INVALID_ARG,
               "give one of --prompt and --prompt-ids");
    gen g = { 0 };
    mt_ckpt *ck = NULL;
    mt_data_tokenizer *tk = NULL;
    mt_arena *ar = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    mt_status st = MT_OK;
    MT_TRY_GOTO(mt_ckpt_open(a->load, MT_CKPT_ITER_LATEST, 0, &ck), st, done);
    mt_model_config c;
    MT_TRY_GOTO(mt_train_model_config_from_hf(mt_ckpt_args(ck), &c), st, done);
    mt_dtype dt; /* the checkpoint's: f32, bf16 or f16 */
    MT_TRY_GOTO(mt_ckpt_info(ck, "embedding.word_embeddings.weight", &dt, NULL, NULL), st, done);
    c.dtype = dt;
    MT_TRY_GOTO(tokenizer_of(a, &tk), st, done);
    const int maxT = c.max_position_embeddings;
    ids = malloc((size_t)(maxT + a->tokens_to_generate + 1) * sizeof *ids);
    MT_REQUIRE_GOTO(ids, MT_ERR_OOM, st, done, "token buffer");
    int n = 0;
    if (a->prompt_ids) {
        MT_TRY_GOTO(parse_ids(a->prompt_ids, ids, maxT, &n), st, done);
    } else {
        MT_REQUIRE_GOTO(tk, MT_ERR_INVALID_ARG, st, done, "--prompt needs a tokenizer");
        int32_t *enc = NULL;
        size_t ne = 0, ecap = 0;
        MT_TRY_GOTO(mt_data_tokenizer_encode(tk, a->prompt, strlen(a->prompt), 0, &enc, &ne, &ecap),
                    st, done);
        n = (int)(ne < (size_t)maxT ? ne : (size_t)maxT);
        memcpy(ids, enc, (size_t)n * sizeof *ids);
        free(enc);
        MT_REQUIRE_GOTO(ne <= (size_t)maxT, MT_ERR_INVALID_ARG, st, done,
                        "the prompt has %zu tokens; the model takes %d", ne, maxT);
    }
    for (int i = 0; i < n; i++)
        MT_REQUIRE_GOTO(ids[i] >= 0 && ids[i] < c.vocab_size, MT_ERR_INVALID_ARG, st, done,
                        "prompt token %d is outside the vocabulary of %d", ids[i], c.vocab_size);
    /* the window: the prompt and what is generated, up to the model's positions */
    c.seq_length = n + a->tokens_to_generate < maxT ? n + a->tokens_to_generate : maxT;
    if (c.seq_length < 1) c.seq_length = 1;
    int ngpu = 0;
    MT_TRY_GOTO(mt_device_count(&ngpu), st, done);
    g.dev = !strcmp(a->device, "cpu") || ngpu == 0 ? MT_DEVICE_CPU : mt_device_cuda(0);
    MT_REQUIRE_GOTO(strcmp(a->device, "cuda") || mt_device_is_cuda(g.dev), MT_ERR_UNSUPPORTED, st,
                    done, "--device cuda but no usable GPU");
    MT_TRY_GOTO(mt_device_set(g.dev), st, done);
    MT_TRY_GOTO(mt_model_create(&c, 1, g.dev, NULL, NULL, &g.m), st, done);
    MT_TRY_GOTO(load_params(g.m, ck), st, done);
    g.T = c.seq_length;
    g.V = c.vocab_size;
    const int64_t Vp = mt_model_get_config(g.m)->padded_vocab_size;
    MT_TRY_GOTO(mt_arena_create(g.dev, (size_t)(g.T * 4 + Vp * 4) + 4 * MT_ARENA_ALIGN, &ar), st,
                done);
    MT_TRY_GOTO(mt_tensor_alloc(ar, MT_I32, 2, (int64_t[]){ 1, g.T }, &g.tok), st, done);
    MT_TRY_GOTO(mt_tensor_alloc(ar, MT_F32, 2, (int64_t[]){ 1, Vp }, &g.row), st, done);
    g.htok = malloc((size_t)g.T * 4);
    MT_REQUIRE_GOTO(g.htok, MT_ERR_OOM, st, done, "tokens");
    /* (mt_cast converts the whole padded row; the callback hands mt-infer the first V) */
    mt_infer_model im = { &g, next_logits, g.V, g.T,
                          (int32_t)(tk ? mt_data_tokenizer_eod(tk) : a->eod) };
    mt_infer_sampling s = { a->greedy ? 0.0f : a->temperature, a->top_k, a->top_p, a->seed };
    int total = n;
    MT_TRY_GOTO(mt_infer_generate(&im, ids, n, a->tokens_to_generate, &s, &total), st, done);
    if (a->print_ids || !tk) {
        for (int i = 0; i < total; i++)
            printf("%s%d", i ? "," : "", ids[i]);
        printf("\n");
    }
    if (tk) { /* the prompt and its continuation */
        MT_TRY_GOTO(mt_data_tokenizer_decode(tk, ids, (size_t)total, &text, &len, &cap), st, done);
        printf("%.*s\n", (int)len, text);
    }
    fflush(stdout);
done:
    free(text);
    free(ids);
    free(g.htok);
    mt_arena_destroy(ar);
    mt_model_destroy(g.m);
    mt_data_tokenizer_destroy(tk);
    mt_ckpt_close(ck);
    return st;
}
