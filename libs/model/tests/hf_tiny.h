/* The tiny Hugging Face GPT-2, Llama (llama_scaled: with Llama 3's scaled rotary frequencies),
 * Mistral (mistral_window: a sliding window), StableLM (LayerNorms, partial rotary embeddings), Qwen3-MoE (a dense layer, then experts),
 * Qwen2 (qwen2_window: a window on its second layer only), Qwen3, Mixtral, Qwen2-MoE (also with a dense layer: qwen2_moe_mixed) and DeepSeek-V3
 * (deepseek_mla: its attention, dense MLPs; deepseek_yarn: that with YaRN) of
 * golden/gen_hf.py (and megatron.core's GPT models with multi-token prediction, mtp_llama,
 * mtp_gpt2 and mtp_moe, of golden/gen_mtp.py), shared by libs/model's
 * test_hf_golden and libs/train's test_hf_adamw: the model config and the weight loading. */
#ifndef MT_MODEL_TESTS_HF_TINY_H
#define MT_MODEL_TESTS_HF_TINY_H

#include <mt/model.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

#define B 2
#define T 16
#define V 500

/* The Llama choices of the tiny models (hidden 64): GQA with 2 groups, SwiGLU 128, RMSNorm, RoPE,
 * no biases, untied output layer. */
static inline void tiny_llama_layers(mt_model_config *c) {
    c->num_query_groups = 2;
    c->ffn_hidden_size = 128;
    c->normalization = MT_NORM_RMSNORM;
    c->position_embedding_type = MT_POS_ROPE;
    c->swiglu = 1;
    c->add_bias_linear = 0;
    c->untie_embeddings_and_output_weights = 1;
}

static inline mt_model_config hf_tiny_config(const char *tag, mt_dtype dt) {
    mt_model_config c = MT_MODEL_CONFIG_INIT;
    c.num_layers = 2;
    c.hidden_size = 64;
    c.num_attention_heads = 4;
    c.seq_length = T;
    c.max_position_embeddings = 32;
    c.vocab_size = V;
    c.make_vocab_size_divisible_by = 128; /* padded to 512: exercises the padded columns */
    c.dtype = dt;
    if (strcmp(tag, "llama") == 0) tiny_llama_layers(&c);
    if (strcmp(tag, "mistral_window") == 0) { /* Llama's, each token attending the 5 before */
        tiny_llama_layers(&c);
        c.window_size = 5;
    }
    if (strcmp(tag, "stablelm") == 0) { /* Llama's with LayerNorms, RoPE on a quarter of a head */
        tiny_llama_layers(&c);
        c.normalization = MT_NORM_LAYERNORM;
        c.rotary_percent = 0.25;
    }
    if (strcmp(tag, "llama_scaled") == 0) { /* Llama 3's scaled rotary frequencies, theta 100 */
        tiny_llama_layers(&c);
        c.max_position_embeddings = 128;
        c.rotary_base = 100.0;
        c.rope_scaling = (mt_rope_scaling){ .type = MT_ROPE_SCALING_LLAMA3,
                                            .factor = 8,
                                            .original_max_position_embeddings = 64 };
    }
    if (strcmp(tag, "mtp_llama") == 0) { /* (megatron.core, gen_mtp.py) 2 MTP depths, 0.3 */
        tiny_llama_layers(&c);
        c.mtp_num_layers = 2;
        c.mtp_loss_scaling_factor = 0.3f;
    }
    if (strcmp(tag, "mtp_moe") == 0) { /* (gen_mtp.py) Mixtral's (below; every layer's experts,
                                          the depth's too), the load-balancing loss at 0.01; 1
                                          depth */
        c.moe_aux_loss_coeff = 0.01f;
        c.mtp_num_layers = 1;
        c.mtp_loss_scaling_factor = 0.3f;
    }
    if (strcmp(tag, "mtp_gpt2") == 0) { /* (megatron.core, gen_mtp.py) GPT-2's, 1 depth, 0.5 */
        c.mtp_num_layers = 1;
        c.mtp_loss_scaling_factor = 0.5f;
    }
    if (strcmp(tag, "qwen2_window") == 0) { /* Qwen2's; layer 1 through a window of 5 before,
                                               layer 0 the whole context (max_window_layers 1) */
        tiny_llama_layers(&c);
        c.add_qkv_bias = 1;
        c.window_size = 5;
        MT_CHECK(mt_model_window_attn_skip_freq(&c, "[0,1]"));
    }
    if (strcmp(tag, "qwen2") == 0) { /* Llama's choices and biases on q, k and v */
        tiny_llama_layers(&c);
        c.add_qkv_bias = 1;
    }
    if (strcmp(tag, "qwen3") == 0) { /* Llama's choices and per-head q and k RMSNorms */
        tiny_llama_layers(&c);
        c.qk_layernorm = 1;
    }
    const int qmoe = strncmp(tag, "qwen2_moe", 9) == 0;
    if (strcmp(tag, "mixtral") == 0 || strcmp(tag, "mtp_moe") == 0 ||
        qmoe) { /* Llama's attention; 4 experts of SwiGLU 32, top-2 */
        tiny_llama_layers(&c);
        c.num_moe_experts = 4;
        c.moe_router_topk = 2;
        c.moe_ffn_hidden_size = 32;
    }
    if (qmoe) { /* Qwen2's attention; the softmax over all 4 experts; a gated shared expert of 48 */
        c.add_qkv_bias = 1;
        c.moe_router_pre_softmax = 1;
        c.moe_shared_expert_intermediate_size = 48;
        c.moe_shared_expert_gate = 1;
    }
    if (strcmp(tag, "qwen3_moe") == 0) { /* Qwen3's attention; layer 0 dense, layer 1 4 experts
                                            of SwiGLU 32, top-2 over their softmax */
        tiny_llama_layers(&c);
        c.qk_layernorm = 1;
        c.num_moe_experts = 4;
        c.moe_router_topk = 2;
        c.moe_ffn_hidden_size = 32;
    }
    if (strcmp(tag, "qwen2_moe_mixed") == 0 ||
        strcmp(tag, "qwen3_moe") == 0) /* layer 0's MLP dense, layer 1's MoE */
        MT_CHECK(mt_model_moe_layer_freq(&c, "[0]+[1]"));
    if (strncmp(tag, "deepseek", 8) == 0) { /* MLA: heads of 16 + 8 rotary channels, values of
                                               12, a kv latent of 16; DeepSeek's norm eps 1e-6 */
        tiny_llama_layers(&c);
        c.num_query_groups = 0;
        c.norm_epsilon = 1e-6f;
        c.multi_latent_attention = 1;
        c.kv_lora_rank = 16;
        c.qk_head_dim = 16;
        c.qk_pos_emb_head_dim = 8;
        c.v_head_dim = 12;
    }
    if (strcmp(tag, "deepseek_yarn") == 0) { /* YaRN (theta 100): cos/sin and softmax mscales */
        c.rotary_base = 100.0;
        c.rope_scaling = (mt_rope_scaling){ .type = MT_ROPE_SCALING_YARN,
                                            .factor = 4,
                                            .original_max_position_embeddings = 16,
                                            .mscale = 0.9,
                                            .mscale_all_dim = 0.8 };
    }
    if (strcmp(tag, "deepseek_v3") == 0) { /* a q latent of 24; layer 1's MLP DeepSeek-V3's MoE:
                                              8 experts of SwiGLU 32 in 2 groups, top-2 from the
                                              best group by sigmoid scores + the expert bias,
                                              scaled by 2.5; a shared expert of 32 */
        c.q_lora_rank = 24;
        c.num_moe_experts = 8;
        c.moe_router_topk = 2;
        c.moe_ffn_hidden_size = 32;
        c.moe_shared_expert_intermediate_size = 32;
        c.moe_router_score_sigmoid = 1;
        c.moe_router_enable_expert_bias = 1;
        c.moe_router_num_groups = 2;
        c.moe_router_group_topk = 1;
        c.moe_router_topk_scaling_factor = 2.5f;
        MT_CHECK(mt_model_moe_layer_freq(&c, "[0]+[1]"));
    }
    return c;
}

/* Golden rows [0, rows) of `name`, as f32, into a zero-padded buffer shaped like `like`. */
static inline float *golden_padded(mt_safetensors *f, const char *name, const mt_tensor *like) {
    mt_tensor g;
    MT_CHECK(mt_safetensors_get(f, name, &g));
    int64_t n = mt_tensor_numel(like), gn = mt_tensor_numel(&g);
    MT_ASSERT(g.dtype == MT_F32 && gn <= n && g.ndim == like->ndim);
    float *x = calloc((size_t)n, 4);
    memcpy(x, g.data, (size_t)gn * 4); // why: padded rows are the trailing ones (row-major)
    return x;
}

/* The pieces of p that this tensor-parallel rank holds, cut from `full` (p's unsharded shape) and
 * shaped like p's weight (malloc'd; NULL when p is not split). */
static inline float *cut_local(const float *full, const mt_model_param *p) {
    if (p->tp_axis < 0) return NULL;
    const mt_tensor *w = &p->weight;
    int64_t rows = w->shape[0], cols = w->ndim == 2 ? w->shape[1] : 1;
    int64_t fcols = w->ndim == 2 ? p->full_shape[1] : 1;
    float *x = calloc((size_t)(rows * cols), 4);
    for (int k = 0; k < p->tp_npieces; k++) {
        int64_t l = p->tp_piece[k].local, g = p->tp_piece[k].global, len = p->tp_piece[k].len;
        if (p->tp_axis == 0)
            memcpy(x + l * cols, full + g * fcols, (size_t)(len * cols) * 4);
        else
            for (int64_t i = 0; i < rows; i++)
                memcpy(x + i * cols + l, full + i * fcols + g, (size_t)len * 4);
    }
    return x;
}

/* Golden `name` (padded as golden_padded to p's unsharded shape) cut to the pieces of p that this
 * tensor-parallel rank holds, shaped like p's weight (the whole tensor without tensor
 * parallelism), as f32. */
static inline float *golden_local(mt_safetensors *f, const char *name, const mt_model_param *p) {
    mt_tensor like = mt_tensor_make(NULL, MT_F32, p->weight.ndim, p->full_shape, MT_DEVICE_CPU);
    float *full = golden_padded(f, name, &like), *x = cut_local(full, p);
    if (!x) return full;
    free(full);
    return x;
}

/* Loads the golden weights `wf` into every parameter of m (dtype dt on dev; under tensor
 * parallelism this rank's pieces); padded vocab rows stay zero. */
static inline void hf_tiny_load_weights(mt_model *m, mt_safetensors *wf, mt_device dev,
                                        mt_dtype dt) {
    for (int i = 0; i < mt_model_num_params(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        float *x = golden_local(wf, p->name, p);
        int64_t n = mt_tensor_numel(&p->weight);
        void *h = malloc((size_t)n * mt_dtype_size(dt));
        mt_tensor hx = mt_tensor_1d(x, MT_F32, n, MT_DEVICE_CPU);
        mt_tensor hh = mt_tensor_1d(h, dt, n, MT_DEVICE_CPU);
        MT_CHECK(mt_cast(&hh, &hx, NULL));
        MT_CHECK(
            mt_memcpy(p->weight.data, dev, h, MT_DEVICE_CPU, (size_t)n * mt_dtype_size(dt), NULL));
        free(x);
        free(h);
    }
    for (int i = 0; i < mt_model_num_buffers(m); i++) { /* (f32: the routers' expert biases) */
        const char *name;
        mt_tensor t, g;
        MT_CHECK(mt_model_buffer_at(m, i, &name, &t));
        MT_CHECK(mt_safetensors_get(wf, name, &g));
        MT_ASSERT(g.dtype == MT_F32 && mt_tensor_numel(&g) == mt_tensor_numel(&t));
        MT_CHECK(mt_memcpy(t.data, dev, g.data, MT_DEVICE_CPU, mt_tensor_nbytes(&t), NULL));
    }
}

#endif
