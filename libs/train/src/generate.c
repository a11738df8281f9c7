/* mt-generate's and mt-serve's runtime: a checkpoint's model (the Hugging Face config its args keep: GPT-2- and
 * Llama-shaped models of mt-pretrain and of mt-convert's import) on one device, the tokenizer, and
 * mt-infer's generation loop around the model's forward over a KV cache. */
#define _GNU_SOURCE /* strcasestr, MSG_NOSIGNAL */
#include <mt/ckpt.h>
#include <mt/data.h>
#include <mt/infer.h>
#include <mt/model.h>
#include <mt/train.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int geti(json_t *o, const char *k, int dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

static double getf(json_t *o, const char *k, double dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

/* Hugging Face's rotary scaling (transformers 5's rope_parameters, else the hub's rope_scaling;
 * "rope_type", or the older "type") into c->rope_scaling as transformers computes it: default,
 * linear, llama3 and yarn (with multi-latent attention, DeepSeek-V3's softmax mscale too); the
 * rest is refused. */
static mt_status rope_from_hf(json_t *h, mt_model_config *c) {
    json_t *rp = json_object_get(h, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(h, "rope_scaling");
    /* (StableLM's partial_rotary_factor: Megatron's --rotary-percent) */
    const double prf = getf(rp, "partial_rotary_factor", getf(h, "partial_rotary_factor", 1.0));
    const char *type = json_string_value(json_object_get(h, "model_type"));
    MT_REQUIRE(prf == 1.0 || (type && (!strcmp(type, "stablelm") || !strcmp(type, "phi3"))),
               MT_ERR_UNSUPPORTED,
               "partial_rotary_factor %g (transformers' %s rotates whole heads)", prf, type);
    c->rotary_percent = prf;
    if (!json_is_object(rp)) return MT_OK;
    const char *t = json_string_value(json_object_get(rp, "rope_type"));
    if (!t) t = json_string_value(json_object_get(rp, "type"));
    if (!t || !strcmp(t, "default")) return MT_OK;
    mt_rope_scaling *s = &c->rope_scaling;
    /* (transformers' standardize_rope_params: a top-level original_max_position_embeddings
     * first, then the rope parameters', then max_position_embeddings) */
    const double n =
        getf(h, "original_max_position_embeddings",
             getf(rp, "original_max_position_embeddings", (double)c->max_position_embeddings));
    s->factor = getf(rp, "factor", 0.0);
    if (!strcmp(t, "linear")) {
        s->type = MT_ROPE_SCALING_LINEAR;
    } else if (!strcmp(t, "llama3")) {
        s->type = MT_ROPE_SCALING_LLAMA3;
        s->low_freq_factor = getf(rp, "low_freq_factor", 0.0);
        s->high_freq_factor = getf(rp, "high_freq_factor", 0.0);
        s->original_max_position_embeddings = n;
        MT_REQUIRE(s->low_freq_factor > 0.0 && s->high_freq_factor > 0.0, MT_ERR_FORMAT,
                   "rope_type llama3 without low_freq_factor and high_freq_factor");
    } else if (!strcmp(t, "yarn")) {
        s->type = MT_ROPE_SCALING_YARN;
        s->original_max_position_embeddings = n;
        if (s->factor == 0.0 && n > 0.0) s->factor = c->max_position_embeddings / n;
        s->beta_fast = getf(rp, "beta_fast", 0.0); /* (0: 32 and 1, as transformers') */
        s->beta_slow = getf(rp, "beta_slow", 0.0);
        s->no_truncate = json_is_false(json_object_get(rp, "truncate"));
        /* (transformers: cos and sin times attention_factor, else m(factor, mscale) /
         * m(factor, mscale_all_dim) when both are given, else m(factor, 1); DeepSeek-V3's softmax
         * times m(factor, mscale_all_dim)^2 when that is given, as Megatron's MLA. Ours: that
         * mscale_all_dim (none without MLA), and the mscale whose ratio is that factor) */
        const double f = s->factor, ms = getf(rp, "mscale", 0.0);
        const double mad = getf(rp, "mscale_all_dim", 0.0);
        const double af =
            getf(rp, "attention_factor",
                 ms != 0.0 && mad != 0.0 ? mt_rope_yarn_mscale(f, ms) / mt_rope_yarn_mscale(f, mad)
                                         : mt_rope_yarn_mscale(f, 1.0));
        s->mscale_all_dim = c->multi_latent_attention ? mad : 0.0;
        s->mscale = 1.0;
        if (f > 1.0)
            s->mscale = (af * mt_rope_yarn_mscale(f, s->mscale_all_dim) - 1.0) / (0.1 * log(f));
        else
            MT_REQUIRE(fabs(af - 1.0) < 1e-12, MT_ERR_UNSUPPORTED,
                       "rope_type yarn: attention_factor %g with factor %g <= 1", af, f);
    } else if (!strcmp(t, "longrope")) { /* (Phi-3's: per-pair divisors, short and long) */
        s->type = MT_ROPE_SCALING_LONGROPE;
        s->original_max_position_embeddings = n;
        if (s->factor == 0.0 && n > 0.0) s->factor = c->max_position_embeddings / n;
        s->attention_factor = getf(rp, "attention_factor", 0.0);
        const int D = c->kv_channels               ? c->kv_channels
                      : c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads
                                                   : 0;
        const int half = (int)(D * prf) / 2;
        json_t *sf = json_object_get(rp, "short_factor"), *lf = json_object_get(rp, "long_factor");
        MT_REQUIRE(half > 0 && half <= MT_ROPE_MAX_PAIRS && (int)json_array_size(sf) == half &&
                       (int)json_array_size(lf) == half,
                   MT_ERR_FORMAT,
                   "rope_type longrope: short_factor and long_factor of %d and %d values (want %d, "
                   "one per rotary channel pair)",
                   (int)json_array_size(sf), (int)json_array_size(lf), half);
        for (int i = 0; i < half; i++) {
            s->ext_factors[i] = json_number_value(json_array_get(sf, (size_t)i));
            c->rope_long_factors[i] = json_number_value(json_array_get(lf, (size_t)i));
        }
    } else {
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "rope type '%s' (default, linear, llama3, yarn and longrope only)", t);
    }
    MT_REQUIRE(s->factor > 0.0, MT_ERR_FORMAT, "rope type '%s' without a positive factor", t);
    return MT_OK;
}

/* DeepSeek-V3's MLA and MoE (transformers' DeepseekV3ForCausalLM) in Megatron's terms: its
 * latents, the first first_k_dense_replace MLPs dense, then sigmoid routing with the expert bias
 * (e_score_correction_bias), groups and scaling, and an ungated shared expert. What would not run
 * as transformers runs it is refused (mt-convert's import refuses the same). */
static mt_status deepseek_config(json_t *h, mt_model_config *c) {
    json_t *il = json_object_get(h, "rope_interleave"), *ab = json_object_get(h, "attention_bias");
    MT_REQUIRE(!json_is_false(il), MT_ERR_UNSUPPORTED,
               "DeepSeek-V3: rope_interleave false (MLA's rotary channels are interleaved pairs)");
    MT_REQUIRE(!json_is_true(ab), MT_ERR_UNSUPPORTED,
               "DeepSeek-V3: attention_bias true (MLA without biases only)");
    c->num_query_groups = 0, c->kv_channels = 0; /* (MLA's head: its own dims) */
    c->multi_latent_attention = 1;
    c->q_lora_rank = geti(h, "q_lora_rank", 0); /* (null: none) */
    c->kv_lora_rank = geti(h, "kv_lora_rank", 512);
    c->qk_head_dim = geti(h, "qk_nope_head_dim", 128);
    c->qk_pos_emb_head_dim = geti(h, "qk_rope_head_dim", 64);
    c->v_head_dim = geti(h, "v_head_dim", 128);
    const int k = geti(h, "first_k_dense_replace", 3);
    if (k >= c->num_layers) return MT_OK; /* (no MoE layer) */
    MT_REQUIRE(k >= 0 && c->num_layers <= MT_MODEL_MAX_LAYERS, MT_ERR_FORMAT,
               "DeepSeek-V3: first_k_dense_replace %d, %d layers (at most %d)", k, c->num_layers,
               MT_MODEL_MAX_LAYERS);
    for (int l = 0; l < c->num_layers; l++)
        c->moe_dense_layer[l] = l < k;
    c->num_moe_experts = geti(h, "n_routed_experts", 256);
    c->moe_router_topk = geti(h, "num_experts_per_tok", 8);
    c->moe_ffn_hidden_size = geti(h, "moe_intermediate_size", 0);
    const int ns = geti(h, "n_shared_experts", 1);
    MT_REQUIRE(ns >= 1, MT_ERR_UNSUPPORTED, "DeepSeek-V3: n_shared_experts %d (at least 1)", ns);
    c->moe_shared_expert_intermediate_size = ns * c->moe_ffn_hidden_size;
    c->moe_router_score_sigmoid = 1;
    c->moe_router_enable_expert_bias = 1;
    c->moe_router_topk_scaling_factor = (float)getf(h, "routed_scaling_factor", 1.0);
    /* (Megatron renormalises sigmoid scores over the k chosen exactly when k > 1) */
    const int norm = !json_is_false(json_object_get(h, "norm_topk_prob"));
    MT_REQUIRE(norm == (c->moe_router_topk > 1), MT_ERR_UNSUPPORTED,
               "DeepSeek-V3: norm_topk_prob %s with num_experts_per_tok %d (Megatron renormalises "
               "sigmoid scores exactly when it is above 1)",
               norm ? "true" : "false", c->moe_router_topk);
    /* groups: HF ranks a group by its top 2 scores, Megatron by its top k / group_topk */
    const int ng = geti(h, "n_group", 1), tg = geti(h, "topk_group", 1);
    if (ng > 1 && tg < ng) {
        MT_REQUIRE(tg > 0 && c->moe_router_topk / tg == 2, MT_ERR_UNSUPPORTED,
                   "DeepSeek-V3: n_group %d with topk_group %d and num_experts_per_tok %d "
                   "(Hugging Face ranks a group by its top 2 scores, Megatron by its top "
                   "num_experts_per_tok / topk_group: they must be 2)",
                   ng, tg, c->moe_router_topk);
        c->moe_router_num_groups = ng, c->moe_router_group_topk = tg;
    }
    return MT_OK;
}

mt_status mt_train_model_config_from_hf(const char *args_json, mt_model_config *c) {
    MT_REQUIRE(args_json && c, MT_ERR_INVALID_ARG, "NULL args or config");
    json_t *args = json_loads(args_json, JSON_DECODE_ANY, NULL);
    json_t *hf = json_object_get(args, "hf"), *h = json_object_get(hf, "config");
    const char *type = json_string_value(json_object_get(h, "model_type"));
    mt_status st = MT_OK;
    *c = (mt_model_config)MT_MODEL_CONFIG_INIT;
    if (!type || (strcmp(type, "gpt2") && strcmp(type, "llama") && strcmp(type, "mistral") &&
                  strcmp(type, "qwen3") && strcmp(type, "qwen2") && strcmp(type, "mixtral") &&
                  strcmp(type, "qwen2_moe") && strcmp(type, "deepseek_v3") &&
                  strcmp(type, "stablelm") && strcmp(type, "qwen3_moe") && strcmp(type, "phi3"))) {
        st =
            MT_ERROR(MT_ERR_FORMAT,
                     "the checkpoint's args have no GPT-2, Llama, Mistral, Phi-3, StableLM, Qwen2, "
                     "Qwen3, "
                     "Mixtral, Qwen2-MoE, Qwen3-MoE or DeepSeek-V3 config (hf.config, kept by "
                     "mt-pretrain for models of those shapes and by mt-convert)");
        goto done;
    }
    const int q3moe = !strcmp(type, "qwen3_moe"); /* (Qwen2-MoE's, Qwen3's attention, no
                                                      shared expert) */
    const int qmoe = !strcmp(type, "qwen2_moe") || q3moe;
    c->vocab_size = geti(h, "vocab_size", 0);
    /* (mt-convert's import of DeepSeek-V3's multi-token prediction layers: not run, but loaded) */
    c->mtp_num_layers = geti(args, "mtp_num_layers", 0);
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
        c->qk_layernorm = !strcmp(type, "qwen3") || q3moe; /* q_norm, k_norm per head */
        c->add_qkv_bias = !strcmp(type, "qwen2");          /* q_proj, k_proj, v_proj biases */
        if (qmoe && !q3moe)
            c->add_qkv_bias = json_object_get(h, "qkv_bias") == NULL ||
                              json_is_true(json_object_get(h, "qkv_bias"));
        c->num_layers = geti(h, "num_hidden_layers", 0);
        c->hidden_size = geti(h, "hidden_size", 0);
        c->num_attention_heads = geti(h, "num_attention_heads", 0);
        c->num_query_groups = geti(h, "num_key_value_heads", 0);
        c->kv_channels = geti(h, "head_dim", 0);
        c->ffn_hidden_size = geti(h, "intermediate_size", 0);
        c->max_position_embeddings = geti(h, "max_position_embeddings", 0);
        c->norm_epsilon = (float)getf(h, "rms_norm_eps", 1e-6);
        if (!strcmp(type, "stablelm")) { /* LayerNorms, q/k/v biases by use_qkv_bias */
            c->norm_epsilon = (float)getf(h, "layer_norm_eps", 1e-5);
            c->add_qkv_bias = json_is_true(json_object_get(h, "use_qkv_bias"));
            if (json_is_true(json_object_get(h, "qk_layernorm")) ||
                json_is_true(json_object_get(h, "use_parallel_residual"))) {
                st = MT_ERROR(MT_ERR_UNSUPPORTED, "StableLM with qk_layernorm or "
                                                  "use_parallel_residual (not Megatron's)");
                goto done;
            }
        }
        json_t *rp = json_object_get(h, "rope_parameters"); /* transformers 5; 4: rope_theta */
        c->rotary_base = getf(rp ? rp : h, "rope_theta", 10000.0);
        c->normalization = strcmp(type, "stablelm") ? MT_NORM_RMSNORM : MT_NORM_LAYERNORM;
        c->position_embedding_type = MT_POS_ROPE;
        c->swiglu = 1;
        c->add_bias_linear = 0;
        c->untie_embeddings_and_output_weights = !(tie && json_is_true(tie));
        if (!strcmp(type, "mixtral")) { /* Llama's, with experts of intermediate_size */
            c->num_moe_experts = geti(h, "num_local_experts", geti(h, "num_experts", 8));
            c->moe_router_topk = geti(h, "num_experts_per_tok", 2);
            c->moe_ffn_hidden_size = c->ffn_hidden_size;
        }
        if (qmoe) { /* experts of moe_intermediate_size, a gated shared expert */
            /* (transformers 5 writes Qwen3-MoE's as num_local_experts) */
            c->num_moe_experts = geti(h, "num_experts", geti(h, "num_local_experts", 60));
            c->moe_router_topk = geti(h, "num_experts_per_tok", 4);
            c->moe_ffn_hidden_size = geti(h, "moe_intermediate_size", 0);
            c->moe_router_pre_softmax = !json_is_true(json_object_get(h, "norm_topk_prob"));
            if (!q3moe) {
                c->moe_shared_expert_intermediate_size =
                    geti(h, "shared_expert_intermediate_size", 0);
                c->moe_shared_expert_gate = 1;
            }
            /* (its dense layers: transformers' rule, l in mlp_only_layers or (l + 1) %
             * decoder_sparse_step != 0; Megatron's --moe-layer-freq pattern) */
            const int step = geti(h, "decoder_sparse_step", 1);
            json_t *only = json_object_get(h, "mlp_only_layers");
            if (step < 1 || c->num_layers > MT_MODEL_MAX_LAYERS) {
                st = MT_ERROR(MT_ERR_FORMAT,
                              "Qwen2-MoE: decoder_sparse_step %d, %d layers (at most %d)", step,
                              c->num_layers, MT_MODEL_MAX_LAYERS);
                goto done;
            }
            for (int l = 0; l < c->num_layers; l++)
                c->moe_dense_layer[l] = (l + 1) % step != 0;
            for (size_t i = 0; i < json_array_size(only); i++) {
                const json_int_t l = json_integer_value(json_array_get(only, i));
                if (l >= 0 && l < c->num_layers) c->moe_dense_layer[l] = 1;
            }
        }
        if (!strcmp(type, "deepseek_v3") && (st = deepseek_config(h, c)) != MT_OK) goto done;
        /* (Mistral's, Mixtral's and Phi-3's sliding window of W tokens, the token included:
         * window_size W - 1; Qwen's on the layers that layer_types calls "sliding_attention",
         * or else from max_window_layers on, the others full: full_attention_layer) */
        json_t *sw = json_object_get(h, "sliding_window");
        const int W = json_is_integer(sw) ? (int)json_integer_value(sw) : 0;
        if (W > 0 && W < c->max_position_embeddings &&
            !json_is_false(json_object_get(h, "use_sliding_window"))) {
            const int qwen = !strncmp(type, "qwen", 4);
            if (strcmp(type, "mistral") && strcmp(type, "mixtral") && strcmp(type, "phi3") &&
                !qwen) {
                st = MT_ERROR(MT_ERR_UNSUPPORTED, "%s with sliding_window %d", type, W);
                goto done;
            }
            c->window_size = W - 1;
            json_t *lt = json_object_get(h, "layer_types");
            const int mw = geti(h, "max_window_layers", c->num_layers);
            for (int l = 0; qwen && l < c->num_layers && l < MT_MODEL_MAX_LAYERS; l++) {
                const char *k = json_string_value(json_array_get(lt, (size_t)l));
                c->full_attention_layer[l] =
                    lt ? !k || strcmp(k, "sliding_attention") != 0 : l < mw;
            }
        }
        if ((st = rope_from_hf(h, c)) != MT_OK) goto done;
    }
    c->seq_length = c->max_position_embeddings;
done:
    json_decref(args);
    return st;
}

/* The model, its tokens buffers and a logits row, for mt-infer's callback. With a KV cache (the
 * default; MT_KV_CACHE=0: without, for comparisons) m runs prompt chunks of C tokens (64;
 * MT_KV_CHUNK sets it) and `one`, a view of its weights, single tokens; both write the keys and
 * values of their positions into kv and attend to the positions before. Without, m runs the whole
 * window every token. */
typedef struct gen {
    mt_model *m, *one;
    mt_model_kv_cache *kv;
    mt_device dev;
    int T; /* the window: the longest sequence */
    int C; /* tokens of m's forward: a prompt chunk (KV cache) or the window */
    int64_t V;
    mt_tensor tok, tok1, row; /* (1,C), (1,1) i32; (1,Vp) f32 on the device */
    int32_t *htok;
    int32_t *cached; /* the tokens whose keys and values kv holds: cached[0..ncached) */
    int ncached;
    mt_prof *prof;    /* MT_PROFILE=1 or 2: the forwards' operations, per token at the end */
    int timing;       /* MT_PROFILE set: the wall times below */
    double t_enqueue; /* wall seconds in mt_model_forward (enqueueing) */
    double t_logits;  /* in next_logits: the logits to the host (waiting for the GPU) */
    double t_call;    /* in next_logits */
    long calls;       /* next_logits calls */
    /* mt-serve's batches (several prompts decoded together): a cache of nb rows (its rows as
     * one-sequence caches for the prompts' prefill through m and one), a view of nb rows for the
     * one-token steps, each row's cached tokens, and the step's tokens and logits */
    int nb;
    mt_model *bone;
    mt_model_kv_cache *bkv, **brow;
    int32_t **bcached;
    int *bncached;
    mt_arena *bar;
    mt_tensor btok, blogits; /* (nb,1) i32; (nb,Vp) f32 */
    /* PUT /api's prevent_newline_after_colon: after a ":" token (colon) the "\n" token (nl) gets
     * logit -1e10 (Megatron's) in the rows asked for: ban1 (one sequence), bban[b] (batch rows) */
    int32_t nl, colon;
    int ban1;
    int *bban;
} gen;

/* prevent_newline_after_colon on a row's logits whose sequence is tokens[0..n) */
static void ban_newline(const gen *g, const int32_t *tokens, int n, float *logits) {
    if (g->nl >= 0 && g->colon >= 0 && n > 0 && tokens[n - 1] == g->colon) logits[g->nl] = -1e10f;
}

/* A forward of m over tok (its enqueueing timed with g->timing). */
static mt_status run_forward(gen *g, mt_model *m, const mt_tensor *tok) {
    const double t0 = g->timing ? mt_time_now() : 0.0;
    MT_TRY(mt_model_forward(m, tok, NULL, NULL));
    if (g->timing) g->t_enqueue += mt_time_now() - t0;
    return MT_OK;
}

/* The logits after tokens[0..n) without a KV cache: the forward over the n tokens (the rest of
 * the window zeros, which a causal model's position n - 1 does not see). */
static mt_status window_logits(gen *g, const int32_t *tokens, int n, mt_tensor *last) {
    memset(g->htok, 0, (size_t)g->T * 4);
    memcpy(g->htok, tokens, (size_t)n * 4);
    MT_TRY(mt_memcpy(g->tok.data, g->dev, g->htok, MT_DEVICE_CPU, (size_t)g->T * 4, NULL));
    MT_TRY(run_forward(g, g->m, &g->tok));
    mt_tensor lg = mt_model_logits(g->m);
    return mt_tensor_slice(&lg, 0, n - 1, 1, last);
}

/* The logits after tokens[0..n) over the one-sequence KV cache kv, which holds the keys and values
 * of cached[0..*ncached): the positions it holds already (the longest common prefix with the
 * tokens, but not position n - 1, whose logits are wanted) are kept, the rest run as prompt
 * chunks of C while that many remain, then one at a time. */
static mt_status cached_logits(gen *g, mt_model_kv_cache *kv, int32_t *cached, int *ncached,
                               const int32_t *tokens, int n, mt_tensor *last) {
    int p = 0;
    while (p < *ncached && p < n - 1 && cached[p] == tokens[p])
        p++;
    *ncached = p;
    mt_model *m = NULL;
    while (p < n) {
        const int k = n - p >= g->C ? g->C : 1;
        m = k == g->C ? g->m : g->one;
        mt_tensor *tok = k == g->C ? &g->tok : &g->tok1;
        MT_TRY(mt_memcpy(tok->data, g->dev, tokens + p, MT_DEVICE_CPU, (size_t)k * 4, NULL));
        MT_TRY(mt_model_set_kv_cache(m, kv, p));
        MT_TRY(run_forward(g, m, tok));
        memcpy(cached + p, tokens + p, (size_t)k * 4);
        *ncached = p += k;
    }
    mt_tensor lg = mt_model_logits(m);
    return mt_tensor_slice(&lg, 0, lg.shape[0] - 1, 1, last);
}

/* A row of logits (padded vocabulary, the model dtype, on the device) as the first V floats of dst
 * on the host. */
static mt_status logits_to_host(gen *g, const mt_tensor *row, float *dst) {
    MT_TRY(mt_cast(&g->row, row, NULL));
    return mt_memcpy(dst, MT_DEVICE_CPU, g->row.data, g->dev, (size_t)g->V * 4, NULL);
}

static mt_status next_logits(void *ctx, const int32_t *tokens, int n, float *logits) {
    gen *g = ctx;
    mt_tensor last;
    const double t0 = g->timing ? mt_time_now() : 0.0;
    MT_TRY(g->kv ? cached_logits(g, g->kv, g->cached, &g->ncached, tokens, n, &last)
                 : window_logits(g, tokens, n, &last));
    const double t1 = g->timing ? mt_time_now() : 0.0;
    MT_TRY(logits_to_host(g, &last, logits));
    if (g->ban1) ban_newline(g, tokens, n, logits);
    if (g->timing) g->t_logits += mt_time_now() - t1, g->t_call += mt_time_now() - t0;
    g->calls++;
    return mt_prof_collect(g->prof);
}

/* Drops the batch state (gen's nb rows). */
static void batch_free(gen *g) {
    for (int b = 0; b < g->nb; b++) {
        if (g->brow) mt_model_kv_cache_destroy(g->brow[b]);
        if (g->bcached) free(g->bcached[b]);
    }
    free(g->brow), free(g->bcached), free(g->bncached);
    mt_model_kv_cache_destroy(g->bkv);
    mt_model_destroy(g->bone);
    mt_arena_destroy(g->bar);
    g->brow = NULL, g->bcached = NULL, g->bncached = NULL, g->bkv = NULL, g->bone = NULL;
    g->bar = NULL, g->nb = 0;
}

/* The batch state for nb rows (kept while the batch size stays). */
static mt_status batch_make(gen *g, int nb) {
    if (g->nb == nb) return MT_OK;
    batch_free(g);
    g->nb = nb;
    g->brow = calloc((size_t)nb, sizeof *g->brow);
    g->bcached = calloc((size_t)nb, sizeof *g->bcached);
    g->bncached = calloc((size_t)nb, sizeof *g->bncached);
    MT_REQUIRE(g->brow && g->bcached && g->bncached, MT_ERR_OOM, "a batch of %d", nb);
    MT_TRY(mt_model_create_view(g->m, nb, 1, &g->bone));
    mt_model_set_cuda_graphs(g->bone, mt_env_int("MT_CUDA_GRAPHS", 1) != 0);
    MT_TRY(mt_model_kv_cache_create(g->bone, g->T, &g->bkv));
    for (int b = 0; b < nb; b++) {
        MT_TRY(mt_model_kv_cache_row(g->bkv, b, &g->brow[b]));
        g->bcached[b] = malloc((size_t)g->T * 4);
        MT_REQUIRE(g->bcached[b], MT_ERR_OOM, "tokens");
    }
    const int64_t Vp = mt_model_get_config(g->m)->padded_vocab_size;
    MT_TRY(
        mt_arena_create(g->dev, (size_t)nb * (4 + (size_t)Vp * 4) + 4 * MT_ARENA_ALIGN, &g->bar));
    MT_TRY(mt_tensor_alloc(g->bar, MT_I32, 2, (int64_t[]){ nb, 1 }, &g->btok));
    return mt_tensor_alloc(g->bar, MT_F32, 2, (int64_t[]){ nb, Vp }, &g->blogits);
}

/* mt-infer's batch callback: one step of the nb-row view at each row's position, every row
 * together. A live row whose cache lacks more than its last token (a prompt that joined) first
 * gets the rest of its prompt into its row of the cache alone (cached_logits up to the token
 * before its last), so joining costs its prefill and not a step of every row alone. The other
 * rows run their last cached token again (the same keys and values at the same position; a row
 * never used token 0 at position 0, which its cache then holds). */
static mt_status batch_logits(void *ctx, int32_t *const *tokens, const int *n, const int *live,
                              int nb, float *logits) {
    gen *g = ctx;
    mt_status st = MT_OK;
    for (int b = 0; b < nb && st == MT_OK; b++) {
        const int c = g->bncached[b];
        if (!live[b] || (c == n[b] - 1 && !memcmp(g->bcached[b], tokens[b], (size_t)c * 4)))
            continue;
        mt_tensor last;
        if (n[b] > 1)
            st = cached_logits(g, g->brow[b], g->bcached[b], &g->bncached[b], tokens[b], n[b] - 1,
                               &last);
        else
            g->bncached[b] = 0;
    }
    int *pos = malloc((size_t)nb * sizeof *pos);
    int32_t *tok = malloc((size_t)nb * 4);
    if (st == MT_OK && (!pos || !tok)) st = MT_ERROR(MT_ERR_OOM, "a batch of %d", nb);
    for (int b = 0; b < nb && st == MT_OK; b++) {
        pos[b] = live[b] ? n[b] - 1 : g->bncached[b] ? g->bncached[b] - 1 : 0;
        tok[b] = live[b] ? tokens[b][pos[b]] : g->bncached[b] ? g->bcached[b][pos[b]] : 0;
    }
    if (st == MT_OK) st = mt_memcpy(g->btok.data, g->dev, tok, MT_DEVICE_CPU, (size_t)nb * 4, NULL);
    if (st == MT_OK) st = mt_model_set_kv_cache_rows(g->bone, g->bkv, pos);
    if (st == MT_OK) st = run_forward(g, g->bone, &g->btok);
    mt_tensor lg = mt_model_logits(g->bone);
    if (st == MT_OK) st = mt_cast(&g->blogits, &lg, NULL);
    const int64_t Vp = g->blogits.shape[1];
    for (int b = 0; b < nb && st == MT_OK; b++) {
        st = mt_memcpy(logits + (size_t)b * g->V, MT_DEVICE_CPU,
                       (const float *)g->blogits.data + (size_t)b * Vp, g->dev, (size_t)g->V * 4,
                       NULL);
        if (live[b] || !g->bncached[b]) g->bcached[b][pos[b]] = tok[b], g->bncached[b] = pos[b] + 1;
        if (st == MT_OK && live[b] && g->bban && g->bban[b])
            ban_newline(g, tokens[b], n[b], logits + (size_t)b * g->V);
    }
    free(pos), free(tok);
    return st;
}

/* Every parameter of m from checkpoint ck (unsharded, as mt-pretrain and mt-convert write), and
 * every buffer (the routers' expert biases, f32). */
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
    for (int i = 0; i < mt_model_num_buffers(m); i++) {
        const char *name;
        mt_tensor b;
        MT_TRY(mt_model_buffer_at(m, i, &name, &b));
        if (mt_ckpt_info(ck, name, NULL, NULL, NULL) != MT_OK) {
            mt_error_clear();
            return MT_ERROR(MT_ERR_FORMAT, "the checkpoint has no '%s' (the model's buffer)", name);
        }
        mt_tensor h = mt_tensor_make(NULL, MT_F32, b.ndim, b.shape, MT_DEVICE_CPU);
        h.data = malloc(mt_tensor_nbytes(&h) + 1);
        MT_REQUIRE(h.data, MT_ERR_OOM, "%s", name);
        mt_status st = mt_ckpt_read(ck, name, &h, NULL);
        if (st == MT_OK) st = mt_tensor_copy(&b, &h, NULL);
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

/* A loaded checkpoint: its model config, tokenizer (NULL: ids in and out) and, once
 * generator_model ran, the model on its device with a window of T tokens. */
typedef struct generator {
    const mt_generate_args *a;
    mt_model_config c;
    mt_data_tokenizer *tk;
    mt_ckpt *ck;
    mt_arena *ar;
    gen g;
    int32_t eod;
    /* the tokenizer's single tokens for "\n", "\n\n" and ":" (-1: none; GPT-2's 198, 628, 25),
     * for PUT /api's stop_on_eol, stop_on_double_eol and prevent_newline_after_colon */
    int32_t nl, nl2, colon;
} generator;

static void generator_close(generator *G) {
    if (G->g.timing && G->g.calls) {
        const double k = 1e3 / (double)G->g.calls;
        fprintf(stderr,
                "mt-generate: per token, ms: %.3f for the logits (%.3f in mt_model_forward, "
                "enqueueing; %.3f bringing them to the host)%s\n",
                k * G->g.t_call, k * G->g.t_enqueue, k * G->g.t_logits,
                G->g.prof ? "; by operation:" : "");
        mt_prof_print(G->g.prof, stderr, (double)G->g.calls);
    }
    mt_prof_destroy(G->g.prof);
    batch_free(&G->g);
    free(G->g.htok);
    free(G->g.cached);
    mt_arena_destroy(G->ar);
    mt_model_kv_cache_destroy(G->g.kv);
    mt_model_destroy(G->g.one);
    mt_model_destroy(G->g.m);
    mt_data_tokenizer_destroy(G->tk);
    mt_ckpt_close(G->ck);
    memset(G, 0, sizeof *G);
}

/* The one token that tk encodes `text` to, or -1 (no tokenizer, or several tokens). */
static int32_t single_token(mt_data_tokenizer *tk, const char *text) {
    if (!tk) return -1;
    int32_t *enc = NULL, id = -1;
    size_t n = 0, cap = 0;
    if (mt_data_tokenizer_encode(tk, text, strlen(text), 0, &enc, &n, &cap) == MT_OK && n == 1)
        id = enc[0];
    mt_error_clear();
    free(enc);
    return id;
}

/* The checkpoint's config and the tokenizer (the model comes with generator_model). */
static mt_status generator_open(const mt_generate_args *a, generator *G) {
    memset(G, 0, sizeof *G);
    G->a = a;
    MT_REQUIRE(a && a->load, MT_ERR_INVALID_ARG, "--load (a checkpoint directory) is required");
    MT_TRY(mt_ckpt_open(a->load, MT_CKPT_ITER_LATEST, 0, &G->ck));
    MT_TRY(mt_train_model_config_from_hf(mt_ckpt_args(G->ck), &G->c));
    mt_dtype dt; /* the checkpoint's: f32, bf16 or f16 */
    MT_TRY(mt_ckpt_info(G->ck, "embedding.word_embeddings.weight", &dt, NULL, NULL));
    G->c.dtype = dt;
    MT_TRY(tokenizer_of(a, &G->tk));
    G->eod = (int32_t)(G->tk ? mt_data_tokenizer_eod(G->tk) : a->eod);
    G->nl = single_token(G->tk, "\n"), G->nl2 = single_token(G->tk, "\n\n");
    G->colon = single_token(G->tk, ":");
    G->g.nl = G->nl, G->g.colon = G->colon;
    return MT_OK;
}

/* The model with a window of `window` tokens (at most the model's positions), its weights from
 * the checkpoint, on the GPU unless --device cpu or none; with a KV cache of the window (gen). */
static mt_status generator_model(generator *G, int window) {
    const mt_generate_args *a = G->a;
    gen *g = &G->g;
    mt_model_config c = G->c;
    g->T = window < c.max_position_embeddings ? window : c.max_position_embeddings;
    if (g->T < 1) g->T = 1;
    int cache = mt_env_int("MT_KV_CACHE", 1) != 0;
    if (cache && c.window_size && g->T > c.window_size + 1) { /* (a cache holds the window) */
        fprintf(stderr, "note: a sliding window of %d tokens, sequences of up to %d: no KV cache\n",
                c.window_size + 1, g->T);
        cache = 0;
    }
    const int chunk = mt_env_int("MT_KV_CHUNK", 64); /* (prompt chunks; tests set it) */
    g->C = cache ? (g->T < chunk ? g->T : chunk > 0 ? chunk : 1) : g->T;
    c.seq_length = g->C;
    int ngpu = 0;
    MT_TRY(mt_device_count(&ngpu));
    g->dev = !strcmp(a->device, "cpu") || ngpu == 0 ? MT_DEVICE_CPU : mt_device_cuda(0);
    MT_REQUIRE(strcmp(a->device, "cuda") || mt_device_is_cuda(g->dev), MT_ERR_UNSUPPORTED,
               "--device cuda but no usable GPU");
    MT_TRY(mt_device_set(g->dev));
    MT_TRY(mt_model_create_inference(&c, 1, g->dev, &g->m));
    MT_TRY(load_params(g->m, G->ck));
    if (cache) { /* (decoding: one CUDA graph; MT_CUDA_GRAPHS=0 turns it off) */
        MT_TRY(mt_model_create_view(g->m, 1, 1, &g->one));
        mt_model_set_cuda_graphs(g->one, mt_env_int("MT_CUDA_GRAPHS", 1) != 0);
        MT_TRY(mt_model_kv_cache_create(g->m, g->T, &g->kv));
        g->cached = malloc((size_t)g->T * 4);
        MT_REQUIRE(g->cached, MT_ERR_OOM, "tokens");
    }
    /* MT_PROFILE: 1 GPU, 2 host time per operation (no CUDA graphs then); 3 the wall times only */
    const int prof = mt_env_int("MT_PROFILE", 0);
    g->timing = prof != 0;
    if (prof == 1 || prof == 2) {
        MT_TRY(mt_prof_create(&g->prof, prof == 1 && mt_device_is_cuda(g->dev), 8192));
        mt_model_set_profiler(g->m, g->prof);
        if (g->one) mt_model_set_profiler(g->one, g->prof);
    }
    g->V = c.vocab_size;
    const int64_t Vp = mt_model_get_config(g->m)->padded_vocab_size;
    MT_TRY(mt_arena_create(g->dev, (size_t)(g->C * 4 + 4 + Vp * 4) + 6 * MT_ARENA_ALIGN, &G->ar));
    MT_TRY(mt_tensor_alloc(G->ar, MT_I32, 2, (int64_t[]){ 1, g->C }, &g->tok));
    MT_TRY(mt_tensor_alloc(G->ar, MT_I32, 2, (int64_t[]){ 1, 1 }, &g->tok1));
    MT_TRY(mt_tensor_alloc(G->ar, MT_F32, 2, (int64_t[]){ 1, Vp }, &g->row));
    g->htok = malloc((size_t)g->T * 4);
    MT_REQUIRE(g->htok, MT_ERR_OOM, "tokens");
    return MT_OK;
}

/* A prompt's ids into ids[0..*n) (room for the model's positions): text through the tokenizer,
 * or "1,2,3"; each inside the vocabulary. */
static mt_status prompt_of(generator *G, const char *text, const char *id_list, int32_t *ids,
                           int *n) {
    const int maxT = G->c.max_position_embeddings;
    if (id_list) {
        MT_TRY(parse_ids(id_list, ids, maxT, n));
    } else {
        MT_REQUIRE(G->tk, MT_ERR_INVALID_ARG,
                   "a text prompt needs a tokenizer (not NullTokenizer)");
        int32_t *enc = NULL;
        size_t ne = 0, ecap = 0;
        MT_TRY(mt_data_tokenizer_encode(G->tk, text, strlen(text), 0, &enc, &ne, &ecap));
        if (ne <= (size_t)maxT) memcpy(ids, enc, ne * sizeof *ids);
        free(enc);
        MT_REQUIRE(ne <= (size_t)maxT, MT_ERR_INVALID_ARG,
                   "the prompt has %zu tokens; the model takes %d", ne, maxT);
        *n = (int)ne;
    }
    MT_REQUIRE(*n >= 1, MT_ERR_INVALID_ARG, "an empty prompt");
    for (int i = 0; i < *n; i++)
        MT_REQUIRE(ids[i] >= 0 && ids[i] < G->c.vocab_size, MT_ERR_INVALID_ARG,
                   "prompt token %d is outside the vocabulary of %d", ids[i], G->c.vocab_size);
    return MT_OK;
}

static mt_status generator_run(generator *G, int32_t *ids, int n, int max_new,
                               const mt_infer_sampling *s, int *total) {
    /* (mt_cast converts the whole padded row; the callback hands mt-infer the first V) */
    mt_infer_model im = { &G->g, next_logits, G->g.V, G->g.T, G->eod };
    return mt_infer_generate(&im, ids, n, max_new, s, total);
}

mt_status mt_generate_run(const mt_generate_args *a) {
    MT_REQUIRE(a, MT_ERR_INVALID_ARG, "NULL arguments");
    MT_REQUIRE(!a->prompt != !a->prompt_ids, MT_ERR_INVALID_ARG,
               "give one of --prompt and --prompt-ids");
    generator G;
    int32_t *ids = NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    int n = 0, total = 0;
    mt_status st = generator_open(a, &G);
    if (st == MT_OK) {
        ids = malloc((size_t)(G.c.max_position_embeddings + 1) * sizeof *ids);
        st = ids ? prompt_of(&G, a->prompt, a->prompt_ids, ids, &n)
                 : MT_ERROR(MT_ERR_OOM, "token buffer");
    }
    /* the window: the prompt and what is generated, up to the model's positions */
    if (st == MT_OK) st = generator_model(&G, n + a->tokens_to_generate);
    mt_infer_sampling s = { a->greedy ? 0.0f : a->temperature, a->top_k, a->top_p, a->seed };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (st == MT_OK) st = generator_run(&G, ids, n, a->tokens_to_generate, &s, &total);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st == MT_OK) { /* (stderr: stdout is the text) */
        const double sec =
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        fprintf(stderr,
                "mt-generate: %d new tokens after a prompt of %d in %.3f s: %.1f tokens/s (%s)\n",
                total - n, n, sec, sec > 0 ? (total - n) / sec : 0.0,
                G.g.kv ? "KV cache" : "no KV cache: the whole window every token");
    }
    if (st == MT_OK && (a->print_ids || !G.tk)) {
        for (int i = 0; i < total; i++)
            printf("%s%d", i ? "," : "", ids[i]);
        printf("\n");
    }
    if (st == MT_OK && G.tk) /* the prompt and its continuation */
        st = mt_data_tokenizer_decode(G.tk, ids, (size_t)total, &text, &len, &cap);
    if (st == MT_OK && G.tk) printf("%.*s\n", (int)len, text);
    fflush(stdout);
    free(text);
    free(ids);
    generator_close(&G);
    return st;
}

/* ---- mt-serve: Megatron's text generation server's REST call over HTTP/1.1 ---- */

static void respond(int fd, int code, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    const char *why = code == 200   ? "OK"
                      : code == 400 ? "Bad Request"
                      : code == 404 ? "Not Found"
                                    : "Method Not Allowed";
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: "
                      "%zu\r\nConnection: close\r\n\r\n",
                      code, why, s ? strlen(s) : 0);
    if (send(fd, head, (size_t)hn, MSG_NOSIGNAL) == hn && s) send(fd, s, strlen(s), MSG_NOSIGNAL);
    free(s);
    json_decref(j);
}

#define SERVE_STOPS 4 /* /completions: the most stop texts (OpenAI's) */

/* A request of mt-serve: its prompts' tokens (room for max_new more each), the sampling, and, as
 * continuous batching goes, how many prompts have joined the batch and how many are not done. */
typedef struct serve_req {
    int fd, id;
    int np, joined, left;
    int32_t **ids;
    int *n, *total;
    int max_new;
    mt_infer_sampling s;
    int logprobs;    /* "logprobs": true: each token's log-probability in the answer */
    int eol_stop;    /* PUT /api: 1 "stop_on_eol", 2 "stop_on_double_eol" (eol_hit) */
    int nl_colon;    /* PUT /api "prevent_newline_after_colon" */
    int no_log;      /* PUT /api "no_log": no line on stderr for it */
    int completions; /* POST /completions (OpenAI's format) rather than PUT /api */
    int echo, top_n; /* /completions: the prompt in the answer; its logprobs' alternatives */
    char *stop[SERVE_STOPS]; /* /completions: texts that end a continuation (NULL: none) */
    size_t *cut;             /* per prompt: where its continuation's text ends (SIZE_MAX: all) */
    int stream;    /* /completions "stream": server-sent events as the text grows (stream_*) */
    size_t *sent;  /* stream: per prompt, the bytes of its choice's text sent so far */
    int *finished; /* stream: per prompt, its last event sent */
    long sid;      /* stream: its events' id ("cmpl-s<sid>", one for all of them) */
    int nc; /* /completions "n": choices per prompt (rows i nc .. i nc + nc - 1 for prompt i; row
               k's sampling seed the request's + k % nc); 1 elsewhere */
    int beside; /* the most rows of other requests decoded beside its rows in one step */
    double t0;  /* when it was read */
    struct serve_req *next; /* the queue of requests with prompts still to join */
} serve_req;

static void req_free(serve_req *r) {
    if (!r) return;
    for (int i = 0; r->ids && i < r->np; i++)
        free(r->ids[i]);
    free(r->ids), free(r->n), free(r->total), free(r->cut), free(r->sent), free(r->finished);
    for (int i = 0; i < SERVE_STOPS; i++)
        free(r->stop[i]);
    free(r);
}

/* The tokens a prompt's buffer holds: the model's positions, max_new more, and add_BOS's token. */
static size_t prompt_room(const generator *G, const serve_req *r) {
    return (size_t)G->c.max_position_embeddings + (r->max_new > 0 ? (size_t)r->max_new : 0) + 1;
}

/* r's np prompts from the JSON list `prompts` (or the one prompt `one`): each a text (the
 * tokenizer) or, with ids_ok, a list of token ids; each with room for max_new more tokens. */
static mt_status req_prompts(generator *G, serve_req *r, json_t *prompts, json_t *one, int ids_ok,
                             int add_bos) {
    const int nc = r->nc; /* ("n": prompt q's choices are rows q nc .. q nc + nc - 1) */
    r->np = (one ? 1 : (int)json_array_size(prompts)) * nc;
    const size_t room = prompt_room(G, r);
    r->ids = calloc((size_t)r->np + 1, sizeof *r->ids);
    r->n = calloc((size_t)r->np + 1, sizeof *r->n);
    r->total = calloc((size_t)r->np + 1, sizeof *r->total);
    r->cut = malloc(((size_t)r->np + 1) * sizeof *r->cut);
    MT_REQUIRE(r->ids && r->n && r->total && r->cut, MT_ERR_OOM, "token buffers");
    for (int i = 0; i < r->np; i++)
        r->cut[i] = SIZE_MAX;
    const int maxT = G->c.max_position_embeddings;
    for (int i = 0; i < r->np; i++) {
        r->ids[i] = malloc(room * sizeof **r->ids);
        MT_REQUIRE(r->ids[i], MT_ERR_OOM, "token buffer");
        if (i % nc) { /* (another choice of the prompt above) */
            memcpy(r->ids[i], r->ids[i - 1], (size_t)r->n[i - 1] * sizeof **r->ids);
            r->n[i] = r->total[i] = r->n[i - 1];
            continue;
        }
        json_t *p = one ? one : json_array_get(prompts, (size_t)(i / nc));
        if (json_is_string(p) && add_bos) { /* (Megatron's: the end-of-document token first) */
            MT_REQUIRE(G->eod >= 0, MT_ERR_INVALID_ARG, "add_BOS: the tokenizer has no EOD token");
            r->ids[i][0] = G->eod, r->n[i] = 1;
            if (json_string_length(p) > 0) {
                MT_TRY(prompt_of(G, json_string_value(p), NULL, r->ids[i] + 1, &r->n[i]));
                MT_REQUIRE(++r->n[i] <= maxT, MT_ERR_INVALID_ARG,
                           "the prompt has %d tokens with BOS; the model takes %d", r->n[i], maxT);
            }
        } else if (json_is_string(p)) {
            MT_TRY(prompt_of(G, json_string_value(p), NULL, r->ids[i], &r->n[i]));
        } else {
            MT_REQUIRE(ids_ok && json_is_array(p), MT_ERR_INVALID_ARG,
                       ids_ok ? "prompt %d is neither a string nor a list of token ids"
                              : "prompts[%d] is not a string",
                       i / nc);
            const int n = (int)json_array_size(p);
            MT_REQUIRE(n >= 1 && n <= maxT, MT_ERR_INVALID_ARG,
                       "the prompt has %d tokens; the model takes 1 to %d", n, maxT);
            for (int k = 0; k < n; k++) {
                json_t *t = json_array_get(p, (size_t)k);
                const json_int_t id = json_integer_value(t);
                MT_REQUIRE(json_is_integer(t) && id >= 0 && id < G->c.vocab_size,
                           MT_ERR_INVALID_ARG, "prompt %d: token %d is not an id below %d", i / nc,
                           k, G->c.vocab_size);
                r->ids[i][k] = (int32_t)id;
            }
            r->n[i] = n;
        }
        r->total[i] = r->n[i];
    }
    return MT_OK;
}

/* The last error's message for a 400: without its file:line and code (valid until the error is
 * cleared). */
static const char *error_text(void) {
    const char *e = mt_last_error(), *q = strstr(e, ": MT_ERR_");
    if (q && (q = strstr(q + 2, ": "))) e = q + 2;
    return e;
}

/* A failure's message for a 400 into msg, once; the error cleared. */
static void req_failed(char *msg, size_t msz) {
    if (!msg[0]) snprintf(msg, msz, "%s", error_text());
    mt_error_clear();
}

/* A request's sampling fields over its defaults in *s (seed_key: the seed's name). */
static void req_sampling(json_t *req, const char *seed_key, mt_infer_sampling *s) {
    json_t *v;
    if ((v = json_object_get(req, "temperature"))) s->temperature = (float)json_number_value(v);
    if ((v = json_object_get(req, "top_k"))) s->top_k = (int)json_integer_value(v);
    if ((v = json_object_get(req, "top_p"))) s->top_p = (float)json_number_value(v);
    if ((v = json_object_get(req, seed_key))) s->seed = (uint64_t)json_integer_value(v);
}

/* A request's first problem into msg (the parsers' msg, msz), later ones not. */
#define BAD_ONCE(...) (msg[0] ? 0 : snprintf(msg, msz, __VA_ARGS__))

/* PUT /api's field k when present: a JSON boolean into *out (else msg: "k must be a boolean
 * value", Megatron's). */
static void api_bool(json_t *req, const char *k, int *out, char *msg, size_t msz) {
    json_t *v = json_object_get(req, k);
    if (!v || msg[0]) return;
    if (!json_is_boolean(v))
        snprintf(msg, msz, "%s must be a boolean value", k);
    else
        *out = json_is_true(v);
}

/* PUT /api: Megatron's text generation server's request (its fields, checks and messages, with
 * the run's flags as the defaults): {"prompts": [text, ...] (1 to 128), "tokens_to_generate": N,
 * "logprobs": B, "temperature": T (0: greedy, as mt-generate's), "top_k": K, "top_p": P,
 * "random_seed": S, "add_BOS": B (the end-of-document token first), "stop_on_eol": B,
 * "stop_on_double_eol": B, "prevent_newline_after_colon": B, "no_log": B}; "top_p_decay",
 * "top_p_bound" and "beam_width" are checked and refused (not supported yet), "stop_token" and
 * "length_penalty" (beam search's) checked. Into a request whose prompts are tokenized; 0, or
 * 400 with msg (why). */
static int req_parse(generator *G, const char *body, serve_req *r, char *msg, size_t msz) {
    const mt_generate_args *a = G->a;
    json_error_t je;
    json_t *req = json_loads(body, 0, &je), *prompts = json_object_get(req, "prompts"), *v;
    msg[0] = 0;
    r->max_new = a->tokens_to_generate;
    r->s = (mt_infer_sampling){ a->greedy ? 0.0f : a->temperature, a->top_k, a->top_p, a->seed };
    int add_bos = 0, eol = 0, eol2 = 0;
    double top_k = 0, top_p = 0;
    if (!req) BAD_ONCE("the body is not JSON: %s", je.text);
    if (!prompts) BAD_ONCE("prompts argument required");
    if (json_object_get(req, "max_len"))
        BAD_ONCE("max_len is no longer used.  Replace with tokens_to_generate");
    if (json_object_get(req, "sentences"))
        BAD_ONCE("sentences is no longer used.  Replace with prompts");
    if (!json_is_array(prompts)) BAD_ONCE("prompts is not a list of strings");
    if (json_is_array(prompts) && json_array_size(prompts) == 0) BAD_ONCE("prompts is empty");
    if (json_is_array(prompts) && json_array_size(prompts) > 128)
        BAD_ONCE("Maximum number of prompts is 128");
    if ((v = json_object_get(req, "tokens_to_generate"))) {
        if (!json_is_integer(v))
            BAD_ONCE("tokens_to_generate must be an integer greater than 0");
        else if (json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX / 2)
            BAD_ONCE("tokens_to_generate must be an integer greater than or equal to 0");
        else
            r->max_new = (int)json_integer_value(v);
    }
    api_bool(req, "logprobs", &r->logprobs, msg, msz);
    if (r->max_new == 0 && !r->logprobs)
        BAD_ONCE("tokens_to_generate=0 implies logprobs should be True");
    if ((v = json_object_get(req, "temperature"))) {
        if (!json_is_number(v))
            BAD_ONCE("temperature must be a positive number less than or equal to 1000.0");
        else if (!(json_number_value(v) >= 0.0 && json_number_value(v) <= 100.0))
            BAD_ONCE("temperature must be a positive number less than or equal to 100.0 (or 0: "
                     "greedy)");
        else
            r->s.temperature = (float)json_number_value(v);
    }
    if ((v = json_object_get(req, "top_k"))) {
        if (!json_is_integer(v))
            BAD_ONCE(
                "top_k must be an integer equal to or greater than 0 and less than or equal to "
                "1000");
        else if (json_integer_value(v) < 0 || json_integer_value(v) > 1000)
            BAD_ONCE("top_k must be equal to or greater than 0 and less than or equal to 1000");
        else
            r->s.top_k = (int)(top_k = (double)json_integer_value(v));
    }
    if ((v = json_object_get(req, "top_p"))) {
        if (!json_is_number(v))
            BAD_ONCE("top_p must be a positive float less than or equal to 1.0");
        else if ((top_p = json_number_value(v)) > 0.0 && top_k > 0.0)
            BAD_ONCE("cannot set both top-k and top-p samplings.");
        else if (!(top_p >= 0.0 && top_p <= 1.0))
            BAD_ONCE("top_p must be less than or equal to 1.0");
        else
            r->s.top_p = (float)top_p;
    }
    static const char *const decays[2] = { "top_p_decay", "top_p_bound" };
    for (int k = 0; k < 2; k++)
        if ((v = json_object_get(req, decays[k]))) {
            if (!json_is_number(v))
                BAD_ONCE("%s must be a positive float less than or equal to %s", decays[k],
                         k ? "top_p" : "1.0");
            else if (top_p == 0.0)
                BAD_ONCE("%s cannot be set without top_p", decays[k]);
            else if (json_number_value(v) != 0.0)
                BAD_ONCE("%s: a decaying top_p is not supported yet", decays[k]);
        }
    api_bool(req, "add_BOS", &add_bos, msg, msz);
    for (size_t k = 0; !msg[0] && json_is_array(prompts) && k < json_array_size(prompts); k++) {
        json_t *p = json_array_get(prompts, k);
        if (!json_is_string(p))
            BAD_ONCE("prompts is not a list of strings");
        else if (json_string_length(p) == 0 && !add_bos)
            BAD_ONCE("Empty prompts require add_BOS=true");
    }
    api_bool(req, "stop_on_double_eol", &eol2, msg, msz);
    api_bool(req, "stop_on_eol", &eol, msg, msz);
    api_bool(req, "prevent_newline_after_colon", &r->nl_colon, msg, msz);
    r->eol_stop = eol2 ? 2 : eol ? 1 : 0; /* (Megatron's: the double one first) */
    if ((v = json_object_get(req, "random_seed"))) {
        if (!json_is_integer(v))
            BAD_ONCE("random_seed must be integer");
        else if (json_integer_value(v) < 0)
            BAD_ONCE("random_seed must be a positive integer");
        else
            r->s.seed = (uint64_t)json_integer_value(v);
    }
    api_bool(req, "no_log", &r->no_log, msg, msz);
    if ((v = json_object_get(req, "beam_width"))) {
        if (!json_is_integer(v))
            BAD_ONCE("beam_width must be integer");
        else if (json_integer_value(v) < 1)
            BAD_ONCE("beam_width must be an integer > 1");
        else if (json_is_array(prompts) && json_array_size(prompts) > 1)
            BAD_ONCE("When doing beam_search, batch size must be 1");
        else
            BAD_ONCE("beam_width: beam search is not supported yet");
    }
    if ((v = json_object_get(req, "stop_token")) && !json_is_integer(v))
        BAD_ONCE("stop_token must be an integer");
    if ((v = json_object_get(req, "length_penalty")) && !json_is_number(v))
        BAD_ONCE("length_penalty must be a float");
    if (r->eol_stop && (G->nl < 0 || G->nl2 < 0))
        BAD_ONCE("%s: the tokenizer has no single newline token",
                 eol2 ? "stop_on_double_eol" : "stop_on_eol");
    if (r->nl_colon && (G->nl < 0 || G->colon < 0))
        BAD_ONCE("prevent_newline_after_colon: the tokenizer has no single newline or colon token");
    if (!msg[0] && req_prompts(G, r, prompts, NULL, 0, add_bos) != MT_OK) req_failed(msg, msz);
    json_decref(req);
    r->left = r->np;
    return msg[0] ? 400 : 0;
}

#define SERVE_TOP_MAX     20 /* /completions: the most logprobs alternatives */
#define SERVE_CHOICES_MAX 16 /* /completions: the most choices a prompt ("n") */

/* POST /completions (or /v1/completions; OpenAI's legacy completions, as Megatron's dynamic
 * server has them): {"prompt": a text, a list of token ids, or a list of either, "max_tokens": N
 * (16), "temperature": T (1), "top_p": P (1), "top_k": K (0), "seed": S (the run's), "echo": B,
 * "stop": a text or up to 4, "logprobs": the alternatives per token (0 to 20; absent or null: no
 * logprobs)}; 0, or 400 with msg. */
static int req_parse_completions(generator *G, const char *body, serve_req *r, char *msg,
                                 size_t msz) {
    json_error_t je;
    json_t *req = json_loads(body, 0, &je), *p = json_object_get(req, "prompt"), *v;
    msg[0] = 0;
    r->completions = 1;
    const int many = json_is_array(p) && json_array_size(p) > 0 &&
                     !json_is_integer(json_array_get(p, 0)); /* (a list of prompts) */
    if (!req)
        snprintf(msg, msz, "the body is not JSON: %s", je.text);
    else if (!json_is_string(p) && !(json_is_array(p) && json_array_size(p) > 0))
        snprintf(msg, msz,
                 "prompt: a text, a list of token ids, or a non-empty list of either is required");
    r->max_new = (v = json_object_get(req, "max_tokens")) ? (int)json_integer_value(v) : 16;
    r->s = (mt_infer_sampling){ 1.0f, 0, 1.0f, G->a->seed };
    req_sampling(req, "seed", &r->s);
    r->echo = json_is_true(json_object_get(req, "echo"));
    json_t *stop = json_object_get(req, "stop");
    const int nstop = json_is_string(stop)  ? 1
                      : json_is_array(stop) ? (int)json_array_size(stop)
                                            : 0;
    if (!msg[0] && stop && !json_is_null(stop) && (nstop < 1 || nstop > SERVE_STOPS))
        snprintf(msg, msz, "stop: a text or a list of 1 to %d texts", SERVE_STOPS);
    for (int i = 0; !msg[0] && i < nstop && nstop <= SERVE_STOPS; i++) {
        const char *t =
            json_string_value(json_is_string(stop) ? stop : json_array_get(stop, (size_t)i));
        if (!t || !t[0])
            snprintf(msg, msz, "stop: a text or a list of 1 to %d texts, none empty", SERVE_STOPS);
        else if (!(r->stop[i] = strdup(t)))
            snprintf(msg, msz, "out of memory");
    }
    v = json_object_get(req, "logprobs");
    r->top_n = v && !json_is_null(v) ? (int)json_integer_value(v) : -1;
    r->logprobs = r->top_n >= 0;
    if (!msg[0] && r->max_new < 0) snprintf(msg, msz, "max_tokens must be >= 0");
    r->nc = 1;
    if ((v = json_object_get(req, "n")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > SERVE_CHOICES_MAX)
            BAD_ONCE("n: an integer from 1 to %d", SERVE_CHOICES_MAX);
        else
            r->nc = (int)json_integer_value(v);
    }
    /* (Megatron's dynamic server refuses it too, with this message) */
    if (!msg[0] && (v = json_object_get(req, "best_of")) && json_integer_value(v) > 1)
        snprintf(msg, msz, "best_of > 1 not supported");
    r->stream = json_is_true(json_object_get(req, "stream"));
    if (!msg[0] && r->stream && r->logprobs)
        snprintf(msg, msz, "stream with logprobs is not supported yet");
    if (!msg[0] && v && !json_is_null(v) &&
        (!json_is_integer(v) || r->top_n < 0 || r->top_n > SERVE_TOP_MAX))
        snprintf(msg, msz, "logprobs: an integer from 0 to %d", SERVE_TOP_MAX);
    if (!msg[0] && req_prompts(G, r, many ? p : NULL, many ? NULL : p, 1, 0) != MT_OK)
        req_failed(msg, msz);
    if (!msg[0] && r->stream) {
        r->sent = calloc((size_t)r->np, sizeof *r->sent);
        r->finished = calloc((size_t)r->np, sizeof *r->finished);
        if (!r->sent || !r->finished) snprintf(msg, msz, "out of memory");
    }
    json_decref(req);
    r->left = r->np;
    return msg[0] ? 400 : 0;
}

/* lp[t - 1] = log p(tokens[t] | tokens[0..t)) for t = 1..n-1 (Megatron's logprobs): the model
 * over the sequence again, in prompt chunks over the one-sequence KV cache (then one token at a
 * time) or the whole window without it; log-softmax of each position's logits in double. With
 * top_n > 0 also each position's top_n most likely tokens (top_id, top_lp: top_n a position,
 * most likely first, the lower id first among equals). */
static mt_status score_tokens(gen *g, const int32_t *tokens, int n, double *lp, int top_n,
                              int32_t *top_id, double *top_lp) {
    float *row = malloc((size_t)g->V * sizeof *row);
    MT_REQUIRE(row, MT_ERR_OOM, "a row of logits");
    mt_status st = MT_OK;
    for (int p = 0; p < n - 1 && st == MT_OK;) {
        mt_model *m = g->m;
        int k = n - 1 - p; /* positions p..p+k-1 score their next tokens */
        if (g->kv) {       /* (the cache then holds this sequence: mt-generate's prefix is reset) */
            const int chunk = k >= g->C;
            m = chunk ? g->m : g->one;
            k = chunk ? g->C : 1;
            mt_tensor *tok = chunk ? &g->tok : &g->tok1;
            st = mt_memcpy(tok->data, g->dev, tokens + p, MT_DEVICE_CPU, (size_t)k * 4, NULL);
            if (st == MT_OK) st = mt_model_set_kv_cache(m, g->kv, p);
            if (st == MT_OK) st = run_forward(g, m, tok);
            g->ncached = 0;
        } else {
            memset(g->htok, 0, (size_t)g->T * 4);
            memcpy(g->htok, tokens, (size_t)n * 4);
            st = mt_memcpy(g->tok.data, g->dev, g->htok, MT_DEVICE_CPU, (size_t)g->T * 4, NULL);
            if (st == MT_OK) st = run_forward(g, m, &g->tok);
        }
        const mt_tensor lg = mt_model_logits(m);
        for (int r = 0; r < k && st == MT_OK; r++) {
            mt_tensor one;
            st = mt_tensor_slice(&lg, 0, r, 1, &one);
            if (st == MT_OK) st = logits_to_host(g, &one, row);
            double mx = -INFINITY, sum = 0.0;
            for (int64_t v = 0; v < g->V; v++)
                mx = row[v] > mx ? row[v] : mx;
            for (int64_t v = 0; v < g->V; v++)
                sum += exp((double)row[v] - mx);
            const double lse = mx + log(sum);
            lp[p + r] = (double)row[tokens[p + r + 1]] - lse;
            int32_t *ti = top_id + (size_t)(p + r) * (size_t)(top_n > 0 ? top_n : 0);
            double *tl = top_lp + (size_t)(p + r) * (size_t)(top_n > 0 ? top_n : 0);
            for (int t = 0; t < top_n; t++)
                ti[t] = -1;
            for (int64_t v = 0; v < g->V && top_n > 0; v++) { /* (insertion into the top_n) */
                int t = top_n;
                while (t > 0 && (ti[t - 1] < 0 || row[v] > row[ti[t - 1]]))
                    t--;
                if (t == top_n) continue;
                memmove(ti + t + 1, ti + t, (size_t)(top_n - 1 - t) * sizeof *ti);
                ti[t] = (int32_t)v;
            }
            for (int t = 0; t < top_n; t++)
                tl[t] = ti[t] >= 0 ? (double)row[ti[t]] - lse : -INFINITY;
        }
        p += k;
    }
    free(row);
    return st;
}

/* A JSON string of text (len bytes): U+FFFD for a piece that is not UTF-8 (a byte-level BPE token
 * alone can be part of a character). */
static json_t *json_text(const char *text, size_t len) {
    json_t *j = json_stringn(text, len);
    return j ? j : json_string("\xef\xbf\xbd");
}

/* The text of ids[0..n) as a JSON string (text, len, cap: the decoder's buffer). */
static mt_status decoded(generator *G, const int32_t *ids, int n, char **text, size_t *len,
                         size_t *cap, json_t **out) {
    *len = 0; /* (decode appends) */
    MT_TRY(mt_data_tokenizer_decode(G->tk, ids, (size_t)n, text, len, cap));
    *out = json_text(*text, *len);
    return MT_OK;
}

/* PUT /api's answer: {"text": [prompt and continuation, ...], "segments": [[each token's text],
 * ...], "tokens": [[ids], ...]} and, when asked for, "logprobs": [[log p of each token after the
 * first], ...]. */
static mt_status answer_api(generator *G, serve_req *r, json_t **out) {
    json_t *texts = json_array(), *toks = json_array(), *segs = json_array(), *lps = json_array();
    *out = json_pack("{s:o,s:o,s:o}", "text", texts, "segments", segs, "tokens", toks);
    if (r->logprobs)
        json_object_set_new(*out, "logprobs", lps);
    else
        json_decref(lps);
    mt_status st = MT_OK;
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (int i = 0; st == MT_OK && i < r->np; i++) {
        json_t *whole, *t = json_array(), *sg = json_array(), *one;
        st = decoded(G, r->ids[i], r->total[i], &text, &len, &cap, &whole);
        if (st == MT_OK) json_array_append_new(texts, whole);
        for (int k = 0; k < r->total[i] && st == MT_OK; k++) {
            json_array_append_new(t, json_integer(r->ids[i][k]));
            st = decoded(G, &r->ids[i][k], 1, &text, &len, &cap, &one);
            if (st == MT_OK) json_array_append_new(sg, one);
        }
        json_array_append_new(toks, t);
        json_array_append_new(segs, sg);
        if (!r->logprobs || st != MT_OK) continue;
        double *lp = malloc((size_t)r->total[i] * sizeof *lp);
        st = lp ? score_tokens(&G->g, r->ids[i], r->total[i], lp, 0, NULL, NULL)
                : MT_ERROR(MT_ERR_OOM, "log-probabilities");
        json_t *l = json_array();
        for (int k = 0; st == MT_OK && k < r->total[i] - 1; k++)
            json_array_append_new(l, json_real(lp[k]));
        json_array_append_new(lps, l);
        free(lp);
    }
    free(text);
    return st;
}

/* /completions' logprobs of choice i (its tokens from `from`: 0 with echo, else the generated
 * ones): {"tokens": [texts], "token_logprobs": [...; null for the first token of a sequence],
 * "top_logprobs": [{text: logprob} of the top_n most likely, ...], "text_offset": [each token's
 * byte offset in the choice's text]}, and Megatron's generation_log_probs into c. */
static mt_status completion_logprobs(generator *G, serve_req *r, int i, int from, json_t *c) {
    const int n = r->n[i], total = r->total[i], tn = r->top_n;
    const int32_t *ids = r->ids[i];
    double *lp = malloc((size_t)total * (1 + (size_t)tn) * sizeof *lp);
    int32_t *tid = malloc(((size_t)total * (size_t)tn + 1) * sizeof *tid);
    mt_status st = lp && tid ? MT_OK : MT_ERROR(MT_ERR_OOM, "log-probabilities");
    if (st == MT_OK) st = score_tokens(&G->g, ids, total, lp, tn, tid, lp + total);
    json_t *tokens = json_array(), *tlp = json_array(), *top = json_array(), *off = json_array();
    json_t *glp = json_array();
    char *text = NULL;
    size_t len = 0, cap = 0, whole = 0;
    for (int k = from; st == MT_OK && k < total; k++) {
        json_t *t;
        st = decoded(G, ids + k, 1, &text, &len, &cap, &t);
        if (st != MT_OK) break;
        const size_t one = len;
        json_array_append_new(tokens, t);
        st = decoded(G, ids + from, k + 1 - from, &text, &len, &cap, &t); /* (its end) */
        json_decref(t);
        whole = len;
        json_array_append_new(off, json_integer((json_int_t)(whole - one)));
        json_array_append_new(tlp, k ? json_real(lp[k - 1]) : json_null());
        if (k >= n) json_array_append_new(glp, json_real(lp[k - 1]));
        if (!k) {
            json_array_append_new(top, json_null());
            continue;
        }
        json_t *alt = json_object();
        for (int a = 0; st == MT_OK && a < tn; a++) {
            const int32_t v = tid[(size_t)(k - 1) * (size_t)tn + (size_t)a];
            if (v < 0) continue;
            len = 0;
            st = mt_data_tokenizer_decode(G->tk, &v, 1, &text, &len, &cap);
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(len < 255 ? len : 255), text);
            if (st == MT_OK)
                json_object_set_new(
                    alt, key, json_real(lp[total + (size_t)(k - 1) * (size_t)tn + (size_t)a]));
        }
        json_array_append_new(top, alt);
    }
    free(text), free(lp), free(tid);
    json_object_set_new(c, "logprobs",
                        json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", tlp,
                                  "top_logprobs", top, "text_offset", off));
    json_object_set_new(c, "generation_log_probs", glp);
    return st;
}

/* /completions' answer: {"id", "object": "text_completion", "created", "model", "choices":
 * [{"index", "text" (the continuation; with echo the prompt and it), "logprobs" (null unless
 * asked for), "finish_reason" ("stop" after the end-of-document token, else "length"),
 * "prompt_token_ids", "generation_token_ids"}, ...], "usage": {"prompt_tokens",
 * "completion_tokens", "total_tokens"}}. */
static mt_status answer_completions(generator *G, serve_req *r, json_t **out) {
    json_t *choices = json_array();
    int ptok = 0, ctok = 0;
    char *text = NULL;
    size_t len = 0, cap = 0;
    mt_status st = MT_OK;
    for (int i = 0; st == MT_OK && i < r->np; i++) {
        const int n = r->n[i], total = r->total[i], from = r->echo ? 0 : n;
        const int32_t *ids = r->ids[i];
        ptok += i % r->nc ? 0 : n, ctok += total - n; /* (a prompt's tokens once: OpenAI's) */
        json_t *t, *pids = json_array(), *gids = json_array();
        size_t gen_len = 0; /* (a stop text: the text ends where it starts) */
        if (r->cut[i] != SIZE_MAX)
            st = mt_data_tokenizer_decode(G->tk, ids + n, (size_t)(total - n), &text, &gen_len,
                                          &cap);
        if (st == MT_OK) st = decoded(G, ids + from, total - from, &text, &len, &cap, &t);
        if (st != MT_OK) break;
        if (r->cut[i] != SIZE_MAX) /* (the text ends with the continuation's) */
            json_decref(t), t = json_text(text, len - gen_len + r->cut[i]);
        for (int k = 0; k < total; k++)
            json_array_append_new(k < n ? pids : gids, json_integer(ids[k]));
        const int stop =
            r->cut[i] != SIZE_MAX || (total > n && G->eod >= 0 && ids[total - 1] == G->eod);
        json_t *c = json_pack("{s:i,s:o,s:n,s:s,s:o,s:o}", "index", i, "text", t, "logprobs",
                              "finish_reason", stop ? "stop" : "length", "prompt_token_ids", pids,
                              "generation_token_ids", gids);
        if (r->logprobs) st = completion_logprobs(G, r, i, from, c);
        json_array_append_new(choices, c);
    }
    free(text);
    static long served;
    char id[32];
    snprintf(id, sizeof id, "cmpl-%ld", ++served);
    *out = json_pack("{s:s,s:s,s:I,s:s,s:o,s:{s:i,s:i,s:i}}", "id", id, "object", "text_completion",
                     "created", (json_int_t)time(NULL), "model", G->a->load, "choices", choices,
                     "usage", "prompt_tokens", ptok, "completion_tokens", ctok, "total_tokens",
                     ptok + ctok);
    return st;
}

/* ---- /completions with "stream": OpenAI's server-sent events: the headers once the request is
 * read, then for each choice events of its text as it grows ("text" the new part), its last
 * with "finish_reason", then "data: [DONE]" and the connection closed ---- */

static void stream_send(serve_req *r, const char *s, size_t n) {
    const ssize_t w = send(r->fd, s, n, MSG_NOSIGNAL); /* (a client gone: nothing more to it) */
    (void)w;
}

static void stream_headers(serve_req *r) {
    static long streams;
    r->sid = ++streams;
    static const char h[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: "
                            "no-cache\r\nConnection: close\r\n\r\n";
    stream_send(r, h, sizeof h - 1);
}

/* One event: "data: " j "\n\n" (j taken). */
static void stream_event(serve_req *r, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return;
    stream_send(r, "data: ", 6);
    stream_send(r, s, strlen(s));
    stream_send(r, "\n\n", 2);
    free(s);
}

/* Choice i's text up to `total` tokens (the prompt's with echo, then the continuation's, cut
 * before a stop text) into *text, its length into *len; 0, or -1 when it cannot be decoded. */
static int choice_text(generator *G, serve_req *r, int i, int total, char **text, size_t *len,
                       size_t *cap) {
    const int n = r->n[i], from = r->echo ? 0 : n;
    *len = 0;
    if (mt_data_tokenizer_decode(G->tk, r->ids[i] + from, (size_t)(total - from), text, len, cap) !=
        MT_OK) {
        mt_error_clear();
        return -1;
    }
    if (r->cut[i] != SIZE_MAX) { /* (the continuation's text ends at the cut) */
        size_t plen = 0;
        char *p = NULL;
        size_t pcap = 0;
        if (from < n &&
            mt_data_tokenizer_decode(G->tk, r->ids[i], (size_t)n, &p, &plen, &pcap) != MT_OK)
            mt_error_clear();
        if (plen + r->cut[i] < *len) *len = plen + r->cut[i];
        free(p);
    }
    return 0;
}

/* Choice i's new text since the last event, up to `total` tokens: while it runs, held back by the
 * longest stop text less a byte (it may yet be cut there) and to a whole UTF-8 character; with
 * `last`, all of it and the event with its finish_reason. */
static void stream_choice(generator *G, serve_req *r, int i, int total, int last) {
    if (r->finished[i]) return;
    char *text = NULL;
    size_t len = 0, cap = 0, hold = 0;
    if (choice_text(G, r, i, total, &text, &len, &cap) < 0) len = r->sent[i];
    for (int k = 0; !last && k < SERVE_STOPS && r->stop[k]; k++)
        if (strlen(r->stop[k]) - 1 > hold) hold = strlen(r->stop[k]) - 1;
    size_t end = last ? len : len > hold ? len - hold : 0;
    while (!last && end > r->sent[i] && end < len && ((unsigned char)text[end] & 0xC0) == 0x80)
        end--; /* (not inside a character) */
    const char *why = NULL;
    if (last) {
        const int ids_end = total > r->n[i] && G->eod >= 0 && r->ids[i][total - 1] == G->eod;
        why = r->cut[i] != SIZE_MAX || ids_end ? "stop" : "length";
    }
    if (end > r->sent[i] || last) {
        char id[32];
        snprintf(id, sizeof id, "cmpl-s%ld", r->sid);
        json_t *c = json_pack("{s:i,s:o,s:n,s:o}", "index", i, "text",
                              json_text(text + r->sent[i], end > r->sent[i] ? end - r->sent[i] : 0),
                              "logprobs", "finish_reason", why ? json_string(why) : json_null());
        stream_event(r, json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", id, "object", "text_completion",
                                  "created", (json_int_t)time(NULL), "model", G->a->load, "choices",
                                  c));
        if (end > r->sent[i]) r->sent[i] = end;
    }
    r->finished[i] = last;
    free(text);
}

/* The server's line for an answered request (unless "no_log"). */
static void req_log(const serve_req *r) {
    if (r->no_log) return;
    int made = 0;
    for (int i = 0; i < r->np; i++)
        made += r->total[i] - r->n[i];
    fprintf(stderr,
            "mt-serve: request %d: %d prompt%s, %d new tokens in %.3f s, beside at most %d rows "
            "of other requests\n",
            r->id, r->np, r->np == 1 ? "" : "s", made, mt_time_now() - r->t0, r->beside);
}

/* The answer to a request whose rows are all done (answer_api or answer_completions: 200), or 400
 * with the message of a failure. */
static void req_answer(generator *G, serve_req *r, const char *fail) {
    json_t *out = NULL;
    mt_status st = MT_OK;
    if (r->stream) { /* (the headers are out: a failure is an event) */
        for (int i = 0; !fail && i < r->np; i++)
            stream_choice(G, r, i, r->total[i], 1);
        if (fail) stream_event(r, json_pack("{s:{s:s}}", "error", "message", fail));
        stream_send(r, "data: [DONE]\n\n", 14);
        mt_error_clear();
        if (!fail) req_log(r);
        close(r->fd);
        return;
    }
    if (!fail) st = r->completions ? answer_completions(G, r, &out) : answer_api(G, r, &out);
    if (!fail && st != MT_OK) fail = error_text();
    if (fail) {
        json_decref(out);
        respond(r->fd, 400, json_pack("{s:s}", "message", fail));
        mt_error_clear();
    } else {
        respond(r->fd, 200, out);
        req_log(r);
    }
    close(r->fd);
}

/* Whether prompt i's continuation up to `total` tokens holds one of the request's stop texts: 1
 * with r->cut[i] at the first one's start in the continuation's text, else 0. */
static int stop_hit(generator *G, serve_req *r, int i, int total) {
    if (!r->stop[0] || total <= r->n[i]) return 0;
    char *text = NULL;
    size_t len = 0, cap = 0, at = SIZE_MAX;
    if (mt_data_tokenizer_decode(G->tk, r->ids[i] + r->n[i], (size_t)(total - r->n[i]), &text, &len,
                                 &cap) != MT_OK) {
        mt_error_clear();
        return 0;
    }
    for (int k = 0; k < SERVE_STOPS && r->stop[k]; k++) {
        const size_t sl = strlen(r->stop[k]);
        for (size_t p = 0; p + sl <= len && p < at; p++)
            if (!memcmp(text + p, r->stop[k], sl)) {
                at = p;
                break;
            }
    }
    free(text);
    if (at == SIZE_MAX) return 0;
    r->cut[i] = at;
    return 1;
}

/* PUT /api's stop_on_eol (1: a "\n" or "\n\n" token) or stop_on_double_eol (2: a "\n\n" token, or
 * "\n" after "\n"): whether prompt i's continuation ends with the token at total - 1 (Megatron's
 * done_token; the token stays in the answer). */
static int eol_hit(const generator *G, const serve_req *r, int i, int total) {
    if (!r->eol_stop || total <= r->n[i]) return 0;
    const int32_t t = r->ids[i][total - 1];
    if (r->eol_stop == 1) return t == G->nl || t == G->nl2;
    return t == G->nl2 || (t == G->nl && total >= 2 && r->ids[i][total - 2] == G->nl);
}

/* A request run alone (without the KV cache, or MT_SERVE_BATCH=1): its prompts one after
 * another. NULL, or the failure's message. */
static const char *req_run_alone(generator *G, serve_req *r) {
    G->g.ban1 = r->nl_colon;
    for (int i = 0; i < r->np; i++) {
        mt_infer_sampling si = r->s;
        si.seed += (uint64_t)(i % r->nc); /* ("n": each choice its own draws) */
        const mt_status st = generator_run(G, r->ids[i], r->n[i], r->max_new, &si, &r->total[i]);
        if (st != MT_OK) {
            G->g.ban1 = 0;
            return error_text();
        }
        for (int t = r->n[i] + 1; t <= r->total[i]; t++) /* (as continuous) */
            if (stop_hit(G, r, i, t) || eol_hit(G, r, i, t)) {
                r->total[i] = t;
                break;
            }
    }
    G->g.ban1 = 0;
    return NULL;
}

/* Continuous batching: B slots of the batch (gen's nb rows); a slot holds a row (one prompt of a
 * request) from its joining to its last token. */
typedef struct serve_batch {
    int B;
    int32_t **tok;
    int *n, *k, *most, *live, *prompt, *was; /* (was: live before the step) */
    int *ban; /* the row's request asks for prevent_newline_after_colon (gen.bban) */
    mt_infer_sampling *s;
    serve_req **owner;
    float *logits;          /* B V, then V of scratch */
    serve_req *head, *tail; /* requests with prompts still to join */
} serve_batch;

static void sb_free(serve_batch *q) {
    free(q->tok), free(q->n), free(q->s), free(q->owner), free(q->logits); /* (n holds k too) */
}

static mt_status sb_make(serve_batch *q, int B, int64_t V) {
    memset(q, 0, sizeof *q);
    q->B = B;
    q->tok = calloc((size_t)B, sizeof *q->tok);
    q->n = calloc((size_t)B * 7, sizeof *q->n);
    q->s = calloc((size_t)B, sizeof *q->s);
    q->owner = calloc((size_t)B, sizeof *q->owner);
    q->logits = malloc((size_t)V * (size_t)(B + 1) * sizeof *q->logits);
    MT_REQUIRE(q->tok && q->n && q->s && q->owner && q->logits, MT_ERR_OOM, "a batch of %d", B);
    q->k = q->n + B, q->most = q->n + 2 * B, q->live = q->n + 3 * B, q->prompt = q->n + 4 * B;
    q->was = q->n + 5 * B, q->ban = q->n + 6 * B;
    return MT_OK;
}

/* Rows done in slots: their requests' totals; a request whose rows are all done is answered.
 * Returns the requests answered. */
static int sb_reap(generator *G, serve_batch *q) {
    int answered = 0;
    for (int b = 0; b < q->B; b++) {
        serve_req *r = q->owner[b];
        if (!r || q->live[b]) continue;
        r->total[q->prompt[b]] = q->n[b];
        if (r->stream) stream_choice(G, r, q->prompt[b], q->n[b], 1);
        q->owner[b] = NULL;
        if (--r->left == 0 && r->joined == r->np) {
            req_answer(G, r, NULL);
            req_free(r);
            answered++;
        }
    }
    return answered;
}

/* The queue's prompts into free slots (a row with nothing to generate is done at once). */
static void sb_join(generator *G, serve_batch *q) {
    for (int b = 0; b < q->B && q->head; b++) {
        if (q->owner[b]) continue;
        serve_req *r = q->head;
        const int i = r->joined++;
        if (r->joined == r->np) q->head = r->next;
        if (!q->head) q->tail = NULL;
        q->owner[b] = r, q->prompt[b] = i;
        q->tok[b] = r->ids[i], q->n[b] = r->n[i], q->k[b] = 0, q->most[b] = r->max_new;
        q->s[b] = r->s;
        q->s[b].seed += (uint64_t)(i % r->nc); /* ("n": each choice its own draws) */
        q->live[b] = r->max_new > 0 && r->n[i] < G->g.T;
    }
}

/* One step of every live row; a failure answers their requests with its message. Returns the
 * requests answered. */
static int sb_step(generator *G, serve_batch *q) {
    int live = 0;
    for (int b = 0; b < q->B; b++)
        live += q->live[b];
    if (!live) return 0;
    for (int b = 0; b < q->B; b++) { /* (other requests' rows beside this one's) */
        serve_req *r = q->owner[b];
        if (!r || !q->live[b]) continue;
        int own = 0;
        for (int c = 0; c < q->B; c++)
            own += q->live[c] && q->owner[c] == r;
        if (live - own > r->beside) r->beside = live - own;
    }
    mt_infer_batch_model bm = { &G->g, batch_logits, G->g.V, G->g.T, G->eod };
    memcpy(q->was, q->live, (size_t)q->B * sizeof *q->was);
    for (int b = 0; b < q->B; b++)
        q->ban[b] = q->owner[b] && q->owner[b]->nl_colon;
    G->g.bban = q->ban;
    mt_status st = mt_infer_batch_step(&bm, q->tok, q->n, q->k, q->most, q->s, q->live, q->B,
                                       q->logits, q->logits + (size_t)G->g.V * (size_t)q->B);
    G->g.bban = NULL;
    for (int b = 0; b < q->B && st == MT_OK; b++) /* (a stop text or newline ends a row too) */
        if (q->owner[b] && q->was[b] &&
            (stop_hit(G, q->owner[b], q->prompt[b], q->n[b]) ||
             eol_hit(G, q->owner[b], q->prompt[b], q->n[b])))
            q->live[b] = 0;
    for (int b = 0; b < q->B && st == MT_OK; b++) /* (streams: the text so far; the end in reap) */
        if (q->owner[b] && q->was[b] && q->live[b] && q->owner[b]->stream)
            stream_choice(G, q->owner[b], q->prompt[b], q->n[b], 0);
    const int delay = mt_env_int("MT_SERVE_STEP_DELAY_MS", 0); /* (tests: requests overlap) */
    if (delay > 0) usleep((useconds_t)delay * 1000u);
    if (st == MT_OK) return 0;
    /* every request with a row in a slot fails: answered once, its other rows dropped */
    char msg[512] = "";
    req_failed(msg, sizeof msg);
    int answered = 0;
    for (int b = 0; b < q->B; b++) {
        serve_req *r = q->owner[b];
        if (!r) continue;
        for (int c = b; c < q->B; c++)
            if (q->owner[c] == r) q->owner[c] = NULL, q->live[c] = 0;
        if (r->joined < r->np) { /* (still queued: out of the queue) */
            serve_req **pp = &q->head, *prev = NULL;
            while (*pp && *pp != r)
                prev = *pp, pp = &(*pp)->next;
            if (*pp) *pp = r->next;
            if (q->tail == r) q->tail = prev;
        }
        req_answer(G, r, msg);
        req_free(r);
        answered++;
    }
    return answered;
}

/* A connection whose request is being read (at most 1 MiB: headers, then Content-Length bytes). */
typedef struct serve_conn {
    int fd;
    char *buf;
    size_t n, cap;
} serve_conn;

#define SERVE_CONNS 64 /* requests read at once (more wait in the listen backlog) */

/* Reads what c's socket has: 1 when its request is complete (c->buf holds it; *body its start),
 * 0 when more is to come, -1 when the peer closed or the request is too long. */
static int conn_read(serve_conn *c, size_t *body) {
    if (c->n == c->cap) {
        if (c->cap >= (1u << 20)) return -1;
        size_t cap = c->cap ? 2 * c->cap : 4096;
        char *b = realloc(c->buf, cap + 1);
        if (!b) return -1;
        c->buf = b, c->cap = cap;
    }
    ssize_t k = recv(c->fd, c->buf + c->n, c->cap - c->n, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    if (k <= 0) return -1;
    c->n += (size_t)k;
    c->buf[c->n] = 0;
    char *end = strstr(c->buf, "\r\n\r\n");
    if (!end) return 0;
    const char *cl = strcasestr(c->buf, "\r\ncontent-length:");
    const size_t need =
        (size_t)(end + 4 - c->buf) + (cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
    if (need > (1u << 20)) return -1;
    *body = (size_t)(end + 4 - c->buf);
    return c->n >= need;
}

mt_status mt_serve_run(const mt_generate_args *a, const char *host, int port, int max_requests) {
    MT_REQUIRE(a, MT_ERR_INVALID_ARG, "NULL arguments");
    generator G;
    int fd = -1;
    serve_batch q;
    memset(&q, 0, sizeof q);
    mt_status st = generator_open(a, &G);
    /* NullTokenizer: prompts and texts are ids with spaces between them (Megatron's) */
    if (st == MT_OK && !G.tk) st = mt_data_tokenizer_null_create(G.c.vocab_size, &G.tk);
    if (st == MT_OK) st = generator_model(&G, G.c.max_position_embeddings);
    /* continuous batching over the KV cache: up to MT_SERVE_BATCH (8) prompts of any requests
     * decoded together, each row a window of keys and values (1: one prompt after another) */
    const int B = st == MT_OK && G.g.kv ? mt_env_int("MT_SERVE_BATCH", 8) : 1;
    if (st == MT_OK && B > 1) st = batch_make(&G.g, B);
    if (st == MT_OK && B > 1) st = sb_make(&q, B, G.g.V);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (st == MT_OK && inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        st = MT_ERROR(MT_ERR_INVALID_ARG, "--host %s is not an IPv4 address", host);
    if (st == MT_OK && (fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
        st = MT_ERROR(MT_ERR_IO, "socket: %s", strerror(errno));
    int one = 1;
    if (st == MT_OK) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (st == MT_OK && (bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 16)))
        st = MT_ERROR(MT_ERR_IO, "cannot listen on %s:%d: %s", host, port, strerror(errno));
    socklen_t al = sizeof addr;
    if (st == MT_OK && getsockname(fd, (struct sockaddr *)&addr, &al) == 0) {
        printf("mt-serve: listening on http://%s:%d/api (PUT or POST)%s\n", host,
               ntohs(addr.sin_port), B > 1 ? "; continuous batching" : "");
        fflush(stdout);
    }
    serve_conn conns[SERVE_CONNS];
    int nconn = 0, accepted = 0, answered = 0, ids = 0;
    /* until --max-requests are accepted and answered (0: for ever) */
    while (st == MT_OK && (max_requests <= 0 || answered < max_requests)) {
        int busy = q.head != NULL;
        for (int b = 0; b < q.B; b++)
            busy |= q.live[b];
        struct pollfd pf[SERVE_CONNS + 1];
        const int listening = nconn < SERVE_CONNS && (max_requests <= 0 || accepted < max_requests);
        pf[0] = (struct pollfd){ listening ? fd : -1, POLLIN, 0 };
        for (int i = 0; i < nconn; i++)
            pf[i + 1] = (struct pollfd){ conns[i].fd, POLLIN, 0 };
        if (poll(pf, (nfds_t)nconn + 1, busy ? 0 : -1) < 0 && errno != EINTR) {
            st = MT_ERROR(MT_ERR_IO, "poll: %s", strerror(errno));
            break;
        }
        for (int i = nconn - 1; i >= 0; i--) { /* (the requests being read) */
            if (!(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            serve_conn *c = &conns[i];
            size_t body = 0;
            const int got = conn_read(c, &body);
            if (got == 0) continue;
            const int cfd = c->fd;
            char *buf = c->buf;
            conns[i] = conns[--nconn]; /* (no longer read) */
            if (got < 0) {
                respond(cfd, 400,
                        json_pack("{s:s}", "message", "an incomplete or too long request"));
                close(cfd), free(buf), answered++;
                continue;
            }
            const int api = !strncmp(buf, "PUT /api ", 9) || !strncmp(buf, "POST /api ", 10);
            const int cmpl = !strncmp(buf, "POST /completions ", 18) ||
                             !strncmp(buf, "POST /v1/completions ", 21);
            if (!api && !cmpl) {
                const char *path = strchr(buf, ' ') ? strchr(buf, ' ') : buf;
                const int known = !strncmp(path, " /api ", 6) ||
                                  !strncmp(path, " /completions ", 14) ||
                                  !strncmp(path, " /v1/completions ", 17);
                respond(cfd, known ? 405 : 404,
                        json_pack("{s:s}", "message",
                                  known ? "use PUT (or POST) /api, or POST /completions"
                                        : "the paths are /api and /completions (/v1/completions)"));
                close(cfd), free(buf), answered++;
                continue;
            }
            serve_req *r = calloc(1, sizeof *r);
            if (r) r->nc = 1;
            char msg[512] = "out of memory";
            if (!r || (api ? req_parse(&G, buf + body, r, msg, sizeof msg)
                           : req_parse_completions(&G, buf + body, r, msg, sizeof msg))) {
                respond(cfd, 400, json_pack("{s:s}", "message", msg));
                close(cfd), free(buf), req_free(r), answered++;
                continue;
            }
            free(buf);
            r->fd = cfd, r->id = ++ids, r->t0 = mt_time_now();
            if (r->stream) stream_headers(r);
            if (B > 1) { /* (its prompts join the batch as slots free up) */
                if (q.tail)
                    q.tail->next = r;
                else
                    q.head = r;
                q.tail = r;
            } else {
                req_answer(&G, r, req_run_alone(&G, r));
                req_free(r), answered++;
            }
        }
        if (pf[0].revents & POLLIN) {
            int c = accept(fd, NULL, NULL);
            if (c >= 0)
                conns[nconn++] = (serve_conn){ c, NULL, 0, 0 }, accepted++;
            else if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
                st = MT_ERROR(MT_ERR_IO, "accept: %s", strerror(errno));
        }
        if (B > 1) {
            sb_join(&G, &q);
            answered += sb_reap(&G, &q); /* (rows with nothing to generate) */
            answered += sb_step(&G, &q);
            answered += sb_reap(&G, &q);
        }
    }
    for (int i = 0; i < nconn; i++)
        close(conns[i].fd), free(conns[i].buf);
    while (q.head) { /* (only after a failure: requests not answered) */
        serve_req *r = q.head;
        q.head = r->next;
        close(r->fd), req_free(r);
    }
    sb_free(&q);
    if (fd >= 0) close(fd);
    generator_close(&G);
    return st;
}
