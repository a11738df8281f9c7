/* mt-model: decoder-only transformers (GPT-2 and Llama style) composed from mt-tensor kernels and
 * mt-attention, with an explicit forward and backward and all activation memory planned once.
 * The same code runs on the CPU reference and on CUDA: every op dispatches on its tensors. */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include <mt/core.h>
#include <mt/tensor.h>
#include <mt/tp.h>

#define MT_MODEL_MAX_LAYERS 256 /* (the longest --moe-layer-freq pattern) */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mt_norm_kind {
    MT_NORM_LAYERNORM = 0,
    MT_NORM_RMSNORM = 1
} mt_norm_kind;
typedef enum mt_pos_kind {
    MT_POS_LEARNED = 0,
    MT_POS_ROPE = 1
} mt_pos_kind;
/* Megatron's --recompute-granularity. full: the recomputed layers keep only their input during
 * the forward and run their forward again right before their backward. selective (Megatron:
 * core attention only) recomputes nothing here: flash attention keeps no (T,T) matrix, and the
 * attention output it would drop is linear_proj's saved input anyway. */
typedef enum mt_recompute_granularity {
    MT_RECOMPUTE_NONE = 0,
    MT_RECOMPUTE_FULL = 1,
    MT_RECOMPUTE_SELECTIVE = 2
} mt_recompute_granularity;
/* --recompute-method: uniform = every layer, in groups of recompute_num_layers consecutive layers
 * of which only the group's input is kept; block = the first recompute_num_layers layers, each
 * keeping its own input, the rest not recomputed. */
typedef enum mt_recompute_method {
    MT_RECOMPUTE_METHOD_NONE = 0,
    MT_RECOMPUTE_UNIFORM = 1,
    MT_RECOMPUTE_BLOCK = 2
} mt_recompute_method;

/* Megatron's TransformerConfig names where they exist. Zero means "derive the default". */
typedef struct mt_model_config {
    size_t size;
    int num_layers;
    int hidden_size;
    int num_attention_heads;
    int num_query_groups;             /* 0: = num_attention_heads (MHA) */
    int kv_channels;                  /* head dim; 0: hidden_size / num_attention_heads */
    int ffn_hidden_size;              /* 0: 4 * hidden_size */
    int seq_length;                   /* T of a micro-batch */
    int max_position_embeddings;      /* 0: seq_length */
    int vocab_size;                   /* real vocabulary V */
    int padded_vocab_size;            /* 0: V rounded up to make_vocab_size_divisible_by */
    int make_vocab_size_divisible_by; /* 0: 128 */
    mt_norm_kind normalization;
    float norm_epsilon; /* 0: 1e-5 */
    mt_pos_kind position_embedding_type;
    double rotary_base;     /* 0: 10000 */
    int rotary_interleaved; /* 0: Hugging Face half-split pairs; 1: Meta interleaved pairs */
    int swiglu;             /* 1: SwiGLU MLP (fc1 is (2F, C): gate rows then up rows) */
    int add_bias_linear;    /* 1: biases on every linear (Megatron's default) */
    int untie_embeddings_and_output_weights;
    float init_method_std; /* 0: 0.02 */
    uint64_t seed;         /* initialisation seed (Megatron --seed) */
    mt_dtype dtype;        /* parameters and activations: MT_F32, MT_BF16 or MT_F16 */
    int deterministic;     /* 1: bitwise-reproducible kernels (no atomics in attention, no GEMM
                              autotuning) */
    mt_recompute_granularity recompute_granularity; /* 0: no activation recomputation */
    mt_recompute_method recompute_method;           /* full only */
    int recompute_num_layers;                       /* full only: 1..num_layers */
    /* selective only, 1: the MLP's activation (GELU or SwiGLU) is not kept per layer but computed
     * again from fc1's kept output right before fc2's backward, into one shared buffer
     * (--recompute-modules mlp_act: Megatron's moe_act for dense MLPs, llm.c's -r 1). The forward
     * then applies it as a separate kernel, the same one the backward repeats, so the two agree
     * bitwise. Saves (num_layers - 1) x tokens x ffn_hidden_size activations. */
    int recompute_mlp_act;
    /* selective only, 1: the outputs of the two norms of each layer are not kept but computed
     * again from the kept residual stream before the GEMMs whose weight gradients read them
     * (--recompute-modules layernorm, as Megatron's; llm.c's -r 2). Bitwise the forward's: the
     * fused residual add normalises the sum as stored. Saves 2 x (num_layers - 1) x tokens x
     * hidden_size activations. */
    int recompute_layernorm;
    /* >1: the output layer, the cross-entropy and the output layer's backward run on that many
     * row slices of the micro-batch's tokens, so only one slice's logits exist at a time (the
     * largest activation of a GPT-2 step: tokens x padded vocab). mt_model_logits then holds the
     * last slice's, and mt_model_forward needs targets. 0 or 1: all logits at once. */
    int logits_chunks;
    /* 1: mt_model_forward_backward's loss is the micro-batch's SUM of token losses times
     * loss_scale, not their mean (Megatron's --calculate-per-token-loss: the trainer divides the
     * gradients by the global batch's token count once they are summed) */
    int per_token_loss;
    /* 1: the query and key heads are normalised (the model's normalization over each head's
     * kv_channels, one weight (and bias) shared by the heads) after linear_qkv and before RoPE:
     * Megatron's --qk-layernorm (q_layernorm, k_layernorm), Qwen3's q_norm and k_norm */
    int qk_layernorm;
    /* Megatron's --hidden-dropout (the embeddings' output, and linear_proj's and linear_fc2's
     * outputs with their biases before the residual adds: bias_dropout_add) and
     * --attention-dropout (the softmax weights), in [0, 1). Training only: mt_model_forward_backward
     * applies them, mt_model_forward (evaluation, generation) does not. The masks are mt_dropout's
     * pure functions of (seed, site, sample id, element): sites 0 the embeddings, 1 + 3l layer l's
     * attention weights, 2 + 3l its linear_proj, 3 + 3l its linear_fc2; the sample ids come from
     * mt_model_set_sample_ids. 0: none (then nothing changes). */
    float hidden_dropout;
    float attention_dropout;
    /* Megatron's --tensor-model-parallel-size (0 or 1: none): the model of mt_model_create_tp
     * holds this rank's share, as megatron.core shards it: the attention heads and query groups
     * (linear_qkv's q, k and v rows, linear_proj's columns), the MLP's hidden units (linear_fc1's
     * rows, for SwiGLU its gate and its up rows; linear_fc2's columns), the padded vocabulary
     * (the embedding's and output layer's rows; padded to make_vocab_size_divisible_by times
     * this). Norms, position table and the row-parallel biases are whole on every rank. Heads,
     * query groups, ffn_hidden_size and the padded vocabulary must be multiples of it. Under it
     * the attention dropout follows Megatron's model-parallel RNG: each rank's heads draw from
     * their own streams (so the masks differ from one rank's); the hidden dropout does not
     * change. */
    int tensor_model_parallel_size;
    /* Megatron's --sequence-parallel, with tensor parallelism (ignored without): the residual
     * stream, the norms and the embedding's output are split by token rows (rank r holds the
     * micro-batch's (B*T)/tp rows from r (B*T)/tp on), all-gathered before the column-parallel
     * linears and reduce-scattered after the row-parallel ones. The norms' weights and the
     * row-parallel biases then get each rank's rows' share of their gradient: mt_model_finalize_grads
     * sums them once per step. The hidden dropout's masks are TP 1's (each rank draws its window
     * of the micro-batch's). seq_length must be a multiple of the TP size. */
    int sequence_parallel;
    /* Megatron's --pipeline-model-parallel-size P (0 or 1: none) and the stage this model is,
     * pipeline_model_parallel_rank r in [0, P): decoder layers [r L/P, (r+1) L/P) (L a multiple
     * of P; their names, dropout sites and grad-ready levels keep the global layer numbers), the
     * embeddings on the first stage, the final norm, output layer and loss on the last. With tied
     * embeddings the last stage of P > 1 holds a copy of embedding.word_embeddings.weight as its
     * output layer (mt_model_param.pp_shared; initialised as the first stage's; the trainer sums
     * the two copies' gradients, Megatron's embedding group). A stage runs through
     * mt_model_pp_forward and mt_model_pp_backward only, and keeps the activations of P - r
     * micro-batches (1F1B's most in flight). Recomputation counts recompute_num_layers in the
     * stage's layers, as Megatron's. */
    int pipeline_model_parallel_size;
    int pipeline_model_parallel_rank;
    /* An uneven split (Megatron's --decoder-first-pipeline-num-layers and
     * --decoder-last-pipeline-num-layers; 0: not set): the first and/or last stage hold this many
     * layers, the other stages the rest evenly (each at least one). E.g. fewer layers on the last
     * stage, which also runs the output layer and the loss. */
    int num_layers_in_first_pipeline_stage;
    int num_layers_in_last_pipeline_stage;
    /* Mixture of experts (Megatron's --num-experts; 0: dense MLPs): every layer's MLP is a router
     * (decoder.layers.l.mlp.router.weight (E, hidden)) and num_moe_experts expert MLPs
     * (...mlp.experts.local_experts.e.linear_fc1.weight and linear_fc2.weight, the dense MLP's
     * shapes with moe_ffn_hidden_size): each token goes to the moe_router_topk experts of its
     * largest router logits, its output the sum of theirs weighted by the softmax over those k
     * logits (Megatron's TopKRouter, dropless; Mixtral's). mt-moe routes and moves the tokens; the
     * experts run one GEMM each (the router's logits reach the host's tokens-per-expert once a
     * layer, so no CUDA graphs). In training, Megatron's load-balancing loss
     * (--moe-router-load-balancing-type aux_loss) times moe_aux_loss_coeff and the z loss times
     * moe_z_loss_coeff are added to each layer's router gradient (scaled as the loss:
     * Megatron's MoEAuxLossAutoScaler), their values (without coefficients) averaged over layers
     * and micro-batches by mt_model_take_moe_losses. Under tensor parallelism each rank holds
     * its share of every expert (fc1's rows, fc2's columns: Megatron's expert tensor parallelism
     * equal to TP), the combine summed over the group; hidden dropout at linear_fc2's site on the
     * combined output; with sequence parallelism every rank routes the whole micro-batch (the
     * combine reduce-scattered into its rows). recompute_mlp_act applies to the experts'
     * activation (Megatron's moe_act); add_bias_linear gives each expert fc1 and fc2 biases. */
    int num_moe_experts;
    int moe_router_topk;     /* 0: 2 */
    int moe_ffn_hidden_size; /* 0: ffn_hidden_size */
    float moe_aux_loss_coeff;
    float moe_z_loss_coeff;
    /* Megatron's token dropping (0: dropless): each expert takes at most
     * ceil(tokens * topk / experts * moe_expert_capacity_factor) of a micro-batch's tokens, the
     * most likely (moe_token_drop_position 0, --moe-token-drop-policy probs) or the first
     * (position); the dropped choices add nothing. moe_pad_expert_input_to_capacity: every expert
     * runs on that many rows (zeros past its tokens): the GEMMs keep one shape and the tokens per
     * expert need not reach the host. Not with sequence parallelism yet. */
    float moe_expert_capacity_factor;
    int moe_token_drop_position;
    int moe_pad_expert_input_to_capacity;
    /* Megatron's --moe-router-pre-softmax (the softmax over all experts at the chosen ones, not
     * renormalised over the k) and --moe-router-topk-scaling-factor (0: 1); mt_moe_router's */
    int moe_router_pre_softmax;
    float moe_router_topk_scaling_factor;
    /* Megatron's --moe-router-num-groups / --moe-router-group-topk (0: none): group-limited
     * routing, a token's experts from its best group_topk of num_groups groups (mt_moe_router's) */
    int moe_router_num_groups, moe_router_group_topk;
    /* Megatron's expert parallelism (--expert-model-parallel-size; 0 or 1: none): the experts
     * split over an expert-parallel group of that many ranks, rank r (this rank's,
     * expert_model_parallel_rank) holding experts [r E/ep, (r+1) E/ep) (their parameters named
     * by global expert index, so a checkpoint's names do not depend on ep). Each rank routes its
     * own tokens and sends every rank the rows for its experts, an all-to-all of variable rows
     * (Megatron's MoEAlltoAllTokenDispatcher); the expert outputs come back the same way.
     * mt_model_set_expert_group gives the group; calls are then collective over it. With token
     * dropping each rank drops its own tokens (the capacity of its micro-batch, as Megatron);
     * padded to capacity every rank sends each expert its region, and the counts need no
     * exchange. */
    int expert_model_parallel_size;
    int expert_model_parallel_rank;
    /* Megatron's context parallelism (--context-parallel-size; 0 or 1: none): each sequence of
     * cp * seq_length tokens is cut into 2 cp chunks and rank r (context_parallel_rank) holds
     * chunks r and 2 cp - 1 - r (Megatron's balance of causal work), seq_length being its share:
     * the caller gives it those tokens, their targets and their positions
     * (mt_model_set_positions). Each layer's keys and values are all-gathered over the group
     * (mt_model_set_context_group; Megatron's allgather cp_comm_type), each chunk's queries attend
     * to the keys up to theirs, and the keys' and values' gradients are reduce-scattered back.
     * With tensor and pipeline parallelism too; not yet with MoE, document masks or attention
     * dropout. */
    int context_parallel_size;
    int context_parallel_rank;
    /* The activation sets a stage keeps (0: 1F1B's P - r). The interleaved schedule's chunks are
     * stages of a pipeline of P V (chunk c of rank r: stage c P + r) that share the rank's slots
     * (mt_pp_interleaved_slot_map's pool; mt_model_create_shared_slots). */
    int pipeline_num_slots;
    /* The interleaved schedule's chunks a rank (Megatron's virtual_pipeline_model_parallel_size;
     * 0 or 1: none). pipeline_model_parallel_size is then P V, and stage c P + r is chunk c of
     * rank r. Only the uneven split reads it: as Megatron's, the first rank's
     * num_layers_in_first_pipeline_stage and the last rank's num_layers_in_last_pipeline_stage
     * are split evenly over their V chunks, and each middle rank's share too. */
    int virtual_pipeline_model_parallel_size;
    /* Megatron's --add-qkv-bias: linear_qkv has a bias even without add_bias_linear (Qwen2) */
    int add_qkv_bias;
    /* Megatron's --moe-shared-expert-intermediate-size (0: none): each MoE layer also runs its
     * shared experts, one MLP of this width (the experts' activation, no biases) over every token,
     * its output added to the routed experts' (decoder.layers.l.mlp.shared_experts.linear_fc1
     * and linear_fc2.weight; tensor-parallel as a dense MLP, its output summed with the experts'
     * combine). moe_shared_expert_gate (--moe-shared-expert-gate; Qwen2-MoE's shared_expert_gate):
     * that output times sigmoid(x . g) for each token x, g mlp.shared_experts.gate_weight
     * (1, hidden). */
    int moe_shared_expert_intermediate_size;
    int moe_shared_expert_gate;
    /* Megatron's --moe-layer-freq as a pattern (all zeros: every layer MoE): layer l's MLP is the
     * dense one (ffn_hidden_size, decoder.layers.l.mlp.linear_fc1/fc2) where moe_dense_layer[l] is
     * nonzero. An int N of Megatron's is the pattern of l % N != 0; mt_model_moe_layer_freq fills
     * it. */
    unsigned char moe_dense_layer[MT_MODEL_MAX_LAYERS];
    /* Megatron's --moe-router-score-function sigmoid (0: softmax; mt_moe_router's sigmoid) */
    int moe_router_score_sigmoid;
    /* Megatron's --moe-router-enable-expert-bias (sigmoid scores only): each MoE layer's router
     * keeps an expert bias (E) f32, a buffer, not a parameter (decoder.layers.l.mlp.router
     * .expert_bias: mt_model_buffer_at), added to the scores that choose the experts. The
     * training forwards count each expert's tokens; mt_model_expert_bias_update moves the bias by
     * moe_router_bias_update_rate (--moe-router-bias-update-rate; mt-pretrain's default 1e-3)
     * towards balance once a step. */
    int moe_router_enable_expert_bias;
    float moe_router_bias_update_rate;
    /* Megatron's --moe-router-load-balancing-type seq_aux_loss (0: aux_loss): the load-balancing
     * loss of each sequence (its own tokens per expert), averaged over the micro-batch's
     * sequences, times moe_aux_loss_coeff (DeepSeek-V2/V3's); not with context parallelism yet */
    int moe_router_seq_aux;
    /* Megatron's --multi-latent-attention (DeepSeek-V2/V3's MLA; 0: the fused linear_qkv): each
     * layer's queries come from linear_q_proj (H (qk_head_dim + qk_pos_emb_head_dim), hidden),
     * or with q_lora_rank > 0 from linear_q_down_proj (q_lora_rank, hidden), a norm
     * (linear_q_up_proj.layer_norm_weight) and linear_q_up_proj; its keys and values from
     * linear_kv_down_proj (kv_lora_rank + qk_pos_emb_head_dim, hidden), whose first kv_lora_rank
     * outputs pass a norm (linear_kv_up_proj.layer_norm_weight) and linear_kv_up_proj
     * (H (qk_head_dim + v_head_dim), kv_lora_rank) and whose last qk_pos_emb_head_dim are one
     * rotary key shared by the heads. Each head's query and key are its qk_head_dim channels
     * without positions and qk_pos_emb_head_dim with RoPE (interleaved pairs, Megatron's MLA rope
     * and Hugging Face's rope_interleave); the softmax scale is 1/sqrt(qk_head_dim +
     * qk_pos_emb_head_dim); linear_proj is (hidden, H v_head_dim). Needs rotary positions, no
     * biases, no query groups, v_head_dim <= qk_head_dim + qk_pos_emb_head_dim; not yet with
     * qk_layernorm. kv_channels becomes qk_head_dim +
     * qk_pos_emb_head_dim (the attention's head, values zero-padded to it). Under tensor
     * parallelism each rank holds its heads' rows of linear_q_proj / linear_q_up_proj and
     * linear_kv_up_proj and their columns of linear_proj; the down-projections and the latents'
     * norms are whole on every rank (Megatron's TE "duplicated" linears), their gradients the
     * same on every rank. */
    int multi_latent_attention;
    int q_lora_rank; /* 0: none (linear_q_proj) */
    int kv_lora_rank;
    int qk_head_dim;
    int qk_pos_emb_head_dim;
    int v_head_dim;
    /* selective only, with multi_latent_attention, 1: the queries, keys and values that the
     * up-projections make from the kept latents (and their RoPE and packing) are not kept per
     * layer but made again into one shared buffer before each layer's attention backward
     * (Megatron's --recompute-modules mla_up_proj). Bitwise the forward's. Saves
     * (num_layers - 1) x tokens x heads x (2 (qk_head_dim + qk_pos_emb_head_dim) x 2 +
     * qk_head_dim + v_head_dim) activations, about, for each layer's packed heads and up-projected
     * outputs. */
    int recompute_mla_up_proj;
    /* rotary frequency scaling (type NONE: none): Llama 3's (Megatron --use-rope-scaling), YaRN
     * (--rope-type yarn; with multi_latent_attention the softmax scale is also multiplied by
     * mt_rope_yarn_mscale(factor, mscale_all_dim)^2, as Megatron's MLA and DeepSeek's) or linear
     * (--rotary-seq-len-interpolation-factor); see mt_rope_scaling */
    mt_rope_scaling rope_scaling;
    /* the share of each head's channels that RoPE rotates, the first int(kv_channels x
     * rotary_percent) (even; the rest pass through: Megatron's --rotary-percent, Hugging Face's
     * partial_rotary_factor); 0: 1 */
    double rotary_percent;
    /* sliding-window attention: each query i attends the keys i - window_size .. i only
     * (Megatron's --window-size (window_size, 0), flash-attention's left window; Hugging Face's
     * sliding_window W is W - 1 here); 0: the whole causal context. The model keeps the window's
     * key starts itself; a caller's mt_model_set_key_starts must include the window. Not with
     * context parallelism, nor a KV cache longer than the window. */
    int window_size;
    /* LongRoPE (rope_scaling LONGROPE, whose ext_factors are the short factors): the long
     * factors, taken instead when the model's context (seq_length, or with a KV cache its length)
     * is longer than rope_scaling.original_max_position_embeddings, as Hugging Face's (which
     * chooses by each forward's length); zeros: the short factors always */
    double rope_long_factors[MT_ROPE_MAX_PAIRS];
    /* Multi-token prediction (Megatron's --mtp-num-layers D; 0: none; DeepSeek-V3's MTP): in
     * training, depth k = 1..D predicts each token's (k+1)-th next token. Its input at position i
     * is the previous depth's output h (depth 1: the decoder's, after its final norm) and the
     * embedding of the token k positions ahead (the tokens, and learned positions, rolled left
     * by k, zeros past the end, as megatron.core's roll_tensor): mtp.layers.(k-1).hnorm(h) and
     * .enorm(embedding) concatenated [e | h] into eh_proj (hidden, 2 hidden; whole on every
     * tensor-parallel rank), a transformer layer (.transformer_layer.*, the decoder layer's names
     * and shapes) and .final_layernorm, whose output goes through the shared output layer to the
     * cross-entropy against the targets rolled left by k (the last k of each row ignored). Each
     * depth's mean loss times mtp_loss_scaling_factor / D is added to the training loss
     * (megatron.core's MTPLossAutoScaler); mt_model_take_mtp_loss_sums reports them apart. The
     * forwards without training (evaluation, generation) skip it. The depths' transformer layers
     * are the decoder's last layer's kind (MoE or dense; with MoE their routers' losses count
     * with the decoder's). With pipeline parallelism the depths are the last stage's, which then
     * also holds a copy of the embedding (mt_model_param.pp_shared, as a tied output layer's;
     * the caller sums the copies' gradients) and needs the tokens too; not yet with learned
     * positions there. Under context parallelism the caller gives the rolls
     * (mt_model_set_mtp_inputs); not yet with learned positions there either. */
    int mtp_num_layers;
    float mtp_loss_scaling_factor; /* Megatron's --mtp-loss-scaling-factor (mt-pretrain: 0.1) */
    /* With window_size: the layers that attend the whole causal context all the same (nonzero:
     * Megatron's --window-attn-skip-freq, its full-attention layers among the sliding-window
     * ones; Hugging Face's layer_types "full_attention", Qwen2's below max_window_layers); an MTP
     * depth's layer is the last layer's kind. mt_model_window_attn_skip_freq fills it. */
    unsigned char full_attention_layer[MT_MODEL_MAX_LAYERS];
} mt_model_config;

// clang-format off
#define MT_MODEL_CONFIG_INIT                                                                   \
    {                                                                                          \
        sizeof(mt_model_config), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, MT_NORM_LAYERNORM, 0.0f,     \
            MT_POS_LEARNED, 0.0, 0, 0, 1, 0, 0.0f, 1234, MT_F32, 0, MT_RECOMPUTE_NONE,         \
            MT_RECOMPUTE_METHOD_NONE, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
            0.0f, 0.0f, 0.0f, 0, 0, 0, 0.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, { 0 },          \
            0, 0, 0.0f, 0, 0, 0, 0, 0, 0, 0, 0, { MT_ROPE_SCALING_NONE }, 0.0, 0, { 0 }, 0, 0.0f, { 0 }   \
    }
// clang-format on

/* Megatron's --moe-layer-freq into cfg->moe_dense_layer for cfg->num_layers layers: an int N (one
 * MoE layer in N: layers l % N == 0) or a Python list expression of 0s (dense) and 1s (MoE) with
 * + and * (e.g. "([0]*1+[1]*3)*2"), whose length must be the layer count. MT_ERR_INVALID_ARG
 * with Megatron's messages otherwise. */
MT_API mt_status mt_model_moe_layer_freq(mt_model_config *cfg, const char *freq);

/* Megatron's --window-attn-skip-freq into cfg->full_attention_layer for cfg->num_layers layers:
 * an int N (layer numbers l + 1 that are multiples of N attend fully, the others through the
 * window: (N-1):1) or a list expression of 1s (sliding window) and 0s (full attention) as
 * --moe-layer-freq's, whose length must be the layer count. MT_ERR_INVALID_ARG otherwise. */
MT_API mt_status mt_model_window_attn_skip_freq(mt_model_config *cfg, const char *freq);

/* Fills the derived fields (zeros) of cfg in place and checks it; MT_ERR_INVALID_ARG with
 * Megatron-style messages for inconsistent values. */
MT_API mt_status mt_model_config_finalize(mt_model_config *cfg);
/* Pipeline stage `stage`'s decoder layers [*first, *first + *count) under cfg's num_layers,
 * pipeline_model_parallel_size and uneven split (the rest of cfg is not read): MT_ERR_INVALID_ARG
 * with Megatron's message when they do not split (also for a stage outside the pipeline). */
MT_API mt_status mt_model_stage_layers(const mt_model_config *cfg, int stage, int *first,
                                       int *count);

/* Parameters: name (Megatron-style, e.g. "decoder.layers.3.mlp.linear_fc1.weight"), the weight
 * (model dtype) and its fp32 gradient (main_grad), both views into contiguous buffers. */
typedef struct mt_model_param {
    const char *name;
    mt_tensor weight;
    mt_tensor grad;
    int no_weight_decay; /* biases, norm weights, 1-D params */
    float init_std;      /* 0 for ones/zeros params */
    int init_ones;       /* norm weights */
    /* tensor parallelism: the unsharded shape, and tp_axis, the dim the ranks split (-1: whole on
     * every rank); along it this rank's [tp_piece[k].local, + len) are the full tensor's
     * [tp_piece[k].global, + len), k < tp_npieces (1, or 3 for linear_qkv's q, k and v heads, 2
     * for SwiGLU's gate and up rows). TP 1: the whole tensor, one piece. */
    int64_t full_shape[2];
    int tp_axis, tp_npieces;
    struct {
        int64_t local, global, len;
    } tp_piece[3];
    /* 1: the last pipeline stage's copy of the tied embedding (its output layer): the first
     * stage's parameter of the same name, the same values after every step (their gradients are
     * summed), counted once in norms and checkpoints (by the first stage) */
    int pp_shared;
} mt_model_param;

typedef struct mt_model mt_model;

/* Where parameter storage comes from: called once per parameter, in the order of the model's
 * table, with its name, shape and weight-decay rule. In listing mode (mt_model_list_params)
 * weight and grad are NULL; when creating a model the callback fills them with views (the weight
 * in the model dtype, the grad f32, on the model's device) that outlive the model. */
typedef mt_status (*mt_model_param_fn)(void *ctx, const char *name, int ndim, const int64_t *shape,
                                       int no_weight_decay, mt_tensor *weight, mt_tensor *grad);

/* Calls fn for every parameter a model of config `cfg` has (cfg is finalized in a copy). */
MT_API mt_status mt_model_list_params(const mt_model_config *cfg, mt_model_param_fn fn, void *ctx);

/* Buffers: model state that is not a parameter (no gradient, no optimizer; fp32), checkpointed
 * beside the parameters: the routers' expert biases (cfg.moe_router_enable_expert_bias). A view
 * (mt_model_create_view) shares its source's. */
MT_API int mt_model_num_buffers(const mt_model *m);
MT_API mt_status mt_model_buffer_at(mt_model *m, int i, const char **name, mt_tensor *t);
/* The buffers' names and shapes of cfg's model (fn's weight and grad NULL), as
 * mt_model_list_params. */
MT_API mt_status mt_model_list_buffers(const mt_model_config *cfg, mt_model_param_fn fn, void *ctx);
/* The expert bias: the tokens per expert that the training forwards counted since the last
 * update, every router's (the model's MoE layers', E each) as one f32 tensor (none: no elements),
 * for the caller to sum over the ranks that route other tokens (data and context parallel;
 * Megatron's TP x CP x DP: tensor-parallel ranks count the same tokens); then
 * mt_model_expert_bias_update moves each bias by the rate towards balance (Megatron's
 * get_updated_expert_bias) and zeroes the counts. */
MT_API mt_status mt_model_expert_bias_tokens(mt_model *m, mt_tensor *tokens);
MT_API mt_status mt_model_expert_bias_update(mt_model *m, mt_stream stream);

/* Plans and allocates activations for micro-batches of (micro_batch_size, seq_length) on `device`,
 * takes parameter storage from `fn` (NULL: the model allocates its own contiguous weights and fp32
 * grads) and initialises the weights from (seed, name, index) with Philox, a pure function of the
 * unsharded tensor. Gradients are zeroed. Blocking. */
MT_API mt_status mt_model_create(const mt_model_config *cfg, int micro_batch_size, mt_device device,
                                 mt_model_param_fn fn, void *ctx, mt_model **out);
/* As mt_model_create, for a tensor-parallel group `tp` of cfg.tensor_model_parallel_size ranks
 * (NULL: one; the group's size must be the config's), this rank holding its share of every
 * parameter (mt_model_param's tp_axis and pieces) and of the activations. The initial weights
 * are the unsharded model's (each rank draws the whole tensor and keeps its pieces). Every call
 * of the model is then collective over the group (the same tokens and targets on every rank);
 * the losses are every rank's, the logits (mt_model_logits) this rank's vocabulary columns.
 * Host tensors go over MPI, device tensors over NCCL (mt-comm). */
MT_API mt_status mt_model_create_tp(const mt_model_config *cfg, int micro_batch_size,
                                    mt_device device, mt_comm *tp, mt_model_param_fn fn, void *ctx,
                                    mt_model **out);
/* Activation slots in the caller's memory: slot s of cfg.pipeline_num_slots (a micro-batch's
 * layer activations) at base + s * stride, stride a multiple of MT_ARENA_ALIGN and at least
 * mt_model_slot_bytes. The chunks of an interleaved pipeline stage share one such pool, since
 * the schedule gives a slot to one chunk's micro-batch at a time (mt_pp_interleaved_slot_map). */
typedef struct mt_model_slots {
    void *base;
    size_t stride;
} mt_model_slots;
/* The bytes of one activation slot of a model of cfg at micro_batch_size on device. */
MT_API mt_status mt_model_slot_bytes(const mt_model_config *cfg, int micro_batch_size,
                                     mt_device device, size_t *bytes);
/* As mt_model_create_tp, with the activation slots in `slots` (which must outlive the model);
 * mt_model_bytes then leaves them out. */
MT_API mt_status mt_model_create_shared_slots(const mt_model_config *cfg, int micro_batch_size,
                                              mt_device device, mt_comm *tp, mt_model_param_fn fn,
                                              void *ctx, const mt_model_slots *slots,
                                              mt_model **out);
MT_API void mt_model_destroy(mt_model *m); /* NULL is a no-op */
/* Expert parallelism (cfg.expert_model_parallel_size > 1): the expert-parallel group, whose size
 * must be the config's and this rank's place in it expert_model_parallel_rank. Before the first
 * forward; the group must outlive the model. Host tensors go over MPI, device tensors over NCCL. */
MT_API mt_status mt_model_set_expert_group(mt_model *m, mt_comm *ep);
/* Context parallelism (cfg.context_parallel_size > 1): the context-parallel group, of the config's
 * size, this rank at context_parallel_rank. Before the first forward; it must outlive the model. */
MT_API mt_status mt_model_set_context_group(mt_model *m, mt_comm *cp);
/* Whether parameter `name` of a model of `cfg` is split by tensor parallelism (its tp_axis, 0 or
 * 1) or whole on every rank (-1): for a caller that lays out storage before creating the model
 * (an optimizer counting replicated parameters once). -2 for a name the model does not have. */
MT_API int mt_model_param_tp_axis(const mt_model_config *cfg, const char *name);
/* The same for every parameter at once, in mt_model_list_params' order: axes[i] for the i-th, i <
 * n. Returns the model's parameter count (more than n: the rest left out), or -1 for a config
 * that mt_model_config_finalize refuses (its error set). */
MT_API int mt_model_param_tp_axes(const mt_model_config *cfg, int *axes, int n);

MT_API const mt_model_config *mt_model_get_config(const mt_model *m);
MT_API int mt_model_num_params(const mt_model *m);
MT_API mt_model_param *mt_model_param_at(mt_model *m, int i);
/* The parameter called `name`, or NULL. */
MT_API mt_model_param *mt_model_param_find(mt_model *m, const char *name);
/* Bytes of parameters + grads + activations + scratch (the model's whole footprint). */
MT_API size_t mt_model_bytes(const mt_model *m);
/* Bytes of the activation arena (activations + scratch) that mt_model_create would allocate for
 * `cfg` at `micro_batch_size` on `device`, without allocating it. */
MT_API mt_status mt_model_activation_bytes(const mt_model_config *cfg, int micro_batch_size,
                                           mt_device device, size_t *bytes);

/* Forward over tokens (B,T) i32 on the model's device. With targets (B,T) i32 (ignore index
 * -100) the micro-batch's token losses and their count are added to the model's loss
 * accumulator (mt_model_take_loss).
 * The logits stay readable through mt_model_logits. Enqueued on `stream`. */
MT_API mt_status mt_model_forward(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                                  mt_stream stream);
/* The (B*T, padded V) logits of the last mt_model_forward (with logits_chunks > 1: the last
 * slice's rows, at the start of a (ceil(B*T / logits_chunks), padded V) buffer). */
MT_API mt_tensor mt_model_logits(mt_model *m);
/* Training: forward, the fused cross-entropy and its gradient (in place over the logits), and the
 * backward for loss = loss_scale * (mean loss over the micro-batch's non-ignored tokens; their
 * sum with cfg.per_token_loss). Gradients are ADDED to the fp32 grads (gradient accumulation:
 * loss_scale = 1 / micro-batches), or written over them after mt_model_discard_grads; the losses
 * go to the accumulator as in mt_model_forward. Enqueued on `stream`. */
MT_API mt_status mt_model_forward_backward(mt_model *m, const mt_tensor *tokens,
                                           const mt_tensor *targets, float loss_scale,
                                           mt_stream stream);
/* The mean loss over every counted (non-ignored) token of the micro-batches since the last call
 * (NaN if none), then resets the accumulator. Synchronises `stream`. */
MT_API mt_status mt_model_take_loss(mt_model *m, double *mean_loss, mt_stream stream);
/* As mt_model_take_loss, but the sum of those tokens' losses and their count (to combine across
 * data-parallel ranks: the mean is the sums' sum over the counts' sum). */
MT_API mt_status mt_model_take_loss_sum(mt_model *m, double *sum, double *count, mt_stream stream);
/* Position ids (B,T) i32 on the model's device for the forwards and backwards from now on, read
 * when they run (a caller may rewrite the buffer between micro-batches; a CUDA graph replays
 * it): the learned position table's rows, or the RoPE angles, of each token (e.g. restarting
 * after each document's end: Megatron's --reset-position-ids). Each < max_position_embeddings
 * for learned positions (CPU: an error; CUDA: no position row). NULL: 0..T-1 (the default). */
MT_API mt_status mt_model_set_positions(mt_model *m, const mt_tensor *pos);
/* Document masks (Megatron's --reset-attention-mask) for the forwards and backwards from now on,
 * read when they run as the position ids are: (B,T) i32 on the model's device, the first key
 * each token's attention may see (its document's first token; mt_attn_config.key_start: each
 * row nondecreasing, each value at most its own index; the CPU checks, CUDA relies on it).
 * NULL: every token sees the whole sequence before it (the default). */
MT_API mt_status mt_model_set_key_starts(mt_model *m, const mt_tensor *ks);
/* Each row's global sample index, (B) i64 on the model's device, for the dropout masks of the
 * forward_backward calls from now on (read when they run, as the position ids are; a caller
 * rewrites it between micro-batches). Needed when cfg.hidden_dropout or cfg.attention_dropout
 * is set; keyed by the sample, so the masks do not depend on the micro-batch or data-parallel
 * split of a global batch. NULL: none. */
MT_API mt_status mt_model_set_sample_ids(mt_model *m, const mt_tensor *ids);
/* After a step's last micro-batch, before the gradients are read: the gradients that each rank
 * holds only its share of are summed over the tensor-parallel group (with sequence parallelism:
 * the norms' weights and biases and the row-parallel biases, Megatron's
 * _allreduce_layernorm_grads). A no-op otherwise. Collective over the group; enqueued. */
MT_API mt_status mt_model_finalize_grads(mt_model *m, mt_stream stream);
/* Sets every gradient to zero. Enqueued. */
MT_API mt_status mt_model_zero_grad(mt_model *m, mt_stream stream);
/* Drops the gradients: the next mt_model_forward_backward writes every gradient instead of adding
 * to it (the GEMMs with beta = 0), as after mt_model_zero_grad but without a pass over all of
 * them; only the ones the backward scatters into (the embeddings) are zeroed here. Enqueued. */
MT_API mt_status mt_model_discard_grads(mt_model *m, mt_stream stream);

/* Times every operation of forward and backward as a named region of `p` (mt_prof in core;
 * NULL: off). The caller owns the profiler and collects and prints it. */
MT_API void mt_model_set_profiler(mt_model *m, mt_prof *p);

/* CUDA graphs for mt_model_forward_backward, and for an inference model's (mt_model_create_inference,
 * _view) mt_model_forward without targets (tokens buffer, stream, positions buffer and KV cache
 * the same: a KV cache's position is read on the device, so decoding replays one graph), without
 * MoE layers (1: on; default off): the second call with the same
 * tokens and targets buffers, loss scale and stream records the step into a graph and later ones
 * replay it, without the per-kernel launch gaps; the first call runs eagerly (cuBLASLt's
 * algorithm choice and other first-use work happen there). Not used while a profiler is set; a
 * failed capture logs a warning and the model runs without (with callbacks set: an error). The
 * grad-ready and param-wait callbacks set at capture are not called at replay: the graph replays
 * the work they enqueued, so they must enqueue the same work at every call (streams forked from
 * the backward's join back into it by the last level, -1; waits for work enqueued outside the
 * graph use mt_stream_wait_event_external). */
MT_API void mt_model_set_cuda_graphs(mt_model *m, int on);

/* Called by the backward, on its stream, as gradients become final: `level` is num_layers after
 * the output layer and final norm, l after decoder layer l, and -1 at the end (the embedding and,
 * when tied, the output weight). A data-parallel trainer starts each bucket's reduction from it.
 * A non-OK return stops the backward with that status. NULL: none (see mt_model_set_cuda_graphs
 * for callbacks under CUDA graphs). */
typedef mt_status (*mt_model_grad_ready_fn)(void *ctx, int level, mt_stream stream);
MT_API void mt_model_set_grad_ready(mt_model *m, mt_model_grad_ready_fn fn, void *ctx);
/* Called by the forward, on its stream, before it reads a level's parameters (the levels of
 * mt_model_grad_ready_fn: -1 before the embedding, l before decoder layer l, num_layers before
 * the final norm and output layer). A trainer that all-gathers the parameters beside the forward
 * (--overlap-param-gather) makes the stream wait for the buckets of that level here. A non-OK
 * return stops the forward with that status. */
typedef mt_status (*mt_model_param_wait_fn)(void *ctx, int level, mt_stream stream);
MT_API void mt_model_set_param_wait(mt_model *m, mt_model_param_wait_fn fn, void *ctx);
/* The level after which parameter `name`'s gradient is final (see mt_model_grad_ready_fn), which
 * is also the first level of the forward that reads it, or MT_ERR_INVALID_ARG for a name the
 * model does not have. */
MT_API mt_status mt_model_param_ready_level(const mt_model_config *cfg, const char *name,
                                            int *level);

/* ---- pipeline parallelism (cfg.pipeline_model_parallel_size > 1) ----
 * A stage's micro-batch goes through mt_model_pp_forward and, in training, mt_model_pp_backward,
 * in one of mt_model_pp_slots activation slots (1F1B: micro-batch i in slot i % slots; a slot's
 * backward before its next forward). The caller moves the tensors between stages: before a
 * non-first stage's forward it writes the previous stage's output into mt_model_pp_input(slot);
 * after a non-last stage's forward it sends mt_model_pp_output on (valid until the next forward);
 * before a non-last stage's backward it writes the next stage's input gradient into
 * mt_model_pp_grad, which after a non-first stage's backward holds this stage's input gradient.
 * Each is (rows, hidden_size) in the model dtype: the micro-batch's B*T token rows (B*T/TP with
 * sequence parallelism). Positions, key starts and sample ids (mt_model_set_positions, ...) are
 * read when the forward and the backward run: the caller sets the micro-batch's before each. With
 * P = 1 these run the whole model (slot 0; mt_model_pp_input, _output and _grad are then unused). */
MT_API int mt_model_pp_slots(const mt_model *m);
MT_API mt_tensor mt_model_pp_input(mt_model *m, int slot);
MT_API mt_tensor mt_model_pp_output(mt_model *m);
MT_API mt_tensor mt_model_pp_grad(mt_model *m);
/* The stage's forward of a micro-batch in `slot`: tokens (B,T) i32 on the first stage (others:
 * ignored, may be NULL), targets (B,T) on the last (others: ignored), as mt_model_forward's. With
 * train, as mt_model_forward_backward's forward (dropout on; on the last stage also the loss,
 * its gradient for loss_scale and the output layer's backward), and the slot's pp_backward must
 * follow before its next forward (on the last stage: next). Enqueued on `stream`. */
MT_API mt_status mt_model_pp_forward(mt_model *m, int slot, const mt_tensor *tokens,
                                     const mt_tensor *targets, int train, float loss_scale,
                                     mt_stream stream);
/* The stage's backward of the micro-batch in `slot` (after its pp_forward with train), gradients
 * added (or written after mt_model_discard_grads) as mt_model_forward_backward's; the grad-ready
 * callback sees this stage's levels, then -1. Enqueued on `stream`. */
MT_API mt_status mt_model_pp_backward(mt_model *m, int slot, mt_stream stream);

/* ---- inference: a model without gradients, views of its weights, and a KV cache ----
 * A serving loop keeps one model's weights and runs forwards of different token counts over a
 * KV cache: a chunk of a prompt, then one token at a time. */
/* As mt_model_create (own weights, initialised the same way) but without gradients: forwards
 * only (mt_model_forward_backward and the gradient calls refuse it). */
MT_API mt_status mt_model_create_inference(const mt_model_config *cfg, int micro_batch_size,
                                           mt_device device, mt_model **out);
/* A model of src's config and weights (the same storage, not a copy: src's later weight updates
 * show) for micro-batches of (micro_batch_size, seq_length), without gradients. src must
 * outlive it; one process, TP 1 and PP 1 (else an error). */
MT_API mt_status mt_model_create_view(const mt_model *src, int micro_batch_size, int seq_length,
                                      mt_model **out);

/* Every layer's keys and values (after RoPE and the qk norms) for up to max_len positions of
 * micro_batch_size sequences, in the model's dtype on its device: (B, max_len, kv heads, kv
 * channels) a layer. Any model of the same config (mt_model_create_view) may use it. */
typedef struct mt_model_kv_cache mt_model_kv_cache;
MT_API mt_status mt_model_kv_cache_create(const mt_model *m, int max_len, mt_model_kv_cache **out);
MT_API void mt_model_kv_cache_destroy(mt_model_kv_cache *c); /* NULL is a no-op */
/* Inference over a KV cache (NULL: off): the forwards from now on take their tokens (B,T) as
 * positions pos .. pos+T-1 of each sequence (their position embeddings or rotary angles), write
 * their keys and values into the cache's rows [pos, pos+T) and attend to its rows [0, pos+T)
 * (causal: token t sees the positions up to pos + t), so the cache must already hold the keys of
 * positions 0 .. pos-1 (earlier forwards). pos + T <= the cache's max_len, and pos + T <=
 * max_position_embeddings with learned positions. Document masks are refused with it; with
 * explicit positions (mt_model_set_positions) these win. Blocking (sets a positions buffer). */
MT_API mt_status mt_model_set_kv_cache(mt_model *m, mt_model_kv_cache *c, int pos);
/* As mt_model_set_kv_cache with each sequence at its own position: row b's tokens are positions
 * pos[b] .. pos[b]+T-1 (pos: B ints on the host), so sequences of different lengths decode in one
 * forward. */
MT_API mt_status mt_model_set_kv_cache_rows(mt_model *m, mt_model_kv_cache *c, const int *pos);
/* Row b of a cache as a cache of one sequence over the same storage, for models of micro-batch
 * 1 (a prompt's prefill into its row of a batch's cache). Destroy it before c. */
MT_API mt_status mt_model_kv_cache_row(mt_model_kv_cache *c, int b, mt_model_kv_cache **out);

/* Multi-token prediction: each depth's token losses summed over the training micro-batches since
 * the last call (sum[k], depth k+1) and their counted tokens (count[k]), for k < n (n at most
 * cfg.mtp_num_layers), then resets every depth's (a depth's mean: sum / count, both summed over
 * data-parallel ranks first; zeros on a pipeline stage before the last, which has no depths).
 * Blocking. */
MT_API mt_status mt_model_take_mtp_loss_sums(mt_model *m, double *sum, double *count, int n,
                                             mt_stream stream);

/* Multi-token prediction with the caller's rolls (needed under context parallelism, where a
 * rank's chunks do not hold the tokens ahead of their ends): tokens and targets (D, B, T) i32 on
 * the model's device, depth k+1's inputs and targets for this rank's positions (the whole
 * sequence's tokens and targets shifted left by k+1, zeros and ignore indices past its end), read
 * when the training forwards from now on run; scales (D floats on the host, read then too; NULL:
 * ones) multiply each depth's loss gradient (e.g. this rank's share of the depth's counted tokens
 * over the decoder's, for a mean over every rank's). All three must outlive those forwards. NULL
 * tokens: the model rolls its own (the default). The training step then runs without CUDA
 * graphs. A model without depths ignores it. */
MT_API mt_status mt_model_set_mtp_inputs(mt_model *m, const mt_tensor *tokens,
                                         const mt_tensor *targets, const float *scales);

/* Mixture of experts: the load-balancing and z losses (without their coefficients) of the
 * training forwards since the last call, each the mean over the layers and micro-batches that
 * computed it (a loss whose coefficient is 0 is not computed: NaN; so are both when none ran).
 * Blocking. */
MT_API mt_status mt_model_take_moe_losses(mt_model *m, double *aux, double *z, mt_stream stream);

/* Megatron's FLOP count for one iteration of `global_batch` sequences (training: fwd + bwd). */
MT_API double mt_model_flops_per_iteration(const mt_model_config *cfg, int64_t global_batch);

#ifdef __cplusplus
}
#endif

#endif /* MT_MODEL_H */
