/* The tiny Hugging Face GPT-2, Llama and Qwen3 of golden/gen_hf.py, shared by libs/model's
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
    if (strcmp(tag, "qwen3") == 0) { /* Llama's choices and per-head q and k RMSNorms */
        tiny_llama_layers(&c);
        c.qk_layernorm = 1;
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

/* Loads the golden weights `wf` into every parameter of m (dtype dt on dev); padded vocab rows
 * stay zero. */
static inline void hf_tiny_load_weights(mt_model *m, mt_safetensors *wf, mt_device dev,
                                        mt_dtype dt) {
    for (int i = 0; i < mt_model_num_params(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        float *x = golden_padded(wf, p->name, &p->weight);
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
}

#endif
