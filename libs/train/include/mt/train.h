/* mt-train: the pretraining runtime behind mt-pretrain: Megatron's command line, initialization,
 * the training loop with gradient accumulation and data parallelism, evaluation, logging (the
 * training line, JSONL metrics, golden-values JSON) and the checkpoint cadence. */
#ifndef MT_TRAIN_H
#define MT_TRAIN_H

#include <mt/core.h>
#include <mt/model.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Megatron's flags (same names, same defaults) for what exists here. Strings are owned. */
typedef struct mt_train_args {
    /* model */
    int num_layers, hidden_size, num_attention_heads, num_query_groups, group_query_attention;
    int ffn_hidden_size, kv_channels, seq_length, max_position_embeddings;
    int vocab_size, make_vocab_size_divisible_by, swiglu, untie_embeddings_and_output_weights;
    int disable_bias_linear, rotary_interleaved;
    char *normalization, *position_embedding_type;
    double norm_epsilon, rotary_base, init_method_std;
    /* batches and schedule */
    int micro_batch_size, global_batch_size;
    int64_t train_iters, lr_decay_iters, lr_warmup_iters, lr_wsd_decay_iters, exit_interval;
    /* sample-based training (instead of --train-iters/--lr-decay-iters/...): 0 = unset */
    int64_t train_samples, lr_decay_samples, lr_warmup_samples, lr_wsd_decay_samples;
    double attention_dropout, hidden_dropout; /* in [0, 1); default 0.1 (Megatron's) */
    char *transformer_impl;                   /* "local" (accepted) */
    int use_rotary_position_embeddings;       /* old spelling of --position-embedding-type rope */
    int no_position_embedding;                /* accepted with rope only */
    int noop;                                 /* flags accepted and ignored (always on here) */
    int timing_log_level;                     /* >= 1: per-operation times at the end */
    char *tensorboard_dir, *wandb_project;    /* accepted, with a warning: not written */
    /* Megatron's implementation choices, accepted when this project has the one asked for (or
     * none to choose from): --distributed-backend, --attention-backend, --dataloader-type,
     * --ckpt-format (noted: checkpoints are this project's format) */
    char *distributed_backend, *attention_backend, *dataloader_type, *ckpt_format;
    double rotary_percent;         /* --rotary-percent: the share of each head RoPE rotates (1.0) */
    int empty_unused_memory_level; /* accepted (0, 1 or 2): memory is planned once here */
    int exit_on_missing_checkpoint; /* --load finds no checkpoint: an error, not a fresh start */
    int use_checkpoint_args;        /* the model's shape from the --load checkpoint's saved args */
    /* --rampup-batch-size START INCREMENT SAMPLES (n_rampup values given; 0: none): the global
     * batch grows from START by INCREMENT over SAMPLES consumed samples (sample-based training) */
    int64_t rampup_batch_size[3];
    int n_rampup;
    /* on resume, the LR/WD schedule's settings: those given (override), the checkpoint's
     * (use-checkpoint), or by default both, which must then agree (Megatron's assert) */
    int override_opt_param_scheduler, use_checkpoint_opt_param_scheduler;
    double exit_duration_in_mins; /* 0: none */
    int exit_signal_handler;      /* SIGTERM: save and exit after the current iteration */
    int skip_train;               /* --skip-train: only the final validation and test passes */
    double lr, min_lr, lr_warmup_fraction, lr_warmup_init, weight_decay, start_weight_decay;
    double end_weight_decay, clip_grad, adam_beta1, adam_beta2, adam_eps, sgd_momentum;
    char *lr_decay_style, *lr_wsd_decay_style, *weight_decay_incr_style, *optimizer;
    int seed;
    /* precision */
    int bf16, fp16;
    /* --loss-scale (0: none, i.e. dynamic with --fp16), the dynamic scaler's settings */
    double loss_scale, initial_loss_scale, min_loss_scale, loss_scale_window;
    int hysteresis;
    /* data */
    int n_data_path;
    char **data_path; /* as given: [w1] p1 [w2 p2 ...] */
    /* --train-data-path, --valid-data-path, --test-data-path: a blend per split (instead of
     * --data-path and --split), each as given */
    int n_split_path[3];
    char **split_path[3];
    /* --data-args-path FILE (the --data-path list in a file), --per-split-data-args-path FILE (JSON
     * {"train": [...] or "...", "valid": ..., "test": ...}): read into the lists above */
    char *data_args_path, *per_split_data_args_path;
    char *split, *tokenizer_type, *vocab_file, *merge_file, *data_cache_path;
    char *tokenizer_model; /* --tokenizer-model (HuggingFaceTokenizer) */
    int mock_data, num_workers;
    /* --eod-mask-loss: no loss where the input token is EOD; --calculate-per-token-loss: the loss
     * and its gradient are the global batch's sum over its counted tokens */
    int eod_mask_loss, calculate_per_token_loss;
    int reset_position_ids; /* positions restart after each EOD (Megatron's position_ids) */
    /* --reset-attention-mask: a token attends only to its own document (the tokens since the
     * last EOD before it), unless --no-create-attention-mask-in-dataloader (Megatron then has no
     * mask to reset: documents attend across, with a warning) */
    int reset_attention_mask, no_create_attention_mask;
    /* --window-size "L,R" (Megatron's tuple; "(L, R)" too): sliding-window attention over the
     * L keys before each token (window_left; R must be 0; L -1: none) */
    char *window_size;
    /* --window-attn-skip-freq: the full-attention layers among the windowed ones (an int N or a
     * list expression of 1s, window, and 0s, full; Megatron's) */
    char *window_attn_skip_freq;
    int window_left;
    int qk_layernorm; /* --qk-layernorm: per-head q and k norms */
    /* multi-token prediction: --mtp-num-layers (0: none), --mtp-loss-scaling-factor (0.1) */
    int mtp_num_layers;
    double mtp_loss_scaling_factor;
    /* mixture of experts: --num-experts (0: dense), --moe-router-topk, --moe-ffn-hidden-size,
     * --moe-aux-loss-coeff, --moe-z-loss-coeff (0: none), --moe-router-load-balancing-type
     * (aux_loss | none), --moe-router-score-function (softmax), --moe-token-dispatcher-type
     * (allgather | alltoall: one and the same without expert parallelism),
     * --expert-model-parallel-size (1), --moe-grouped-gemm (accepted: one GEMM an expert) */
    int num_experts, moe_router_topk, moe_ffn_hidden_size, expert_model_parallel_size;
    double moe_aux_loss_coeff, moe_z_loss_coeff;
    char *moe_router_load_balancing_type, *moe_router_score_function, *moe_token_dispatcher_type;
    char *moe_router_dtype; /* --moe-router-dtype: NULL or fp32 (the router's GEMM and softmax
                               are in fp32 either way) */
    /* token dropping: --moe-expert-capacity-factor (0: dropless), --moe-token-drop-policy
     * (probs | position), --moe-pad-expert-input-to-capacity */
    double moe_expert_capacity_factor;
    char *moe_token_drop_policy;
    int moe_pad_expert_input_to_capacity;
    int moe_router_pre_softmax;              /* --moe-router-pre-softmax */
    double moe_router_topk_scaling_factor;   /* --moe-router-topk-scaling-factor (0: none) */
    int moe_router_num_groups;               /* --moe-router-num-groups (0: none) */
    int add_qkv_bias;                        /* --add-qkv-bias */
    int moe_router_group_topk;               /* --moe-router-group-topk (0: none) */
    int moe_shared_expert_intermediate_size; /* --moe-shared-expert-intermediate-size (0: none) */
    int moe_shared_expert_gate;              /* --moe-shared-expert-gate */
    char *moe_layer_freq; /* --moe-layer-freq: Megatron's int or list expression (NULL: 1) */
    int moe_router_enable_expert_bias;  /* --moe-router-enable-expert-bias */
    double moe_router_bias_update_rate; /* --moe-router-bias-update-rate (1e-3) */
    /* --multi-latent-attention and its shapes: --q-lora-rank (0: none), --kv-lora-rank (32),
     * --qk-head-dim (128), --qk-pos-emb-head-dim (64), --v-head-dim (128); --rope-type (NULL:
     * MLA's yarn; rope) */
    int multi_latent_attention, q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim;
    int v_head_dim;
    char *rope_type;
    /* rotary scaling: Llama 3.x's --use-rope-scaling with --rope-scaling-factor (8);
     * --rotary-seq-len-interpolation-factor (0: none); YaRN's (MLA's --rope-type yarn, its
     * default, or --position-embedding-type yarn): --rotary-scaling-factor (1: none), --mscale
     * (1), --mscale-all-dim (0), --original-max-position-embeddings (4096), --beta-fast (32),
     * --beta-slow (1) */
    int use_rope_scaling, original_max_position_embeddings;
    double rope_scaling_factor, rotary_seq_len_interpolation_factor, rotary_scaling_factor;
    double mscale, mscale_all_dim, beta_fast, beta_slow;
    int decrease_batch_size_if_needed; /* round the global batch down to a multiple of MBS x DP */
    /* evaluation and logging */
    int64_t eval_interval, eval_iters, log_interval;
    int log_throughput, log_num_zeros_in_grad, log_params_norm;
    int no_check_for_nan_in_loss_and_grad; /* skip (not stop at) a bf16/fp32 step with Inf/NaN */
    char *golden_values_out, *metrics_jsonl;
    /* checkpoints */
    char *save, *load;
    int64_t save_interval;
    int async_save, no_save_optim, no_load_optim, no_load_rng, finetune;
    /* parallelism */
    int tensor_model_parallel_size, pipeline_model_parallel_size, context_parallel_size;
    /* --cp-comm-type (p2p | a2a | allgather | a2a+p2p; the keys and values are all-gathered
     * whichever: the same results), --expert-tensor-parallel-size (0: the tensor-parallel size,
     * the only one taken yet) */
    char *cp_comm_type;
    int expert_tensor_parallel_size;
    /* --decoder-first/last-pipeline-num-layers: an uneven pipeline split (0: even) */
    int decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers;
    /* the interleaved schedule: --num-layers-per-virtual-pipeline-stage or
     * --num-virtual-stages-per-pipeline-rank (0: not set), and the chunks a stage that they give
     * (virtual_pipeline_model_parallel_size; 0 or 1: 1F1B) */
    int num_layers_per_virtual_pipeline_stage, num_virtual_stages_per_pipeline_rank;
    int virtual_pipeline_model_parallel_size;
    int microbatch_group_size_per_vp_stage; /* --microbatch-group-size-per-virtual-pipeline-stage
                                               (0: the pipeline size, Megatron's default) */
    int sequence_parallel; /* --sequence-parallel (with tensor parallelism; else ignored) */
    int use_distributed_optimizer, overlap_grad_reduce, overlap_param_gather, grad_reduce_in_bf16;
    int64_t ddp_bucket_size;
    double distributed_timeout_minutes;
    char *recompute_granularity, *recompute_method; /* NULL: none */
    int n_recompute_modules;
    char **recompute_modules;                        /* selective: core_attn, mlp_act (as given) */
    int recompute_num_layers, recompute_activations; /* 0: None */
    int deterministic_mode;
    /* ours */
    char *device;      /* "auto" (GPU if there is one), "cpu" or "cuda" */
    int logits_chunks; /* the output layer and cross-entropy in that many token slices */
} mt_train_args;

/* Megatron's defaults. */
MT_API void mt_train_args_init(mt_train_args *a);
/* Parses argv (argv[0] is the program) over the defaults; unknown flags, bad values and
 * incompatible combinations give MT_ERR_INVALID_ARG (or MT_ERR_UNSUPPORTED for features that do
 * not exist yet) with a Megatron-style message, before anything starts. */
MT_API mt_status mt_train_args_parse(mt_train_args *a, int argc, char **argv);
MT_API void mt_train_args_free(mt_train_args *a);
/* Prints the flags with their defaults. */
MT_API void mt_train_usage(const char *prog);

/* Runs pretraining as Megatron's pretrain_gpt.py does. Collective over the launcher's ranks. With
 * several ranks, a failure prints the error with this rank's number and ends the whole job
 * (mt_comm_abort_job): the other ranks do not wait in a collective until the timeout. */
MT_API mt_status mt_train_run(const mt_train_args *a);

/* ---- mt-generate ---- */

/* libs/model's config of the GPT-2-, Llama-, Qwen2-, Qwen3-, Mixtral-, Qwen2-MoE- or
 * DeepSeek-V3-shaped model whose Hugging Face config a checkpoint's args keep (hf.config:
 * mt-pretrain writes it for those shapes, mt-convert's import always); seq_length =
 * max_position_embeddings. MT_ERR_FORMAT without one; MT_ERR_UNSUPPORTED for a DeepSeek-V3 config
 * that libs/model would not run as transformers does (YaRN, rope_interleave false, ...). */
MT_API mt_status mt_train_model_config_from_hf(const char *args_json, mt_model_config *c);

/* mt-generate's settings (its flags: --load, --prompt or --prompt-ids, --tokens-to-generate,
 * --temperature, --top_k, --top_p, --greedy, --seed, the tokenizer's, --device, --print-ids). */
typedef struct mt_generate_args {
    const char *load;         /* the checkpoint directory (its latest iteration) */
    const char *prompt;       /* text, tokenized; or NULL */
    const char *prompt_ids;   /* "1,2,3"; or NULL */
    int tokens_to_generate;   /* at most this many (fewer at eod or at the model's positions) */
    float temperature, top_p; /* mt-infer's sampling; greedy: argmax */
    int top_k, greedy;
    uint64_t seed;
    const char *tokenizer_type, *vocab_file, *merge_file, *tokenizer_model;
    int eod;            /* NullTokenizer: the id that stops generation (< 0: none) */
    const char *device; /* auto, cpu or cuda */
    int print_ids;      /* also print the ids (always with NullTokenizer) */
} mt_generate_args;

/* Loads the checkpoint's model on one device and prints the prompt's continuation (decoded; the
 * ids with print_ids or NullTokenizer): mt-infer's sampling over the model's forward. */
MT_API mt_status mt_generate_run(const mt_generate_args *a);
/* mt-serve: the model loaded once (its whole window), then Megatron's text generation server's
 * REST call over HTTP/1.1 on host:port (0: any free port; the line "listening on ..." names it):
 * PUT (or POST) /api with {"prompts": [...], "tokens_to_generate", "temperature", "top_k",
 * "top_p", "random_seed", "logprobs"} answers {"text": [...], "segments": [[...]], "tokens":
 * [[...]]} (and "logprobs": [[...]]); POST /completions or /v1/completions takes OpenAI's legacy
 * completions call (Megatron's dynamic server's); a bad request gets 400 with {"message"}.
 * Requests are read without blocking and decoded with continuous batching over the KV cache
 * (MT_SERVE_BATCH rows, 8; 1 or no cache: one prompt after another); max_requests > 0: returns
 * after answering that many. */
MT_API mt_status mt_serve_run(const mt_generate_args *a, const char *host, int port,
                              int max_requests);

#ifdef __cplusplus
}
#endif

#endif /* MT_TRAIN_H */
