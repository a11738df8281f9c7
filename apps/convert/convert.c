/* Hugging Face <-> mt-ckpt. Every internal tensor is a stack of row blocks taken from HF tensors
 * (after selecting an expert of a fused 3-D tensor and transposing Conv1D weights), plus zero
 * rows of vocabulary padding, so import concatenates blocks and export scatters them back (and
 * drops the padding): both directions are bit-exact copies.
 *
 * Internal names and layouts are libs/model's (mt_model_param, Megatron-core names), per layer i,
 * (out, in) = nn.Linear layout:
 *   embedding.word_embeddings.weight (Vp,C)    GPT-2 wte, Llama/Mixtral model.embed_tokens, then
 *       Vp - V zero rows: Vp = V rounded up to --make-vocab-size-divisible-by (Megatron, 128)
 *   embedding.position_embeddings.weight (P,C) GPT-2 wpe
 *   decoder.layers.i.input_layernorm.{weight,bias}    ln_1 / input_layernorm (biases: GPT-2's
 *       and StableLM's LayerNorms)
 *   decoder.layers.i.self_attention.linear_qkv.{weight,bias} ((Q+2G)*D, C): [all Q query heads |
 *       all G key heads | all G value heads], each head D rows (libs/model's layout, not
 *       Megatron's per-group interleaving): GPT-2 c_attn transposed; q_proj, k_proj, v_proj
 *   decoder.layers.i.self_attention.linear_proj.{weight,bias} (C,Q*D)  c_proj^T / o_proj
 *   decoder.layers.i.self_attention.{q,k}_layernorm.weight (D)  Qwen3 self_attn.{q,k}_norm
 *   DeepSeek-V3's MLA (self_attention. <- self_attn., HF's layouts, the rope channels
 *       interleaved pairs as Megatron's MLA): linear_q_proj.weight q_proj (no q_lora_rank), else
 *       linear_q_down_proj.weight q_a_proj, linear_q_up_proj.layer_norm_weight q_a_layernorm,
 *       linear_q_up_proj.weight q_b_proj; linear_kv_down_proj.weight kv_a_proj_with_mqa,
 *       linear_kv_up_proj.layer_norm_weight kv_a_layernorm, linear_kv_up_proj.weight kv_b_proj
 *   decoder.layers.i.pre_mlp_layernorm.{weight,bias}  ln_2 / post_attention_layernorm
 *   decoder.layers.i.mlp.linear_fc1.{weight,bias}     GPT-2 c_fc^T (4C,C); Llama [gate; up] (2I,C)
 *   decoder.layers.i.mlp.linear_fc2.{weight,bias}     GPT-2 c_proj^T; Llama down_proj (C,I)
 *   decoder.layers.i.mlp.router.weight (E,C)          Mixtral gate
 *   decoder.layers.i.mlp.experts.local_experts.e.linear_fc1.weight (2I,C)  [w1; w3] = [gate; up]
 *   decoder.layers.i.mlp.experts.local_experts.e.linear_fc2.weight (C,I)   w2 = down
 *       (Qwen2-MoE, DeepSeek-V3: mlp.gate, and mlp.experts.e.{gate,up,down}_proj or
 *       transformers 5's fused mlp.experts.gate_up_proj and down_proj as Mixtral's)
 *   decoder.layers.i.mlp.router.expert_bias (E)       DeepSeek-V3 mlp.gate.e_score_correction_bias
 *       (a buffer of libs/model's, checkpointed beside the parameters)
 *   decoder.layers.i.mlp.shared_experts.linear_fc1.weight (2Is,C)  Qwen2-MoE shared_expert,
 *       DeepSeek-V3 shared_experts [gate_proj; up_proj]; linear_fc2.weight (C,Is) down_proj;
 *       gate_weight (1,C) Qwen2-MoE shared_expert_gate
 *   mtp.layers.k.{enorm,hnorm,eh_proj,final_layernorm}.weight  DeepSeek-V3's multi-token
 *       prediction layer model.layers.(L+k).{enorm,hnorm,eh_proj,shared_head.norm}.weight, its
 *       transformer layer mtp.layers.k.transformer_layer.* as a decoder layer's (exported with the
 *       hub's copies of the embedding and head: embed_tokens, shared_head.head)
 *   decoder.final_layernorm.{weight,bias}, output_layer.weight (Vp,C, zero padding rows as the
 *       embedding; absent when tied)
 * RoPE: we keep HF's half-split (rotate_half) layout, so Llama q/k rows are not permuted; a Meta
 * (interleaved) checkpoint needs transformers' convert_llama_weights_to_hf permutation first. */
#include "convert.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct cv_piece {
    int hf;        /* index into map.hf; -1: `rows` zero rows (vocabulary padding) */
    int expert;    /* >= 0: select [expert] of a fused 3-D tensor first */
    int transpose; /* Conv1D (in,out) -> (out,in) */
    int64_t row0, rows;
} cv_piece;

typedef struct cv_entry {
    char name[128];
    int first, n; /* pieces [first, first+n) */
} cv_entry;

typedef struct cv_map {
    char **hf;
    int nhf, caphf;
    cv_entry *e;
    int ne, cape;
    cv_piece *p;
    int np, capp;
} cv_map;

static void map_free(cv_map *m) {
    for (int i = 0; i < m->nhf; i++)
        free(m->hf[i]);
    free(m->hf);
    free(m->e);
    free(m->p);
}

static int grow(void **v, int *cap, int n, size_t sz) {
    if (n < *cap) return 1;
    int c = *cap ? *cap * 2 : 64;
    void *q = realloc(*v, sz * (size_t)c);
    if (!q) return 0;
    *v = q;
    *cap = c;
    return 1;
}

static int hf_id(cv_map *m, const char *name) {
    for (int i = 0; i < m->nhf; i++)
        if (strcmp(m->hf[i], name) == 0) return i;
    if (!grow((void **)&m->hf, &m->caphf, m->nhf, sizeof(char *))) return -1;
    m->hf[m->nhf] = strdup(name);
    return m->hf[m->nhf] ? m->nhf++ : -1;
}

static mt_status entry(cv_map *m, const char *fmt, ...) {
    MT_REQUIRE(grow((void **)&m->e, &m->cape, m->ne, sizeof(cv_entry)), MT_ERR_OOM, "map");
    cv_entry *e = &m->e[m->ne++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->first = m->np;
    e->n = 0;
    return MT_OK;
}

/* Appends rows [row0, row0+rows) of HF tensor `name` (expert/transpose applied) to the last
 * entry. */
static mt_status piece(cv_map *m, const char *name, int expert, int transpose, int64_t row0,
                       int64_t rows) {
    int id = hf_id(m, name);
    MT_REQUIRE(id >= 0 && grow((void **)&m->p, &m->capp, m->np, sizeof(cv_piece)), MT_ERR_OOM,
               "map");
    m->p[m->np++] = (cv_piece){ id, expert, transpose, row0, rows };
    m->e[m->ne - 1].n++;
    return MT_OK;
}

/* Appends `rows` zero rows to the last entry (dropped on export). */
static mt_status pad(cv_map *m, int64_t rows) {
    if (rows <= 0) return MT_OK;
    MT_REQUIRE(grow((void **)&m->p, &m->capp, m->np, sizeof(cv_piece)), MT_ERR_OOM, "map");
    m->p[m->np++] = (cv_piece){ -1, -1, 0, 0, rows };
    m->e[m->ne - 1].n++;
    return MT_OK;
}

/* One internal tensor from one whole HF tensor. */
static mt_status same(cv_map *m, const char *internal, const char *hf, int transpose,
                      int64_t rows) {
    MT_TRY(entry(m, "%s", internal));
    return piece(m, hf, -1, transpose, 0, rows);
}

#define CV_MAX_LAYERS 1024

typedef struct cv_cfg {
    const char *type; /* gpt2, llama, stablelm, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe,
                         deepseek_v3 */
    int64_t L, C, V, Vp, P, Q, G, D, I, E, Ie, Is; /* Vp: padded vocabulary; I: the dense MLPs'
                                                      width, Ie an expert's, Is the shared one's */
    /* DeepSeek-V3's MLA: q_lora_rank (0: none), kv_lora_rank, qk_nope_head_dim,
     * qk_rope_head_dim, v_head_dim */
    int64_t qr, kr, dn, dr, dv;
    unsigned char dense[CV_MAX_LAYERS]; /* Qwen2-MoE, DeepSeek-V3: the layers whose MLP is dense */
    int64_t nmtp; /* DeepSeek-V3: the multi-token prediction layers (num_nextn_predict_layers) */
    int tied, experts_fused;
    const char *prefix; /* GPT-2: "transformer." or "" */
} cv_cfg;

static int64_t geti(json_t *cfg, const char *k, const char *alias, int64_t dflt) {
    json_t *v = json_object_get(cfg, k);
    if (!json_is_integer(v) && alias) v = json_object_get(cfg, alias);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* A boolean of the config (absent: dflt). */
static int getb(json_t *cfg, const char *k, int dflt) {
    json_t *v = json_object_get(cfg, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* DeepSeek-V3's shapes, and what libs/model does not run as transformers does (refused). */
static mt_status read_deepseek(json_t *cfg, cv_cfg *c) {
    c->qr = geti(cfg, "q_lora_rank", NULL, 0); /* (null: none) */
    c->kr = geti(cfg, "kv_lora_rank", NULL, -1);
    c->dn = geti(cfg, "qk_nope_head_dim", NULL, -1);
    c->dr = geti(cfg, "qk_rope_head_dim", NULL, -1);
    c->dv = geti(cfg, "v_head_dim", NULL, -1);
    const int64_t k = geti(cfg, "first_k_dense_replace", NULL, -1);
    MT_REQUIRE(c->qr >= 0 && c->kr > 0 && c->dn > 0 && c->dr > 0 && c->dv > 0, MT_ERR_FORMAT,
               "config.json: bad q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim "
               "or v_head_dim");
    c->nmtp = geti(cfg, "num_nextn_predict_layers", NULL, 0);
    MT_REQUIRE(k >= 0 && c->nmtp >= 0 && c->L + c->nmtp <= CV_MAX_LAYERS, MT_ERR_FORMAT,
               "config.json: first_k_dense_replace %lld, %lld layers and %lld MTP layers (at "
               "most %d)",
               (long long)k, (long long)c->L, (long long)c->nmtp, CV_MAX_LAYERS);
    for (int64_t l = 0; l < c->L + c->nmtp; l++) /* (an MTP layer: the last layer's kind, ours) */
        c->dense[l] = (l < c->L ? l : c->L - 1) < k;
    MT_REQUIRE(getb(cfg, "rope_interleave", 1), MT_ERR_UNSUPPORTED,
               "config.json: rope_interleave false (MLA's rotary channels are interleaved pairs "
               "here, Megatron's MLA rope)");
    MT_REQUIRE(!getb(cfg, "attention_bias", 0), MT_ERR_UNSUPPORTED,
               "config.json: attention_bias true (MLA without biases only)");
    if (k >= c->L) return MT_OK; /* (no MoE layer) */
    c->E = geti(cfg, "n_routed_experts", NULL, -1);
    c->Ie = geti(cfg, "moe_intermediate_size", NULL, -1);
    const int64_t ns = geti(cfg, "n_shared_experts", NULL, -1);
    MT_REQUIRE(c->E > 0 && c->Ie > 0, MT_ERR_FORMAT,
               "config.json: bad n_routed_experts or moe_intermediate_size");
    MT_REQUIRE(ns >= 1, MT_ERR_UNSUPPORTED, "config.json: n_shared_experts %lld (at least 1)",
               (long long)ns);
    c->Is = ns * c->Ie;
    /* (Megatron's sigmoid scores are renormalised over the k chosen when k > 1, never for k 1) */
    const int64_t topk = geti(cfg, "num_experts_per_tok", NULL, -1);
    const int norm = getb(cfg, "norm_topk_prob", 1);
    MT_REQUIRE(topk > 0 && norm == (topk > 1), MT_ERR_UNSUPPORTED,
               "config.json: norm_topk_prob %s with num_experts_per_tok %lld (Megatron "
               "renormalises sigmoid scores exactly when it is above 1)",
               norm ? "true" : "false", (long long)topk);
    /* HF ranks a group by its top 2 scores, Megatron by its top k / group_topk */
    const int64_t ng = geti(cfg, "n_group", NULL, 1), tg = geti(cfg, "topk_group", NULL, 1);
    MT_REQUIRE(ng <= 1 || tg >= ng || (tg > 0 && topk / tg == 2), MT_ERR_UNSUPPORTED,
               "config.json: n_group %lld with topk_group %lld and num_experts_per_tok %lld "
               "(Hugging Face ranks a group by its top 2 scores, Megatron by its top "
               "num_experts_per_tok / topk_group: they must be 2)",
               (long long)ng, (long long)tg, (long long)topk);
    return MT_OK;
}

static mt_status read_cfg(json_t *cfg, cv_cfg *c) {
    const char *t = json_string_value(json_object_get(cfg, "model_type"));
    MT_REQUIRE(t, MT_ERR_FORMAT, "config.json has no model_type");
    MT_REQUIRE(!strcmp(t, "gpt2") || !strcmp(t, "llama") || !strcmp(t, "mistral") ||
                   !strcmp(t, "phi3") || !strcmp(t, "qwen2") || !strcmp(t, "qwen3") ||
                   !strcmp(t, "mixtral") || !strcmp(t, "qwen2_moe") || !strcmp(t, "deepseek_v3") ||
                   !strcmp(t, "stablelm") || !strcmp(t, "qwen3_moe"),
               MT_ERR_UNSUPPORTED,
               "model_type '%s' (we convert gpt2, llama, mistral, phi3, stablelm, qwen2, qwen3, "
               "mixtral, "
               "qwen2_moe, qwen3_moe, deepseek_v3)",
               t);
    if (strcmp(t, "mistral") && strcmp(t, "mixtral") && strcmp(t, "phi3") &&
        strncmp(t, "qwen", 4)) { /* (Qwen's on some layers: mt-generate's full_attention_layer;
                                    another family's: not ours unless it spans the context) */
        json_t *sw = json_object_get(cfg, "sliding_window");
        const json_int_t w = json_integer_value(sw),
                         P = geti(cfg, "max_position_embeddings", NULL, 0);
        MT_REQUIRE(!json_is_integer(sw) || w >= P || getb(cfg, "use_sliding_window", 1) == 0,
                   MT_ERR_UNSUPPORTED,
                   "config.json: sliding_window %lld below max_position_embeddings %lld (attention "
                   "over the whole context only)",
                   (long long)w, (long long)P);
    }
    if (!strcmp(t, "stablelm")) { /* (its per-head norms are one per head, not Megatron's) */
        MT_REQUIRE(!getb(cfg, "qk_layernorm", 0), MT_ERR_UNSUPPORTED,
                   "config.json: qk_layernorm true (StableLM's norms of each head apart)");
        MT_REQUIRE(!getb(cfg, "use_parallel_residual", 0), MT_ERR_UNSUPPORTED,
                   "config.json: use_parallel_residual true (sequential layers only)");
    }
    c->type = t;
    int gpt2 = !strcmp(t, "gpt2");
    /* the rotary scaling libs/model runs (the hub's rope_scaling; transformers 5's
     * rope_parameters; their parameters are read where the model is built) */
    const char *keys[] = { "rope_parameters", "rope_scaling" };
    for (int i = 0; i < 2 && !gpt2; i++) {
        json_t *rp = json_object_get(cfg, keys[i]);
        const char *rt = json_string_value(json_object_get(rp, "rope_type"));
        if (!rt) rt = json_string_value(json_object_get(rp, "type"));
        MT_REQUIRE(
            !rt || !strcmp(rt, "default") || !strcmp(rt, "linear") || !strcmp(rt, "llama3") ||
                !strcmp(rt, "yarn") || !strcmp(rt, "longrope"),
            MT_ERR_UNSUPPORTED,
            "config.json: %s type '%s' (default, linear, llama3, yarn and longrope are supported)",
            keys[i], rt);
    }
    c->L = geti(cfg, gpt2 ? "n_layer" : "num_hidden_layers", "num_hidden_layers", -1);
    c->C = geti(cfg, gpt2 ? "n_embd" : "hidden_size", "hidden_size", -1);
    c->Q = geti(cfg, gpt2 ? "n_head" : "num_attention_heads", "num_attention_heads", -1);
    c->V = geti(cfg, "vocab_size", NULL, -1);
    c->P = geti(cfg, "n_positions", "max_position_embeddings", 0);
    c->G = gpt2 ? c->Q : geti(cfg, "num_key_value_heads", NULL, c->Q);
    MT_REQUIRE(c->L > 0 && c->C > 0 && c->Q > 0 && c->V > 0 && c->G > 0 && c->Q % c->G == 0,
               MT_ERR_FORMAT, "config.json: bad layers/hidden/heads/vocab/kv heads");
    c->D = geti(cfg, "head_dim", NULL, c->C / c->Q);
    c->I = gpt2 ? geti(cfg, "n_inner", NULL, 4 * c->C) : geti(cfg, "intermediate_size", NULL, -1);
    c->E = geti(cfg, "num_local_experts", "num_experts", 0);
    c->Ie = c->I; /* (Mixtral's experts are intermediate_size wide) */
    if (!strcmp(t, "qwen2_moe") || !strcmp(t, "qwen3_moe")) { /* (Qwen3-MoE: no shared expert) */
        c->Ie = geti(cfg, "moe_intermediate_size", NULL, -1);
        c->Is = strcmp(t, "qwen3_moe") ? geti(cfg, "shared_expert_intermediate_size", NULL, -1) : 1;
        MT_REQUIRE(c->E > 0 && c->Ie > 0 && c->Is > 0, MT_ERR_FORMAT,
                   "config.json: bad expert count, moe_intermediate_size or "
                   "shared_expert_intermediate_size");
        /* its dense layers (transformers' rule): l in mlp_only_layers or (l + 1) %
         * decoder_sparse_step != 0 */
        const int64_t step = geti(cfg, "decoder_sparse_step", NULL, 1);
        MT_REQUIRE(step >= 1 && c->L <= CV_MAX_LAYERS, MT_ERR_FORMAT,
                   "config.json: decoder_sparse_step %lld, %lld layers (at most %d)",
                   (long long)step, (long long)c->L, CV_MAX_LAYERS);
        for (int64_t l = 0; l < c->L; l++)
            c->dense[l] = (l + 1) % step != 0;
        json_t *only = json_object_get(cfg, "mlp_only_layers");
        for (size_t i = 0; i < json_array_size(only); i++) {
            const json_int_t l = json_integer_value(json_array_get(only, i));
            if (l >= 0 && l < c->L) c->dense[l] = 1;
        }
    }
    if (!strcmp(t, "deepseek_v3")) MT_TRY(read_deepseek(cfg, c));
    MT_REQUIRE(c->I > 0 && (strcmp(t, "mixtral") || c->E > 0), MT_ERR_FORMAT,
               "config.json: bad intermediate size or expert count");
    json_t *tie = json_object_get(cfg, "tie_word_embeddings");
    c->tied = tie ? json_is_true(tie) : gpt2;
    return MT_OK;
}

static int has(json_t *wmap, const char *fmt, ...) {
    char k[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k, sizeof k, fmt, ap);
    va_end(ap);
    return !wmap || json_object_get(wmap, k) != NULL; /* NULL: all optional tensors */
}

/* The table: internal tensors as row blocks of HF tensors, for config `c`. `wmap` (HF name ->
 * anything) says which optional tensors (biases, lm_head) exist; NULL: assume all do. */
static mt_status build_map(const cv_cfg *c, json_t *wmap, cv_map *m) {
    char h[256], n[256];
    int gpt2 = !strcmp(c->type, "gpt2");
    int ln = gpt2 || !strcmp(c->type, "stablelm"); /* LayerNorms with biases */
    const char *pre = gpt2 ? c->prefix : "model.";
    int64_t Q = c->Q, G = c->G, D = c->D, C = c->C, I = c->I;
    snprintf(h, sizeof h, "%s%s", pre, gpt2 ? "wte.weight" : "embed_tokens.weight");
    MT_TRY(same(m, "embedding.word_embeddings.weight", h, 0, c->V));
    MT_TRY(pad(m, c->Vp - c->V));
    if (gpt2) {
        snprintf(h, sizeof h, "%swpe.weight", pre);
        MT_TRY(same(m, "embedding.position_embeddings.weight", h, 0, c->P));
    }
    const int ds = !strcmp(c->type, "deepseek_v3");
    /* (DeepSeek-V3's multi-token prediction layers: model.layers.L + k, our mtp.layers.k) */
    for (int64_t i = 0; i < c->L + (ds ? c->nmtp : 0); i++) {
        char lp[64], ip[96];
        snprintf(lp, sizeof lp, gpt2 ? "%sh.%lld." : "%slayers.%lld.", pre, (long long)i);
        if (i < c->L)
            snprintf(ip, sizeof ip, "decoder.layers.%lld.", (long long)i);
        else
            snprintf(ip, sizeof ip, "mtp.layers.%lld.transformer_layer.", (long long)(i - c->L));
        const char *wb[] = { "weight", "bias" };
        if (ds) { /* MLA's projections and latent norms, HF's layouts in Megatron's MLA names */
            const struct {
                const char *ours, *hf;
                int64_t rows;
            } a[] = {
                { "linear_q_proj.weight", "q_proj.weight", Q * (c->dn + c->dr) }, /* (no q_lora) */
                { "linear_q_down_proj.weight", "q_a_proj.weight", c->qr },
                { "linear_q_up_proj.layer_norm_weight", "q_a_layernorm.weight", c->qr },
                { "linear_q_up_proj.weight", "q_b_proj.weight", Q * (c->dn + c->dr) },
                { "linear_kv_down_proj.weight", "kv_a_proj_with_mqa.weight", c->kr + c->dr },
                { "linear_kv_up_proj.layer_norm_weight", "kv_a_layernorm.weight", c->kr },
                { "linear_kv_up_proj.weight", "kv_b_proj.weight", Q * (c->dn + c->dv) },
            };
            for (int k = 0; k < 7; k++) {
                if (k < 4 && (k == 0) != (c->qr == 0)) continue;
                snprintf(n, sizeof n, "%sself_attention.%s", ip, a[k].ours);
                snprintf(h, sizeof h, "%sself_attn.%s", lp, a[k].hf);
                MT_TRY(same(m, n, h, 0, a[k].rows));
            }
        }
        const int phi3 = !strcmp(c->type, "phi3"); /* (its q|k|v and gate|up fused as ours) */
        for (int b = 0; b < 2 && !ds; b++) {
            if (!gpt2 && b == 1 &&
                !has(wmap, phi3 ? "%sself_attn.qkv_proj.bias" : "%sself_attn.q_proj.bias", lp))
                continue;
            MT_TRY(entry(m, "%sself_attention.linear_qkv.%s", ip, wb[b]));
            if (gpt2) { /* c_attn^T rows are already q | k | v, each C = Q*D */
                snprintf(h, sizeof h, "%sattn.c_attn.%s", lp, wb[b]);
                MT_TRY(piece(m, h, -1, b == 0, 0, 3 * C));
                continue;
            }
            if (phi3) {
                snprintf(h, sizeof h, "%sself_attn.qkv_proj.%s", lp, wb[b]);
                MT_TRY(piece(m, h, -1, 0, 0, (Q + 2 * G) * D));
                continue;
            }
            const char *qkv[] = { "q", "k", "v" };
            for (int k = 0; k < 3; k++) {
                snprintf(h, sizeof h, "%sself_attn.%s_proj.%s", lp, qkv[k], wb[b]);
                MT_TRY(piece(m, h, -1, 0, 0, (k ? G : Q) * D));
            }
        }
        const int q3 = !strcmp(c->type, "qwen3") || !strcmp(c->type, "qwen3_moe");
        for (int k = 0; q3 && k < 2; k++) { /* per-head q and k norms */
            snprintf(h, sizeof h, "%sself_attn.%s_norm.weight", lp, k ? "k" : "q");
            snprintf(n, sizeof n, "%sself_attention.%s_layernorm.weight", ip, k ? "k" : "q");
            MT_TRY(same(m, n, h, 0, D));
        }
        for (int b = 0; b < 2; b++) {
            const char *w = wb[b];
            int t = gpt2 && b == 0; /* Conv1D weights are (in, out) */
            if (ln || b == 0) {
                snprintf(h, sizeof h, gpt2 ? "%sln_1.%s" : "%sinput_layernorm.%s", lp, w);
                snprintf(n, sizeof n, "%sinput_layernorm.%s", ip, w);
                MT_TRY(same(m, n, h, 0, C));
                snprintf(h, sizeof h, gpt2 ? "%sln_2.%s" : "%spost_attention_layernorm.%s", lp, w);
                snprintf(n, sizeof n, "%spre_mlp_layernorm.%s", ip, w);
                MT_TRY(same(m, n, h, 0, C));
            }
            snprintf(h, sizeof h, gpt2 ? "%sattn.c_proj.%s" : "%sself_attn.o_proj.%s", lp, w);
            snprintf(n, sizeof n, "%sself_attention.linear_proj.%s", ip, w);
            if (b == 0 || has(wmap, "%s", h)) MT_TRY(same(m, n, h, t, C));
            if (gpt2) {
                snprintf(n, sizeof n, "%smlp.linear_fc1.%s", ip, w);
                snprintf(h, sizeof h, "%smlp.c_fc.%s", lp, w);
                MT_TRY(same(m, n, h, t, I));
                snprintf(n, sizeof n, "%smlp.linear_fc2.%s", ip, w);
                snprintf(h, sizeof h, "%smlp.c_proj.%s", lp, w);
                MT_TRY(same(m, n, h, t, C));
            } else if (phi3 && b == 0) {
                snprintf(n, sizeof n, "%smlp.linear_fc1.weight", ip);
                snprintf(h, sizeof h, "%smlp.gate_up_proj.weight", lp);
                MT_TRY(same(m, n, h, 0, 2 * I));
                snprintf(n, sizeof n, "%smlp.linear_fc2.weight", ip);
                snprintf(h, sizeof h, "%smlp.down_proj.weight", lp);
                MT_TRY(same(m, n, h, 0, C));
            } else if ((!strcmp(c->type, "llama") || !strcmp(c->type, "mistral") ||
                        !strcmp(c->type, "qwen2") || !strcmp(c->type, "qwen3") ||
                        !strcmp(c->type, "stablelm") || c->dense[i]) &&
                       (b == 0 || has(wmap, "%smlp.gate_proj.bias", lp))) {
                MT_TRY(entry(m, "%smlp.linear_fc1.%s", ip, w));
                snprintf(h, sizeof h, "%smlp.gate_proj.%s", lp, w);
                MT_TRY(piece(m, h, -1, 0, 0, I));
                snprintf(h, sizeof h, "%smlp.up_proj.%s", lp, w);
                MT_TRY(piece(m, h, -1, 0, 0, I));
                snprintf(n, sizeof n, "%smlp.linear_fc2.%s", ip, w);
                snprintf(h, sizeof h, "%smlp.down_proj.%s", lp, w);
                MT_TRY(same(m, n, h, 0, C));
            }
        }
        /* (a sparse layer of Qwen2-MoE, Qwen3-MoE or DeepSeek-V3) */
        const int q3moe = !strcmp(c->type, "qwen3_moe");
        const int qmoe = (!strcmp(c->type, "qwen2_moe") || q3moe || ds) && !c->dense[i];
        const int64_t Ie = c->Ie;
        if (qmoe && !q3moe) { /* the shared expert ([gate; up], down), Qwen2-MoE's gated */
            const char *hs = ds ? "mlp.shared_experts" : "mlp.shared_expert";
            snprintf(n, sizeof n, "%smlp.shared_experts.", ip);
            MT_TRY(entry(m, "%slinear_fc1.weight", n));
            snprintf(h, sizeof h, "%s%s.gate_proj.weight", lp, hs);
            MT_TRY(piece(m, h, -1, 0, 0, c->Is));
            snprintf(h, sizeof h, "%s%s.up_proj.weight", lp, hs);
            MT_TRY(piece(m, h, -1, 0, 0, c->Is));
            char sn[300];
            snprintf(sn, sizeof sn, "%slinear_fc2.weight", n);
            snprintf(h, sizeof h, "%s%s.down_proj.weight", lp, hs);
            MT_TRY(same(m, sn, h, 0, C));
            snprintf(sn, sizeof sn, "%sgate_weight", n);
            snprintf(h, sizeof h, "%smlp.shared_expert_gate.weight", lp);
            if (!ds) MT_TRY(same(m, sn, h, 0, 1));
        }
        if (!strcmp(c->type, "mixtral") || qmoe) {
            int f = c->experts_fused;
            /* (Mixtral's unfused experts: block_sparse_moe.experts.e.w1, w3, w2; Qwen2-MoE's and
             * DeepSeek-V3's: mlp.experts.e.gate_proj, up_proj, down_proj) */
            const char *u1 = qmoe ? "%smlp.experts.%d.gate_proj.weight"
                                  : "%sblock_sparse_moe.experts.%d.w1.weight";
            const char *u3 = qmoe ? "%smlp.experts.%d.up_proj.weight"
                                  : "%sblock_sparse_moe.experts.%d.w3.weight";
            const char *u2 = qmoe ? "%smlp.experts.%d.down_proj.weight"
                                  : "%sblock_sparse_moe.experts.%d.w2.weight";
            snprintf(h, sizeof h,
                     f || qmoe ? "%smlp.gate.weight" : "%sblock_sparse_moe.gate.weight", lp);
            snprintf(n, sizeof n, "%smlp.router.weight", ip);
            MT_TRY(same(m, n, h, 0, c->E));
            if (ds) { /* the expert bias: a buffer of ours, not a parameter */
                snprintf(n, sizeof n, "%smlp.router.expert_bias", ip);
                snprintf(h, sizeof h, "%smlp.gate.e_score_correction_bias", lp);
                MT_TRY(same(m, n, h, 0, c->E));
            }
            for (int e = 0; e < c->E; e++) {
                char ep[160];
                snprintf(ep, sizeof ep, "%smlp.experts.local_experts.%d.", ip, e);
                MT_TRY(entry(m, "%slinear_fc1.weight", ep));
                if (f) {
                    snprintf(h, sizeof h, "%smlp.experts.gate_up_proj", lp);
                    MT_TRY(piece(m, h, e, 0, 0, 2 * Ie));
                } else {
                    snprintf(h, sizeof h, u1, lp, e);
                    MT_TRY(piece(m, h, -1, 0, 0, Ie));
                    snprintf(h, sizeof h, u3, lp, e);
                    MT_TRY(piece(m, h, -1, 0, 0, Ie));
                }
                snprintf(n, sizeof n, "%slinear_fc2.weight", ep);
                if (f) {
                    snprintf(h, sizeof h, "%smlp.experts.down_proj", lp);
                    MT_TRY(entry(m, "%s", n));
                    MT_TRY(piece(m, h, e, 0, 0, C));
                } else {
                    snprintf(h, sizeof h, u2, lp, e);
                    MT_TRY(same(m, n, h, 0, C));
                }
            }
        }
        if (i >= c->L) { /* the MTP layer's own: its norms, eh_proj ([e | h], as ours) */
            const char *a[4][2] = { { "enorm.weight", "enorm.weight" },
                                    { "hnorm.weight", "hnorm.weight" },
                                    { "eh_proj.weight", "eh_proj.weight" },
                                    { "final_layernorm.weight", "shared_head.norm.weight" } };
            for (int k = 0; k < 4; k++) {
                snprintf(n, sizeof n, "mtp.layers.%lld.%s", (long long)(i - c->L), a[k][0]);
                snprintf(h, sizeof h, "%s%s", lp, a[k][1]);
                MT_TRY(same(m, n, h, 0, C));
            }
            if (!wmap) { /* (export: the hub's copies of the shared embedding and head) */
                snprintf(h, sizeof h, "%sembed_tokens.weight", lp);
                MT_TRY(same(m, "embedding.word_embeddings.weight", h, 0, c->V));
                MT_TRY(pad(m, c->Vp - c->V));
                snprintf(h, sizeof h, "%sshared_head.head.weight", lp);
                MT_TRY(same(m, c->tied ? "embedding.word_embeddings.weight" : "output_layer.weight",
                            h, 0, c->V));
                MT_TRY(pad(m, c->Vp - c->V));
            }
        }
    }
    const char *fw[] = { "weight", "bias" };
    for (int b = 0; b < (ln ? 2 : 1); b++) {
        snprintf(h, sizeof h, gpt2 ? "%sln_f.%s" : "%snorm.%s", pre, fw[b]);
        snprintf(n, sizeof n, "decoder.final_layernorm.%s", fw[b]);
        MT_TRY(same(m, n, h, 0, C));
    }
    if (!c->tied) { /* (a tied model's lm_head.weight, if saved, is the embedding: skipped) */
        MT_TRY(same(m, "output_layer.weight", "lm_head.weight", 0, c->V));
        MT_TRY(pad(m, c->Vp - c->V));
    }
    return MT_OK;
}

/* ---- HF side: a set of safetensors files and the weight map ---- */

typedef struct hf_set {
    json_t *wmap; /* name -> file */
    int nf;
    char **fname;
    mt_safetensors **f;
} hf_set;

static void hf_close(hf_set *s) {
    for (int i = 0; i < s->nf; i++) {
        mt_safetensors_close(s->f[i]);
        free(s->fname[i]);
    }
    free(s->f);
    free(s->fname);
    json_decref(s->wmap);
}

static mt_status hf_open(const char *dir, hf_set *s) {
    char p[4096];
    memset(s, 0, sizeof *s);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    json_t *ix = json_load_file(p, JSON_REJECT_DUPLICATES, NULL);
    if (ix) {
        s->wmap = json_incref(json_object_get(ix, "weight_map"));
        json_decref(ix);
        MT_REQUIRE(json_is_object(s->wmap), MT_ERR_FORMAT, "%s: no weight_map", p);
    } else {
        s->wmap = json_object();
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        mt_safetensors *f;
        MT_TRY(mt_safetensors_open(p, &f));
        for (int i = 0; i < mt_safetensors_count(f); i++)
            json_object_set_new(s->wmap, mt_safetensors_name(f, i),
                                json_string("model.safetensors"));
        mt_safetensors_close(f);
    }
    size_t nmax = json_object_size(s->wmap) + 1;
    s->f = calloc(nmax, sizeof *s->f);
    s->fname = calloc(nmax, sizeof *s->fname);
    MT_REQUIRE(s->f && s->fname, MT_ERR_OOM, "files");
    const char *k;
    json_t *v;
    json_object_foreach(s->wmap, k, v) {
        const char *fn = json_string_value(v);
        MT_REQUIRE(fn && !strchr(fn, '/'), MT_ERR_FORMAT, "weight_map['%s'] is not a file name", k);
        int found = 0;
        for (int i = 0; i < s->nf && !found; i++)
            found = !strcmp(s->fname[i], fn);
        if (found) continue;
        snprintf(p, sizeof p, "%s/%s", dir, fn);
        MT_TRY(mt_safetensors_open(p, &s->f[s->nf]));
        s->fname[s->nf++] = strdup(fn);
    }
    return MT_OK;
}

static mt_status hf_get(const hf_set *s, const char *name, mt_tensor *t) {
    const char *fn = json_string_value(json_object_get(s->wmap, name));
    MT_REQUIRE(fn, MT_ERR_FORMAT, "HF checkpoint has no tensor '%s'", name);
    for (int i = 0; i < s->nf; i++)
        if (!strcmp(s->fname[i], fn)) return mt_safetensors_get(s->f[i], name, t);
    return MT_ERROR(MT_ERR_INTERNAL, "file %s not opened", fn);
}

/* The (rows, cols) matrix a piece reads: expert selected, transposed if asked; 1-D: (n, 1). */
static void piece_dims(const cv_piece *p, const mt_tensor *t, int64_t *rows, int64_t *cols) {
    if (t->ndim <= 1) {
        *rows = t->ndim ? t->shape[0] : 1;
        *cols = 1;
        return;
    }
    int a = p->expert >= 0 ? 1 : 0;
    int64_t r = t->shape[a], c = a + 1 < t->ndim ? t->shape[a + 1] : 1;
    *rows = p->transpose ? c : r;
    *cols = p->transpose ? r : c;
}

/* Copies the piece's rows between the HF tensor `t` and internal rows starting at `irow` of a
 * (rows, cols) buffer `in`; to_internal picks the direction. */
static void copy_piece(const cv_piece *p, mt_tensor *t, unsigned char *in, int64_t irow,
                       int64_t cols, int to_internal) {
    size_t es = mt_dtype_size(t->dtype);
    unsigned char *hf = t->data;
    int64_t hr, hc;
    piece_dims(p, t, &hr, &hc);
    if (p->expert >= 0) hf += (size_t)p->expert * (size_t)(hr * hc) * es;
    for (int64_t r = 0; r < p->rows; r++) {
        unsigned char *dst = in + (size_t)((irow + r) * cols) * es;
        if (!p->transpose) {
            unsigned char *src = hf + (size_t)((p->row0 + r) * cols) * es;
            if (to_internal)
                memcpy(dst, src, (size_t)cols * es);
            else
                memcpy(src, dst, (size_t)cols * es);
            continue;
        }
        for (int64_t c = 0; c < cols; c++) { /* M[r][c] = hf[c][r]; hf is (cols, rows) */
            unsigned char *src = hf + (size_t)(c * hr + p->row0 + r) * es;
            if (to_internal)
                memcpy(dst + (size_t)c * es, src, es);
            else
                memcpy(src, dst + (size_t)c * es, es);
        }
    }
}

static mt_status load_config(const char *dir, json_t **cfg, cv_cfg *c) {
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_error_t je;
    *cfg = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    MT_REQUIRE(*cfg, MT_ERR_IO, "%s: %s", p, je.text);
    return read_cfg(*cfg, c);
}

mt_status cv_hf_to_mt(const char *hf_dir, const char *mt_dir, int make_vocab_size_divisible_by) {
    json_t *cfg = NULL;
    cv_cfg c = { 0 };
    hf_set s = { 0 };
    cv_map m = { 0 };
    mt_ckpt_item *items = NULL;
    mt_tensor *ts = NULL;
    void **bufs = NULL;
    mt_ckpt_writer *w = NULL;
    char *args = NULL;
    mt_status st = MT_OK;
    int64_t div = make_vocab_size_divisible_by;
    MT_REQUIRE(div > 0, MT_ERR_INVALID_ARG, "--make-vocab-size-divisible-by %lld must be > 0",
               (long long)div);
    MT_TRY_GOTO(load_config(hf_dir, &cfg, &c), st, done);
    c.Vp = (c.V + div - 1) / div * div;
    MT_TRY_GOTO(hf_open(hf_dir, &s), st, done);
    c.prefix = json_object_get(s.wmap, "transformer.wte.weight") ? "transformer." : "";
    for (int64_t i = 0; i < c.L && !c.experts_fused; i++) /* (a MoE layer's; some are dense) */
        c.experts_fused = has(s.wmap, "model.layers.%lld.mlp.experts.gate_up_proj", (long long)i);
    MT_TRY_GOTO(build_map(&c, s.wmap, &m), st, done);
    for (int i = 0; i < m.nhf && c.nmtp; i++) /* (MTP layers stripped or partial: skipped) */
        if (!json_object_get(s.wmap, m.hf[i])) {
            MT_LOG_INFO("%s: no '%s': the multi-token prediction layers are not imported", hf_dir,
                        m.hf[i]);
            map_free(&m);
            memset(&m, 0, sizeof m);
            c.nmtp = 0;
            MT_TRY_GOTO(build_map(&c, s.wmap, &m), st, done);
        }
    /* every HF tensor must be used (bar GPT-2's mask buffers and DeepSeek-V3's multi-token
     * prediction layers), each row exactly once */
    const char *k;
    json_t *v;
    int64_t nmtp = 0;
    json_object_foreach(s.wmap, k, v) {
        size_t kl = strlen(k); /* GPT-2's causal-mask buffers are not weights */
        int buffer = (kl > 10 && !strcmp(k + kl - 10, ".attn.bias")) || strstr(k, "masked_bias");
        buffer |= c.tied && !strcmp(k, "lm_head.weight"); /* the embedding's tied copy */
        long long l = -1; /* (the hub's DeepSeek-V3 keeps them as model.layers.L.*, L >= layers:
                             imported when whole, their copies of the embedding and head not) */
        if (!strcmp(c.type, "deepseek_v3") && sscanf(k, "model.layers.%lld.", &l) == 1 &&
            l >= c.L) {
            buffer = !c.nmtp || strstr(k, ".embed_tokens.") || strstr(k, ".shared_head.head.");
            nmtp += !c.nmtp;
        }
        int used = 0;
        for (int i = 0; i < m.nhf && !used; i++)
            used = !strcmp(m.hf[i], k);
        if (!used && !buffer) {
            st = MT_ERROR(MT_ERR_UNSUPPORTED, "%s: tensor '%s' has no mapping for %s", hf_dir, k,
                          c.type);
            goto done;
        }
    }
    if (c.nmtp)
        MT_LOG_INFO("%s: importing %lld multi-token prediction layer(s) (model.layers.%lld and on) "
                    "as mtp.layers.*: train them with --mtp-num-layers %lld",
                    hf_dir, (long long)c.nmtp, (long long)c.L, (long long)c.nmtp);
    if (nmtp)
        MT_LOG_INFO("%s: skipping %lld tensors of the multi-token prediction layers "
                    "(model.layers.%lld and on; num_nextn_predict_layers %lld)",
                    hf_dir, (long long)nmtp, (long long)c.L,
                    (long long)geti(cfg, "num_nextn_predict_layers", NULL, 0));
    items = calloc((size_t)m.ne, sizeof *items);
    ts = calloc((size_t)m.ne, sizeof *ts);
    bufs = calloc((size_t)m.ne, sizeof *bufs);
    int64_t *used = calloc((size_t)m.nhf, sizeof *used);
    if (!items || !ts || !bufs || !used) {
        free(used);
        st = MT_ERROR(MT_ERR_OOM, "tables");
        goto done;
    }
    for (int i = 0; i < m.ne; i++) {
        cv_entry *e = &m.e[i];
        int64_t rows = 0, cols = -1;
        mt_tensor t0 = { 0 };
        for (int j = 0; j < e->n; j++) {
            cv_piece *p = &m.p[e->first + j];
            if (p->hf < 0) { /* padding: zero rows of the previous piece's width */
                rows += p->rows;
                continue;
            }
            mt_tensor t;
            MT_TRY_GOTO(hf_get(&s, m.hf[p->hf], &t), st, done_used);
            int64_t hr, hc;
            piece_dims(p, &t, &hr, &hc);
            if (cols < 0) t0 = t;
            if ((cols >= 0 && hc != cols) || p->row0 + p->rows > hr || t.dtype != t0.dtype ||
                (p->expert >= 0 && (t.ndim != 3 || p->expert >= t.shape[0]))) {
                char b[128];
                st = MT_ERROR(MT_ERR_FORMAT, "%s: '%s' is %s, which does not fit '%s' (config?)",
                              hf_dir, m.hf[p->hf], mt_tensor_str(&t, b, sizeof b), e->name);
                goto done_used;
            }
            cols = hc;
            rows += p->rows;
            used[p->hf] += p->rows;
        }
        size_t es = mt_dtype_size(t0.dtype);
        bufs[i] = calloc(1, (size_t)(rows * cols) * es + 1); /* padding rows stay zero */
        if (!bufs[i]) {
            st = MT_ERROR(MT_ERR_OOM, "%s", e->name);
            goto done_used;
        }
        for (int64_t r = 0, j = 0; j < e->n; j++) {
            cv_piece *p = &m.p[e->first + j];
            mt_tensor t;
            if (p->hf >= 0 && hf_get(&s, m.hf[p->hf], &t) == MT_OK)
                copy_piece(p, &t, bufs[i], r, cols, 1);
            r += p->rows;
        }
        ts[i] = t0.ndim == 1 ? mt_tensor_1d(bufs[i], t0.dtype, rows, MT_DEVICE_CPU)
                             : mt_tensor_2d(bufs[i], t0.dtype, rows, cols, MT_DEVICE_CPU);
        items[i] = (mt_ckpt_item){ e->name, &ts[i], NULL, NULL, 0 };
    }
    for (int i = 0; i < m.nhf; i++) { /* rows covered == rows held, for every HF tensor */
        mt_tensor t;
        hf_get(&s, m.hf[i], &t);
        int64_t want = t.ndim == 1 ? t.shape[0] : t.ndim == 3 ? t.shape[0] * t.shape[1] : 0;
        if (t.ndim == 2) {
            int tr = 0;
            for (int j = 0; j < m.np; j++)
                if (m.p[j].hf == i) tr = m.p[j].transpose;
            want = t.shape[tr ? 1 : 0];
        }
        if (used[i] != want) {
            st = MT_ERROR(MT_ERR_INTERNAL, "'%s': mapped %lld of %lld rows", m.hf[i],
                          (long long)used[i], (long long)want);
            goto done_used;
        }
    }
    json_t *a = json_pack("{s{sO ss ss sI sI}}", "hf", "config", cfg, "experts",
                          c.experts_fused ? "fused" : "split", "prefix", c.prefix,
                          "make_vocab_size_divisible_by", (json_int_t)div, "padded_vocab_size",
                          (json_int_t)c.Vp);
    if (c.nmtp) /* (mt-pretrain's --use-checkpoint-args and mt-generate read it) */
        json_object_set_new(a, "mtp_num_layers", json_integer(c.nmtp));
    args = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    mt_ckpt_writer_config wc = MT_CKPT_WRITER_CONFIG_INIT;
    wc.dir = mt_dir;
    MT_TRY_GOTO(mt_ckpt_writer_create(&wc, &w), st, done_used);
    mt_ckpt_state state = { args, NULL, NULL };
    MT_TRY_GOTO(mt_ckpt_save(w, 0, items, m.ne, &state), st, done_used);
    MT_LOG_INFO("%s: %s, %d HF tensors -> %d tensors in %s", hf_dir, c.type, m.nhf, m.ne, mt_dir);
done_used:
    free(used);
done:
    mt_ckpt_writer_destroy(w);
    for (int i = 0; bufs && i < m.ne; i++)
        free(bufs[i]);
    free(bufs);
    free(ts);
    free(items);
    free(args);
    map_free(&m);
    hf_close(&s);
    json_decref(cfg);
    return st;
}

static mt_status write_hf(const char *dir, const cv_map *m, const int *keep, mt_tensor *hts,
                          uint64_t max_shard, json_t *cfg) {
    char p[4096], fn[64];
    MT_REQUIRE(mkdir(dir, 0755) == 0 || errno == EEXIST, MT_ERR_IO, "cannot create %s: %s", dir,
               strerror(errno));
    int nshards = 0;
    int *shard = calloc((size_t)m->nhf + 1, sizeof *shard);
    mt_safetensors_item *it = calloc((size_t)m->nhf + 1, sizeof *it);
    MT_REQUIRE(shard && it, MT_ERR_OOM, "shards");
    uint64_t cur = 0, total = 0;
    for (int i = 0; i < m->nhf; i++) {
        if (!keep[i]) continue;
        uint64_t b = mt_tensor_nbytes(&hts[i]);
        if (nshards == 0 || (cur > 0 && cur + b > max_shard)) {
            nshards++;
            cur = 0;
        }
        shard[i] = nshards;
        cur += b;
        total += b;
    }
    json_t *wmap = json_object();
    mt_status st = MT_OK;
    const char *meta[] = { "format", "pt" };
    for (int k = 1; k <= nshards && st == MT_OK; k++) {
        if (nshards == 1)
            snprintf(fn, sizeof fn, "model.safetensors");
        else
            snprintf(fn, sizeof fn, "model-%05d-of-%05d.safetensors", k, nshards);
        int n = 0;
        for (int i = 0; i < m->nhf; i++)
            if (keep[i] && shard[i] == k) {
                it[n++] = (mt_safetensors_item){ m->hf[i], &hts[i] };
                json_object_set_new(wmap, m->hf[i], json_string(fn));
            }
        snprintf(p, sizeof p, "%s/%s", dir, fn);
        st = mt_safetensors_save(p, it, n, meta, 1);
    }
    if (st == MT_OK && nshards > 1) {
        json_t *ix = json_pack("{s{sI} sO}", "metadata", "total_size", (json_int_t)total,
                               "weight_map", wmap);
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        if (json_dump_file(ix, p, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
            st = MT_ERROR(MT_ERR_IO, "cannot write %s", p);
        json_decref(ix);
    }
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (st == MT_OK && json_dump_file(cfg, p, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
        st = MT_ERROR(MT_ERR_IO, "cannot write %s", p);
    json_decref(wmap);
    free(shard);
    free(it);
    return st;
}

mt_status cv_mt_to_hf(const char *mt_dir, const char *hf_dir, uint64_t max_shard_bytes,
                      cv_experts experts) {
    mt_ckpt *ck = NULL;
    json_t *args = NULL;
    cv_cfg c = { 0 };
    cv_map m = { 0 };
    int *keep = NULL, *ekeep = NULL;
    mt_tensor *hts = NULL;
    unsigned char *ibuf = NULL;
    mt_status st = MT_OK;
    MT_TRY_GOTO(mt_ckpt_open(mt_dir, MT_CKPT_ITER_LATEST, 0, &ck), st, done);
    args = json_loads(mt_ckpt_args(ck), JSON_DECODE_ANY, NULL);
    json_t *hf = json_object_get(args, "hf"), *cfg = json_object_get(hf, "config");
    if (!cfg) {
        st = MT_ERROR(MT_ERR_FORMAT,
                      "%s: args have no hf.config (neither imported by mt-convert nor a GPT-2, "
                      "Llama, Qwen2, Qwen3, Mixtral, Qwen2-MoE or DeepSeek-V3 shape that "
                      "mt-pretrain keeps one for; an MoE router other than theirs, or ungated "
                      "shared experts without DeepSeek-V3's attention, have none)",
                      mt_dir);
        goto done;
    }
    MT_TRY_GOTO(read_cfg(cfg, &c), st, done);
    const char *pre = json_string_value(json_object_get(hf, "prefix"));
    const char *ex = json_string_value(json_object_get(hf, "experts"));
    c.prefix = pre ? pre : "transformer.";
    c.experts_fused =
        experts == CV_EXPERTS_AUTO ? (ex && !strcmp(ex, "fused")) : experts == CV_EXPERTS_FUSED;
    int64_t esh[MT_MAX_DIMS]; /* the padded vocabulary is whatever the embedding holds */
    MT_TRY_GOTO(mt_ckpt_info(ck, "embedding.word_embeddings.weight", NULL, NULL, esh), st, done);
    c.Vp = esh[0];
    if (c.Vp < c.V) {
        st = MT_ERROR(MT_ERR_FORMAT, "%s: embedding has %lld rows < vocab_size %lld", mt_dir,
                      (long long)c.Vp, (long long)c.V);
        goto done;
    }
    /* multi-token prediction: DeepSeek-V3's layers model.layers.L + k when the checkpoint has
     * them; other families have no such layers (not exported) */
    const json_int_t ntrained = json_integer_value(json_object_get(args, "mtp_num_layers"));
    if (mt_ckpt_info(ck, "mtp.layers.0.eh_proj.weight", NULL, NULL, NULL) != MT_OK) {
        mt_error_clear();
        c.nmtp = 0;
    } else if (strcmp(c.type, "deepseek_v3") != 0) {
        MT_LOG_WARN("%s: its %lld multi-token prediction layer(s) (mtp.layers.*) are not exported: "
                    "Hugging Face's %s has none",
                    mt_dir, (long long)ntrained, c.type);
    }
    MT_TRY_GOTO(build_map(&c, NULL, &m), st, done);
    keep = calloc((size_t)m.nhf + 1, sizeof *keep);
    ekeep = calloc((size_t)m.ne + 1, sizeof *ekeep);
    hts = calloc((size_t)m.nhf + 1, sizeof *hts);
    int64_t *rows = calloc((size_t)m.nhf + 1, sizeof *rows);
    if (!keep || !ekeep || !hts || !rows) {
        free(rows);
        st = MT_ERROR(MT_ERR_OOM, "tables");
        goto done;
    }
    /* shapes of the HF tensors, from the internal ones they feed */
    for (int i = 0; i < m.ne; i++) {
        mt_dtype dt;
        int nd;
        int64_t sh[MT_MAX_DIMS];
        if (mt_ckpt_info(ck, m.e[i].name, &dt, &nd, sh) != MT_OK) {
            mt_error_clear();
            continue; /* an optional tensor (bias, untied head) this model does not have */
        }
        ekeep[i] = 1;
        for (int j = 0; j < m.e[i].n; j++) {
            cv_piece *p = &m.p[m.e[i].first + j];
            if (p->hf < 0) continue; /* padding: not exported */
            mt_tensor *t = &hts[p->hf];
            int64_t cols = nd == 2 ? sh[1] : 1;
            if (p->expert < 0 || p->expert == 0) rows[p->hf] += p->rows;
            keep[p->hf] = 1;
            t->dtype = dt;
            if (nd == 1) {
                t->ndim = 1;
                t->shape[0] = rows[p->hf];
            } else if (p->expert >= 0) {
                t->ndim = 3;
                t->shape[0] = t->shape[0] > p->expert + 1 ? t->shape[0] : p->expert + 1;
                t->shape[1] = rows[p->hf];
                t->shape[2] = cols;
            } else {
                t->ndim = 2;
                t->shape[0] = p->transpose ? cols : rows[p->hf];
                t->shape[1] = p->transpose ? rows[p->hf] : cols;
            }
        }
    }
    free(rows);
    for (int i = 0; i < m.nhf; i++) {
        if (!keep[i]) continue;
        hts[i] = mt_tensor_make(NULL, hts[i].dtype, hts[i].ndim, hts[i].shape, MT_DEVICE_CPU);
        hts[i].data = calloc(1, mt_tensor_nbytes(&hts[i]) + 1);
        if (!hts[i].data) {
            st = MT_ERROR(MT_ERR_OOM, "%s", m.hf[i]);
            goto done;
        }
    }
    for (int i = 0; i < m.ne; i++) {
        if (!ekeep[i]) {
            int required = strstr(m.e[i].name, ".bias") == NULL &&
                           strcmp(m.e[i].name, "output_layer.weight") != 0;
            if (required) {
                st = MT_ERROR(MT_ERR_FORMAT, "%s: no tensor '%s' for %s", mt_dir, m.e[i].name,
                              c.type);
                goto done;
            }
            continue;
        }
        mt_dtype dt;
        int nd;
        int64_t sh[MT_MAX_DIMS];
        MT_TRY_GOTO(mt_ckpt_info(ck, m.e[i].name, &dt, &nd, sh), st, done);
        mt_tensor t = mt_tensor_make(NULL, dt, nd, sh, MT_DEVICE_CPU);
        free(ibuf);
        ibuf = malloc(mt_tensor_nbytes(&t) + 1);
        t.data = ibuf;
        if (!ibuf) {
            st = MT_ERROR(MT_ERR_OOM, "%s", m.e[i].name);
            goto done;
        }
        int64_t want = 0; /* rows the table expects, padding included */
        for (int j = 0; j < m.e[i].n; j++)
            want += m.p[m.e[i].first + j].rows;
        if (sh[0] != want) {
            st = MT_ERROR(MT_ERR_FORMAT, "%s: '%s' has %lld rows, %s config wants %lld", mt_dir,
                          m.e[i].name, (long long)sh[0], c.type, (long long)want);
            goto done;
        }
        MT_TRY_GOTO(mt_ckpt_read(ck, m.e[i].name, &t, NULL), st, done);
        for (int64_t r = 0, j = 0; j < m.e[i].n; j++) {
            cv_piece *p = &m.p[m.e[i].first + j];
            if (p->hf >= 0) copy_piece(p, &hts[p->hf], ibuf, r, nd == 2 ? sh[1] : 1, 0);
            r += p->rows;
        }
    }
    MT_TRY_GOTO(write_hf(hf_dir, &m, keep, hts, max_shard_bytes, cfg), st, done);
    MT_LOG_INFO("%s -> %s: %s", mt_dir, hf_dir, c.type);
done:
    for (int i = 0; hts && i < m.nhf; i++)
        free(hts[i].data);
    free(hts);
    free(ibuf);
    free(keep);
    free(ekeep);
    map_free(&m);
    json_decref(args);
    mt_ckpt_close(ck);
    return st;
}
