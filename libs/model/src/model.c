/* Model configuration, the parameter table, memory planning and Philox initialisation. */
#include "model_impl.h"
#include <mt/moe.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The mixture-of-experts fields: defaults and what works with them. */
static mt_status moe_finalize(mt_model_config *c) {
    MT_REQUIRE(c->num_moe_experts >= 0, MT_ERR_INVALID_ARG, "--num-experts %d must be positive",
               c->num_moe_experts);
    const int Fs = c->moe_shared_expert_intermediate_size;
    MT_REQUIRE(!Fs || c->num_moe_experts, MT_ERR_INVALID_ARG,
               "--moe-shared-expert-intermediate-size needs --num-experts");
    int dense = 0;
    for (int l = 0; l < MT_MODEL_MAX_LAYERS; l++)
        dense |= c->moe_dense_layer[l] && (l >= c->num_layers || !c->num_moe_experts);
    MT_REQUIRE(!dense, MT_ERR_INVALID_ARG,
               "--moe-layer-freq: a pattern needs --num-experts and at most --num-layers layers");
    MT_REQUIRE(!c->moe_shared_expert_gate || Fs, MT_ERR_INVALID_ARG,
               "--moe-shared-expert-gate needs --moe-shared-expert-intermediate-size");
    if (!c->num_moe_experts) return MT_OK;
    if (Fs) { /* (megatron's checks and message) */
        MT_REQUIRE(Fs > 0, MT_ERR_INVALID_ARG,
                   "moe_shared_expert_intermediate_size must be num_shared_experts * "
                   "ffn_size_of_each_shared_expert, but got %d",
                   Fs);
        MT_REQUIRE(!c->add_bias_linear, MT_ERR_INVALID_ARG,
                   "bias is not supported in the shared experts, please set "
                   "'--disable-bias-linear' instead.");
        MT_REQUIRE(Fs % c->tensor_model_parallel_size == 0, MT_ERR_INVALID_ARG,
                   "--moe-shared-expert-intermediate-size (%d) is not divisible by "
                   "--tensor-model-parallel-size (%d)",
                   Fs, c->tensor_model_parallel_size);
    }
    if (!c->moe_router_topk) c->moe_router_topk = 2;
    if (!c->moe_ffn_hidden_size) c->moe_ffn_hidden_size = c->ffn_hidden_size;
    MT_REQUIRE(c->moe_router_topk >= 1 && c->moe_router_topk <= c->num_moe_experts,
               MT_ERR_INVALID_ARG, "--moe-router-topk (%d) must be in [1, --num-experts (%d)]",
               c->moe_router_topk, c->num_moe_experts);
    MT_REQUIRE(c->moe_ffn_hidden_size > 0, MT_ERR_INVALID_ARG,
               "--moe-ffn-hidden-size %d must be positive", c->moe_ffn_hidden_size);
    MT_REQUIRE(c->moe_aux_loss_coeff >= 0.0f && c->moe_z_loss_coeff >= 0.0f, MT_ERR_INVALID_ARG,
               "--moe-aux-loss-coeff (%g) and --moe-z-loss-coeff (%g) must not be negative",
               (double)c->moe_aux_loss_coeff, (double)c->moe_z_loss_coeff);
    MT_REQUIRE(c->moe_ffn_hidden_size % c->tensor_model_parallel_size == 0, MT_ERR_INVALID_ARG,
               "--moe-ffn-hidden-size (%d) is not divisible by --tensor-model-parallel-size (%d)",
               c->moe_ffn_hidden_size, c->tensor_model_parallel_size);
    MT_REQUIRE(!c->moe_router_score_sigmoid || !c->moe_router_pre_softmax, MT_ERR_INVALID_ARG,
               "--moe-router-pre-softmax is the softmax score function's (not with "
               "--moe-router-score-function sigmoid)");
    MT_REQUIRE(!c->moe_router_enable_expert_bias || c->moe_router_score_sigmoid, MT_ERR_INVALID_ARG,
               "Expert bias for aux-loss-free routing only supports sigmoid score function. "
               "Please set --moe-router-score-function sigmoid for sigmoid score function.");
    MT_REQUIRE(!c->moe_router_seq_aux || c->context_parallel_size <= 1, MT_ERR_UNSUPPORTED,
               "--moe-router-load-balancing-type seq_aux_loss with context parallelism is not "
               "supported yet");
    MT_REQUIRE(c->moe_router_bias_update_rate >= 0.0f, MT_ERR_INVALID_ARG,
               "--moe-router-bias-update-rate %g must not be negative",
               (double)c->moe_router_bias_update_rate);
    MT_REQUIRE(c->moe_router_topk_scaling_factor >= 0.0f, MT_ERR_INVALID_ARG,
               "--moe-router-topk-scaling-factor %g must be positive",
               (double)c->moe_router_topk_scaling_factor);
    if (c->moe_router_group_topk || c->moe_router_num_groups) { /* (megatron's checks) */
        const int G = c->moe_router_num_groups, g = c->moe_router_group_topk;
        MT_REQUIRE(G > 0, MT_ERR_INVALID_ARG,
                   "When using group limited routing, moe_router_num_groups must be specified.");
        MT_REQUIRE(g > 0, MT_ERR_INVALID_ARG,
                   "--moe-router-num-groups %d without --moe-router-group-topk", G);
        MT_REQUIRE(c->num_moe_experts % G == 0, MT_ERR_INVALID_ARG,
                   "num_moe_experts (%d) should be divisible by moe_router_num_groups (%d).",
                   c->num_moe_experts, G);
        MT_REQUIRE(g <= G, MT_ERR_INVALID_ARG,
                   "moe_router_group_topk (%d) should be smaller than moe_router_num_groups (%d).",
                   g, G);
        MT_REQUIRE(G <= 64, MT_ERR_UNSUPPORTED, "--moe-router-num-groups %d: at most 64", G);
        MT_REQUIRE(c->moe_router_topk >= g && c->moe_router_topk <= g * (c->num_moe_experts / G),
                   MT_ERR_INVALID_ARG,
                   "--moe-router-topk (%d) must be in [--moe-router-group-topk (%d), the %d "
                   "experts of the chosen groups]",
                   c->moe_router_topk, g, g * (c->num_moe_experts / G));
    }
    MT_REQUIRE(c->moe_expert_capacity_factor >= 0.0f, MT_ERR_INVALID_ARG,
               "--moe-expert-capacity-factor %g must not be negative",
               (double)c->moe_expert_capacity_factor);
    MT_REQUIRE(!c->moe_pad_expert_input_to_capacity || c->moe_expert_capacity_factor > 0.0f,
               MT_ERR_INVALID_ARG,
               "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity");
    MT_REQUIRE(c->moe_expert_capacity_factor == 0.0f || !c->sequence_parallel ||
                   c->tensor_model_parallel_size == 1,
               MT_ERR_UNSUPPORTED,
               "--moe-expert-capacity-factor with --sequence-parallel is not supported yet");
    const int ep = c->expert_model_parallel_size;
    MT_REQUIRE(ep >= 0 && (ep <= 1 || c->num_moe_experts % ep == 0), MT_ERR_INVALID_ARG,
               "Number of experts (%d) should be a multiple of expert model parallel_size (%d).",
               c->num_moe_experts, ep);
    MT_REQUIRE(c->expert_model_parallel_rank >= 0 && c->expert_model_parallel_rank < (ep ? ep : 1),
               MT_ERR_INVALID_ARG, "expert_model_parallel_rank %d of %d",
               c->expert_model_parallel_rank, ep);
    return MT_OK;
}

/* The context-parallel fields: what works with them. */
static mt_status cp_finalize(const mt_model_config *c) {
    const int cp = c->context_parallel_size;
    MT_REQUIRE(cp >= 0 && c->context_parallel_rank >= 0 && c->context_parallel_rank < (cp ? cp : 1),
               MT_ERR_INVALID_ARG, "context_parallel_rank %d of %d", c->context_parallel_rank, cp);
    if (cp <= 1) return MT_OK;
    MT_REQUIRE(c->seq_length % 2 == 0, MT_ERR_INVALID_ARG,
               "context parallelism: a rank's %d tokens of a sequence must be two equal chunks",
               c->seq_length);
    MT_REQUIRE(c->attention_dropout == 0.0f, MT_ERR_UNSUPPORTED,
               "context parallelism with attention dropout is not supported yet");
    MT_REQUIRE(!c->window_size, MT_ERR_UNSUPPORTED,
               "context parallelism with sliding-window attention is not supported yet");
    return MT_OK;
}

/* Multi-latent attention: its shapes and the choices it does not take (yet). megatron.core's
 * MLASelfAttention; arguments.py refuses it with query groups. */
static mt_status mla_finalize(mt_model_config *c) {
    if (!c->multi_latent_attention) return MT_OK;
    MT_REQUIRE(c->kv_lora_rank > 0 && c->qk_head_dim > 0 && c->qk_pos_emb_head_dim > 0 &&
                   c->v_head_dim > 0 && c->q_lora_rank >= 0,
               MT_ERR_INVALID_ARG,
               "--multi-latent-attention needs positive --kv-lora-rank (%d), --qk-head-dim (%d), "
               "--qk-pos-emb-head-dim (%d) and --v-head-dim (%d)",
               c->kv_lora_rank, c->qk_head_dim, c->qk_pos_emb_head_dim, c->v_head_dim);
    MT_REQUIRE(c->qk_pos_emb_head_dim % 2 == 0, MT_ERR_INVALID_ARG,
               "--qk-pos-emb-head-dim (%d) must be even (rotary pairs)", c->qk_pos_emb_head_dim);
    const int D = c->qk_head_dim + c->qk_pos_emb_head_dim;
    MT_REQUIRE(c->v_head_dim <= D, MT_ERR_UNSUPPORTED,
               "--v-head-dim (%d) larger than --qk-head-dim + --qk-pos-emb-head-dim (%d) is not "
               "supported yet",
               c->v_head_dim, D);
    MT_REQUIRE(!c->kv_channels || c->kv_channels == D, MT_ERR_INVALID_ARG,
               "--kv-channels (%d) with --multi-latent-attention: the head is --qk-head-dim + "
               "--qk-pos-emb-head-dim (%d)",
               c->kv_channels, D);
    c->kv_channels = D;
    MT_REQUIRE(!c->num_query_groups || c->num_query_groups == c->num_attention_heads,
               MT_ERR_INVALID_ARG,
               "--multi-latent-attention does not take --group-query-attention "
               "(--num-query-groups %d of %d heads)",
               c->num_query_groups, c->num_attention_heads);
    MT_REQUIRE(c->position_embedding_type == MT_POS_ROPE, MT_ERR_INVALID_ARG,
               "--multi-latent-attention needs --position-embedding-type rope");
    MT_REQUIRE(!c->rotary_interleaved, MT_ERR_INVALID_ARG,
               "--rotary-interleaved with --multi-latent-attention: MLA's rotary channels are "
               "interleaved pairs already");
    MT_REQUIRE(!c->add_bias_linear && !c->add_qkv_bias, MT_ERR_UNSUPPORTED,
               "--multi-latent-attention with biases is not supported yet (use "
               "--disable-bias-linear)");
    MT_REQUIRE(!c->qk_layernorm, MT_ERR_UNSUPPORTED,
               "--multi-latent-attention with --qk-layernorm is not supported yet");
    return MT_OK;
}

mt_status mt_model_config_finalize(mt_model_config *c) {
    MT_REQUIRE(c && c->size >= sizeof(mt_model_config), MT_ERR_INVALID_ARG,
               "config is NULL or from an older header");
    MT_REQUIRE(c->num_layers > 0, MT_ERR_INVALID_ARG, "--num-layers must be positive");
    MT_REQUIRE(c->hidden_size > 0, MT_ERR_INVALID_ARG, "--hidden-size must be positive");
    MT_REQUIRE(c->num_attention_heads > 0, MT_ERR_INVALID_ARG,
               "--num-attention-heads must be positive");
    MT_REQUIRE(c->seq_length > 0, MT_ERR_INVALID_ARG, "--seq-length must be positive");
    MT_REQUIRE(c->vocab_size > 0, MT_ERR_INVALID_ARG, "vocab size must be positive");
    MT_TRY(mla_finalize(c));
    if (!c->num_query_groups) c->num_query_groups = c->num_attention_heads;
    MT_REQUIRE(c->num_attention_heads % c->num_query_groups == 0, MT_ERR_INVALID_ARG,
               "--num-attention-heads (%d) must be a multiple of --num-query-groups (%d)",
               c->num_attention_heads, c->num_query_groups);
    if (!c->kv_channels) {
        MT_REQUIRE(c->hidden_size % c->num_attention_heads == 0, MT_ERR_INVALID_ARG,
                   "--hidden-size (%d) must be divisible by --num-attention-heads (%d)",
                   c->hidden_size, c->num_attention_heads);
        c->kv_channels = c->hidden_size / c->num_attention_heads;
    }
    if (!c->ffn_hidden_size) c->ffn_hidden_size = 4 * c->hidden_size;
    if (!c->max_position_embeddings) c->max_position_embeddings = c->seq_length;
    MT_REQUIRE(c->position_embedding_type != MT_POS_LEARNED ||
                   c->max_position_embeddings >= c->seq_length,
               MT_ERR_INVALID_ARG, "--max-position-embeddings (%d) must be >= --seq-length (%d)",
               c->max_position_embeddings, c->seq_length);
    MT_REQUIRE(c->tensor_model_parallel_size >= 0, MT_ERR_INVALID_ARG,
               "--tensor-model-parallel-size %d must be positive", c->tensor_model_parallel_size);
    if (!c->tensor_model_parallel_size) c->tensor_model_parallel_size = 1;
    const int tp = c->tensor_model_parallel_size;
    if (!c->make_vocab_size_divisible_by) c->make_vocab_size_divisible_by = 128;
    int div = c->make_vocab_size_divisible_by * tp; /* Megatron's _vocab_size_with_padding */
    if (!c->padded_vocab_size) c->padded_vocab_size = (c->vocab_size + div - 1) / div * div;
    MT_REQUIRE(c->padded_vocab_size >= c->vocab_size, MT_ERR_INVALID_ARG,
               "padded vocab size %d < vocab size %d", c->padded_vocab_size, c->vocab_size);
    /* megatron.core's divide(): each rank's share of heads, groups, MLP and vocabulary */
    const struct {
        int n;
        const char *what;
    } shares[4] = { { c->num_attention_heads, "--num-attention-heads" },
                    { c->num_query_groups, "--num-query-groups" },
                    { c->ffn_hidden_size, "--ffn-hidden-size" },
                    { c->padded_vocab_size, "the padded vocab size" } };
    for (int i = 0; i < 4; i++)
        MT_REQUIRE(shares[i].n % tp == 0, MT_ERR_INVALID_ARG,
                   "%s (%d) is not divisible by --tensor-model-parallel-size (%d)", shares[i].what,
                   shares[i].n, tp);
    if (tp == 1) c->sequence_parallel = 0; /* (Megatron disables it, with a warning) */
    if (c->sequence_parallel) {
        MT_REQUIRE(c->seq_length % tp == 0, MT_ERR_INVALID_ARG,
                   "--seq-length (%d) must be a multiple of --tensor-model-parallel-size (%d) with "
                   "--sequence-parallel",
                   c->seq_length, tp);
    }
    MT_REQUIRE(c->pipeline_model_parallel_size >= 0, MT_ERR_INVALID_ARG,
               "--pipeline-model-parallel-size %d must be positive",
               c->pipeline_model_parallel_size);
    if (!c->pipeline_model_parallel_size) c->pipeline_model_parallel_size = 1;
    const int pp = c->pipeline_model_parallel_size;
    MT_REQUIRE(c->pipeline_model_parallel_rank >= 0 && c->pipeline_model_parallel_rank < pp,
               MT_ERR_INVALID_ARG, "pipeline_model_parallel_rank %d is not a stage of %d",
               c->pipeline_model_parallel_rank, pp);
    int most = 0; /* the most layers a stage has */
    for (int r = 0; r < pp; r++) {
        int first, n;
        MT_TRY(mt_model_stage_layers(c, r, &first, &n));
        most = n > most ? n : most;
    }
    if (c->norm_epsilon == 0.0f) c->norm_epsilon = 1e-5f;
    MT_REQUIRE(c->hidden_dropout >= 0.0f && c->hidden_dropout < 1.0f, MT_ERR_INVALID_ARG,
               "--hidden-dropout %g must be in [0, 1)", (double)c->hidden_dropout);
    MT_REQUIRE(c->attention_dropout >= 0.0f && c->attention_dropout < 1.0f, MT_ERR_INVALID_ARG,
               "--attention-dropout %g must be in [0, 1)", (double)c->attention_dropout);
    if (c->rotary_base == 0.0) c->rotary_base = 10000.0;
    MT_REQUIRE(c->window_size >= 0, MT_ERR_INVALID_ARG, "window_size %d < 0", c->window_size);
    if (c->rotary_percent == 0.0) c->rotary_percent = 1.0;
    MT_REQUIRE(c->rotary_percent > 0.0 && c->rotary_percent <= 1.0, MT_ERR_INVALID_ARG,
               "--rotary-percent %g must be in (0, 1]", c->rotary_percent);
    MT_REQUIRE(c->rotary_percent == 1.0 ||
                   (c->position_embedding_type == MT_POS_ROPE && !c->multi_latent_attention),
               MT_ERR_INVALID_ARG,
               "--rotary-percent %g needs rotary position embeddings without multi-latent "
               "attention",
               c->rotary_percent);
    {
        const int rd = (int)(c->kv_channels * c->rotary_percent);
        MT_REQUIRE(c->rotary_percent == 1.0 || (rd >= 2 && rd % 2 == 0), MT_ERR_INVALID_ARG,
                   "--rotary-percent %g rotates %d of %d channels (want an even number >= 2)",
                   c->rotary_percent, rd, c->kv_channels);
    }
    if (c->rope_scaling.type != MT_ROPE_SCALING_NONE) {
        double inv[2], attn;
        MT_REQUIRE(c->position_embedding_type == MT_POS_ROPE, MT_ERR_INVALID_ARG,
                   "rotary scaling (--use-rope-scaling, --rope-type yarn, "
                   "--rotary-seq-len-interpolation-factor) needs rotary position embeddings");
        MT_TRY(mt_rope_inv_freq(inv, &attn, 2, c->rotary_base, &c->rope_scaling));
    }
    if (c->init_method_std == 0.0f) c->init_method_std = 0.02f;
    MT_REQUIRE(c->dtype == MT_F32 || c->dtype == MT_BF16 || c->dtype == MT_F16, MT_ERR_UNSUPPORTED,
               "model dtype %s (use f32, bf16 or f16)", mt_dtype_name(c->dtype));
    MT_REQUIRE(c->position_embedding_type == MT_POS_LEARNED || c->kv_channels % 2 == 0,
               MT_ERR_INVALID_ARG, "rotary embeddings need an even head dim (%d)", c->kv_channels);
    /* megatron/core/transformer/transformer_config.py __post_init__ and arguments.py */
    switch (c->recompute_granularity) {
    case MT_RECOMPUTE_NONE:
        break;
    case MT_RECOMPUTE_FULL:
        MT_REQUIRE(c->recompute_method == MT_RECOMPUTE_UNIFORM ||
                       c->recompute_method == MT_RECOMPUTE_BLOCK,
                   MT_ERR_INVALID_ARG,
                   "Using recompute_granularity: full so recompute_method must be \"block\" or "
                   "\"uniform\"");
        MT_REQUIRE(c->recompute_num_layers >= 1 && c->recompute_num_layers <= most,
                   MT_ERR_INVALID_ARG,
                   "When using recompute_granularity: full recompute_num_layers must be between 1 "
                   "and num_layers_per_pipeline_rank: %d",
                   most);
        break;
    case MT_RECOMPUTE_SELECTIVE:
        MT_REQUIRE(c->recompute_method == MT_RECOMPUTE_METHOD_NONE, MT_ERR_INVALID_ARG,
                   "recompute method is not yet supported for selective recomputing granularity");
        MT_REQUIRE(
            c->recompute_num_layers == 0, MT_ERR_INVALID_ARG,
            "When using recompute_granularity: selective recompute_num_layers must be None.");
        break;
    default:
        return MT_ERROR(MT_ERR_INVALID_ARG,
                        "When using recompute_granuarlity: %d must be \"full\" or \"selective\".",
                        (int)c->recompute_granularity);
    }
    MT_REQUIRE(!c->recompute_mlp_act || c->recompute_granularity == MT_RECOMPUTE_SELECTIVE,
               MT_ERR_INVALID_ARG,
               "recompute_modules mlp_act needs recompute_granularity: selective");
    MT_REQUIRE(c->logits_chunks >= 0, MT_ERR_INVALID_ARG, "logits_chunks %d < 0", c->logits_chunks);
    if (c->logits_chunks == 0) c->logits_chunks = 1;
    MT_REQUIRE(!c->recompute_mla_up_proj || (c->recompute_granularity == MT_RECOMPUTE_SELECTIVE &&
                                             c->multi_latent_attention),
               MT_ERR_INVALID_ARG,
               "recompute_modules mla_up_proj needs recompute_granularity: selective and "
               "multi_latent_attention");
    MT_REQUIRE(!c->recompute_layernorm || c->recompute_granularity == MT_RECOMPUTE_SELECTIVE,
               MT_ERR_INVALID_ARG,
               "recompute_modules layernorm needs recompute_granularity: selective");
    MT_REQUIRE(c->mtp_num_layers >= 0, MT_ERR_INVALID_ARG, "--mtp-num-layers %d must be >= 0",
               c->mtp_num_layers);
    if (c->mtp_num_layers > 0) {
        MT_REQUIRE(c->context_parallel_size <= 1 || c->position_embedding_type != MT_POS_LEARNED,
                   MT_ERR_UNSUPPORTED,
                   "--mtp-num-layers with context parallelism is not supported yet with learned "
                   "absolute position embeddings");
        MT_REQUIRE(pp == 1 || c->position_embedding_type != MT_POS_LEARNED, MT_ERR_UNSUPPORTED,
                   "--mtp-num-layers with pipeline parallelism is not supported yet with learned "
                   "absolute position embeddings (the last stage holds no copy of them)");
        MT_REQUIRE(c->mtp_loss_scaling_factor >= 0.0f, MT_ERR_INVALID_ARG,
                   "--mtp-loss-scaling-factor %g must be >= 0", (double)c->mtp_loss_scaling_factor);
    }
    MT_TRY(moe_finalize(c));
    return cp_finalize(c);
}

mt_status mt_model_stage_layers(const mt_model_config *c, int stage, int *first, int *count) {
    MT_REQUIRE(c && first && count, MT_ERR_INVALID_ARG, "NULL argument");
    const int P = c->pipeline_model_parallel_size > 1 ? c->pipeline_model_parallel_size : 1;
    const int L = c->num_layers, F = c->num_layers_in_first_pipeline_stage,
              E = c->num_layers_in_last_pipeline_stage;
    MT_REQUIRE(stage >= 0 && stage < P, MT_ERR_INVALID_ARG, "pipeline stage %d is not one of %d",
               stage, P);
    MT_REQUIRE(F >= 0 && E >= 0, MT_ERR_INVALID_ARG,
               "the first and last pipeline stages' layer counts must be positive (%d, %d)", F, E);
    MT_REQUIRE(P > 1 || (F == 0 && E == 0), MT_ERR_INVALID_ARG,
               "an uneven pipeline split (--decoder-first/last-pipeline-num-layers) needs "
               "--pipeline-model-parallel-size > 1");
    /* megatron.core's get_num_layers_to_build: the set ends first, the rest evenly */
    const int left = P - (F > 0) - (E > 0), rest = L - F - E;
    const int V = c->virtual_pipeline_model_parallel_size;
    if (V > 1 && (F || E)) { /* (transformer_config.py's checks and text, its spaces as there) */
        MT_REQUIRE(P % V == 0 && P / V > 1, MT_ERR_INVALID_ARG,
                   "%d pipeline stages are not %d chunks of 2 or more ranks", P, V);
        const int ranks = P / V, middle = ranks - (F > 0) - (E > 0), mid_layers = L - F - E;
        MT_REQUIRE(F % V == 0, MT_ERR_INVALID_ARG,
                   "number of layers at first stage: %dmust be divisible by virtual "
                   "pipelineparallel degree %d",
                   F, V);
        MT_REQUIRE(E % V == 0, MT_ERR_INVALID_ARG,
                   "number of layers at last stage: %dmust be divisible by virtual "
                   "pipelineparallel degree %d",
                   E, V);
        MT_REQUIRE(!mid_layers == !middle && mid_layers >= 0, MT_ERR_INVALID_ARG,
                   "Mismatch: %d middle layers remaining but %d middle PP stages available.",
                   mid_layers, middle);
        MT_REQUIRE(!middle || mid_layers % middle == 0, MT_ERR_INVALID_ARG,
                   "number of layers at middle stage: %d must be divisible bythe middle pipeline "
                   "model parallel size %d",
                   mid_layers, middle);
        MT_REQUIRE(!middle || mid_layers / middle % V == 0, MT_ERR_INVALID_ARG,
                   "number of layers on each middle pipeline rank:%d must be divisible by "
                   "virtualpipeline parallel degree %d",
                   middle ? mid_layers / middle : 0, V);
        stage_range(c, stage, first, count);
        return MT_OK;
    }
    if (!F && !E && V > 1)
        MT_REQUIRE(L % P == 0, MT_ERR_INVALID_ARG,
                   "Number of layers should be divisible by the pipeline-model-parallel size "
                   "times --num-virtual-stages-per-pipeline-rank (--num-layers %d, %d x %d)",
                   L, P / V, V);
    else if (!F && !E)
        MT_REQUIRE(L % P == 0, MT_ERR_INVALID_ARG,
                   "Number of layers should be divisible by the pipeline-model-parallel size "
                   "(--num-layers %d, --pipeline-model-parallel-size %d)",
                   L, P);
    else if (left > 0)
        MT_REQUIRE(rest > 0 && rest % left == 0, MT_ERR_INVALID_ARG,
                   "number of layers at middle stage: %d must be divisible by the middle pipeline "
                   "model parallel size %d (--num-layers %d, first stage %d, last stage %d), "
                   "with at least one layer a stage",
                   rest, left, L, F, E);
    else
        MT_REQUIRE(rest == 0, MT_ERR_INVALID_ARG,
                   "the first and last pipeline stages' layers (%d + %d) must be --num-layers (%d) "
                   "with 2 stages",
                   F, E, L);
    stage_range(c, stage, first, count);
    return MT_OK;
}

/* ---- --moe-layer-freq: Megatron's int or Python list expression ---- */

/* A parser of list expressions: expr = term { '+' term }, term = factor { '*' int },
 * factor = '[' int { ',' int } ']' | '(' expr ')'. The list grows in out[*n] (at most cap). */
typedef struct freq_parser {
    const char *s;
    unsigned char *out;
    int n, cap, bad;
} freq_parser;

static void fp_space(freq_parser *p) {
    while (*p->s == ' ')
        p->s++;
}

static long fp_int(freq_parser *p) {
    fp_space(p);
    char *end;
    long v = strtol(p->s, &end, 10);
    if (end == p->s) p->bad = 1;
    p->s = end;
    return v;
}

static void fp_expr(freq_parser *p, int depth);

/* Takes character ch (after spaces), else marks the expression bad (never past its end). */
static void fp_eat(freq_parser *p, char ch) {
    fp_space(p);
    if (*p->s == ch)
        p->s++;
    else
        p->bad = 1;
}

static void fp_factor(freq_parser *p, int depth) {
    fp_space(p);
    if (*p->s == '(') {
        p->s++;
        fp_expr(p, depth + 1);
        fp_eat(p, ')');
        return;
    }
    fp_eat(p, '[');
    while (!p->bad) {
        long v = fp_int(p);
        if (v != 0 && v != 1) p->bad = 1;
        if (p->n < p->cap) p->out[p->n] = (unsigned char)v;
        p->n++;
        fp_space(p);
        if (*p->s != ',') break;
        p->s++;
    }
    if (!p->bad) fp_eat(p, ']');
}

static void fp_term(freq_parser *p, int depth) {
    const int start = p->n;
    fp_factor(p, depth);
    for (fp_space(p); !p->bad && *p->s == '*'; fp_space(p)) {
        p->s++;
        long times = fp_int(p);
        const int len = p->n - start;
        if (times < 0 || (long)len * times > 1L << 20) {
            p->bad = 1;
            return;
        }
        for (long t = 1; t < times; t++)
            for (int i = 0; i < len; i++, p->n++)
                if (p->n < p->cap && start + i < p->cap) p->out[p->n] = p->out[start + i];
        if (times == 0) p->n = start;
    }
    if (p->n > 1 << 24) p->bad = 1; /* (no pattern is that long) */
}

static void fp_expr(freq_parser *p, int depth) {
    if (depth > 32) {
        p->bad = 1;
        return;
    }
    fp_term(p, depth);
    for (fp_space(p); !p->bad && *p->s == '+'; fp_space(p)) {
        p->s++;
        fp_term(p, depth);
    }
}

/* A per-layer pattern flag (--moe-layer-freq, --window-attn-skip-freq) for c's num_layers
 * layers into pat[0..L): an int N (*n set, pat untouched) or a list expression of 0s and 1s
 * (*n 0). `what` names the pattern in Megatron's length message. */
static mt_status layer_pattern(const mt_model_config *c, const char *flag, const char *what,
                               const char *current, const char *freq, unsigned char *pat, long *n) {
    MT_REQUIRE(c && freq, MT_ERR_INVALID_ARG, "NULL argument");
    const int L = c->num_layers;
    MT_REQUIRE(L > 0 && L <= MT_MODEL_MAX_LAYERS, MT_ERR_INVALID_ARG,
               "%s with --num-layers %d (at most %d)", flag, L, MT_MODEL_MAX_LAYERS);
    *n = 0;
    if (!strchr(freq, '[')) {
        char *end;
        *n = strtol(freq, &end, 10);
        MT_REQUIRE(end != freq && *end == '\0' && *n >= 1, MT_ERR_INVALID_ARG,
                   "%s %s: an int of at least 1 or a list expression such as "
                   "\"([0]*1+[1]*3)*2\"",
                   flag, freq);
        return MT_OK;
    }
    freq_parser p = { freq, pat, 0, MT_MODEL_MAX_LAYERS, 0 };
    fp_expr(&p, 0);
    fp_space(&p);
    MT_REQUIRE(!p.bad && *p.s == '\0', MT_ERR_INVALID_ARG,
               "%s %s: not a list expression of 0s and 1s with + and *", flag, freq);
    MT_REQUIRE(p.n == L, MT_ERR_INVALID_ARG,
               "Invalid length of %s: %d, expected %d, current %s: %s", what, p.n, L, current,
               freq);
    return MT_OK;
}

mt_status mt_model_moe_layer_freq(mt_model_config *c, const char *freq) {
    unsigned char pat[MT_MODEL_MAX_LAYERS];
    long n;
    MT_TRY(layer_pattern(c, "--moe-layer-freq", "moe_layer_pattern", "moe layer pattern", freq, pat,
                         &n));
    memset(c->moe_dense_layer, 0, sizeof c->moe_dense_layer);
    for (int l = 0; l < c->num_layers; l++) /* (an int N: one MoE layer in N, the first) */
        c->moe_dense_layer[l] = n ? l % n != 0 : !pat[l];
    return MT_OK;
}

mt_status mt_model_window_attn_skip_freq(mt_model_config *c, const char *freq) {
    unsigned char pat[MT_MODEL_MAX_LAYERS];
    long n;
    MT_TRY(layer_pattern(c, "--window-attn-skip-freq", "window_attn_skip_freq",
                         "window attention pattern", freq, pat, &n));
    memset(c->full_attention_layer, 0, sizeof c->full_attention_layer);
    for (int l = 0; l < c->num_layers; l++) /* (megatron.core's is_layer_window_attention) */
        c->full_attention_layer[l] = n ? (l + 1) % n == 0 : !pat[l];
    return MT_OK;
}

double mt_model_flops_per_iteration(const mt_model_config *c, int64_t global_batch) {
    /* megatron/training/training.py num_floating_point_operations, dense GPT; multi-token
     * prediction's depths as layers more, each with its norms and eh_proj (3 h + 2 h^2 a token)
     * and another output layer */
    const double Dm = mtp_n(c);
    double T = (double)global_batch * c->seq_length, h = c->hidden_size, L = c->num_layers + Dm;
    double q = (double)c->kv_channels * c->num_attention_heads;
    double kv = (double)c->kv_channels * c->num_query_groups;
    double ffn_factor = c->swiglu ? 3 : 2;
    double S2 = (double)global_batch * c->seq_length * c->seq_length;
    /* (MoE: each token through moe_router_topk experts of moe_ffn_hidden_size and the shared
     * experts; the router's and the shared experts' gate's GEMMs not counted, as Megatron's) */
    const double moe_ffn =
        (double)c->moe_ffn_hidden_size * (c->moe_router_topk ? c->moe_router_topk : 2) +
        c->moe_shared_expert_intermediate_size;
    double ffn_layers = 0.0; /* (the MLP widths of all layers: dense and MoE, --moe-layer-freq) */
    for (int l = 0; l < c->num_layers + mtp_n(c); l++)
        ffn_layers += moe_layer(c, l) ? moe_ffn : (double)c->ffn_hidden_size;
    const double mlp_head =
        T * (3 * 2 * h * ffn_layers * ffn_factor + 3 * 2 * h * c->padded_vocab_size * (1 + Dm) +
             3 * 2 * Dm * (3 * h + 2 * h * h));
    if (c->multi_latent_attention) { /* (Megatron's MLA branch: its latents' norms as one FMA) */
        const double H = c->num_attention_heads, dn = c->qk_head_dim;
        const double dr = c->qk_pos_emb_head_dim, dv = c->v_head_dim;
        const double q_term =
            c->q_lora_rank ? c->q_lora_rank * (h + H * (dn + dr) + 1) : h * H * (dn + dr);
        const double proj =
            q_term + c->kv_lora_rank * (h + H * (dn + dv) + 1) + h * dr + H * dv * h;
        const double core = (double)c->seq_length * (H * (dn + dr) / 2 + H * dv / 2);
        return mlp_head + T * 3 * 2 * L * (proj + core);
    }
    return mlp_head + T * 3 * 2 * (h * (q + 2 * kv) + q * h) * L + S2 * 3 * 2 * q / 2 * 2 * L;
}

/* ---- parameter table ---- */

typedef struct table {
    param_spec *spec;
    int n;
} table;

static void add_param(table *m, const char *name, int ndim, int64_t d0, int64_t d1, float std,
                      int ones, int no_wd) {
    MT_ASSERT(m->n < MT_MODEL_MAX_PARAMS);
    param_spec *s = &m->spec[m->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim;
    s->shape[0] = d0;
    s->shape[1] = d1;
    s->std = std;
    s->ones = ones;
    s->no_wd = no_wd;
    s->numel = d0 * (ndim == 2 ? d1 : 1);
    s->full[0] = d0, s->full[1] = d1;
    s->axis = -1;
    s->nblk = 1;
    s->blk[0] = d0;
}

/* Tensor parallelism over n ranks: the last parameter added is split along `axis` in blocks
 * b[0..nblk) (their sum: the axis's length), each block evenly (divisibility: checked by the
 * config). n = 1 changes nothing but the record. */
static void split_last(table *m, int n, int axis, int nblk, int64_t b0, int64_t b1, int64_t b2) {
    param_spec *s = &m->spec[m->n - 1];
    s->axis = axis, s->nblk = nblk;
    s->blk[0] = b0, s->blk[1] = b1, s->blk[2] = b2;
    s->shape[axis] /= n;
    s->numel = s->shape[0] * (s->ndim == 2 ? s->shape[1] : 1);
}

/* Layer l's parameters (l >= num_layers: an MTP depth's transformer layer), named base.<suffix>. */
static void layer_table(const mt_model_config *c, table *m, int l, const char *base) {
    int64_t C = c->hidden_size, D = c->kv_channels, H = c->num_attention_heads;
    int64_t G = c->num_query_groups, F = c->ffn_hidden_size;
    float std = c->init_method_std, out_std = std / sqrtf(2.0f * (float)c->num_layers);
    int ln = c->normalization == MT_NORM_LAYERNORM, bias = c->add_bias_linear;
    int64_t F1 = (c->swiglu ? 2 : 1) * F, Fb = c->swiglu ? F : 0;
    const int tp = tp_n(c);
    char n[MT_MODEL_NAME_LEN];
#define P(suffix, ...)                                \
    do {                                              \
        snprintf(n, sizeof n, "%s.%s", base, suffix); \
        add_param(m, n, __VA_ARGS__);                 \
    } while (0)
    P("input_layernorm.weight", 1, C, 0, 0, 1, 1);
    if (ln) P("input_layernorm.bias", 1, C, 0, 0, 0, 1);
    if (c->multi_latent_attention) {
        /* tensor parallelism: the up-projections and linear_q_proj column-parallel (each
         * rank's heads), linear_proj row-parallel; the down-projections and the latents'
         * norms whole on every rank (Megatron's TE "duplicated" linears) */
        const int64_t Dq = c->qk_head_dim + c->qk_pos_emb_head_dim, Rq = c->q_lora_rank;
        const int64_t Rkv = c->kv_lora_rank, KV = H * (c->qk_head_dim + c->v_head_dim);
        if (!Rq) {
            P("self_attention.linear_q_proj.weight", 2, H * Dq, C, std, 0, 0);
            split_last(m, tp, 0, 1, H * Dq, 0, 0);
        }
        if (Rq) {
            P("self_attention.linear_q_down_proj.weight", 2, Rq, C, std, 0, 0);
            P("self_attention.linear_q_up_proj.layer_norm_weight", 1, Rq, 0, 0, 1, 1);
            if (ln) P("self_attention.linear_q_up_proj.layer_norm_bias", 1, Rq, 0, 0, 0, 1);
            P("self_attention.linear_q_up_proj.weight", 2, H * Dq, Rq, std, 0, 0);
            split_last(m, tp, 0, 1, H * Dq, 0, 0);
        }
        P("self_attention.linear_kv_down_proj.weight", 2, Rkv + c->qk_pos_emb_head_dim, C, std, 0,
          0);
        P("self_attention.linear_kv_up_proj.layer_norm_weight", 1, Rkv, 0, 0, 1, 1);
        if (ln) P("self_attention.linear_kv_up_proj.layer_norm_bias", 1, Rkv, 0, 0, 0, 1);
        P("self_attention.linear_kv_up_proj.weight", 2, KV, Rkv, std, 0, 0);
        split_last(m, tp, 0, 1, KV, 0, 0);
        P("self_attention.linear_proj.weight", 2, C, H * c->v_head_dim, out_std, 0, 0);
        split_last(m, tp, 1, 1, H * c->v_head_dim, 0, 0);
        goto mlp;
    }
    /* column-parallel: each rank's q, k and v heads; row-parallel: their inputs' columns */
    P("self_attention.linear_qkv.weight", 2, (H + 2 * G) * D, C, std, 0, 0);
    split_last(m, tp, 0, 3, H * D, G * D, G * D);
    if (bias || c->add_qkv_bias) {
        P("self_attention.linear_qkv.bias", 1, (H + 2 * G) * D, 0, 0, 0, 1);
        split_last(m, tp, 0, 3, H * D, G * D, G * D);
    }
    if (c->qk_layernorm) {
        P("self_attention.q_layernorm.weight", 1, D, 0, 0, 1, 1);
        if (ln) P("self_attention.q_layernorm.bias", 1, D, 0, 0, 0, 1);
        P("self_attention.k_layernorm.weight", 1, D, 0, 0, 1, 1);
        if (ln) P("self_attention.k_layernorm.bias", 1, D, 0, 0, 0, 1);
    }
    P("self_attention.linear_proj.weight", 2, C, H * D, out_std, 0, 0);
    split_last(m, tp, 1, 1, H * D, 0, 0);
    if (bias) P("self_attention.linear_proj.bias", 1, C, 0, 0, 0, 1);
mlp:
    P("pre_mlp_layernorm.weight", 1, C, 0, 0, 1, 1);
    if (ln) P("pre_mlp_layernorm.bias", 1, C, 0, 0, 0, 1);
    if (moe_layer(c, l)) {                         /* (--moe-layer-freq: some layers' MLPs dense) */
        const int64_t Fe = c->moe_ffn_hidden_size; /* (expert TP = TP: Megatron's default) */
        P("mlp.router.weight", 2, moe_n(c), C, std, 0, 0);
        /* (expert parallelism: this rank's experts, by global index) */
        for (int e = moe_first(c); e < moe_first(c) + moe_local(c); e++) {
            char x[64];
            snprintf(x, sizeof x, "mlp.experts.local_experts.%d.linear_fc1.weight", e);
            P(x, 2, (c->swiglu ? 2 : 1) * Fe, C, std, 0, 0);
            split_last(m, tp, 0, c->swiglu ? 2 : 1, Fe, c->swiglu ? Fe : 0, 0);
            if (bias) { /* (column-parallel: split as its rows) */
                snprintf(x, sizeof x, "mlp.experts.local_experts.%d.linear_fc1.bias", e);
                P(x, 1, (c->swiglu ? 2 : 1) * Fe, 0, 0, 0, 1);
                split_last(m, tp, 0, c->swiglu ? 2 : 1, Fe, c->swiglu ? Fe : 0, 0);
            }
            snprintf(x, sizeof x, "mlp.experts.local_experts.%d.linear_fc2.weight", e);
            P(x, 2, C, Fe, out_std, 0, 0);
            split_last(m, tp, 1, 1, Fe, 0, 0);
            if (bias) { /* (row-parallel: whole on every rank) */
                snprintf(x, sizeof x, "mlp.experts.local_experts.%d.linear_fc2.bias", e);
                P(x, 1, C, 0, 0, 0, 1);
            }
        }
        const int64_t Fs = c->moe_shared_expert_intermediate_size; /* (a dense MLP's split) */
        if (Fs) {
            P("mlp.shared_experts.linear_fc1.weight", 2, (c->swiglu ? 2 : 1) * Fs, C, std, 0, 0);
            split_last(m, tp, 0, c->swiglu ? 2 : 1, Fs, c->swiglu ? Fs : 0, 0);
            P("mlp.shared_experts.linear_fc2.weight", 2, C, Fs, out_std, 0, 0);
            split_last(m, tp, 1, 1, Fs, 0, 0);
        }
        if (c->moe_shared_expert_gate) P("mlp.shared_experts.gate_weight", 2, 1, C, std, 0, 0);
        return;
    }
    P("mlp.linear_fc1.weight", 2, F1, C, std, 0, 0);
    split_last(m, tp, 0, c->swiglu ? 2 : 1, F, Fb, 0);
    if (bias) {
        P("mlp.linear_fc1.bias", 1, F1, 0, 0, 0, 1);
        split_last(m, tp, 0, c->swiglu ? 2 : 1, F, Fb, 0);
    }
    P("mlp.linear_fc2.weight", 2, C, F, out_std, 0, 0);
    split_last(m, tp, 1, 1, F, 0, 0);
    if (bias) P("mlp.linear_fc2.bias", 1, C, 0, 0, 0, 1);
#undef P
}

static void build_table(const mt_model_config *c, table *m) {
    int64_t C = c->hidden_size, Vp = c->padded_vocab_size;
    float std = c->init_method_std;
    int ln = c->normalization == MT_NORM_LAYERNORM;
    const int tp = tp_n(c);
    char n[MT_MODEL_NAME_LEN];
    if (first_stage(c)) {
        add_param(m, "embedding.word_embeddings.weight", 2, Vp, C, std, 0, 0);
        split_last(m, tp, 0, 1, Vp, 0, 0);
        if (c->position_embedding_type == MT_POS_LEARNED)
            add_param(m, "embedding.position_embeddings.weight", 2, c->max_position_embeddings, C,
                      std, 0, 0);
    }
    for (int l = stage_l0(c); l < stage_l0(c) + stage_nl(c); l++) {
        snprintf(n, sizeof n, "decoder.layers.%d", l);
        layer_table(c, m, l, n);
    }
    if (!last_stage(c)) return;
    add_param(m, "decoder.final_layernorm.weight", 1, C, 0, 0, 1, 1);
    if (ln) add_param(m, "decoder.final_layernorm.bias", 1, C, 0, 0, 0, 1);
    if (mtp_n(c) && !first_stage(c) && c->untie_embeddings_and_output_weights) {
        /* (multi-token prediction on the last of several stages: a copy of the embedding, as a
         * tied output layer's; tied, that copy is the output layer below) */
        add_param(m, "embedding.word_embeddings.weight", 2, Vp, C, std, 0, 0);
        split_last(m, tp, 0, 1, Vp, 0, 0);
        m->spec[m->n - 1].shared = 1;
    }
    for (int k = 0; k < mtp_n(c); k++) { /* (megatron.core's order: after the decoder) */
#define P(suffix, ...)                                        \
    do {                                                      \
        snprintf(n, sizeof n, "mtp.layers.%d.%s", k, suffix); \
        add_param(m, n, __VA_ARGS__);                         \
    } while (0)
        P("enorm.weight", 1, C, 0, 0, 1, 1);
        if (ln) P("enorm.bias", 1, C, 0, 0, 0, 1);
        P("hnorm.weight", 1, C, 0, 0, 1, 1);
        if (ln) P("hnorm.bias", 1, C, 0, 0, 0, 1);
        P("eh_proj.weight", 2, C, 2 * C, std, 0, 0); /* (whole on every tensor-parallel rank) */
        char b[MT_MODEL_NAME_LEN];
        snprintf(b, sizeof b, "mtp.layers.%d.transformer_layer", k);
        layer_table(c, m, c->num_layers + k, b);
        P("final_layernorm.weight", 1, C, 0, 0, 1, 1);
        if (ln) P("final_layernorm.bias", 1, C, 0, 0, 0, 1);
#undef P
    }
    if (c->untie_embeddings_and_output_weights || !first_stage(c)) {
        /* (tied, on the last of several stages: the embedding's copy, the same name and init) */
        const int shared = !c->untie_embeddings_and_output_weights;
        add_param(m, shared ? "embedding.word_embeddings.weight" : "output_layer.weight", 2, Vp, C,
                  std, 0, 0);
        split_last(m, tp, 0, 1, Vp, 0, 0);
        m->spec[m->n - 1].shared = shared;
    }
}

/* The parameter's pieces on tensor-parallel rank r (mt_model_param's tp_piece). */
static void param_pieces(const param_spec *s, int n, int r, mt_model_param *p) {
    p->full_shape[0] = s->full[0], p->full_shape[1] = s->ndim == 2 ? s->full[1] : 0;
    p->tp_axis = n > 1 ? s->axis : -1;
    p->pp_shared = s->shared;
    p->tp_npieces = 1;
    p->tp_piece[0].local = p->tp_piece[0].global = 0;
    p->tp_piece[0].len = s->full[0];
    if (p->tp_axis < 0) return;
    p->tp_npieces = s->nblk;
    int64_t g0 = 0, l0 = 0;
    for (int b = 0; b < s->nblk; b++) {
        const int64_t part = s->blk[b] / n;
        p->tp_piece[b].local = l0;
        p->tp_piece[b].global = g0 + r * part;
        p->tp_piece[b].len = part;
        l0 += part, g0 += s->blk[b];
    }
}

/* The parameter table of cfg, finalized into *c (t->spec allocated: the caller frees it). */
static mt_status param_table(const mt_model_config *cfg, mt_model_config *c, table *t) {
    MT_REQUIRE(cfg, MT_ERR_INVALID_ARG, "NULL config");
    *c = *cfg;
    MT_TRY(mt_model_config_finalize(c));
    *t = (table){ calloc(MT_MODEL_MAX_PARAMS, sizeof(param_spec)), 0 };
    MT_REQUIRE(t->spec, MT_ERR_OOM, "param table");
    build_table(c, t);
    return MT_OK;
}

int mt_model_param_tp_axis(const mt_model_config *cfg, const char *name) {
    mt_model_config c;
    table t;
    if (!name || param_table(cfg, &c, &t) != MT_OK) {
        mt_error_clear();
        return -2;
    }
    int axis = -2;
    for (int i = 0; i < t.n && axis == -2; i++)
        if (strcmp(t.spec[i].name, name) == 0) axis = tp_n(&c) > 1 ? t.spec[i].axis : -1;
    free(t.spec);
    return axis;
}

int mt_model_param_tp_axes(const mt_model_config *cfg, int *axes, int n) {
    mt_model_config c;
    table t;
    if (n > 0 && !axes) {
        (void)MT_ERROR(MT_ERR_INVALID_ARG, "NULL axes");
        return -1;
    }
    if (param_table(cfg, &c, &t) != MT_OK) return -1;
    for (int i = 0; i < t.n && i < n; i++)
        axes[i] = tp_n(&c) > 1 ? t.spec[i].axis : -1;
    free(t.spec);
    return t.n;
}

mt_status mt_model_list_params(const mt_model_config *cfg, mt_model_param_fn fn, void *ctx) {
    MT_REQUIRE(fn, MT_ERR_INVALID_ARG, "NULL callback");
    mt_model_config c;
    table t;
    MT_TRY(param_table(cfg, &c, &t));
    mt_status st = MT_OK;
    for (int i = 0; i < t.n && st == MT_OK; i++)
        st = fn(ctx, t.spec[i].name, t.spec[i].ndim, t.spec[i].shape, t.spec[i].no_wd, NULL, NULL);
    free(t.spec);
    return st;
}

/* ---- memory planning: one pass measures (base == NULL), the next assigns ---- */

typedef struct planner {
    char *base;
    size_t off;
    mt_device dev;
    int nsets;     /* layer activation sets planned (MoE: host counts each) */
    int32_t *host; /* MoE: their host counts, E a set (NULL while measuring) */
    /* shared slots (mt_model_slots): each activation slot planned apart, at pool + s * stride
     * (pool NULL while measuring); slot_bytes gets the largest */
    int shared;
    char *pool;
    size_t stride, slot_bytes;
} planner;

static void take(planner *p, mt_tensor *t, mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor v = mt_tensor_make(NULL, dt, ndim, shape, p->dev);
    p->off = (p->off + MT_ARENA_ALIGN - 1) / MT_ARENA_ALIGN * MT_ARENA_ALIGN;
    v.data = p->base ? p->base + p->off : NULL;
    p->off += mt_tensor_nbytes(&v);
    if (t) *t = v;
}
#define TAKE(p, t, dt, ...) \
    take(p, t, dt, sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t), (int64_t[]){ __VA_ARGS__ })

/* (with tensor parallelism: this rank's heads, groups, MLP width and vocabulary columns) */
static void plan_layer(const mt_model *m, planner *p, layer_acts *la, int moe) {
    const mt_model_config *c = &m->cfg;
    int64_t B = m->B, T = c->seq_length, N = B * T, C = c->hidden_size, D = c->kv_channels;
    int64_t H = local_heads(c), G = local_groups(c), F = local_ffn(c);
    int64_t F1 = (c->swiglu ? 2 : 1) * F, QKV = (H + 2 * G) * D, Nl = local_rows(c, N);
    mt_dtype dt = c->dtype;
    TAKE(p, &la->resid_in, dt, Nl, C);
    if (c->recompute_layernorm)
        la->ln1 = la->ln2 = m->a.ln_out; /* one shared buffer, refilled before each use */
    else
        TAKE(p, &la->ln1, dt, Nl, C);
    TAKE(p, &la->ln1_mean, MT_F32, Nl);
    TAKE(p, &la->ln1_rstd, MT_F32, Nl);
    if (c->recompute_mla_up_proj)
        la->qkv = m->a.mla_up_qkv; /* (shared: made again before each attention backward) */
    else
        TAKE(p, &la->qkv, dt, N, QKV);
    if (c->multi_latent_attention) { /* (every row: under sequence parallelism the gathered) */
        const int64_t Rq = c->q_lora_rank, Rkv = c->kv_lora_rank, dr = c->qk_pos_emb_head_dim;
        const int ln = c->normalization == MT_NORM_LAYERNORM;
        if (Rq) {
            TAKE(p, &la->mla_qc, dt, N, Rq);
            TAKE(p, &la->mla_qn, dt, N, Rq);
            if (ln) TAKE(p, &la->mla_q_mean, MT_F32, N);
            TAKE(p, &la->mla_q_rstd, MT_F32, N);
        }
        if (c->recompute_mla_up_proj)
            la->mla_q = m->a.mla_up_q, la->mla_kv = m->a.mla_up_kv;
        else
            TAKE(p, &la->mla_q, dt, N, H * D);
        TAKE(p, &la->mla_kvl, dt, N, Rkv + dr);
        TAKE(p, &la->mla_kc, dt, N, Rkv);
        TAKE(p, &la->mla_kn, dt, N, Rkv);
        if (ln) TAKE(p, &la->mla_k_mean, MT_F32, N);
        TAKE(p, &la->mla_k_rstd, MT_F32, N);
        if (!c->recompute_mla_up_proj)
            TAKE(p, &la->mla_kv, dt, N, H * (c->qk_head_dim + c->v_head_dim));
        TAKE(p, &la->mla_o, dt, N, H * c->v_head_dim);
    }
    if (c->qk_layernorm) {
        TAKE(p, &la->q_raw, dt, N * H, D);
        TAKE(p, &la->k_raw, dt, N * G, D);
        TAKE(p, &la->q_rstd, MT_F32, N * H);
        TAKE(p, &la->k_rstd, MT_F32, N * G);
        if (c->normalization == MT_NORM_LAYERNORM) { /* RMSNorm has no mean */
            TAKE(p, &la->q_mean, MT_F32, N * H);
            TAKE(p, &la->k_mean, MT_F32, N * G);
        }
    }
    TAKE(p, &la->atty, dt, N, H * D);
    TAKE(p, &la->lse, MT_F32, B, H, T);
    TAKE(p, &la->resid_mid, dt, Nl, C);
    if (!c->recompute_layernorm) TAKE(p, &la->ln2, dt, Nl, C);
    TAKE(p, &la->ln2_mean, MT_F32, Nl);
    TAKE(p, &la->ln2_rstd, MT_F32, Nl);
    if (moe) { /* the permuted rows: N*k, each expert's consecutive */
        const int64_t E = moe_n(c), k = moe_k(c), Fe = local_moe_ffn(c), R = moe_rows(c, N);
        const int64_t Re = moe_expert_rows(c, N); /* (this rank's experts' rows) */
        TAKE(p, &la->router_logits, MT_F32, N, E);
        TAKE(p, &la->moe_probs, MT_F32, N, k);
        TAKE(p, &la->moe_idx, MT_I32, N, k);
        TAKE(p, &la->moe_counts, MT_I32, E);
        if (cp_n(c) > 1) TAKE(p, &la->moe_counts_cp, MT_I32, E);
        if (c->moe_router_seq_aux) /* (each sequence's) */
            TAKE(p, &la->moe_aux_counts, MT_I32, B, E);
        else if (c->moe_router_num_groups)
            TAKE(p, &la->moe_aux_counts, MT_I32, E);
        if (c->moe_expert_capacity_factor > 0.0f) TAKE(p, &la->moe_kept, MT_I32, E);
        TAKE(p, &la->moe_rows, MT_I32, R);
        TAKE(p, &la->moe_pos, MT_I32, N, k);
        TAKE(p, &la->moe_xp, dt, R, C);
        if (ep_n(c) > 1)
            TAKE(p, &la->moe_xe, dt, Re, C);
        else
            la->moe_xe = la->moe_xp;
        TAKE(p, &la->fc1_pre, dt, Re, (c->swiglu ? 2 : 1) * Fe);
        if (c->recompute_mlp_act)
            la->fc1_act = m->a.moe_mlp_act; /* (Megatron's moe_act: refilled before its backward) */
        else
            TAKE(p, &la->fc1_act, dt, Re, Fe);
        TAKE(p, &la->moe_yp, dt, R, C);
        if (shared_n(c)) { /* (every token's: the whole micro-batch's under sequence parallelism) */
            TAKE(p, &la->sh_pre, dt, N, (c->swiglu ? 2 : 1) * local_shared_ffn(c));
            TAKE(p, &la->sh_act, dt, N, local_shared_ffn(c));
            if (c->moe_shared_expert_gate) {
                TAKE(p, &la->sh_y, dt, N, C);
                TAKE(p, &la->sh_g, MT_F32, N, 1);
            }
        }
        la->counts_h = p->host ? p->host + (size_t)p->nsets * E * ep_n(c) : NULL;
        p->nsets++;
        return;
    }
    TAKE(p, &la->fc1_pre, dt, N, F1);
    if (c->recompute_mlp_act)
        la->fc1_act = m->a.mlp_act; /* one shared buffer, refilled before each backward */
    else
        TAKE(p, &la->fc1_act, dt, N, F);
}

/* Number of scratch layer sets that full recompute needs: the largest group. */
static int recompute_sets(const mt_model_config *c) {
    if (c->recompute_granularity != MT_RECOMPUTE_FULL) return 0;
    if (c->recompute_method == MT_RECOMPUTE_BLOCK) return 1;
    return c->recompute_num_layers;
}

static void plan_acts(mt_model *m, planner *p) {
    const mt_model_config *c = &m->cfg;
    int64_t B = m->B, T = c->seq_length, N = B * T, C = c->hidden_size, D = c->kv_channels;
    int64_t H = local_heads(c), G = local_groups(c), F = local_ffn(c);
    int64_t F1 = (c->swiglu ? 2 : 1) * F, Vp = local_vocab(c), QKV = (H + 2 * G) * D;
    const int tp = tp_n(c) > 1;
    const int64_t Nl = local_rows(c, N);
    mt_dtype dt = c->dtype;
    acts *a = &m->a;
    const int moe = any_moe_layer(c), dense = any_dense_layer(c);
    if (c->recompute_mlp_act && dense) TAKE(p, &a->mlp_act, dt, N, F);
    if (c->recompute_mlp_act && moe) /* (the experts' rows) */
        TAKE(p, &a->moe_mlp_act, dt, moe_expert_rows(c, N), local_moe_ffn(c));
    if (c->recompute_layernorm) TAKE(p, &a->ln_out, dt, Nl, C);
    if (c->recompute_mla_up_proj) { /* (one set for every layer) */
        TAKE(p, &a->mla_up_qkv, dt, N, QKV);
        TAKE(p, &a->mla_up_q, dt, N, H * D);
        TAKE(p, &a->mla_up_kv, dt, N, H * (c->qk_head_dim + c->v_head_dim));
    }
    if (cp_n(c) > 1) {
        const int64_t cp = cp_n(c), KV = 2 * G;
        TAKE(p, &a->cp_kvl, dt, B, T, KV, D);
        TAKE(p, &a->cp_kva, dt, cp * B * T * KV * D);
        TAKE(p, &a->cp_kv, dt, B, cp * T, KV, D);
        TAKE(p, &a->cp_dkv, dt, B, cp * T, KV, D);
        TAKE(p, &a->cp_tmp, dt, B, cp * T, KV, D);
        if (cp_two_streams(c, m->dev)) TAKE(p, &a->cp_tmp2, dt, B, cp * T, KV, D);
        if (cp_padded(c, m->dev)) {
            TAKE(p, &a->cp_qp, dt, B, cp * T, H, D);
            TAKE(p, &a->cp_op, dt, B, cp * T, H, D);
            TAKE(p, &a->cp_lp, MT_F32, B * H * cp * T);
        }
    }
    for (int s = 0; s < a->n_rc * (moe + dense); s++) /* (MoE layers' sets first) */
        plan_layer(m, p, &a->rc[s], moe && s < a->n_rc);
    const int l0 = stage_l0(c), nl = stage_nl(c), last = last_stage(c);
    for (int slot = 0; slot < pp_slots(c); slot++) { /* (pipeline parallelism: one set a slot) */
        planner sp = *p, *q = p;
        if (p->shared) { /* (the slot apart, in the caller's memory) */
            sp.base = p->pool ? p->pool + (size_t)slot * p->stride : NULL, sp.off = 0;
            q = &sp;
        }
        for (int l = l0; l < l0 + nl; l++) {
            layer_acts *la = &a->layer[slot * nl + l - l0];
            int g0, g1;
            if (!recompute_group(c, l, &g0, &g1)) {
                plan_layer(m, q, la, moe_layer(c, l));
                continue;
            }
            *la = a->rc[(moe && !moe_layer(c, l) ? a->n_rc : 0) + l - g0];
            if (l == g0) TAKE(q, &la->resid_in, dt, Nl, C); // why: the kept input
        }
        if (p->shared) {
            p->nsets = sp.nsets;
            if (sp.off > p->slot_bytes) p->slot_bytes = sp.off;
        }
    }
    /* multi-token prediction (training models only; one stage, one slot) */
    const int nmtp = m->no_grads ? 0 : mtp_n(c);
    for (int k = 0; k < nmtp; k++) {
        mtp_acts *t = &a->mtp[k];
        plan_layer(m, p, &a->layer[pp_slots(c) * nl + k], moe_layer(c, c->num_layers + k));
        TAKE(p, &t->tok, MT_I32, B, T);
        if (c->position_embedding_type == MT_POS_LEARNED) TAKE(p, &t->pos, MT_I32, B, T);
        TAKE(p, &t->tgt, MT_I32, B, T);
        TAKE(p, &t->emb, dt, Nl, C);
        TAKE(p, &t->en_mean, MT_F32, Nl);
        TAKE(p, &t->en_rstd, MT_F32, Nl);
        TAKE(p, &t->hn_mean, MT_F32, Nl);
        TAKE(p, &t->hn_rstd, MT_F32, Nl);
        TAKE(p, &t->cat, dt, Nl, 2 * C);
        TAKE(p, &t->out, dt, Nl, C);
        TAKE(p, &t->fin, dt, Nl, C);
        TAKE(p, &t->fin_mean, MT_F32, Nl);
        TAKE(p, &t->fin_rstd, MT_F32, Nl);
        TAKE(p, &t->dh, dt, Nl, C);
    }
    if (nmtp) {
        TAKE(p, &a->mtp_dh0, dt, Nl, C);
        TAKE(p, &a->mtp_dcat, dt, Nl, 2 * C);
        TAKE(p, &a->mtp_tmp, dt, Nl, C);
        TAKE(p, &a->mtp_fill, MT_I32, 2, B);
        if (c->position_embedding_type == MT_POS_LEARNED) TAKE(p, &a->mtp_pos0, MT_I32, B, T);
        TAKE(p, &a->mtp_sum, MT_F32, nmtp, N);
        TAKE(p, &a->mtp_count, MT_F32, nmtp);
    }
    TAKE(p, &a->resid_final, dt, Nl, C);
    if (last) { /* (the final norm and the output layer: the last stage's) */
        TAKE(p, &a->lnf, dt, Nl, C);
        TAKE(p, &a->lnf_mean, MT_F32, Nl);
        TAKE(p, &a->lnf_rstd, MT_F32, Nl);
    }
    if (c->sequence_parallel) {
        TAKE(p, &a->ln_all, dt, N, C);
        if (last) TAKE(p, &a->lnf_all, dt, N, C);
        TAKE(p, &a->sp_all, dt, N, C);
    }
    const int64_t chunks = c->logits_chunks;                          /* >= 1 once finalized */
    if (last) TAKE(p, &a->logits, dt, (N + chunks - 1) / chunks, Vp); /* one slice's logits */
    if (last && (chunks > 1 || c->per_token_loss || tp || nmtp)) TAKE(p, &a->dloss, MT_F32, N);
    if (last && tp) TAKE(p, &a->tp_stats, MT_F32, 3 * N);
    if (tp && c->qk_layernorm) TAKE(p, &a->qk_grad, MT_F32, 4 * D);
    TAKE(p, &a->losses, MT_F32, N);
    TAKE(p, &a->stats, MT_F32, 2);
    TAKE(p, &a->loss_sum, MT_F32, N);
    TAKE(p, &a->loss_count, MT_F32, 1);
    /* scratch shared by forward and backward */
    TAKE(p, &a->dres, dt, Nl, C);
    if (c->hidden_dropout > 0.0f) TAKE(p, &a->drop, dt, Nl, C);
    TAKE(p, &a->dln, dt, Nl, C);
    TAKE(p, &a->datty, dt, N, H * D);
    TAKE(p, &a->dqkv, dt, N, QKV);
    if (moe) { /* (the experts' rows: N*k of this rank's moe_ffn_hidden_size) */
        const int64_t E = moe_n(c), k = moe_k(c), Fe = local_moe_ffn(c), R = moe_rows(c, N);
        const int64_t Re = moe_expert_rows(c, N);
        TAKE(p, &a->moe_loss, MT_F32, 2);
        if (c->moe_router_num_groups || c->moe_router_seq_aux) { /* (mt_moe_aux_counts's) */
            TAKE(p, &a->moe_aux_probs, MT_F32, N, k);
            TAKE(p, &a->moe_aux_idx, MT_I32, N, k);
        }
        if (tp || c->hidden_dropout > 0.0f) TAKE(p, &a->moe_y, dt, N, C);
        if (c->moe_expert_capacity_factor > 0.0f) TAKE(p, &a->moe_work, MT_I32, N * k);
        TAKE(p, &a->moe_dyp, dt, R, C);
        TAKE(p, &a->moe_dxp, dt, R, C);
        if (ep_n(c) > 1) {
            TAKE(p, &a->moe_ye, dt, Re, C);
            TAKE(p, &a->moe_dye, dt, Re, C);
            TAKE(p, &a->moe_dxe, dt, Re, C);
            TAKE(p, &a->moe_counts_all, MT_I32, ep_n(c), E);
        } else {
            a->moe_dye = a->moe_dyp, a->moe_dxe = a->moe_dxp;
        }
        TAKE(p, &a->moe_dprobs, MT_F32, N, k);
        TAKE(p, &a->moe_dlogits, MT_F32, N, E);
        TAKE(p, &a->moe_dlogits_dt, dt, N, E);
        if (c->swiglu) TAKE(p, &a->moe_dfc1_act, dt, Re, Fe);
        TAKE(p, &a->moe_dfc1_pre, dt, Re, (c->swiglu ? 2 : 1) * Fe);
        if (shared_n(c)) {
            const int64_t Fs = local_shared_ffn(c);
            TAKE(p, &a->sh_pos, MT_I32, N, 1);
            TAKE(p, &a->sh_ones, MT_F32, N, 1);
            TAKE(p, &a->sh_out, dt, N, C);
            if (!c->moe_shared_expert_gate) TAKE(p, &a->sh_y, dt, N, C);
            TAKE(p, &a->sh_logit, MT_F32, N, 1);
            TAKE(p, &a->sh_dy, dt, N, C);
            TAKE(p, &a->sh_dg, MT_F32, N, 1);
            TAKE(p, &a->sh_dlogit_dt, dt, N, 1);
            if (c->swiglu) TAKE(p, &a->sh_dact, dt, N, Fs);
            TAKE(p, &a->sh_dpre, dt, N, (c->swiglu ? 2 : 1) * Fs);
        }
    }
    if (dense) {
        if (c->swiglu) TAKE(p, &a->dfc1_act, dt, N, F); /* GELU's backward rides on fc2's GEMM */
        TAKE(p, &a->dfc1_pre, dt, N, F1);
    }
    int64_t ns = mt_norm_bwd_scratch_numel(N, C > F1 ? C : F1);
    if (c->multi_latent_attention) {
        const int64_t Rq = c->q_lora_rank, Rkv = c->kv_lora_rank, dr = c->qk_pos_emb_head_dim;
        TAKE(p, &a->mla_do, dt, N, H * c->v_head_dim);
        TAKE(p, &a->mla_dq, dt, N, H * D);
        TAKE(p, &a->mla_dkv, dt, N, H * (c->qk_head_dim + c->v_head_dim));
        TAKE(p, &a->mla_dkvl, dt, N, Rkv + dr);
        if (Rq) TAKE(p, &a->mla_dqc, dt, N, Rq);
        TAKE(p, &a->mla_dkc, dt, N, Rkv);
        /* the heads' shares (kv latent, rotary key, q latent) in one span, each part starting
         * aligned as the arena's tensors: one all-reduce (the padding between them summed too,
         * never read) */
        const int64_t sh[3][2] = { { N, Rkv }, { N, dr }, { N, Rq } };
        const int64_t es = (int64_t)mt_dtype_size(dt), al = MT_ARENA_ALIGN / es;
        int64_t off[4] = { 0 };
        for (int i = 0; i < 3; i++)
            off[i + 1] = off[i] + (sh[i][0] * sh[i][1] + al - 1) / al * al;
        TAKE(p, &a->mla_shares, dt, off[3]);
        mt_tensor *part[3] = { &a->mla_dkn, &a->mla_dpe, &a->mla_dqn };
        for (int i = 0; i < 3; i++) {
            char *at = a->mla_shares.data;
            *part[i] = mt_tensor_make(at ? at + off[i] * es : NULL, dt, 2, sh[i], m->dev);
        }
        TAKE(p, &a->mla_zero, dt, 1);
        TAKE(p, &a->mla_ones, dt, 1, H);
        for (int i = 0; i < 2; i++) { /* (the latents' norms' backwards) */
            const int64_t w = mt_norm_bwd_scratch_numel(N, i ? Rq : Rkv);
            ns = w > ns ? w : ns;
        }
    }
    if (c->qk_layernorm && mt_head_norm_bwd_scratch_numel(D) > ns)
        ns = mt_head_norm_bwd_scratch_numel(D);
    TAKE(p, &a->norm_scratch, MT_F32, ns + 1);
    TAKE(p, &a->ws, MT_U8, (int64_t)m->ws_bytes + 1);
    if (cp_two_streams(c, m->dev)) TAKE(p, &a->ws2, MT_U8, (int64_t)m->ws_bytes + 1);
}

static size_t align_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

/* The expert bias's buffers (zeros), or a view's source's biases. */
static mt_status expert_bias_setup(mt_model *m, const mt_model *src) {
    const mt_model_config *c = &m->cfg;
    if (!c->moe_router_enable_expert_bias) return MT_OK;
    const int l0 = stage_l0(c), nl = stage_nl(c), L = c->num_layers, D = mtp_n(c);
    const int64_t E = moe_n(c);
    m->eb_row = malloc(sizeof(int) * (size_t)(L + D));
    m->eb_view = calloc((size_t)(nl + D) + 1, sizeof *m->eb_view);
    m->eb_name = calloc((size_t)(nl + D) + 1, sizeof *m->eb_name);
    MT_REQUIRE(m->eb_row && m->eb_view && m->eb_name, MT_ERR_OOM, "expert bias tables");
    for (int l = 0; l < L + D; l++) /* (the MTP depths' layers last: one stage) */
        m->eb_row[l] = ((l >= l0 && l < l0 + nl) || l >= L) && moe_layer(c, l) ? m->n_eb++ : -1;
    if (!m->n_eb) return MT_OK;
    if (src) { /* (a view only runs inference: it counts no tokens) */
        MT_REQUIRE(src->n_eb == m->n_eb, MT_ERR_INVALID_ARG, "the source model differs");
        m->eb_bias = src->eb_bias;
    } else { /* the biases, then the counted tokens, both zero */
        const size_t bytes = (size_t)m->n_eb * (size_t)E * 4;
        void *p;
        MT_TRY(mt_arena_create(m->dev, 2 * bytes + MT_ARENA_ALIGN, &m->eb_arena));
        MT_TRY(mt_arena_alloc(m->eb_arena, 2 * bytes, &p));
        MT_TRY(mt_memset_zero(p, m->dev, 2 * bytes, NULL));
        m->eb_bias = mt_tensor_2d(p, MT_F32, m->n_eb, E, m->dev);
        m->eb_tokens = mt_tensor_2d((char *)p + bytes, MT_F32, m->n_eb, E, m->dev);
    }
    for (int l = 0; l < L + D; l++) {
        const int i = m->eb_row[l];
        if (i < 0) continue;
        m->eb_view[i] = mt_tensor_1d((float *)m->eb_bias.data + (size_t)i * E, MT_F32, E, m->dev);
        if (l < L)
            snprintf(m->eb_name[i], MT_MODEL_NAME_LEN, "decoder.layers.%d.mlp.router.expert_bias",
                     l);
        else
            snprintf(m->eb_name[i], MT_MODEL_NAME_LEN,
                     "mtp.layers.%d.transformer_layer.mlp.router.expert_bias", l - L);
    }
    return MT_OK;
}

int mt_model_num_buffers(const mt_model *m) {
    return m ? m->n_eb : 0;
}

mt_status mt_model_buffer_at(mt_model *m, int i, const char **name, mt_tensor *t) {
    MT_REQUIRE(m && name && t, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(i >= 0 && i < m->n_eb, MT_ERR_INVALID_ARG, "buffer %d of %d", i, m->n_eb);
    *name = m->eb_name[i], *t = m->eb_view[i];
    return MT_OK;
}

mt_status mt_model_list_buffers(const mt_model_config *cfg, mt_model_param_fn fn, void *ctx) {
    MT_REQUIRE(cfg && fn, MT_ERR_INVALID_ARG, "NULL argument");
    mt_model_config c = *cfg;
    MT_TRY(mt_model_config_finalize(&c));
    if (!c.moe_router_enable_expert_bias) return MT_OK;
    const int l0 = stage_l0(&c), nl = stage_nl(&c);
    const int64_t shape[2] = { moe_n(&c), 0 };
    for (int l = l0; l < l0 + nl; l++) {
        char name[MT_MODEL_NAME_LEN];
        snprintf(name, sizeof name, "decoder.layers.%d.mlp.router.expert_bias", l);
        if (moe_layer(&c, l)) MT_TRY(fn(ctx, name, 1, shape, 1, NULL, NULL));
    }
    for (int k = 0; k < mtp_n(&c) && moe_layer(&c, c.num_layers + k); k++) {
        char name[MT_MODEL_NAME_LEN];
        snprintf(name, sizeof name, "mtp.layers.%d.transformer_layer.mlp.router.expert_bias", k);
        MT_TRY(fn(ctx, name, 1, shape, 1, NULL, NULL));
    }
    return MT_OK;
}

mt_status mt_model_expert_bias_tokens(mt_model *m, mt_tensor *tokens) {
    MT_REQUIRE(m && tokens, MT_ERR_INVALID_ARG, "NULL argument");
    *tokens = mt_tensor_1d(m->eb_tokens.data, MT_F32,
                           m->eb_tokens.data ? mt_tensor_numel(&m->eb_tokens) : 0, m->dev);
    return MT_OK;
}

mt_status mt_model_expert_bias_update(mt_model *m, mt_stream s) {
    MT_REQUIRE(m, MT_ERR_INVALID_ARG, "NULL model");
    if (!m->n_eb) return MT_OK;
    MT_REQUIRE(!m->view, MT_ERR_INVALID_ARG, "a view's expert bias is its source's");
    return mt_moe_expert_bias_update(&m->eb_bias, &m->eb_tokens, m->cfg.moe_router_bias_update_rate,
                                     s);
}

/* The shared experts' constants: the identity map and unit weights of their combine (mt-moe's
 * unpermute with one choice a token: the token's own row, times its gate or 1). */
static mt_status shared_constants(mt_model *m) {
    const int64_t N = (int64_t)m->B * m->cfg.seq_length;
    int32_t *pos = malloc((size_t)N * 4);
    float *ones = malloc((size_t)N * 4);
    mt_status st = pos && ones ? MT_OK : MT_ERROR(MT_ERR_OOM, "shared experts' constants");
    for (int64_t n = 0; n < N && st == MT_OK; n++)
        pos[n] = (int32_t)n, ones[n] = 1.0f;
    if (st == MT_OK)
        st = mt_memcpy(m->a.sh_pos.data, m->dev, pos, MT_DEVICE_CPU, (size_t)N * 4, NULL);
    if (st == MT_OK)
        st = mt_memcpy(m->a.sh_ones.data, m->dev, ones, MT_DEVICE_CPU, (size_t)N * 4, NULL);
    free(pos);
    free(ones);
    return st;
}

static mt_status workspace_sizes(mt_model *m) {
    const mt_model_config *c = &m->cfg;
    int64_t B = m->B, T = c->seq_length, H = local_heads(c), G = local_groups(c);
    int64_t D = c->kv_channels, N = B * T;
    void *shape_only = (void *)(uintptr_t)MT_ARENA_ALIGN; // why: queries validate like real calls
    mt_tensor q = mt_tensor_4d(shape_only, c->dtype, B, T, H, D, m->dev);
    mt_tensor k = mt_tensor_4d(shape_only, c->dtype, B, T, G, D, m->dev);
    mt_tensor ids = mt_tensor_2d(shape_only, MT_I32, B, T, m->dev);
    mt_attn_config ac = MT_ATTN_CONFIG_INIT;
    ac.causal = 1;
    ac.deterministic = c->deterministic;
    size_t wa = 0, we = 0;
    MT_TRY(mt_attn_bwd_workspace(&q, &k, &ac, &wa));
    if (cp_n(c) > 1) { /* (a chunk's queries over the keys up to it: the longest, every key) */
        mt_tensor qc = mt_tensor_4d(shape_only, c->dtype, B, T / 2, H, D, m->dev);
        mt_tensor kc = mt_tensor_4d(shape_only, c->dtype, B, T * cp_n(c), G, D, m->dev);
        MT_TRY(mt_attn_bwd_workspace(&qc, &kc, &ac, &wa));
    }
    /* (with position ids the position table is sorted too: the larger table's bits) */
    int64_t rows =
        local_vocab(c) > c->max_position_embeddings ? local_vocab(c) : c->max_position_embeddings;
    MT_TRY(mt_embedding_bwd_workspace(&ids, rows, m->dev, &we));
    mt_tensor big = mt_tensor_1d(shape_only, MT_F32, N * c->padded_vocab_size, m->dev);
    size_t wr = 0;
    MT_TRY(mt_reduce_workspace(&big, &wr));
    m->ws_bytes = align_up(wa > we ? wa : we, 256);
    if (wr > m->ws_bytes) m->ws_bytes = wr;
    return MT_OK;
}

static mt_status own_storage(mt_model *m) {
    size_t wbytes = 0, gbytes = 0, es = mt_dtype_size(m->cfg.dtype);
    for (int i = 0; i < m->nparams; i++) {
        wbytes += align_up((size_t)m->spec[i].numel * es, MT_ARENA_ALIGN);
        gbytes += align_up((size_t)m->spec[i].numel * 4, MT_ARENA_ALIGN);
    }
    MT_TRY(mt_arena_create(m->dev, wbytes, &m->w_arena));
    if (!m->no_grads) MT_TRY(mt_arena_create(m->dev, gbytes, &m->g_arena));
    for (int i = 0; i < m->nparams; i++) {
        param_spec *s = &m->spec[i];
        MT_TRY(mt_tensor_alloc(m->w_arena, m->cfg.dtype, s->ndim, s->shape, &m->params[i].weight));
        if (!m->no_grads)
            MT_TRY(mt_tensor_alloc(m->g_arena, MT_F32, s->ndim, s->shape, &m->params[i].grad));
    }
    return MT_OK;
}

/* A view's weights: src's tensors, parameter by parameter (the same table: the same config). */
static mt_status shared_storage(mt_model *m, const mt_model *src) {
    MT_REQUIRE(src->nparams == m->nparams, MT_ERR_INVALID_ARG, "the source model differs");
    for (int i = 0; i < m->nparams; i++) {
        MT_REQUIRE(!strcmp(src->params[i].name, m->params[i].name), MT_ERR_INVALID_ARG,
                   "the source model differs at %s", m->params[i].name);
        m->params[i].weight = src->params[i].weight;
    }
    return MT_OK;
}

static mt_status external_storage(mt_model *m, mt_model_param_fn fn, void *ctx) {
    for (int i = 0; i < m->nparams; i++) {
        param_spec *s = &m->spec[i];
        mt_model_param *p = &m->params[i];
        MT_TRY(fn(ctx, s->name, s->ndim, s->shape, s->no_wd, &p->weight, &p->grad));
        mt_tensor want = mt_tensor_make(NULL, m->cfg.dtype, s->ndim, s->shape, m->dev);
        MT_REQUIRE(mt_tensor_same_shape(&p->weight, &want) &&
                       mt_tensor_same_shape(&p->grad, &want) && p->weight.dtype == m->cfg.dtype &&
                       p->grad.dtype == MT_F32 && mt_device_eq(p->weight.device, m->dev) &&
                       mt_device_eq(p->grad.device, m->dev),
                   MT_ERR_INVALID_ARG, "storage for %s does not match its shape, dtype or device",
                   s->name);
    }
    return MT_OK;
}

/* A tensor-parallel shard's random init: the whole tensor drawn into `full` (scratch of its
 * shape), this rank's pieces copied out. */
static mt_status init_shard(mt_model *m, const param_spec *s, const mt_model_param *p,
                            mt_tensor *full) {
    MT_TRY(mt_fill_normal(full, 0.0f, s->std, m->cfg.seed, mt_philox_stream_of(s->name), NULL));
    for (int k = 0; k < p->tp_npieces; k++) {
        mt_tensor src, dst;
        MT_TRY(mt_tensor_slice(full, p->tp_axis, p->tp_piece[k].global, p->tp_piece[k].len, &src));
        MT_TRY(mt_tensor_slice(&p->weight, p->tp_axis, p->tp_piece[k].local, p->tp_piece[k].len,
                               &dst));
        MT_TRY(mt_copy(&dst, &src, NULL));
    }
    return MT_OK;
}

/* Initialises every weight where it lives: ones, zeros, or std * N(0,1) from Philox keyed by
 * (seed, name, element index of the unsharded tensor), so any device and any sharding start from
 * the same model. */
static mt_status init_weights(mt_model *m) {
    mt_arena *tmp = NULL; /* tensor parallelism: room for the largest whole tensor */
    size_t big = 0;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].tp_axis >= 0) {
            const param_spec *s = &m->spec[i];
            size_t b = (size_t)(s->full[0] * (s->ndim == 2 ? s->full[1] : 1)) *
                       mt_dtype_size(m->cfg.dtype);
            big = b > big ? b : big;
        }
    if (big) MT_TRY(mt_arena_create(m->dev, big + MT_ARENA_ALIGN, &tmp));
    mt_status st = MT_OK;
    for (int i = 0; i < m->nparams && st == MT_OK; i++) {
        param_spec *s = &m->spec[i];
        mt_model_param *p = &m->params[i];
        if (s->ones || s->std == 0.0f) {
            st = mt_fill(&p->weight, s->ones ? 1.0f : 0.0f, NULL);
        } else if (p->tp_axis >= 0) {
            mt_tensor full;
            mt_arena_reset(tmp);
            st = mt_tensor_alloc(tmp, m->cfg.dtype, s->ndim, s->full, &full);
            if (st == MT_OK) st = init_shard(m, s, p, &full);
        } else {
            st = mt_fill_normal(&p->weight, 0.0f, s->std, m->cfg.seed, mt_philox_stream_of(s->name),
                                NULL);
        }
    }
    if (tmp && st == MT_OK) st = mt_stream_sync(NULL); /* before the scratch goes */
    mt_arena_destroy(tmp);
    return st;
}

/* A parallel group of the config's size n, this rank at `rank` in it, into *dst. */
static mt_status set_group(mt_model *m, mt_comm *g, int n, int rank, const char *what,
                           const char *field, mt_comm **dst) {
    MT_REQUIRE(m, MT_ERR_INVALID_ARG, "model is NULL");
    MT_REQUIRE(n > 1, MT_ERR_INVALID_ARG, "a %s group for a model without %s", what, what);
    MT_REQUIRE(g && mt_comm_size(g) == n && mt_comm_rank(g) == rank, MT_ERR_INVALID_ARG,
               "the %s group has %d rank(s) (this one %d), the config's %s_size is %d (rank %d)",
               what, g ? mt_comm_size(g) : 0, g ? mt_comm_rank(g) : -1, field, n, rank);
    *dst = g;
    return MT_OK;
}

mt_status mt_model_set_context_group(mt_model *m, mt_comm *cp) {
    return set_group(m, cp, m ? cp_n(&m->cfg) : 0, m ? m->cfg.context_parallel_rank : 0,
                     "context-parallel", "context_parallel", m ? &m->cp : NULL);
}

mt_status mt_model_set_expert_group(mt_model *m, mt_comm *ep) {
    return set_group(m, ep, m ? ep_n(&m->cfg) : 0, m ? m->cfg.expert_model_parallel_rank : 0,
                     "expert-parallel", "expert_model_parallel", m ? &m->ep : NULL);
}

mt_status mt_model_create(const mt_model_config *cfg, int micro_batch_size, mt_device device,
                          mt_model_param_fn fn, void *ctx, mt_model **out) {
    return mt_model_create_tp(cfg, micro_batch_size, device, NULL, fn, ctx, out);
}

/* Sliding-window attention's key starts, max(0, t - window_size) for every row: m->win_ks. */
static mt_status window_key_starts(mt_model *m) {
    const int T = m->cfg.seq_length, W = m->cfg.window_size;
    const size_t n = (size_t)m->B * T;
    void *buf;
    MT_TRY(mt_arena_create(m->dev, n * 4 + MT_ARENA_ALIGN, &m->win_arena));
    MT_TRY(mt_arena_alloc(m->win_arena, n * 4, &buf));
    m->win_ks = mt_tensor_2d(buf, MT_I32, m->B, T, m->dev);
    int32_t *h = malloc(n * 4);
    MT_REQUIRE(h, MT_ERR_OOM, "window key starts");
    for (size_t i = 0; i < n; i++) {
        const int t = (int)(i % (size_t)T);
        h[i] = t > W ? t - W : 0;
    }
    mt_status st = mt_memcpy(buf, m->dev, h, MT_DEVICE_CPU, n * 4, NULL);
    free(h);
    return st;
}

/* A model: weights from fn, from src (a view: no initialisation) or its own; gradients unless
 * no_grads. */
static mt_status create(const mt_model_config *cfg, int micro_batch_size, mt_device device,
                        mt_comm *tp, mt_model_param_fn fn, void *ctx, const mt_model *src,
                        const mt_model_slots *shared, int no_grads, mt_model **out) {
    MT_REQUIRE(out && cfg, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(micro_batch_size > 0, MT_ERR_INVALID_ARG, "--micro-batch-size must be positive");
    *out = NULL;
    mt_model *m = calloc(1, sizeof *m);
    MT_REQUIRE(m, MT_ERR_OOM, "model");
    mt_status st = MT_OK;
    m->cfg = *cfg;
    m->B = micro_batch_size;
    m->dev = device;
    m->no_grads = no_grads || src;
    m->view = src != NULL;
    if (shared) m->shared = *shared;
    MT_TRY_GOTO(mt_model_config_finalize(&m->cfg), st, fail);
    if (mt_tp_size(tp) != m->cfg.tensor_model_parallel_size) {
        st = MT_ERROR(MT_ERR_INVALID_ARG,
                      "the tensor-parallel group has %d rank(s), the config's "
                      "tensor_model_parallel_size is %d",
                      mt_tp_size(tp), m->cfg.tensor_model_parallel_size);
        goto fail;
    }
    m->tp = mt_tp_size(tp) > 1 ? tp : NULL;
    m->tpr = mt_tp_rank(m->tp);
    m->nslots = pp_slots(&m->cfg);
    /* (multi-token prediction: its layers' sets after the decoder's; one slot) */
    m->a.layer =
        calloc((size_t)(m->nslots * stage_nl(&m->cfg) + mtp_n(&m->cfg)), sizeof *m->a.layer);
    m->a.mtp = calloc((size_t)mtp_n(&m->cfg) + 1, sizeof *m->a.mtp);
    m->mp = calloc((size_t)mtp_n(&m->cfg) + 1, sizeof *m->mp);
    m->slot_tokens = calloc((size_t)m->nslots, sizeof *m->slot_tokens);
    m->a.n_rc = recompute_sets(&m->cfg);
    m->a.rc = calloc((size_t)m->a.n_rc * 2 + 1, sizeof *m->a.rc); /* (MoE and dense sets) */
    m->spec = calloc(MT_MODEL_MAX_PARAMS, sizeof *m->spec);
    m->params = calloc(MT_MODEL_MAX_PARAMS, sizeof *m->params);
    if (!m->a.layer || !m->slot_tokens || !m->a.rc || !m->spec || !m->params || !m->a.mtp ||
        !m->mp) {
        st = MT_ERROR(MT_ERR_OOM, "model tables");
        goto fail;
    }
    table t = { m->spec, 0 };
    build_table(&m->cfg, &t);
    m->nparams = t.n;
    for (int i = 0; i < m->nparams; i++) {
        mt_model_param *p = &m->params[i];
        p->name = m->spec[i].name;
        p->no_weight_decay = m->spec[i].no_wd;
        p->init_std = m->spec[i].std;
        p->init_ones = m->spec[i].ones;
        param_pieces(&m->spec[i], tp_n(&m->cfg), m->tpr, p);
    }
    MT_TRY_GOTO(mt_device_set(device), st, fail);
    if (m->tp && mt_device_is_cuda(device) && mt_env_int("MT_TP_ASYNC", 0) != 0) {
        MT_TRY_GOTO(mt_tp_async_create(device, &m->tpa), st, fail);
        m->tpa_on = &m->tpa;
    }
    MT_TRY_GOTO(mt_blas_create(device, &m->blas), st, fail);
    /* tuned GEMM algorithms unless runs must be bitwise reproducible (MT_GEMM_AUTOTUNE wins) */
    mt_blas_set_autotune(m->blas, !m->cfg.deterministic);
    if (moe_n(&m->cfg)) MT_TRY_GOTO(mt_blas_create(device, &m->blas_x), st, fail);
    if (cp_two_streams(&m->cfg, device)) {
        MT_TRY_GOTO(mt_stream_create(&m->cp_side), st, fail);
        MT_TRY_GOTO(mt_event_create(&m->cp_fork, 0), st, fail);
        MT_TRY_GOTO(mt_event_create(&m->cp_join, 0), st, fail);
    }
    MT_TRY_GOTO(workspace_sizes(m), st, fail);
    MT_TRY_GOTO(src  ? shared_storage(m, src)
                : fn ? external_storage(m, fn, ctx)
                     : own_storage(m),
                st, fail);

    /* per-layer parameter handles for the forward and backward */
    char n[2 * MT_MODEL_NAME_LEN + 32];
    const int nlp = m->cfg.num_layers + mtp_n(&m->cfg); /* (the MTP depths' layers last) */
    m->lp = calloc((size_t)nlp, sizeof *m->lp);
    if (!m->lp) {
        st = MT_ERROR(MT_ERR_OOM, "layer table");
        goto fail;
    }
#define FIND(field, suffix)                           \
    do {                                              \
        snprintf(n, sizeof n, "%s.%s", base, suffix); \
        m->lp[l].field = mt_model_param_find(m, n);   \
    } while (0)
    for (int l = 0; l < nlp; l++) {
        char base[MT_MODEL_NAME_LEN];
        if (l < m->cfg.num_layers)
            snprintf(base, sizeof base, "decoder.layers.%d", l);
        else
            snprintf(base, sizeof base, "mtp.layers.%d.transformer_layer", l - m->cfg.num_layers);
        FIND(ln1_w, "input_layernorm.weight");
        FIND(ln1_b, "input_layernorm.bias");
        FIND(qkv_w, "self_attention.linear_qkv.weight");
        FIND(qkv_b, "self_attention.linear_qkv.bias");
        FIND(proj_w, "self_attention.linear_proj.weight");
        FIND(proj_b, "self_attention.linear_proj.bias");
        FIND(ln2_w, "pre_mlp_layernorm.weight");
        FIND(ln2_b, "pre_mlp_layernorm.bias");
        FIND(fc1_w, "mlp.linear_fc1.weight");
        FIND(fc1_b, "mlp.linear_fc1.bias");
        FIND(fc2_w, "mlp.linear_fc2.weight");
        FIND(fc2_b, "mlp.linear_fc2.bias");
        FIND(qn_w, "self_attention.q_layernorm.weight");
        FIND(qn_b, "self_attention.q_layernorm.bias");
        FIND(kn_w, "self_attention.k_layernorm.weight");
        FIND(kn_b, "self_attention.k_layernorm.bias");
        FIND(router_w, "mlp.router.weight");
        FIND(mla_q, m->cfg.q_lora_rank ? "self_attention.linear_q_up_proj.weight"
                                       : "self_attention.linear_q_proj.weight");
        FIND(mla_qd, "self_attention.linear_q_down_proj.weight");
        FIND(mla_qn_w, "self_attention.linear_q_up_proj.layer_norm_weight");
        FIND(mla_qn_b, "self_attention.linear_q_up_proj.layer_norm_bias");
        FIND(mla_kvd, "self_attention.linear_kv_down_proj.weight");
        FIND(mla_kvn_w, "self_attention.linear_kv_up_proj.layer_norm_weight");
        FIND(mla_kvn_b, "self_attention.linear_kv_up_proj.layer_norm_bias");
        FIND(mla_kvu, "self_attention.linear_kv_up_proj.weight");
        if (!moe_layer(&m->cfg, l)) continue; /* (--moe-layer-freq: a dense layer's MLP) */
        FIND(sh_fc1, "mlp.shared_experts.linear_fc1.weight");
        FIND(sh_fc2, "mlp.shared_experts.linear_fc2.weight");
        FIND(sh_gate, "mlp.shared_experts.gate_weight");
        const int E = moe_local(&m->cfg), e0 = moe_first(&m->cfg); /* (this rank's experts) */
        if (!m->moe_params) m->moe_params = calloc((size_t)(4 * E * nlp), sizeof *m->moe_params);
        if (!m->moe_params) {
            st = MT_ERROR(MT_ERR_OOM, "layer table");
            goto fail;
        }
        m->lp[l].exp_fc1 = m->moe_params + (size_t)4 * E * l;
        m->lp[l].exp_fc2 = m->lp[l].exp_fc1 + E;
        m->lp[l].exp_fc1_b = m->lp[l].exp_fc2 + E;
        m->lp[l].exp_fc2_b = m->lp[l].exp_fc1_b + E;
        for (int e = 0; e < E; e++) {
            char x[64];
            snprintf(x, sizeof x, "mlp.experts.local_experts.%d.linear_fc1.weight", e0 + e);
            FIND(exp_fc1[e], x);
            snprintf(x, sizeof x, "mlp.experts.local_experts.%d.linear_fc2.weight", e0 + e);
            FIND(exp_fc2[e], x);
            snprintf(x, sizeof x, "mlp.experts.local_experts.%d.linear_fc1.bias", e0 + e);
            FIND(exp_fc1_b[e], x);
            snprintf(x, sizeof x, "mlp.experts.local_experts.%d.linear_fc2.bias", e0 + e);
            FIND(exp_fc2_b[e], x);
        }
    }
#undef FIND
    for (int k = 0; k < mtp_n(&m->cfg); k++) {
        mtp_params *q = &m->mp[k];
        mt_model_param **f[7] = { &q->en_w, &q->en_b, &q->hn_w, &q->hn_b,
                                  &q->eh_w, &q->fn_w, &q->fn_b };
        const char *sfx[7] = { "enorm.weight",        "enorm.bias",     "hnorm.weight",
                               "hnorm.bias",          "eh_proj.weight", "final_layernorm.weight",
                               "final_layernorm.bias" };
        for (int i = 0; i < 7; i++) {
            snprintf(n, sizeof n, "mtp.layers.%d.%s", k, sfx[i]);
            *f[i] = mt_model_param_find(m, n);
        }
    }
    /* (pipeline parallelism: the first stage's embeddings, the last stage's head; tied, the
     * last of several stages has the embedding's copy as its output layer) */
    mt_model_param *emb = mt_model_param_find(m, "embedding.word_embeddings.weight");
    m->wte = first_stage(&m->cfg) ? emb : NULL;
    m->wpe = mt_model_param_find(m, "embedding.position_embeddings.weight");
    m->lnf_w = mt_model_param_find(m, "decoder.final_layernorm.weight");
    m->lnf_b = mt_model_param_find(m, "decoder.final_layernorm.bias");
    m->out_w = mt_model_param_find(m, "output_layer.weight");
    if (!m->out_w && last_stage(&m->cfg)) m->out_w = emb;
    m->mtp_wte = mtp_n(&m->cfg) && last_stage(&m->cfg) ? emb : NULL; /* (PP: the last's copy) */

    /* activations */
    const int sh = m->shared.base != NULL;
    planner p = { NULL, 0, device, 0, NULL, sh, NULL, 0, 0 };
    plan_acts(m, &p);
    if (sh && (m->shared.stride < p.slot_bytes || m->shared.stride % MT_ARENA_ALIGN ||
               (uintptr_t)m->shared.base % MT_ARENA_ALIGN)) {
        st = MT_ERROR(MT_ERR_INVALID_ARG,
                      "shared activation slots: a stride of %zu bytes at %p, a slot needs %zu "
                      "(aligned to %d)",
                      m->shared.stride, m->shared.base, p.slot_bytes, (int)MT_ARENA_ALIGN);
        goto fail;
    }
    MT_TRY_GOTO(mt_arena_create(device, p.off + MT_ARENA_ALIGN, &m->a_arena), st, fail);
    void *abase;
    MT_TRY_GOTO(mt_arena_alloc(m->a_arena, p.off, &abase), st, fail);
    if (moe_n(&m->cfg)) {
        const size_t per = (size_t)moe_n(&m->cfg) * (size_t)ep_n(&m->cfg);
        m->moe_host = calloc((size_t)p.nsets * per + 1, sizeof(int32_t));
        if (!m->moe_host) {
            st = MT_ERROR(MT_ERR_OOM, "MoE counts");
            goto fail;
        }
    }
    p = (planner){ abase, 0, device, 0, m->moe_host, sh, m->shared.base, m->shared.stride, 0 };
    plan_acts(m, &p);
    if (moe_n(&m->cfg)) MT_TRY_GOTO(mt_memset_zero(m->a.moe_loss.data, device, 8, NULL), st, fail);
    if (shared_n(&m->cfg) && any_moe_layer(&m->cfg)) MT_TRY_GOTO(shared_constants(m), st, fail);
    if (m->cfg.multi_latent_attention) {
        MT_TRY_GOTO(mt_fill(&m->a.mla_zero, 0.0f, NULL), st, fail);
        MT_TRY_GOTO(mt_fill(&m->a.mla_ones, 1.0f, NULL), st, fail);
        /* (the attention output's gradient: mla_out_bwd writes the value channels only, so the
         * padding stays zero) */
        MT_TRY_GOTO(mt_fill(&m->a.datty, 0.0f, NULL), st, fail);
    }
    MT_TRY_GOTO(expert_bias_setup(m, src), st, fail);
    if (m->cfg.window_size && m->cfg.window_size < m->cfg.seq_length - 1) /* (else: no effect) */
        MT_TRY_GOTO(window_key_starts(m), st, fail);

    if (!m->view) MT_TRY_GOTO(init_weights(m), st, fail);
    if (!m->no_grads) MT_TRY_GOTO(mt_model_zero_grad(m, NULL), st, fail);
    MT_TRY_GOTO(
        mt_memset_zero(m->a.loss_sum.data, device, (size_t)m->B * m->cfg.seq_length * 4, NULL), st,
        fail);
    MT_TRY_GOTO(mt_memset_zero(m->a.loss_count.data, device, 4, NULL), st, fail);
    if (m->a.mtp_fill.data) { /* (the rolls' fill: token and position 0, the ignore index) */
        const int T = m->cfg.seq_length;
        int32_t *f = malloc((size_t)m->B * (2 + T) * sizeof *f);
        if (!f) {
            st = MT_ERROR(MT_ERR_OOM, "MTP fill");
            goto fail;
        }
        for (int b = 0; b < m->B; b++) {
            f[b] = 0, f[m->B + b] = MT_XENT_IGNORE_INDEX;
            for (int t = 0; t < T; t++)
                f[2 * m->B + b * T + t] = t;
        }
        st = mt_memcpy(m->a.mtp_fill.data, device, f, MT_DEVICE_CPU, (size_t)m->B * 8, NULL);
        if (st == MT_OK && m->a.mtp_pos0.data)
            st = mt_memcpy(m->a.mtp_pos0.data, device, f + 2 * m->B, MT_DEVICE_CPU,
                           (size_t)m->B * T * 4, NULL);
        free(f);
        MT_TRY_GOTO(st, st, fail);
        MT_TRY_GOTO(
            mt_memset_zero(m->a.mtp_sum.data, device, mt_tensor_nbytes(&m->a.mtp_sum), NULL), st,
            fail);
        MT_TRY_GOTO(
            mt_memset_zero(m->a.mtp_count.data, device, mt_tensor_nbytes(&m->a.mtp_count), NULL),
            st, fail);
    }
    MT_TRY_GOTO(mt_stream_sync(NULL), st, fail);
    *out = m;
    return MT_OK;
fail:
    mt_model_destroy(m);
    return st;
}

mt_status mt_model_create_tp(const mt_model_config *cfg, int micro_batch_size, mt_device device,
                             mt_comm *tp, mt_model_param_fn fn, void *ctx, mt_model **out) {
    return create(cfg, micro_batch_size, device, tp, fn, ctx, NULL, NULL, 0, out);
}

mt_status mt_model_create_shared_slots(const mt_model_config *cfg, int micro_batch_size,
                                       mt_device device, mt_comm *tp, mt_model_param_fn fn,
                                       void *ctx, const mt_model_slots *slots, mt_model **out) {
    MT_REQUIRE(slots && slots->base, MT_ERR_INVALID_ARG, "NULL shared slots");
    return create(cfg, micro_batch_size, device, tp, fn, ctx, NULL, slots, 0, out);
}

mt_status mt_model_create_inference(const mt_model_config *cfg, int micro_batch_size,
                                    mt_device device, mt_model **out) {
    return create(cfg, micro_batch_size, device, NULL, NULL, NULL, NULL, NULL, 1, out);
}

mt_status mt_model_create_view(const mt_model *src, int micro_batch_size, int seq_length,
                               mt_model **out) {
    MT_REQUIRE(src && out, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(!src->tp && pp_n(&src->cfg) == 1, MT_ERR_UNSUPPORTED,
               "a view of a tensor- or pipeline-parallel model");
    mt_model_config c = src->cfg;
    c.seq_length = seq_length;
    c.logits_chunks = 1; /* (forwards without targets: every token's logits) */
    return create(&c, micro_batch_size, src->dev, NULL, NULL, NULL, src, NULL, 1, out);
}

mt_status mt_model_kv_cache_create(const mt_model *m, int max_len, mt_model_kv_cache **out) {
    MT_REQUIRE(m && out, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(max_len > 0, MT_ERR_INVALID_ARG, "a KV cache of %d positions", max_len);
    const mt_model_config *c = &m->cfg;
    MT_REQUIRE(pp_n(c) == 1, MT_ERR_UNSUPPORTED, "a KV cache for a pipeline stage");
    *out = NULL;
    mt_model_kv_cache *kc = calloc(1, sizeof *kc);
    MT_REQUIRE(kc, MT_ERR_OOM, "KV cache");
    kc->cfg = *c, kc->B = m->B, kc->max_len = max_len, kc->dev = m->dev;
    const int L = c->num_layers;
    const int64_t shape[4] = { m->B, max_len, local_groups(c), c->kv_channels };
    const size_t one =
        align_up((size_t)(shape[0] * shape[1] * shape[2] * shape[3]) * mt_dtype_size(c->dtype),
                 MT_ARENA_ALIGN);
    kc->k = calloc((size_t)L, sizeof *kc->k);
    kc->v = calloc((size_t)L, sizeof *kc->v);
    mt_status st = kc->k && kc->v ? MT_OK : MT_ERROR(MT_ERR_OOM, "KV cache tables");
    if (st == MT_OK) st = mt_arena_create(m->dev, 2 * (size_t)L * one + MT_ARENA_ALIGN, &kc->arena);
    for (int l = 0; l < L && st == MT_OK; l++) {
        st = mt_tensor_alloc(kc->arena, c->dtype, 4, shape, &kc->k[l]);
        if (st == MT_OK) st = mt_tensor_alloc(kc->arena, c->dtype, 4, shape, &kc->v[l]);
    }
    if (st != MT_OK) {
        mt_model_kv_cache_destroy(kc);
        return st;
    }
    *out = kc;
    return MT_OK;
}

void mt_model_kv_cache_destroy(mt_model_kv_cache *c) {
    if (!c) return;
    mt_arena_destroy(c->arena);
    free(c->k);
    free(c->v);
    free(c);
}

mt_status mt_model_kv_cache_row(mt_model_kv_cache *c, int b, mt_model_kv_cache **out) {
    MT_REQUIRE(c && out, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(b >= 0 && b < c->B, MT_ERR_INVALID_ARG, "row %d of a KV cache of %d", b, c->B);
    *out = NULL;
    const int L = c->cfg.num_layers;
    mt_model_kv_cache *r = calloc(1, sizeof *r);
    if (r) r->k = calloc((size_t)L, sizeof *r->k), r->v = calloc((size_t)L, sizeof *r->v);
    if (!r || !r->k || !r->v) {
        mt_model_kv_cache_destroy(r);
        return MT_ERROR(MT_ERR_OOM, "KV cache row");
    }
    r->cfg = c->cfg, r->B = 1, r->max_len = c->max_len, r->dev = c->dev; /* (no arena: c's) */
    mt_status st = MT_OK;
    for (int l = 0; l < L && st == MT_OK; l++) {
        st = mt_tensor_slice(&c->k[l], 0, b, 1, &r->k[l]);
        if (st == MT_OK) st = mt_tensor_slice(&c->v[l], 0, b, 1, &r->v[l]);
    }
    if (st != MT_OK) {
        mt_model_kv_cache_destroy(r);
        return st;
    }
    *out = r;
    return MT_OK;
}

mt_status mt_model_set_kv_cache(mt_model *m, mt_model_kv_cache *c, int pos) {
    MT_REQUIRE(m, MT_ERR_INVALID_ARG, "NULL model");
    int *rows = malloc((size_t)m->B * sizeof *rows);
    MT_REQUIRE(rows, MT_ERR_OOM, "positions");
    for (int b = 0; b < m->B; b++)
        rows[b] = pos;
    const mt_status st = mt_model_set_kv_cache_rows(m, c, rows);
    free(rows);
    return st;
}

mt_status mt_model_set_kv_cache_rows(mt_model *m, mt_model_kv_cache *c, const int *pos) {
    MT_REQUIRE(m, MT_ERR_INVALID_ARG, "NULL model");
    m->kv = NULL;
    if (!c) return MT_OK;
    MT_REQUIRE(pos, MT_ERR_INVALID_ARG, "NULL positions");
    const mt_model_config *mc = &m->cfg, *cc = &c->cfg;
    const int T = mc->seq_length;
    MT_REQUIRE(c->B == m->B && cc->num_layers == mc->num_layers &&
                   local_groups(cc) == local_groups(mc) && cc->kv_channels == mc->kv_channels &&
                   cc->dtype == mc->dtype && mt_device_eq(c->dev, m->dev),
               MT_ERR_INVALID_ARG, "the KV cache was made for another model shape or device");
    for (int b = 0; b < m->B; b++) {
        MT_REQUIRE(pos[b] >= 0 && pos[b] + T <= c->max_len, MT_ERR_INVALID_ARG,
                   "tokens at positions %d..%d: the KV cache holds %d", pos[b], pos[b] + T - 1,
                   c->max_len);
        MT_REQUIRE(mc->position_embedding_type != MT_POS_LEARNED ||
                       pos[b] + T <= mc->max_position_embeddings,
                   MT_ERR_INVALID_ARG, "positions %d..%d: the model has %d position embeddings",
                   pos[b], pos[b] + T - 1, mc->max_position_embeddings);
    }
    MT_REQUIRE(!m->ks.data, MT_ERR_UNSUPPORTED, "a KV cache with document masks");
    MT_REQUIRE(!mc->window_size || c->max_len <= mc->window_size + 1, MT_ERR_UNSUPPORTED,
               "a KV cache of %d positions with a sliding window of %d keys (at most the window)",
               c->max_len, mc->window_size + 1);
    const size_t n = (size_t)m->B * (T + 1); /* positions (B,T), then lengths (B) */
    if (!m->kv_arena) {
        void *buf;
        MT_TRY(mt_arena_create(m->dev, n * 4 + MT_ARENA_ALIGN, &m->kv_arena));
        MT_TRY(mt_arena_alloc(m->kv_arena, n * 4, &buf));
        m->kv_positions = mt_tensor_2d(buf, MT_I32, m->B, T, m->dev);
        m->kv_len = mt_tensor_1d((int32_t *)buf + (size_t)m->B * T, MT_I32, m->B, m->dev);
    }
    int32_t *p = malloc(n * 4);
    MT_REQUIRE(p, MT_ERR_OOM, "positions");
    for (int b = 0; b < m->B; b++) {
        for (int t = 0; t < T; t++)
            p[b * T + t] = pos[b] + t;
        p[(size_t)m->B * T + b] = pos[b] + T;
    }
    mt_status st = mt_memcpy(m->kv_positions.data, m->dev, p, MT_DEVICE_CPU, n * 4, NULL);
    free(p);
    MT_TRY(st);
    m->kv = c;
    return MT_OK;
}

void mt_model_destroy(mt_model *m) {
    if (!m) return;
    mt_arena_destroy(m->kv_arena);
    mt_arena_destroy(m->win_arena);
    mt_graph_destroy(m->gf.graph);
    for (int i = 0; i < MODEL_GRAPH_SLOTS; i++)
        mt_graph_destroy(m->gs[i].graph);
    mt_blas_destroy(m->blas);
    mt_blas_destroy(m->blas_x);
    mt_tp_async_destroy(&m->tpa);
    if (m->cp_side) mt_stream_destroy(m->cp_side);
    if (m->cp_fork) mt_event_destroy(m->cp_fork);
    if (m->cp_join) mt_event_destroy(m->cp_join);
    mt_arena_destroy(m->w_arena);
    mt_arena_destroy(m->g_arena);
    mt_arena_destroy(m->a_arena);
    free(m->a.layer);
    free(m->slot_tokens);
    free(m->a.rc);
    free(m->lp);
    free(m->mp);
    free(m->a.mtp);
    free(m->moe_params);
    free(m->moe_host);
    mt_arena_destroy(m->eb_arena);
    free(m->eb_row);
    free(m->eb_view);
    free(m->eb_name);
    free(m->spec);
    free(m->params);
    free(m);
}

const mt_model_config *mt_model_get_config(const mt_model *m) {
    return &m->cfg;
}

int mt_model_num_params(const mt_model *m) {
    return m->nparams;
}

mt_model_param *mt_model_param_at(mt_model *m, int i) {
    return i >= 0 && i < m->nparams ? &m->params[i] : NULL;
}

mt_model_param *mt_model_param_find(mt_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

size_t mt_model_bytes(const mt_model *m) {
    size_t own = m->w_arena ? mt_arena_capacity(m->w_arena) + mt_arena_capacity(m->g_arena) : 0;
    return own + mt_arena_capacity(m->a_arena);
}

/* Plans a model of cfg without allocating: the activation arena's bytes (*bytes) and, with
 * `shared`, the slots planned apart and *slot their largest. */
static mt_status measure(const mt_model_config *cfg, int micro_batch_size, mt_device device,
                         int shared, size_t *bytes, size_t *slot) {
    MT_REQUIRE(cfg && bytes, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(micro_batch_size > 0, MT_ERR_INVALID_ARG, "--micro-batch-size must be positive");
    mt_model m = { 0 };
    m.cfg = *cfg;
    m.B = micro_batch_size;
    m.dev = device;
    MT_TRY(mt_model_config_finalize(&m.cfg));
    MT_TRY(workspace_sizes(&m));
    m.a.n_rc = recompute_sets(&m.cfg);
    m.nslots = pp_slots(&m.cfg);
    m.a.layer = calloc((size_t)(m.nslots * stage_nl(&m.cfg) + mtp_n(&m.cfg)), sizeof *m.a.layer);
    m.a.rc = calloc((size_t)m.a.n_rc * 2 + 1, sizeof *m.a.rc);
    m.a.mtp = calloc((size_t)mtp_n(&m.cfg) + 1, sizeof *m.a.mtp);
    mt_status st = MT_OK;
    if (m.a.layer && m.a.rc && m.a.mtp) {
        planner p = { NULL, 0, device, 0, NULL, shared, NULL, 0, 0 };
        plan_acts(&m, &p);
        *bytes = p.off + MT_ARENA_ALIGN; // why: as mt_model_create sizes its arena
        if (slot) *slot = (p.slot_bytes + MT_ARENA_ALIGN - 1) / MT_ARENA_ALIGN * MT_ARENA_ALIGN;
    } else {
        st = MT_ERROR(MT_ERR_OOM, "layer tables");
    }
    free(m.a.layer);
    free(m.a.rc);
    free(m.a.mtp);
    return st;
}

mt_status mt_model_activation_bytes(const mt_model_config *cfg, int micro_batch_size,
                                    mt_device device, size_t *bytes) {
    return measure(cfg, micro_batch_size, device, 0, bytes, NULL);
}

mt_status mt_model_slot_bytes(const mt_model_config *cfg, int micro_batch_size, mt_device device,
                              size_t *bytes) {
    size_t all;
    MT_REQUIRE(bytes, MT_ERR_INVALID_ARG, "NULL argument");
    return measure(cfg, micro_batch_size, device, 1, &all, bytes);
}

mt_tensor mt_model_logits(mt_model *m) {
    return m->a.logits;
}

static mt_status zero_grad_of(const mt_model *m, const mt_model_param *p, mt_stream stream) {
    return mt_memset_zero(p->grad.data, m->dev, mt_tensor_nbytes(&p->grad), stream);
}

mt_status mt_model_finalize_grads(mt_model *m, mt_stream stream) {
    MT_REQUIRE(m, MT_ERR_INVALID_ARG, "NULL model");
    if (!m->cfg.sequence_parallel) return MT_OK;
    /* each rank's rows' share: the norms (their backward's column sums) and the biases of the
     * row-parallel linears (the sums of the norms' backwards that take their dy; with hidden
     * dropout their own backwards take them from the gathered dropped gradient: whole) */
    const int biases = m->cfg.hidden_dropout == 0.0f;
    const int l0 = stage_l0(&m->cfg), l1 = l0 + stage_nl(&m->cfg), last = last_stage(&m->cfg);
    for (int l = l0 - 1; l < l1; l++) {
        const layer_params *lp = &m->lp[l < l0 ? l0 : l];
        /* (a pipeline stage's last fc2 bias before another stage: taken whole, as there) */
        mt_model_param *q[6] = { lp->ln1_w,
                                 lp->ln1_b,
                                 lp->ln2_w,
                                 lp->ln2_b,
                                 biases ? lp->proj_b : NULL,
                                 biases && (l < l1 - 1 || last) ? lp->fc2_b : NULL };
        if (l < l0) /* the final norm (on the last stage; else nothing) */
            q[0] = m->lnf_w, q[1] = m->lnf_b, q[2] = q[3] = q[4] = q[5] = NULL;
        for (int k = 0; k < 6; k++)
            MT_TRY(q[k] ? mt_tp_all_reduce(m->tp, &q[k]->grad, stream) : MT_OK);
    }
    /* multi-token prediction: its norms and its layers' as the decoder's, and eh_proj (whole on
     * every rank, each applied to its rows) */
    for (int k = 0; k < mtp_n(&m->cfg); k++) {
        const layer_params *lp = &m->lp[m->cfg.num_layers + k];
        const mtp_params *mp = &m->mp[k];
        mt_model_param *q[13] = { lp->ln1_w,
                                  lp->ln1_b,
                                  lp->ln2_w,
                                  lp->ln2_b,
                                  biases ? lp->proj_b : NULL,
                                  biases ? lp->fc2_b : NULL,
                                  mp->en_w,
                                  mp->en_b,
                                  mp->hn_w,
                                  mp->hn_b,
                                  mp->eh_w,
                                  mp->fn_w,
                                  mp->fn_b };
        for (int i = 0; i < 13; i++)
            MT_TRY(q[i] ? mt_tp_all_reduce(m->tp, &q[i]->grad, stream) : MT_OK);
    }
    return MT_OK;
}

mt_status mt_model_zero_grad(mt_model *m, mt_stream stream) {
    MT_REQUIRE(m && !m->no_grads, MT_ERR_INVALID_ARG, "a model without gradients");
    for (int i = 0; i < m->nparams; i++)
        MT_TRY(zero_grad_of(m, &m->params[i], stream));
    return MT_OK;
}

mt_status mt_model_discard_grads(mt_model *m, mt_stream stream) {
    MT_REQUIRE(m && !m->no_grads, MT_ERR_INVALID_ARG, "NULL model or one without gradients");
    /* the embedding's backward adds its scatter; an untied wte has no other writer */
    if (m->wpe) MT_TRY(zero_grad_of(m, m->wpe, stream));
    if (m->wte && m->out_w != m->wte) MT_TRY(zero_grad_of(m, m->wte, stream));
    if (m->mtp_wte && m->mtp_wte != m->wte && m->mtp_wte != m->out_w) /* (MTP's stage copy) */
        MT_TRY(zero_grad_of(m, m->mtp_wte, stream));
    m->grads_discarded = 1;
    return MT_OK;
}

mt_status mt_model_take_loss_sum(mt_model *m, double *sum, double *count, mt_stream stream) {
    acts *a = &m->a;
    float v[2] = { 0, 0 };
    mt_tensor out;
    MT_TRY(mt_tensor_slice(&a->stats, 0, 0, 1, &out));
    MT_TRY(mt_reduce(&out, &a->loss_sum, MT_REDUCE_SUM, a->ws.data, m->ws_bytes, stream));
    MT_TRY(mt_stream_sync(stream));
    MT_TRY(mt_memcpy(&v[0], MT_DEVICE_CPU, out.data, m->dev, 4, NULL));
    MT_TRY(mt_memcpy(&v[1], MT_DEVICE_CPU, a->loss_count.data, m->dev, 4, NULL));
    *sum = v[0];
    *count = v[1];
    m->n_loss = 0;
    MT_TRY(
        mt_memset_zero(a->loss_sum.data, m->dev, (size_t)mt_tensor_numel(&a->loss_sum) * 4, NULL));
    return mt_memset_zero(a->loss_count.data, m->dev, 4, NULL);
}

mt_status mt_model_take_loss(mt_model *m, double *mean_loss, mt_stream stream) {
    double sum, count;
    int n = m->n_loss;
    MT_TRY(mt_model_take_loss_sum(m, &sum, &count, stream));
    *mean_loss = n > 0 ? sum / count : NAN; /* no counted token: 0/0, NaN as torch */
    return MT_OK;
}

mt_status mt_model_take_mtp_loss_sums(mt_model *m, double *sum, double *count, int n,
                                      mt_stream stream) {
    MT_REQUIRE(m && (n <= 0 || (sum && count)), MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(n <= mtp_n(&m->cfg), MT_ERR_INVALID_ARG, "%d MTP losses asked of a model with %d", n,
               mtp_n(&m->cfg));
    for (int k = 0; k < n; k++) /* (a stage without the depths: none) */
        sum[k] = count[k] = 0.0;
    if (!m->a.mtp_sum.data) return MT_OK;
    acts *a = &m->a;
    const int64_t N = a->mtp_sum.shape[1];
    float v[2];
    for (int k = 0; k < n; k++) {
        mt_tensor r2, row, out;
        MT_TRY(mt_tensor_slice(&a->mtp_sum, 0, k, 1, &r2));
        MT_TRY(mt_tensor_reshape(&r2, 1, &N, &row));
        MT_TRY(mt_tensor_slice(&a->stats, 0, 0, 1, &out));
        MT_TRY(mt_reduce(&out, &row, MT_REDUCE_SUM, a->ws.data, m->ws_bytes, stream));
        MT_TRY(mt_stream_sync(stream));
        MT_TRY(mt_memcpy(&v[0], MT_DEVICE_CPU, out.data, m->dev, 4, NULL));
        MT_TRY(mt_memcpy(&v[1], MT_DEVICE_CPU, (float *)a->mtp_count.data + k, m->dev, 4, NULL));
        sum[k] = v[0], count[k] = v[1];
    }
    MT_TRY(mt_memset_zero(a->mtp_sum.data, m->dev, mt_tensor_nbytes(&a->mtp_sum), stream));
    return mt_memset_zero(a->mtp_count.data, m->dev, mt_tensor_nbytes(&a->mtp_count), stream);
}

mt_status mt_model_set_mtp_inputs(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                                  const float *scales) {
    MT_REQUIRE(m, MT_ERR_INVALID_ARG, "NULL model");
    const int D = mtp_n(&m->cfg);
    if (!D || !m->a.mtp_sum.data) return MT_OK; /* (no depths here) */
    if (!tokens) {
        m->mtp_in_tok.data = m->mtp_in_tgt.data = NULL;
        return MT_OK;
    }
    const int64_t want[3] = { D, m->B, m->cfg.seq_length };
    const mt_tensor *t[2] = { tokens, targets };
    for (int i = 0; i < 2; i++) {
        MT_REQUIRE(t[i] && t[i]->dtype == MT_I32 && t[i]->ndim == 3 && t[i]->data &&
                       !memcmp(t[i]->shape, want, sizeof want) && mt_tensor_is_contiguous(t[i]) &&
                       mt_device_eq(t[i]->device, m->dev),
                   MT_ERR_INVALID_ARG,
                   "MTP %s: want (%d, %d, %d) i32 contiguous on the model's device",
                   i ? "targets" : "tokens", D, m->B, m->cfg.seq_length);
    }
    m->mtp_mult = scales;
    m->mtp_in_tok = *tokens, m->mtp_in_tgt = *targets;
    return MT_OK;
}

mt_status mt_model_take_moe_losses(mt_model *m, double *aux, double *z, mt_stream stream) {
    MT_REQUIRE(m && aux && z, MT_ERR_INVALID_ARG, "NULL argument");
    *aux = *z = NAN;
    if (!moe_n(&m->cfg)) return MT_OK;
    float v[2];
    MT_TRY(mt_memcpy(v, MT_DEVICE_CPU, m->a.moe_loss.data, m->dev, 8, stream));
    MT_TRY(mt_stream_sync(stream));
    /* (context parallelism: this rank's part of the sequences' load-balancing loss, times cp,
     * so that the mean over the ranks is the whole loss, as z's mean is) */
    if (m->n_moe > 0 && m->cfg.moe_aux_loss_coeff > 0.0f) *aux = v[0] / m->n_moe / cp_n(&m->cfg);
    if (m->n_moe > 0 && m->cfg.moe_z_loss_coeff > 0.0f) *z = v[1] / m->n_moe;
    m->n_moe = 0;
    return mt_memset_zero(m->a.moe_loss.data, m->dev, 8, stream);
}

/* Per-token i32 ids (B,T) on the model's device, contiguous, into *dst (NULL: cleared). */
static mt_status set_token_ids(mt_model *m, const mt_tensor *t, const char *what, mt_tensor *dst) {
    MT_REQUIRE(m, MT_ERR_INVALID_ARG, "NULL model");
    if (!t) {
        memset(dst, 0, sizeof *dst);
        return MT_OK;
    }
    MT_TRY(mt_tensor_check(t, what, 2));
    MT_REQUIRE(t->dtype == MT_I32 && t->shape[0] == m->B && t->shape[1] == m->cfg.seq_length &&
                   mt_device_eq(t->device, m->dev) && mt_tensor_is_contiguous(t),
               MT_ERR_INVALID_ARG, "%s must be contiguous i32 (%d,%d) on the model's device", what,
               m->B, m->cfg.seq_length);
    *dst = *t;
    return MT_OK;
}

mt_status mt_model_set_positions(mt_model *m, const mt_tensor *pos) {
    return set_token_ids(m, pos, "positions", m ? &m->pos : NULL);
}

mt_status mt_model_set_key_starts(mt_model *m, const mt_tensor *ks) {
    return set_token_ids(m, ks, "key starts", m ? &m->ks : NULL);
}

mt_status mt_model_set_sample_ids(mt_model *m, const mt_tensor *ids) {
    MT_REQUIRE(m, MT_ERR_INVALID_ARG, "NULL model");
    if (!ids) {
        memset(&m->ids, 0, sizeof m->ids);
        return MT_OK;
    }
    MT_TRY(mt_tensor_check(ids, "sample ids", 1));
    MT_REQUIRE(ids->dtype == MT_I64 && ids->shape[0] == m->B && mt_device_eq(ids->device, m->dev) &&
                   mt_tensor_is_contiguous(ids),
               MT_ERR_INVALID_ARG, "sample ids must be contiguous i64 (%d) on the model's device",
               m->B);
    m->ids = *ids;
    return MT_OK;
}

void mt_model_set_profiler(mt_model *m, mt_prof *p) {
    if (m) m->prof = p;
}

void mt_model_set_cuda_graphs(mt_model *m, int on) {
    if (!m) return;
    m->graphs = on;
    if (!on) {
        for (int i = 0; i < MODEL_GRAPH_SLOTS; i++) {
            mt_graph_destroy(m->gs[i].graph);
            m->gs[i] = (graph_slot){ 0 };
        }
        mt_graph_destroy(m->gf.graph);
        m->gf = (graph_slot){ 0 };
    }
}

void mt_model_set_grad_ready(mt_model *m, mt_model_grad_ready_fn fn, void *ctx) {
    if (!m) return;
    m->ready_fn = fn;
    m->ready_ctx = ctx;
}

void mt_model_set_param_wait(mt_model *m, mt_model_param_wait_fn fn, void *ctx) {
    if (!m) return;
    m->wait_fn = fn;
    m->wait_ctx = ctx;
}

mt_status mt_model_param_ready_level(const mt_model_config *cfg, const char *name, int *level) {
    MT_REQUIRE(cfg && name && level, MT_ERR_INVALID_ARG, "NULL config, name or level");
    int l, n = 0;
    if (sscanf(name, "decoder.layers.%d.%n", &l, &n) == 1 && n > 0 && l >= 0 &&
        l < cfg->num_layers) {
        *level = l;
        return MT_OK;
    }
    if (!strncmp(name, "embedding.", 10)) {
        *level = -1;
        return MT_OK;
    }
    /* (multi-token prediction: read after the final norm, its backward before the final norm's) */
    if (!strncmp(name, "decoder.final_layernorm.", 24) || !strcmp(name, "output_layer.weight") ||
        (sscanf(name, "mtp.layers.%d.%n", &l, &n) == 1 && n > 0 && l >= 0 && l < mtp_n(cfg))) {
        *level = cfg->num_layers;
        return MT_OK;
    }
    return MT_ERROR(MT_ERR_INVALID_ARG, "no parameter '%s' in the model", name);
}
