/* Megatron's command line: the flag table (names and defaults as in megatron/training/arguments.py
 * and its config dataclasses), parsing and the consistency checks made before anything starts. */
#define _POSIX_C_SOURCE 200809L
#include "train_impl.h"

#include <mt/ckpt.h>
#include <mt/model.h>
#include <mt/train.h>

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    F_INT,
    F_I64,
    F_DBL,
    F_STR,
    F_TRUE,
    F_NO_VAL /* refused (not supported yet), a flag that takes one value: the help is the message */
} ftype;

typedef struct flag {
    const char *name;
    ftype type;
    size_t off;
    const char *help;
} flag;

/* Megatron's flags: name, type, field, help (a refused one's message) */
#define O(f) offsetof(mt_train_args, f)
static const flag flags[] = {
    { "--num-layers", F_INT, O(num_layers), "transformer layers (required)" },
    { "--hidden-size", F_INT, O(hidden_size), "hidden size (required)" },
    { "--num-attention-heads", F_INT, O(num_attention_heads), "attention heads (required)" },
    { "--group-query-attention", F_TRUE, O(group_query_attention), "use --num-query-groups" },
    { "--num-query-groups", F_INT, O(num_query_groups), "KV groups for GQA" },
    { "--ffn-hidden-size", F_INT, O(ffn_hidden_size), "MLP width (default 4h)" },
    { "--kv-channels", F_INT, O(kv_channels), "head dim (default h/heads)" },
    { "--seq-length", F_INT, O(seq_length), "sequence length (required)" },
    { "--max-position-embeddings", F_INT, O(max_position_embeddings), "position table size" },
    { "--vocab-size", F_INT, O(vocab_size), "vocabulary size (NullTokenizer)" },
    { "--make-vocab-size-divisible-by", F_INT, O(make_vocab_size_divisible_by), "128" },
    { "--swiglu", F_TRUE, O(swiglu), "SwiGLU MLP" },
    { "--untie-embeddings-and-output-weights", F_TRUE, O(untie_embeddings_and_output_weights),
      "separate output layer" },
    { "--disable-bias-linear", F_TRUE, O(disable_bias_linear), "no linear biases" },
    { "--add-qkv-bias", F_TRUE, O(add_qkv_bias),
      "a bias on the QKV linear even with --disable-bias-linear (Qwen2)" },
    { "--rotary-interleaved", F_TRUE, O(rotary_interleaved), "Meta's interleaved RoPE pairs" },
    { "--normalization", F_STR, O(normalization), "LayerNorm | RMSNorm" },
    { "--position-embedding-type", F_STR, O(position_embedding_type),
      "learned_absolute | rope | yarn (rope with YaRN's scaling)" },
    { "--norm-epsilon", F_DBL, O(norm_epsilon), "1e-5" },
    { "--rotary-base", F_DBL, O(rotary_base), "10000" },
    { "--init-method-std", F_DBL, O(init_method_std), "0.02" },
    { "--micro-batch-size", F_INT, O(micro_batch_size), "sequences per micro-batch" },
    { "--global-batch-size", F_INT, O(global_batch_size), "default micro * data parallel" },
    { "--train-iters", F_I64, O(train_iters), "iterations (or --train-samples)" },
    { "--train-samples", F_I64, O(train_samples), "samples (sample-based schedule)" },
    { "--lr-decay-samples", F_I64, O(lr_decay_samples), "default --train-samples" },
    { "--lr-warmup-samples", F_I64, O(lr_warmup_samples), "0" },
    { "--lr-wsd-decay-samples", F_I64, O(lr_wsd_decay_samples), "WSD annealing samples" },
    { "--attention-dropout", F_DBL, O(attention_dropout),
      "dropout on the attention weights (0.1)" },
    { "--hidden-dropout", F_DBL, O(hidden_dropout),
      "dropout on the embeddings and the projections' outputs (0.1)" },
    { "--transformer-impl", F_STR, O(transformer_impl), "local (the only one)" },
    /* implementation switches of Megatron that are always on (or meaningless) here */
    { "--use-flash-attn", F_TRUE, O(noop), "accepted: attention is always flash-style" },
    { "--timing-log-level", F_INT, O(timing_log_level),
      "0; >= 1: per-operation GPU times at the end (as MT_PROFILE=1)" },
    { "--tensorboard-dir", F_STR, O(tensorboard_dir), "accepted, not written: --metrics-jsonl" },
    { "--wandb-project", F_STR, O(wandb_project), "accepted, not written: --metrics-jsonl" },
    { "--use-mcore-models", F_TRUE, O(noop), "accepted" },
    { "--no-masked-softmax-fusion", F_TRUE, O(noop), "accepted" },
    { "--no-bias-gelu-fusion", F_TRUE, O(noop), "accepted" },
    { "--no-bias-swiglu-fusion", F_TRUE, O(noop), "accepted" },
    { "--no-bias-dropout-fusion", F_TRUE, O(noop), "accepted" },
    { "--no-gradient-accumulation-fusion", F_TRUE, O(noop), "accepted" },
    { "--no-rope-fusion", F_TRUE, O(noop), "accepted" },
    { "--attention-softmax-in-fp32", F_TRUE, O(noop), "accepted: softmax is always fp32" },
    { "--accumulate-allreduce-grads-in-fp32", F_TRUE, O(noop), "accepted: grads are fp32" },
    { "--sequence-parallel", F_TRUE, O(sequence_parallel),
      "split the residual stream's tokens over the tensor-parallel ranks (TP > 1)" },
    { "--no-async-tensor-model-parallel-allreduce", F_TRUE, O(noop),
      "accepted: the column-parallel backward's all-reduce runs in line (MT_TP_ASYNC=1 "
      "overlaps it)" },
    { "--cross-entropy-loss-fusion", F_TRUE, O(noop),
      "accepted: the output layer and cross-entropy are always fused" },
    { "--apply-query-key-layer-scaling", F_TRUE, O(noop),
      "accepted: the same scores in exact arithmetic, softmax in fp32" },
    { "--manual-gc", F_TRUE, O(noop), "accepted (no garbage collector here)" },
    { "--no-create-attention-mask-in-dataloader", F_TRUE, O(no_create_attention_mask),
      "no attention mask from the data: --reset-attention-mask then does nothing (as Megatron)" },
    { "--no-persist-layer-norm", F_TRUE, O(noop), "accepted" },
    { "--empty-unused-memory-level", F_INT, O(empty_unused_memory_level),
      "0 | 1 | 2: accepted (activation memory is planned once)" },
    { "--log-timers-to-tensorboard", F_TRUE, O(noop), "accepted, not written: --metrics-jsonl" },
    { "--log-validation-ppl-to-tensorboard", F_TRUE, O(noop),
      "accepted, not written: --metrics-jsonl" },
    { "--log-memory-to-tensorboard", F_TRUE, O(noop), "accepted, not written" },
    { "--log-world-size-to-tensorboard", F_TRUE, O(noop), "accepted, not written" },
    { "--log-loss-scale-to-tensorboard", F_TRUE, O(noop),
      "accepted, not written: --metrics-jsonl" },
    { "--distributed-backend", F_STR, O(distributed_backend),
      "nccl | gloo: accepted (NCCL on GPUs, MPI or a socket ring on the host)" },
    { "--attention-backend", F_STR, O(attention_backend),
      "auto | flash | fused | unfused | local: accepted (one flash-style attention)" },
    { "--dataloader-type", F_STR, O(dataloader_type), "single (the only one)" },
    { "--ckpt-format", F_STR, O(ckpt_format),
      "accepted: checkpoints are this project's sharded safetensors (mt-convert exports HF)" },
    { "--rotary-percent", F_DBL, O(rotary_percent),
      "the share of each head's channels RoPE rotates (1.0)" },
    { "--reset-position-ids", F_TRUE, O(reset_position_ids),
      "positions restart after each EOD (attention still spans the documents)" },
    { "--window-size", F_STR, O(window_size),
      "L,R: sliding-window attention over the L keys before each token (R 0; default none)" },
    { "--window-attn-skip-freq", F_STR, O(window_attn_skip_freq),
      "N or a list like \"[0]+[1]*3\": the full-attention layers among the windowed (1s) ones" },
    { "--reset-attention-mask", F_TRUE, O(reset_attention_mask),
      "a token attends only to its own document (since the last EOD)" },
    { "--multi-latent-attention", F_TRUE, O(multi_latent_attention),
      "DeepSeek's multi-latent attention (MLA)" },
    { "--q-lora-rank", F_INT, O(q_lora_rank), "MLA's query latent (default none)" },
    { "--kv-lora-rank", F_INT, O(kv_lora_rank), "MLA's key-value latent (32)" },
    { "--qk-head-dim", F_INT, O(qk_head_dim), "MLA's query and key channels without RoPE (128)" },
    { "--qk-pos-emb-head-dim", F_INT, O(qk_pos_emb_head_dim), "MLA's RoPE channels (64)" },
    { "--v-head-dim", F_INT, O(v_head_dim), "MLA's value channels (128)" },
    { "--rope-type", F_STR, O(rope_type), "rope | yarn (MLA's default): MLA's rotary embeddings" },
    { "--use-rope-scaling", F_TRUE, O(use_rope_scaling),
      "Llama 3.x's scaled rotary frequencies (low/high_freq_factor 1/4, original 8192)" },
    { "--rope-scaling-factor", F_DBL, O(rope_scaling_factor), "--use-rope-scaling's (8.0)" },
    { "--rotary-seq-len-interpolation-factor", F_DBL, O(rotary_seq_len_interpolation_factor),
      "positions divided by it (linear interpolation; default none)" },
    { "--rotary-scaling-factor", F_DBL, O(rotary_scaling_factor), "YaRN's factor (1.0: none)" },
    { "--mscale", F_DBL, O(mscale), "YaRN's mscale (1.0)" },
    { "--mscale-all-dim", F_DBL, O(mscale_all_dim), "YaRN's mscale_all_dim (0.0)" },
    { "--original-max-position-embeddings", F_INT, O(original_max_position_embeddings),
      "YaRN's original context (4096)" },
    { "--beta-fast", F_DBL, O(beta_fast), "YaRN's beta_fast (32)" },
    { "--beta-slow", F_DBL, O(beta_slow), "YaRN's beta_slow (1)" },
    { "--qk-layernorm", F_TRUE, O(qk_layernorm),
      "normalise each query and key head (the --normalization) before RoPE" },
    { "--eod-mask-loss", F_TRUE, O(eod_mask_loss),
      "no loss where the input token is EOD (the next document's first token)" },
    { "--decrease-batch-size-if-needed", F_TRUE, O(decrease_batch_size_if_needed),
      "round the global batch down to a multiple of micro-batch x data-parallel size" },
    { "--calculate-per-token-loss", F_TRUE, O(calculate_per_token_loss),
      "the loss is the global batch's sum over its token count (not a mean of micro-batch means)" },
    { "--use-rotary-position-embeddings", F_TRUE, O(use_rotary_position_embeddings),
      "= --position-embedding-type rope" },
    { "--no-position-embedding", F_TRUE, O(no_position_embedding),
      "no learned position table (with rope)" },
    { "--exit-interval", F_I64, O(exit_interval), "stop after this many iterations" },
    { "--exit-duration-in-mins", F_DBL, O(exit_duration_in_mins),
      "save and stop once training has run this long" },
    { "--skip-train", F_TRUE, O(skip_train),
      "no training: evaluate the validation and test splits (with --load: that model)" },
    { "--exit-signal-handler", F_TRUE, O(exit_signal_handler),
      "on SIGTERM: save a checkpoint after the current iteration and exit" },
    { "--lr", F_DBL, O(lr), "peak learning rate (required)" },
    { "--min-lr", F_DBL, O(min_lr), "0" },
    { "--lr-decay-style", F_STR, O(lr_decay_style),
      "constant|linear|cosine|inverse-square-root|WSD" },
    { "--lr-decay-iters", F_I64, O(lr_decay_iters), "default --train-iters" },
    { "--lr-warmup-iters", F_I64, O(lr_warmup_iters), "0" },
    { "--lr-warmup-fraction", F_DBL, O(lr_warmup_fraction), "of the decay iterations" },
    { "--lr-warmup-init", F_DBL, O(lr_warmup_init), "0" },
    { "--lr-wsd-decay-style", F_STR, O(lr_wsd_decay_style), "exponential" },
    { "--lr-wsd-decay-iters", F_I64, O(lr_wsd_decay_iters), "WSD annealing iterations" },
    { "--weight-decay", F_DBL, O(weight_decay), "0.01" },
    { "--start-weight-decay", F_DBL, O(start_weight_decay), "default --weight-decay" },
    { "--end-weight-decay", F_DBL, O(end_weight_decay), "default --weight-decay" },
    { "--weight-decay-incr-style", F_STR, O(weight_decay_incr_style), "constant|linear|cosine" },
    { "--clip-grad", F_DBL, O(clip_grad), "1.0" },
    { "--optimizer", F_STR, O(optimizer), "adam | sgd" },
    { "--adam-beta1", F_DBL, O(adam_beta1), "0.9" },
    { "--adam-beta2", F_DBL, O(adam_beta2), "0.999" },
    { "--adam-eps", F_DBL, O(adam_eps), "1e-8" },
    { "--sgd-momentum", F_DBL, O(sgd_momentum), "0.9" },
    { "--seed", F_INT, O(seed), "1234" },
    { "--bf16", F_TRUE, O(bf16), "bf16 params and activations, fp32 master weights" },
    { "--fp16", F_TRUE, O(fp16),
      "fp16 params and activations, fp32 master weights, dynamic loss scaling" },
    { "--loss-scale", F_DBL, O(loss_scale), "static loss scale (fp16 or bf16); default dynamic" },
    { "--initial-loss-scale", F_DBL, O(initial_loss_scale), "2**32 (dynamic scaling)" },
    { "--min-loss-scale", F_DBL, O(min_loss_scale), "1 (dynamic scaling)" },
    { "--loss-scale-window", F_DBL, O(loss_scale_window),
      "1000: clean steps before the scale doubles" },
    { "--hysteresis", F_INT, O(hysteresis), "2: overflowing steps before the scale halves" },
    { "--split", F_STR, O(split), "969, 30, 1" },
    { "--data-args-path", F_STR, O(data_args_path), "a file holding the --data-path list" },
    { "--per-split-data-args-path", F_STR, O(per_split_data_args_path),
      "JSON {\"train\": [...], \"valid\": [...], \"test\": [...]}" },
    { "--tokenizer-type", F_STR, O(tokenizer_type),
      "GPT2BPETokenizer | NullTokenizer | HuggingFaceTokenizer | Llama2Tokenizer | "
      "GPTSentencePieceTokenizer" },
    { "--tokenizer-model", F_STR, O(tokenizer_model),
      "HuggingFaceTokenizer: a directory with tokenizer.json (or that file); the SentencePiece "
      "ones: the .model file" },
    { "--vocab-file", F_STR, O(vocab_file), "GPT-2 encoder.json" },
    { "--merge-file", F_STR, O(merge_file), "GPT-2 vocab.bpe" },
    { "--data-cache-path", F_STR, O(data_cache_path), "where index files are cached" },
    { "--mock-data", F_TRUE, O(mock_data), "synthetic data" },
    { "--num-workers", F_INT, O(num_workers), "accepted; data loading is synchronous" },
    { "--eval-interval", F_I64, O(eval_interval), "iterations between evaluations" },
    { "--eval-iters", F_I64, O(eval_iters), "100" },
    { "--log-interval", F_I64, O(log_interval), "100" },
    { "--log-throughput", F_TRUE, O(log_throughput), "TFLOP/s/GPU in the training line" },
    { "--log-num-zeros-in-grad", F_TRUE, O(log_num_zeros_in_grad), "count zero grads" },
    { "--log-params-norm", F_TRUE, O(log_params_norm), "the parameters' L2 norm in the log line" },
    { "--no-check-for-nan-in-loss-and-grad", F_TRUE, O(no_check_for_nan_in_loss_and_grad),
      "skip a bf16/fp32 step with Inf/NaN gradients instead of stopping" },
    { "--golden-values-out", F_STR, O(golden_values_out), "Megatron golden-values JSON" },
    { "--metrics-jsonl", F_STR, O(metrics_jsonl), "one JSON object per iteration" },
    { "--save", F_STR, O(save), "checkpoint directory" },
    { "--load", F_STR, O(load), "checkpoint directory to resume from" },
    { "--save-interval", F_I64, O(save_interval), "iterations between checkpoints" },
    { "--async-save", F_TRUE, O(async_save), "write checkpoints in the background" },
    { "--no-save-optim", F_TRUE, O(no_save_optim), "" },
    { "--no-load-optim", F_TRUE, O(no_load_optim), "" },
    { "--no-load-rng", F_TRUE, O(no_load_rng), "" },
    { "--finetune", F_TRUE, O(finetune), "load weights only, start at iteration 0" },
    { "--override-opt_param-scheduler", F_TRUE, O(override_opt_param_scheduler),
      "on resume, the schedule's settings given here, not the checkpoint's" },
    { "--use-checkpoint-opt_param-scheduler", F_TRUE, O(use_checkpoint_opt_param_scheduler),
      "on resume, the checkpoint's schedule settings (default: both, which must agree)" },
    { "--use-checkpoint-args", F_TRUE, O(use_checkpoint_args),
      "the model's shape from the --load checkpoint (over the flags given)" },
    { "--exit-on-missing-checkpoint", F_TRUE, O(exit_on_missing_checkpoint),
      "--load without a checkpoint there is an error (default: start from random)" },
    { "--tensor-model-parallel-size", F_INT, O(tensor_model_parallel_size), "1" },
    { "--pipeline-model-parallel-size", F_INT, O(pipeline_model_parallel_size), "1" },
    { "--num-layers-per-virtual-pipeline-stage", F_INT, O(num_layers_per_virtual_pipeline_stage),
      "the interleaved schedule: chunks of this many layers, (layers / P) / this a stage" },
    { "--num-virtual-stages-per-pipeline-rank", F_INT, O(num_virtual_stages_per_pipeline_rank),
      "the interleaved schedule: this many chunks a stage" },
    { "--microbatch-group-size-per-virtual-pipeline-stage", F_INT,
      O(microbatch_group_size_per_vp_stage),
      "the interleaved schedule: micro-batches through the chunks in groups of this many "
      "(default: the pipeline size)" },
    { "--decoder-first-pipeline-num-layers", F_INT, O(decoder_first_pipeline_num_layers),
      "layers of the first pipeline stage (the others: the rest evenly)" },
    { "--decoder-last-pipeline-num-layers", F_INT, O(decoder_last_pipeline_num_layers),
      "layers of the last pipeline stage (which also runs the output layer and the loss)" },
    { "--context-parallel-size", F_INT, O(context_parallel_size), "1" },
    { "--cp-comm-type", F_STR, O(cp_comm_type),
      "p2p | a2a | allgather | a2a+p2p (accepted: keys and values are all-gathered)" },
    { "--expert-tensor-parallel-size", F_INT, O(expert_tensor_parallel_size),
      "experts' tensor parallelism (default and only: --tensor-model-parallel-size)" },
    { "--num-experts", F_INT, O(num_experts), "MoE: experts a layer (default: dense MLPs)" },
    { "--moe-router-topk", F_INT, O(moe_router_topk), "MoE: experts a token (2)" },
    { "--moe-ffn-hidden-size", F_INT, O(moe_ffn_hidden_size),
      "MoE: an expert's MLP width (default --ffn-hidden-size)" },
    { "--mtp-num-layers", F_INT, O(mtp_num_layers),
      "multi-token prediction depths, each predicting one token further (none)" },
    { "--mtp-loss-scaling-factor", F_DBL, O(mtp_loss_scaling_factor),
      "weight of the MTP depths' mean loss in the training loss (0.1)" },
    { "--moe-aux-loss-coeff", F_DBL, O(moe_aux_loss_coeff), "load-balancing loss weight (0)" },
    { "--moe-z-loss-coeff", F_DBL, O(moe_z_loss_coeff), "router z-loss weight (none)" },
    { "--moe-router-load-balancing-type", F_STR, O(moe_router_load_balancing_type),
      "aux_loss | seq_aux_loss | none" },
    { "--moe-router-score-function", F_STR, O(moe_router_score_function), "softmax | sigmoid" },
    { "--moe-router-dtype", F_STR, O(moe_router_dtype),
      "fp32 (the router's logits are fp32 GEMM outputs in every precision)" },
    { "--moe-token-dispatcher-type", F_STR, O(moe_token_dispatcher_type),
      "allgather | alltoall (the same without expert parallelism)" },
    { "--moe-grouped-gemm", F_TRUE, O(noop), "accepted (one GEMM an expert)" },
    { "--moe-expert-capacity-factor", F_DBL, O(moe_expert_capacity_factor),
      "each expert's capacity: tokens x topk / experts x this (default: dropless)" },
    { "--moe-token-drop-policy", F_STR, O(moe_token_drop_policy), "probs | position" },
    { "--moe-pad-expert-input-to-capacity", F_TRUE, O(moe_pad_expert_input_to_capacity),
      "every expert runs on its capacity's rows" },
    { "--moe-router-pre-softmax", F_TRUE, O(moe_router_pre_softmax),
      "the softmax over all experts, not renormalised over the top k" },
    { "--moe-router-topk-scaling-factor", F_DBL, O(moe_router_topk_scaling_factor),
      "the routing probabilities times this" },
    { "--moe-router-num-groups", F_INT, O(moe_router_num_groups),
      "group-limited routing: the experts in this many equal groups" },
    { "--moe-router-group-topk", F_INT, O(moe_router_group_topk),
      "group-limited routing: a token's experts from its best this many groups" },
    { "--moe-shared-expert-intermediate-size", F_INT, O(moe_shared_expert_intermediate_size),
      "each MoE layer's shared experts: one MLP of this width over every token" },
    { "--moe-shared-expert-gate", F_TRUE, O(moe_shared_expert_gate),
      "the shared experts' output times sigmoid(x . g) (Qwen2-MoE)" },
    { "--moe-router-enable-expert-bias", F_TRUE, O(moe_router_enable_expert_bias),
      "aux-loss-free balancing: a bias on each expert's score, moved towards balance each step" },
    { "--moe-router-bias-update-rate", F_DBL, O(moe_router_bias_update_rate),
      "the expert bias's step (1e-3)" },
    { "--moe-layer-freq", F_STR, O(moe_layer_freq),
      "MoE layers among dense ones: an int N (one in N) or a list such as \"([0]*1+[1]*3)*2\"" },
    { "--expert-model-parallel-size", F_INT, O(expert_model_parallel_size), "1" },
    { "--use-distributed-optimizer", F_TRUE, O(use_distributed_optimizer), "ZeRO-1 over DP" },
    { "--overlap-grad-reduce", F_TRUE, O(overlap_grad_reduce),
      "reduce gradient buckets during the backward" },
    { "--overlap-param-gather", F_TRUE, O(overlap_param_gather),
      "all-gather the updated param buckets during the next forward" },
    { "--ddp-bucket-size", F_I64, O(ddp_bucket_size), "elements per gradient bucket" },
    { "--grad-reduce-in-bf16", F_TRUE, O(grad_reduce_in_bf16),
      "reduce gradients over data parallel in bf16 (they accumulate in fp32)" },
    { "--distributed-timeout-minutes", F_DBL, O(distributed_timeout_minutes), "10" },
    { "--deterministic-mode", F_TRUE, O(deterministic_mode), "bitwise-reproducible kernels" },
    { "--recompute-activations", F_TRUE, O(recompute_activations),
      "= --recompute-granularity selective" },
    { "--recompute-granularity", F_STR, O(recompute_granularity), "full | selective" },
    { "--recompute-method", F_STR, O(recompute_method), "uniform | block (full only)" },
    { "--recompute-num-layers", F_INT, O(recompute_num_layers),
      "layers per recomputed group (uniform) or recomputed layers (block)" },
    { "--device", F_STR, O(device), "auto | cpu | cuda (not a Megatron flag)" },
    { "--logits-chunks", F_INT, O(logits_chunks),
      "the output layer and cross-entropy on N slices of the micro-batch's tokens: one slice's "
      "logits in memory at a time (not a Megatron flag; default 1)" },
};
#undef O
#define NFLAGS ((int)(sizeof flags / sizeof *flags))

static void set_str(char **dst, const char *v) {
    free(*dst);
    *dst = v ? strdup(v) : NULL;
}

void mt_train_args_init(mt_train_args *a) {
    memset(a, 0, sizeof *a);
    a->make_vocab_size_divisible_by = 128;
    set_str(&a->normalization, "LayerNorm");
    set_str(&a->position_embedding_type, "learned_absolute");
    a->norm_epsilon = 1e-5;
    a->rotary_base = 10000;
    a->init_method_std = 0.02;
    a->lr = NAN;
    a->lr_warmup_fraction = NAN;
    set_str(&a->lr_decay_style, "linear");
    set_str(&a->lr_wsd_decay_style, "exponential");
    set_str(&a->weight_decay_incr_style, "constant");
    set_str(&a->optimizer, "adam");
    a->weight_decay = 0.01;
    a->start_weight_decay = NAN;
    a->end_weight_decay = NAN;
    a->clip_grad = 1.0;
    a->adam_beta1 = 0.9;
    a->adam_beta2 = 0.999;
    a->adam_eps = 1e-8;
    a->sgd_momentum = 0.9;
    a->seed = 1234;
    a->initial_loss_scale = 4294967296.0;
    a->min_loss_scale = 1;
    a->loss_scale_window = 1000;
    a->hysteresis = 2;
    set_str(&a->split, "969, 30, 1");
    set_str(&a->tokenizer_type, "GPT2BPETokenizer");
    a->num_workers = 2;
    a->eval_iters = 100;
    a->log_interval = 100;
    a->tensor_model_parallel_size = 1;
    a->pipeline_model_parallel_size = 1;
    a->context_parallel_size = 1;
    a->moe_router_topk = 2;
    a->expert_model_parallel_size = 1;
    set_str(&a->moe_router_load_balancing_type, "aux_loss");
    a->moe_router_bias_update_rate = 1e-3;
    a->kv_lora_rank = 32;
    a->qk_head_dim = 128;
    a->qk_pos_emb_head_dim = 64;
    a->v_head_dim = 128;
    set_str(&a->moe_router_score_function, "softmax");
    set_str(&a->moe_token_dispatcher_type, "allgather");
    set_str(&a->cp_comm_type, "p2p");
    set_str(&a->moe_token_drop_policy, "probs");
    a->distributed_timeout_minutes = 10;
    set_str(&a->device, "auto");
    a->rotary_percent = 1.0;
    a->rope_scaling_factor = 8.0;
    a->rotary_scaling_factor = 1.0;
    a->mscale = 1.0;
    a->original_max_position_embeddings = 4096;
    a->beta_fast = 32.0;
    a->beta_slow = 1.0;
    a->logits_chunks = 1;
    a->attention_dropout = 0.1;
    a->hidden_dropout = 0.1;
    a->mtp_loss_scaling_factor = 0.1;
}

static void free_list(char ***list, int *n) {
    for (int i = 0; i < *n; i++)
        free((*list)[i]);
    free(*list);
    *list = NULL;
    *n = 0;
}

/* Flags that take a list of values ([w1] p1 [w2 p2 ...]), as nargs='*' in Megatron. */
static const char *const list_flags[5] = { "--data-path", "--train-data-path", "--valid-data-path",
                                           "--test-data-path", "--recompute-modules" };

void mt_train_args_free(mt_train_args *a) {
    for (int i = 0; i < NFLAGS; i++)
        if (flags[i].type == F_STR) set_str((char **)((char *)a + flags[i].off), NULL);
    free_list(&a->data_path, &a->n_data_path);
    for (int k = 0; k < 3; k++)
        free_list(&a->split_path[k], &a->n_split_path[k]);
    free_list(&a->recompute_modules, &a->n_recompute_modules);
}

void mt_train_usage(const char *prog) {
    printf("usage: %s [flags]   (Megatron-LM's pretrain_gpt.py flags)\n", prog);
    printf("  %-40s %s\n", "--data-path [w1] p1 [w2 p2 ...]", "dataset prefixes with weights");
    printf("  %-40s %s\n", "--{train,valid,test}-data-path [w1] p1 ...",
           "a blend per split (instead of --data-path and --split)");
    printf("  %-40s %s\n", "--recompute-modules m1 [m2 ...]",
           "selective: core_attn (always: flash attention keeps no scores), layernorm (the two "
           "norms' outputs), mlp_act (the MLP activation; Megatron's moe_act for dense MLPs)");
    for (int i = 0; i < NFLAGS; i++)
        printf("  %-40s %s\n", flags[i].name, flags[i].help);
}

#define BAD(...) MT_ERROR(MT_ERR_INVALID_ARG, __VA_ARGS__)

static mt_status parse_value(const flag *f, const char *v, mt_train_args *a) {
    char *end;
    void *p = (char *)a + f->off;
    errno = 0;
    switch (f->type) {
    case F_INT:
    case F_I64: {
        long long x = strtoll(v, &end, 10);
        if (*v == '\0' || *end != '\0' || errno)
            return BAD("argument %s: invalid int value: '%s'", f->name, v);
        if (f->type == F_INT)
            *(int *)p = (int)x;
        else
            *(int64_t *)p = x;
        return MT_OK;
    }
    case F_DBL: {
        double x = strtod(v, &end);
        if (*v == '\0' || *end != '\0' || errno)
            return BAD("argument %s: invalid float value: '%s'", f->name, v);
        *(double *)p = x;
        return MT_OK;
    }
    case F_STR:
        set_str((char **)p, v);
        return MT_OK;
    default:
        return MT_OK;
    }
}

static int is_number(const char *s) {
    char *end;
    strtod(s, &end);
    return *s && *end == '\0';
}

static mt_status validate(mt_train_args *a);

/* The model's shape, as load_args_from_checkpoint sets it (force=True: over the flags given). */
static const char *const model_args[] = { "num_layers",
                                          "hidden_size",
                                          "ffn_hidden_size",
                                          "num_attention_heads",
                                          "group_query_attention",
                                          "num_query_groups",
                                          "kv_channels",
                                          "seq_length",
                                          "max_position_embeddings",
                                          "position_embedding_type",
                                          "no_position_embedding",
                                          "rotary_base",
                                          "rotary_interleaved",
                                          "swiglu",
                                          "qk_layernorm",
                                          "untie_embeddings_and_output_weights",
                                          "disable_bias_linear",
                                          "add_qkv_bias",
                                          "normalization",
                                          "norm_epsilon",
                                          "make_vocab_size_divisible_by",
                                          "vocab_size",
                                          "tokenizer_type",
                                          "num_experts",
                                          "moe_router_topk",
                                          "moe_ffn_hidden_size",
                                          "moe_router_pre_softmax",
                                          "moe_router_topk_scaling_factor",
                                          "moe_router_num_groups",
                                          "moe_router_group_topk",
                                          "moe_shared_expert_intermediate_size",
                                          "moe_shared_expert_gate",
                                          "moe_layer_freq",
                                          "moe_router_score_function",
                                          "moe_router_enable_expert_bias",
                                          "moe_router_load_balancing_type",
                                          "multi_latent_attention",
                                          "q_lora_rank",
                                          "kv_lora_rank",
                                          "qk_head_dim",
                                          "qk_pos_emb_head_dim",
                                          "v_head_dim",
                                          "rope_type",
                                          "rotary_percent",
                                          "window_size",
                                          "window_attn_skip_freq",
                                          "use_rope_scaling",
                                          "rope_scaling_factor",
                                          "rotary_seq_len_interpolation_factor",
                                          "rotary_scaling_factor",
                                          "mscale",
                                          "mscale_all_dim",
                                          "original_max_position_embeddings",
                                          "beta_fast",
                                          "beta_slow",
                                          "mtp_num_layers" };
#define N_MODEL_ARGS ((int)(sizeof model_args / sizeof *model_args))

/* The flag named by the first len characters of name (NULL: none). */
static const flag *find_flag(const char *name, size_t len) {
    for (int k = 0; k < NFLAGS; k++)
        if (strlen(flags[k].name) == len && strncmp(flags[k].name, name, len) == 0)
            return &flags[k];
    return NULL;
}

static const flag *flag_of_arg(const char *arg) { /* num_layers -> --num-layers */
    char name[80] = "--";
    for (size_t i = 0; arg[i] && i + 3 < sizeof name; i++)
        name[i + 2] = arg[i] == '_' ? '-' : arg[i];
    return find_flag(name, strlen(name));
}

mt_status train_args_model_json(const mt_train_args *a, json_t *obj) {
    for (int i = 0; i < N_MODEL_ARGS; i++) {
        const flag *f = flag_of_arg(model_args[i]);
        MT_ASSERT(f);
        const void *p = (const char *)a + f->off;
        json_t *v = f->type == F_TRUE   ? json_boolean(*(const int *)p)
                    : f->type == F_INT  ? json_integer(*(const int *)p)
                    : f->type == F_I64  ? json_integer(*(const int64_t *)p)
                    : f->type == F_DBL  ? json_real(*(const double *)p)
                    : *(char *const *)p ? json_string(*(char *const *)p)
                                        : json_null();
        MT_REQUIRE(v && !json_object_set_new(obj, model_args[i], v), MT_ERR_OOM, "args JSON");
    }
    return MT_OK;
}

/* --use-checkpoint-args: the model's shape from the args saved with the --load checkpoint (none
 * there: the flags given, as Megatron does). */
static mt_status args_from_checkpoint(mt_train_args *a) {
    if (!a->use_checkpoint_args) return MT_OK;
    if (!a->load) return BAD("--use-checkpoint-args requires --load argument");
    int64_t it;
    if (mt_ckpt_latest(a->load, &it) != MT_OK) {
        mt_error_clear();
        printf("Checkpoint not found to provide arguments, using provided arguments.\n");
        return MT_OK;
    }
    mt_ckpt *c;
    MT_TRY(mt_ckpt_open(a->load, it, 0, &c));
    const char *saved = mt_ckpt_args(c);
    json_t *j = saved ? json_loads(saved, 0, NULL) : NULL;
    mt_status st = MT_OK;
    for (int i = 0; i < N_MODEL_ARGS && st == MT_OK && j; i++) {
        json_t *v = json_object_get(j, model_args[i]);
        const flag *f = flag_of_arg(model_args[i]);
        if (!v || json_is_null(v)) {
            printf("Checkpoint did not provide arguments %s\n", model_args[i]);
            continue;
        }
        char buf[64];
        const char *str = buf;
        if (f->type == F_TRUE)
            *(int *)((char *)a + f->off) = json_is_true(v);
        else if (json_is_string(v))
            str = json_string_value(v);
        else if (json_is_integer(v))
            snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        else
            snprintf(buf, sizeof buf, "%.17g", json_number_value(v));
        if (f->type != F_TRUE) st = parse_value(f, str, a);
    }
    if (!j && st == MT_OK)
        st = MT_ERROR(MT_ERR_FORMAT,
                      "--use-checkpoint-args: the checkpoint of iteration %lld in %s "
                      "has no readable args",
                      (long long)it, a->load);
    json_decref(j);
    mt_ckpt_close(c);
    return st;
}

mt_status mt_train_args_parse(mt_train_args *a, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int lf = -1;
        for (int k = 0; k < 5; k++)
            if (strcmp(arg, list_flags[k]) == 0) lf = k;
        if (lf >= 0) {
            char ***list = lf == 4 ? &a->recompute_modules
                           : lf    ? &a->split_path[lf - 1]
                                   : &a->data_path;
            int *n = lf == 4 ? &a->n_recompute_modules
                     : lf    ? &a->n_split_path[lf - 1]
                             : &a->n_data_path;
            free_list(list, n);
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                *list = realloc(*list, sizeof(char *) * (size_t)(*n + 1));
                (*list)[(*n)++] = strdup(argv[++i]);
            }
            if (*n == 0) return BAD("argument %s: expected at least one argument", arg);
            continue;
        }
        if (strcmp(arg, "--rampup-batch-size") == 0) { /* nargs='*': the count checked later */
            a->n_rampup = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                const char *v = argv[++i];
                char *e;
                long long x = strtoll(v, &e, 10);
                if (e == v || *e) return BAD("invalid literal for int() with base 10: '%s'", v);
                if (a->n_rampup < 3) a->rampup_batch_size[a->n_rampup] = x;
                a->n_rampup++;
            }
            if (a->n_rampup == 0) a->n_rampup = -1; /* given without values */
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const flag *f = find_flag(arg, len);
        if (!f) return BAD("unrecognized arguments: %s", arg);
        if (f->type == F_NO_VAL) return MT_ERROR(MT_ERR_UNSUPPORTED, "%s", f->help);
        if (f->type == F_TRUE) {
            if (eq) return BAD("argument %s: ignored explicit argument '%s'", f->name, eq + 1);
            *(int *)((char *)a + f->off) = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v || (!eq && strncmp(v, "--", 2) == 0 && !is_number(v)))
            return BAD("argument %s: expected one argument", f->name);
        MT_TRY(parse_value(f, v, a));
    }
    MT_TRY(args_from_checkpoint(a));
    return validate(a);
}

/* The mixture-of-experts flags (megatron/training/arguments.py's messages where it has them). */
static mt_status validate_moe(const mt_train_args *a) {
    const int ep = a->expert_model_parallel_size;
    if (ep < 1) return BAD("--expert-model-parallel-size must be positive, got %d", ep);
    if (a->expert_tensor_parallel_size &&
        a->expert_tensor_parallel_size != a->tensor_model_parallel_size)
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--expert-tensor-parallel-size %d: only the tensor-parallel size (%d) is "
                        "supported yet (each rank holds its share of every local expert)",
                        a->expert_tensor_parallel_size, a->tensor_model_parallel_size);
    if (a->num_experts < 0) return BAD("--num-experts must be positive, got %d", a->num_experts);
    if (ep > 1 && !a->num_experts)
        return BAD("num_experts must be non None to use expert model parallelism");
    if (!a->num_experts) return MT_OK;
    if (a->num_experts % ep != 0)
        return BAD("Number of experts should be a multiple of expert model parallel_size.");
    if (a->moe_router_topk < 1 || a->moe_router_topk > a->num_experts)
        return BAD("--moe-router-topk (%d) must be in [1, --num-experts (%d)]", a->moe_router_topk,
                   a->num_experts);
    if (a->moe_ffn_hidden_size < 0)
        return BAD("--moe-ffn-hidden-size must be positive, got %d", a->moe_ffn_hidden_size);
    if (!(a->moe_aux_loss_coeff >= 0) || !(a->moe_z_loss_coeff >= 0))
        return BAD("--moe-aux-loss-coeff (%g) and --moe-z-loss-coeff (%g) must not be negative",
                   a->moe_aux_loss_coeff, a->moe_z_loss_coeff);
    if (strcmp(a->moe_router_load_balancing_type, "aux_loss") != 0 &&
        strcmp(a->moe_router_load_balancing_type, "seq_aux_loss") != 0 &&
        strcmp(a->moe_router_load_balancing_type, "none") != 0)
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--moe-router-load-balancing-type %s is not supported yet (aux_loss, "
                        "seq_aux_loss or none)",
                        a->moe_router_load_balancing_type);
    if (a->moe_router_dtype && strcmp(a->moe_router_dtype, "fp32") != 0) {
        if (strcmp(a->moe_router_dtype, "fp64") == 0)
            return MT_ERROR(MT_ERR_UNSUPPORTED,
                            "--moe-router-dtype fp64 is not supported yet (fp32: the router's "
                            "logits are fp32 GEMM outputs)");
        return BAD("argument --moe-router-dtype: invalid choice: '%s' (choose from 'fp32', "
                   "'fp64')",
                   a->moe_router_dtype);
    }
    if (strcmp(a->moe_router_score_function, "sqrtsoftplus") == 0)
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--moe-router-score-function sqrtsoftplus is not supported yet (softmax "
                        "or sigmoid)");
    if (strcmp(a->moe_router_score_function, "softmax") != 0 &&
        strcmp(a->moe_router_score_function, "sigmoid") != 0)
        return BAD("argument --moe-router-score-function: invalid choice: '%s' (choose from "
                   "'softmax', 'sigmoid', 'sqrtsoftplus')",
                   a->moe_router_score_function);
    if (strcmp(a->moe_token_dispatcher_type, "allgather") != 0 &&
        strcmp(a->moe_token_dispatcher_type, "alltoall") != 0)
        return BAD("argument --moe-token-dispatcher-type: invalid choice: '%s' (choose from "
                   "'allgather', 'alltoall', 'flex')",
                   a->moe_token_dispatcher_type);
    if (strcmp(a->moe_token_drop_policy, "probs") != 0 &&
        strcmp(a->moe_token_drop_policy, "position") != 0)
        return BAD("argument --moe-token-drop-policy: invalid choice: '%s' (choose from 'probs', "
                   "'position')",
                   a->moe_token_drop_policy);
    if (!(a->moe_router_topk_scaling_factor >= 0))
        return BAD("--moe-router-topk-scaling-factor must be positive, got %g",
                   a->moe_router_topk_scaling_factor);
    if (!(a->moe_expert_capacity_factor >= 0))
        return BAD("--moe-expert-capacity-factor must not be negative, got %g",
                   a->moe_expert_capacity_factor);
    if (a->moe_pad_expert_input_to_capacity && !(a->moe_expert_capacity_factor > 0))
        return BAD("moe_expert_capacity_factor must be set to use "
                   "moe_pad_expert_input_to_capacity");
    if (a->moe_expert_capacity_factor > 0 && a->sequence_parallel &&
        a->tensor_model_parallel_size > 1)
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--moe-expert-capacity-factor with --sequence-parallel is not supported "
                        "yet");
    return MT_OK;
}

/* Multi-latent attention's flags, and the rotary scaling: Megatron's MLA takes YaRN rotary
 * embeddings unless --rope-type rope (MLATransformerConfig.rope_type), other attention YaRN with
 * --position-embedding-type yarn; YaRN's flags are for those only, one scaling at a time. */
static mt_status validate_mla(const mt_train_args *a) {
    const char *rt = a->rope_type;
    const int mla = a->multi_latent_attention;
    if (rt && strcmp(rt, "rope") != 0 && strcmp(rt, "yarn") != 0)
        return BAD("argument --rope-type: invalid choice: '%s' (choose from 'rope', 'yarn')", rt);
    if (rt && strcmp(rt, "yarn") == 0 && !mla)
        return BAD("--rope-type yarn is multi-latent attention's: other attention takes "
                   "--position-embedding-type yarn");
    const int pos_yarn = strcmp(a->position_embedding_type, "yarn") == 0;
    if (mla && pos_yarn)
        return BAD("--multi-latent-attention takes YaRN by --rope-type yarn (its default), not "
                   "--position-embedding-type yarn");
    const int yarn = mla ? !rt || strcmp(rt, "yarn") == 0 : pos_yarn;
    if (!yarn && (a->rotary_scaling_factor != 1.0 || a->mscale != 1.0 || a->mscale_all_dim != 0.0 ||
                  a->original_max_position_embeddings != 4096 || a->beta_fast != 32.0 ||
                  a->beta_slow != 1.0))
        return BAD("--rotary-scaling-factor, --mscale, --mscale-all-dim, "
                   "--original-max-position-embeddings, --beta-fast and --beta-slow are YaRN's: "
                   "--multi-latent-attention with --rope-type yarn (its default), or "
                   "--position-embedding-type yarn");
    if (yarn && (!(a->rotary_scaling_factor > 0.0) || a->original_max_position_embeddings <= 0 ||
                 !(a->beta_fast > 0.0) || !(a->beta_slow > 0.0)))
        return BAD("--rotary-scaling-factor (%g), --original-max-position-embeddings (%d), "
                   "--beta-fast (%g) and --beta-slow (%g) must be positive",
                   a->rotary_scaling_factor, a->original_max_position_embeddings, a->beta_fast,
                   a->beta_slow);
    const int rope = strcmp(a->position_embedding_type, "rope") == 0 && !mla;
    if (a->use_rope_scaling && !rope)
        return BAD("--use-rope-scaling (Llama 3.x's) is for --position-embedding-type rope "
                   "without multi-latent attention");
    if (a->use_rope_scaling && !(a->rope_scaling_factor > 0.0))
        return BAD("--rope-scaling-factor must be positive, got %g", a->rope_scaling_factor);
    const double li = a->rotary_seq_len_interpolation_factor;
    if (li != 0.0 && (!rope || a->use_rope_scaling))
        return BAD("--rotary-seq-len-interpolation-factor is for --position-embedding-type rope "
                   "without multi-latent attention or --use-rope-scaling");
    if (li != 0.0 && !(li >= 1.0))
        return BAD("--rotary-seq-len-interpolation-factor must be at least 1, got %g", li);
    if (!mla) return MT_OK;
    if (a->group_query_attention) /* (Megatron's num_floating_point_operations asserts it) */
        return BAD("--multi-latent-attention does not take --group-query-attention");
    if (a->q_lora_rank < 0 || a->kv_lora_rank <= 0 || a->qk_head_dim <= 0 ||
        a->qk_pos_emb_head_dim <= 0 || a->v_head_dim <= 0)
        return BAD("--q-lora-rank (%d) must not be negative; --kv-lora-rank (%d), --qk-head-dim "
                   "(%d), --qk-pos-emb-head-dim (%d) and --v-head-dim (%d) must be positive",
                   a->q_lora_rank, a->kv_lora_rank, a->qk_head_dim, a->qk_pos_emb_head_dim,
                   a->v_head_dim);
    return MT_OK;
}

/* megatron/training/arguments.py and TransformerConfig.__post_init__ */
/* (per_stage: the most layers a pipeline stage has) */
/* The interleaved schedule's chunks a stage (megatron/training/arguments.py's rules and
 * messages). Megatron wants P > 2 without its p2p overlap (P = 2 pairs a rank's two sends to one
 * peer in the wrong order there); mt-pp's batches post the activations first, so P = 2 works. */
static mt_status validate_virtual(mt_train_args *a) {
    const int n = a->num_layers_per_virtual_pipeline_stage;
    const int v = a->num_virtual_stages_per_pipeline_rank, P = a->pipeline_model_parallel_size;
    a->virtual_pipeline_model_parallel_size = 0;
    if (!n && !v) return MT_OK;
    if (n && v)
        return BAD("--num-layers-per-virtual-pipeline-stage and "
                   "--num-virtual-stages-per-pipeline-rank cannot be set at the same time");
    if (n < 0 || v < 0)
        return BAD("--num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-pipeline-"
                   "rank must be positive, got %d",
                   n ? n : v);
    if (P <= 1)
        return BAD("When interleaved schedule is used, pipeline-model-parallel size should be "
                   "greater than 1");
    const int uneven = a->decoder_first_pipeline_num_layers || a->decoder_last_pipeline_num_layers;
    if (n && uneven)
        return BAD("please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
                   "parallel degree when enable uneven pipeline parallelism");
    if (n) {
        if (a->num_layers % P != 0)
            return BAD("number of layers of the model must be divisible pipeline model parallel "
                       "size");
        if (a->num_layers / P % n != 0)
            return BAD("number of layers per pipeline stage must be divisible number of layers "
                       "per virtual pipeline stage");
        a->virtual_pipeline_model_parallel_size = a->num_layers / P / n;
    } else { /* (the model's split checks the layers, below) */
        a->virtual_pipeline_model_parallel_size = v;
    }
    return MT_OK;
}

static mt_status validate_recompute(mt_train_args *a, int per_stage) {
    if (a->recompute_activations) set_str(&a->recompute_granularity, "selective");
    const char *g = a->recompute_granularity, *m = a->recompute_method;
    if (g && strcmp(g, "full") != 0 && strcmp(g, "selective") != 0)
        return BAD("argument --recompute-granularity: invalid choice: '%s' (choose from 'full', "
                   "'selective')",
                   g);
    if (m && strcmp(m, "uniform") != 0 && strcmp(m, "block") != 0)
        return BAD("argument --recompute-method: invalid choice: '%s' (choose from 'uniform', "
                   "'block')",
                   m);
    for (int i = 0; i < a->n_recompute_modules; i++) {
        const char *x = a->recompute_modules[i];
        static const char *const megatron[] = { "moe_act", "mla_up_proj", "mlp", "moe",
                                                "shared_experts" };
        if (strcmp(x, "moe_act") == 0 && a->num_experts > 0) continue; /* (the experts' mlp_act) */
        if (strcmp(x, "mla_up_proj") == 0 && a->multi_latent_attention) continue;
        for (size_t k = 0; k < sizeof megatron / sizeof *megatron; k++)
            if (strcmp(x, megatron[k]) == 0)
                return BAD("--recompute-modules %s is not supported yet (supported: core_attn, "
                           "layernorm, mlp_act; moe_act with --num-experts, mla_up_proj with "
                           "--multi-latent-attention)",
                           x);
        if (strcmp(x, "core_attn") != 0 && strcmp(x, "layernorm") != 0 && strcmp(x, "mlp_act") != 0)
            return BAD("Invalid choice for recompute_modules: %s (choose from core_attn, "
                       "layernorm, mlp_act)",
                       x);
    }
    if (a->n_recompute_modules && !(g && strcmp(g, "selective") == 0))
        return BAD("--recompute-modules needs --recompute-granularity selective");
    if (!g) return MT_OK; /* Megatron ignores --recompute-method/-num-layers without it */
    if (strcmp(g, "selective") == 0) {
        if (m)
            return BAD("recompute method is not yet supported for selective recomputing "
                       "granularity");
        if (a->recompute_num_layers)
            return BAD("When using recompute_granularity: selective recompute_num_layers must be "
                       "None.");
        return MT_OK;
    }
    if (!m)
        return BAD("Using recompute_granularity: full so recompute_method must be \"block\" or "
                   "\"uniform\"");
    if (a->recompute_num_layers < 1 || a->recompute_num_layers > per_stage)
        return BAD("When using recompute_granularity: full recompute_num_layers must be between 1 "
                   "and num_layers_per_pipeline_rank: %d",
                   per_stage);
    return MT_OK;
}

/* Appends the whitespace-separated words of `text` to a list. */
static void add_words(char ***list, int *n, const char *text) {
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        size_t len = strcspn(p, " \t\n\r");
        if (!len) break;
        *list = realloc(*list, sizeof(char *) * (size_t)(*n + 1));
        (*list)[(*n)++] = strndup(p, len);
        p += len;
    }
}

/* megatron's get_blend_and_blend_per_split for --data-args-path and --per-split-data-args-path. */
static mt_status read_data_args(mt_train_args *a) {
    if (a->data_args_path) {
        if (a->n_data_path) return BAD("--data-path and --data-args-path are mutually exclusive");
        FILE *f = fopen(a->data_args_path, "r");
        if (!f)
            return BAD("cannot read --data-args-path %s: %s", a->data_args_path, strerror(errno));
        char buf[1 << 16];
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        int big = !feof(f);
        fclose(f);
        if (big) return BAD("--data-args-path %s is larger than 64 KiB", a->data_args_path);
        buf[got] = '\0';
        add_words(&a->data_path, &a->n_data_path, buf);
        if (!a->n_data_path) return BAD("--data-args-path %s is empty", a->data_args_path);
    }
    if (!a->per_split_data_args_path) return MT_OK;
    if (a->n_split_path[0] + a->n_split_path[1] + a->n_split_path[2])
        return BAD("--per-split-data-args-path and --train-data-path/--valid-data-path/"
                   "--test-data-path are mutually exclusive");
    json_error_t err;
    json_t *root = json_load_file(a->per_split_data_args_path, 0, &err);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return BAD("--per-split-data-args-path %s: not a JSON object (%s, line %d)",
                   a->per_split_data_args_path, root ? "wrong type" : err.text, err.line);
    }
    static const char *const keys[3] = { "train", "valid", "test" };
    mt_status st = MT_OK;
    for (int k = 0; k < 3 && st == MT_OK; k++) {
        json_t *v = json_object_get(root, keys[k]);
        if (!v || json_is_null(v)) continue;
        if (json_is_string(v)) {
            add_words(&a->split_path[k], &a->n_split_path[k], json_string_value(v));
        } else if (json_is_array(v)) {
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                if (!json_is_string(e)) {
                    st = BAD("--per-split-data-args-path %s: \"%s\"[%zu] is not a string",
                             a->per_split_data_args_path, keys[k], i);
                    break;
                }
                add_words(&a->split_path[k], &a->n_split_path[k], json_string_value(e));
            }
        } else {
            st = BAD("--per-split-data-args-path %s: \"%s\" must be a list or a string",
                     a->per_split_data_args_path, keys[k]);
        }
    }
    json_decref(root);
    return st;
}

/* Whether v is one of `ok` (NULL-terminated). */
static int one_of(const char *v, const char *const *ok) {
    for (int i = 0; ok[i]; i++)
        if (!strcmp(v, ok[i])) return 1;
    return 0;
}

/* argparse's choices: NULL (not given) or one of `ok` (NULL-terminated). */
static mt_status choice(const char *flag, const char *v, const char *const *ok) {
    if (!v || one_of(v, ok)) return MT_OK;
    char list[160] = "";
    for (int i = 0; ok[i]; i++) {
        size_t k = strlen(list);
        snprintf(list + k, sizeof list - k, "%s'%s'", i ? ", " : "", ok[i]);
    }
    return BAD("argument %s: invalid choice: '%s' (choose from %s)", flag, v, list);
}

/* argparse's choices=[0, 1, 2] */
static mt_status level_choice(const char *flag, int v) {
    if (v >= 0 && v <= 2) return MT_OK;
    return BAD("argument %s: invalid choice: %d (choose from 0, 1, 2)", flag, v);
}

static mt_status validate(mt_train_args *a) {
    MT_TRY(read_data_args(a));
    if (a->num_layers <= 0) return BAD("--num-layers is required (a positive integer)");
    if (a->hidden_size <= 0) return BAD("--hidden-size is required (a positive integer)");
    if (a->num_attention_heads <= 0) return BAD("--num-attention-heads is required");
    if (a->seq_length <= 0) return BAD("--seq-length is required");
    if (a->micro_batch_size <= 0) return BAD("--micro-batch-size is required");
    if (a->logits_chunks < 1 || a->logits_chunks > (int64_t)a->micro_batch_size * a->seq_length)
        return BAD("--logits-chunks %d: want 1 to the micro-batch's tokens (%lld)",
                   a->logits_chunks, (long long)a->micro_batch_size * a->seq_length);
    if (a->train_iters > 0) { /* megatron's asserts for iteration-based training */
        if (a->train_samples > 0) return BAD("expected iteration-based training");
        if (a->lr_decay_samples > 0) return BAD("expected iteration-based learning rate decay");
        if (a->lr_warmup_samples > 0) return BAD("expected iteration-based learning rate warmup");
        if (a->n_rampup) return BAD("expected no batch-size rampup for iteration-based training");
    } else if (a->train_samples > 0) {
        if (a->lr_decay_iters > 0) return BAD("expected sample-based learning rate decay");
        if (a->lr_warmup_iters > 0) return BAD("expected sample-based learnig rate warmup");
        if (!isnan(a->lr_warmup_fraction) && a->lr_warmup_samples > 0)
            return BAD("can only specify one of lr-warmup-fraction and lr-warmup-samples");
    } else {
        return BAD("--train-iters or --train-samples is required (a positive integer)");
    }
    /* torch.nn.Dropout's check (p = 1, all zeros there, is refused here: no 1/(1-p)) */
    if (!(a->attention_dropout >= 0.0 && a->attention_dropout < 1.0))
        return BAD("--attention-dropout %g: dropout probability has to be in [0, 1)",
                   a->attention_dropout);
    if (!(a->hidden_dropout >= 0.0 && a->hidden_dropout < 1.0))
        return BAD("--hidden-dropout %g: dropout probability has to be in [0, 1)",
                   a->hidden_dropout);
    if (a->transformer_impl && strcmp(a->transformer_impl, "local") != 0)
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--transformer-impl %s: only 'local' (this project's own kernels)",
                        a->transformer_impl);
    static const char *const backends[] = { "nccl", "gloo", NULL };
    static const char *const attn[] = { "auto", "flash", "fused", "unfused", "local", NULL };
    static const char *const loaders[] = { "single", NULL };
    static const char *const ckpts[] = { "torch",     "torch_dist",   "zarr",
                                         "torch_dcp", "fsdp_dtensor", NULL };
    MT_TRY(choice("--distributed-backend", a->distributed_backend, backends));
    MT_TRY(choice("--attention-backend", a->attention_backend, attn));
    static const char *const other_loaders[] = { "cyclic", "external", NULL };
    if (a->dataloader_type && one_of(a->dataloader_type, other_loaders))
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--dataloader-type %s is not supported: only 'single' (Megatron's "
                        "pretraining sampler, the default)",
                        a->dataloader_type);
    MT_TRY(choice("--dataloader-type", a->dataloader_type, loaders));
    MT_TRY(choice("--ckpt-format", a->ckpt_format, ckpts));
    MT_TRY(level_choice("--empty-unused-memory-level", a->empty_unused_memory_level));
    a->window_left = 0;
    if (a->window_size) { /* Megatron's tuple_type: "L,R", parentheses and spaces allowed */
        const char *w = a->window_size;
        char *e;
        while (*w == ' ' || *w == '(')
            w++;
        const long l = strtol(w, &e, 10);
        int ok = e != w;
        while (*e == ' ')
            e++;
        ok = ok && *e == ',';
        w = e + 1;
        const long r = strtol(w, &e, 10);
        ok = ok && e != w;
        while (*e == ' ' || *e == ')')
            e++;
        if (!ok || *e)
            return BAD("argument --window-size: invalid tuple value: '%s' (want L,R)",
                       a->window_size);
        if (r != 0)
            return MT_ERROR(MT_ERR_UNSUPPORTED,
                            "--window-size %s: only causal windows (R = 0) are supported",
                            a->window_size);
        if (l < -1 || l > 1L << 30)
            return BAD("--window-size %s: L must be -1 (no window) or more", a->window_size);
        a->window_left = l < 0 ? 0 : (int)l;
        if (a->window_left && a->context_parallel_size > 1)
            return MT_ERROR(MT_ERR_UNSUPPORTED,
                            "--window-size with --context-parallel-size is not supported yet");
        if (a->window_left && a->window_attn_skip_freq && a->reset_attention_mask)
            return MT_ERROR(MT_ERR_UNSUPPORTED,
                            "--window-attn-skip-freq with --reset-attention-mask is not supported "
                            "yet (the documents' key starts carry the window for every layer)");
    }
    if (a->mtp_num_layers < 0)
        return BAD("--mtp-num-layers must be positive, got %d", a->mtp_num_layers);
    if (!(a->mtp_loss_scaling_factor >= 0))
        return BAD("--mtp-loss-scaling-factor must not be negative, got %g",
                   a->mtp_loss_scaling_factor);
    if (a->mtp_num_layers &&
        (a->pipeline_model_parallel_size > 1 || a->context_parallel_size > 1) &&
        strcmp(a->position_embedding_type, "learned_absolute") == 0)
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--mtp-num-layers with --pipeline-model-parallel-size or "
                        "--context-parallel-size is not supported yet with learned absolute "
                        "position embeddings");
    if (a->mtp_num_layers && a->mtp_num_layers >= a->seq_length)
        return BAD("--mtp-num-layers %d leaves no target in a sequence of --seq-length %d",
                   a->mtp_num_layers, a->seq_length);
    if (!(a->rotary_percent > 0.0 && a->rotary_percent <= 1.0))
        return BAD("--rotary-percent must be in (0, 1], got %g", a->rotary_percent);
    if (a->rotary_percent != 1.0 && a->multi_latent_attention)
        return BAD("--rotary-percent is not multi-latent attention's (its rotary channels are "
                   "--qk-pos-emb-head-dim)");
    if (a->rotary_percent != 1.0 && !a->use_rotary_position_embeddings &&
        strcmp(a->position_embedding_type, "learned_absolute") == 0)
        return BAD("--rotary-percent needs rotary position embeddings");
    if (a->rotary_percent != 1.0 && a->num_attention_heads > 0) {
        const int kv = a->kv_channels ? a->kv_channels : a->hidden_size / a->num_attention_heads;
        const int rd = (int)(kv * a->rotary_percent);
        if (rd < 2 || rd % 2 != 0)
            return BAD("--rotary-percent %g rotates %d of the %d channels of a head (want an even "
                       "number, at least 2)",
                       a->rotary_percent, rd, kv);
    }
    if (a->n_rampup) { /* megatron-core's RampupBatchsizeNumMicroBatchesCalculator asserts */
        const int64_t *rb = a->rampup_batch_size;
        if (a->n_rampup != 3)
            return BAD("expected the following format: --rampup-batch-size <start batch size> "
                       "<batch size incerement> <ramp-up samples>");
        if (rb[0] <= 0)
            return BAD("start batch size should be positive, got %lld.", (long long)rb[0]);
        if (rb[1] <= 0)
            return BAD("batch size increment should be positive, got %lld.", (long long)rb[1]);
        if (rb[2] < 0)
            return BAD("ramp-up samples should be non-negative, got %lld.", (long long)rb[2]);
    }
    MT_TRY(level_choice("--timing-log-level", a->timing_log_level));
    if (a->use_rotary_position_embeddings) set_str(&a->position_embedding_type, "rope");
    if (a->no_position_embedding && strcmp(a->position_embedding_type, "learned_absolute") == 0)
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--no-position-embedding without rotary embeddings (no positions at all) "
                        "is not supported: add --position-embedding-type rope");
    if (isnan(a->lr)) return BAD("--lr is required");
    if (a->override_opt_param_scheduler && a->use_checkpoint_opt_param_scheduler)
        return BAD("both override and use-checkpoint are set.");
    if (a->bf16 && a->fp16) return BAD("cannot specify both fp16 and bf16");
    /* the asserts of ConstantGradScaler and DynamicGradScaler (megatron/core/optimizer) */
    if (a->loss_scale < 0) return BAD("--loss-scale must be positive, got %g", a->loss_scale);
    if (a->fp16 && !(a->loss_scale > 0)) {
        if (!(a->initial_loss_scale > 0))
            return BAD("--initial-loss-scale must be positive, got %g", a->initial_loss_scale);
        if (!(a->min_loss_scale > 0) || a->min_loss_scale > a->initial_loss_scale)
            return BAD("--min-loss-scale (%g) must be positive and at most --initial-loss-scale "
                       "(%g)",
                       a->min_loss_scale, a->initial_loss_scale);
        if (!(a->loss_scale_window >= 1) || a->loss_scale_window > 2147483647.0)
            return BAD("--loss-scale-window must be positive, got %g", a->loss_scale_window);
        if (a->hysteresis <= 0) return BAD("--hysteresis must be positive, got %d", a->hysteresis);
    }
    if (a->tensor_model_parallel_size < 1)
        return BAD("--tensor-model-parallel-size must be positive, got %d",
                   a->tensor_model_parallel_size);
    if (a->pipeline_model_parallel_size < 1)
        return BAD("--pipeline-model-parallel-size must be positive, got %d",
                   a->pipeline_model_parallel_size);
    MT_TRY(validate_virtual(a));
    int most = 0; /* the most layers a pipeline stage (or chunk) has */
    {             /* the model's split rule (megatron/training/arguments.py's messages) */
        mt_model_config c = MT_MODEL_CONFIG_INIT;
        c.num_layers = a->num_layers;
        c.virtual_pipeline_model_parallel_size = a->virtual_pipeline_model_parallel_size;
        c.pipeline_model_parallel_size =
            a->pipeline_model_parallel_size * (a->virtual_pipeline_model_parallel_size > 1
                                                   ? a->virtual_pipeline_model_parallel_size
                                                   : 1);
        c.num_layers_in_first_pipeline_stage = a->decoder_first_pipeline_num_layers;
        c.num_layers_in_last_pipeline_stage = a->decoder_last_pipeline_num_layers;
        for (int r = 0; r < c.pipeline_model_parallel_size; r++) {
            int first, n;
            MT_TRY(mt_model_stage_layers(&c, r, &first, &n));
            most = n > most ? n : most;
        }
    }
    const int cp = a->context_parallel_size;
    if (cp < 1) return BAD("--context-parallel-size must be positive, got %d", cp);
    if (strcmp(a->cp_comm_type, "p2p") != 0 && strcmp(a->cp_comm_type, "a2a") != 0 &&
        strcmp(a->cp_comm_type, "allgather") != 0 && strcmp(a->cp_comm_type, "a2a+p2p") != 0)
        return BAD("argument --cp-comm-type: invalid choice: '%s' (choose from 'p2p', 'a2a', "
                   "'allgather', 'a2a+p2p')",
                   a->cp_comm_type);
    if (cp > 1 && a->seq_length % (2 * cp) != 0)
        return BAD("seq-length should be a multiple of 2 * context-parallel-size if "
                   "context-parallel-size != 1 (--seq-length %d, --context-parallel-size %d)",
                   a->seq_length, cp);
    if (cp > 1 && (a->reset_attention_mask || a->attention_dropout > 0))
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--context-parallel-size %d with --reset-attention-mask or "
                        "--attention-dropout is not supported yet",
                        cp);
    MT_TRY(validate_moe(a));
    MT_TRY(validate_mla(a));
    if (a->tensor_model_parallel_size == 1) a->sequence_parallel = 0; /* as Megatron */
    if (a->sequence_parallel) {
        if (a->seq_length % a->tensor_model_parallel_size != 0)
            return BAD("--seq-length (%d) must be a multiple of --tensor-model-parallel-size (%d) "
                       "with --sequence-parallel",
                       a->seq_length, a->tensor_model_parallel_size);
    }
    if (a->overlap_param_gather) { /* megatron/training/arguments.py */
        if (!a->use_distributed_optimizer)
            return BAD("--overlap-param-gather only supported with distributed optimizer");
        if (!a->overlap_grad_reduce)
            return BAD("Must use --overlap-param-gather with --overlap-grad-reduce");
    }
    MT_TRY(validate_recompute(a, most));
    if (strcmp(a->normalization, "LayerNorm") != 0 && strcmp(a->normalization, "RMSNorm") != 0)
        return BAD("argument --normalization: invalid choice: '%s' (choose from 'LayerNorm', "
                   "'RMSNorm')",
                   a->normalization);
    if (strcmp(a->position_embedding_type, "learned_absolute") != 0 &&
        strcmp(a->position_embedding_type, "rope") != 0 &&
        strcmp(a->position_embedding_type, "yarn") != 0)
        return BAD("argument --position-embedding-type: invalid choice: '%s' (choose from "
                   "'learned_absolute', 'rope', 'yarn')",
                   a->position_embedding_type);
    if (a->group_query_attention && a->num_query_groups <= 0)
        return BAD("--group-query-attention needs --num-query-groups");
    if (!a->group_query_attention) a->num_query_groups = 0;
    if (!a->kv_channels && a->hidden_size % a->num_attention_heads != 0)
        return BAD("hidden size (%d) must be divisible by the number of attention heads (%d)",
                   a->hidden_size, a->num_attention_heads);
    if (a->ffn_hidden_size < 0)
        return BAD("--ffn-hidden-size must be positive, got %d", a->ffn_hidden_size);
    { /* megatron.core's divide() over the tensor-parallel ranks (padded vocab: a multiple) */
        const int tp = a->tensor_model_parallel_size;
        const int groups = a->num_query_groups ? a->num_query_groups : a->num_attention_heads;
        const int ffn = a->ffn_hidden_size ? a->ffn_hidden_size : 4 * a->hidden_size;
        if (a->num_attention_heads % tp != 0)
            return BAD("--num-attention-heads (%d) is not divisible by "
                       "--tensor-model-parallel-size (%d)",
                       a->num_attention_heads, tp);
        if (groups % tp != 0)
            return BAD("--num-query-groups (%d) is not divisible by --tensor-model-parallel-size "
                       "(%d)",
                       groups, tp);
        if (ffn % tp != 0)
            return BAD("--ffn-hidden-size (%d) is not divisible by --tensor-model-parallel-size "
                       "(%d)",
                       ffn, tp);
    }
    if (a->kv_channels < 0) return BAD("--kv-channels must be positive, got %d", a->kv_channels);
    /* torch.optim's checks (Megatron's optimizers pass these through unchecked) */
    if (!(a->adam_beta1 >= 0.0 && a->adam_beta1 < 1.0))
        return BAD("--adam-beta1: Invalid beta parameter at index 0: %g", a->adam_beta1);
    if (!(a->adam_beta2 >= 0.0 && a->adam_beta2 < 1.0))
        return BAD("--adam-beta2: Invalid beta parameter at index 1: %g", a->adam_beta2);
    if (!(a->adam_eps >= 0.0)) return BAD("--adam-eps: Invalid epsilon value: %g", a->adam_eps);
    if (!(a->sgd_momentum >= 0.0))
        return BAD("--sgd-momentum: Invalid momentum value: %g", a->sgd_momentum);
    if (!a->max_position_embeddings) a->max_position_embeddings = a->seq_length;
    if (strcmp(a->position_embedding_type, "learned_absolute") == 0 &&
        a->max_position_embeddings < a->seq_length)
        return BAD("max_position_embeddings (%d) must be at least seq_length (%d)",
                   a->max_position_embeddings, a->seq_length);
    if (a->exit_duration_in_mins < 0)
        return BAD("--exit-duration-in-mins must be positive, got %g", a->exit_duration_in_mins);
    if (!isnan(a->lr_warmup_fraction) && a->lr_warmup_iters > 0)
        return BAD("can only specify one of lr-warmup-fraction and lr-warmup-iters");
    if (strcmp(a->optimizer, "adam") != 0 && strcmp(a->optimizer, "sgd") != 0)
        return MT_ERROR(MT_ERR_UNSUPPORTED, "--optimizer %s (choose adam or sgd)", a->optimizer);
    int per_split = a->n_split_path[0] + a->n_split_path[1] + a->n_split_path[2] > 0;
    if (a->n_data_path == 0 && !per_split && !a->mock_data)
        return BAD("no data: give --data-path PREFIX [...], --train-data-path PREFIX [...] or "
                   "--mock-data");
    if (a->n_data_path > 0 && per_split)
        return BAD("--data-path and --train-data-path/--valid-data-path/--test-data-path are "
                   "mutually exclusive");
    if (per_split && a->n_split_path[0] == 0 && !a->mock_data)
        return BAD("--valid-data-path/--test-data-path need --train-data-path");
    for (int k = 0; k < 4; k++) {
        int n = k ? a->n_split_path[k - 1] : a->n_data_path;
        if (n > 1 && n % 2 != 0)
            return BAD("%s with several prefixes needs weight prefix pairs", list_flags[k]);
    }
    static const char *const tokenizers[] = { "GPT2BPETokenizer",          "NullTokenizer",
                                              "HuggingFaceTokenizer",      "Llama2Tokenizer",
                                              "GPTSentencePieceTokenizer", NULL };
    if (!one_of(a->tokenizer_type, tokenizers))
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "--tokenizer-type %s (choose GPT2BPETokenizer, NullTokenizer, "
                        "HuggingFaceTokenizer, Llama2Tokenizer or GPTSentencePieceTokenizer)",
                        a->tokenizer_type);
    if (strcmp(a->tokenizer_type, "GPT2BPETokenizer") != 0 &&
        strcmp(a->tokenizer_type, "NullTokenizer") != 0 && !a->tokenizer_model)
        return BAD("%s needs --tokenizer-model (%s)", a->tokenizer_type,
                   strcmp(a->tokenizer_type, "HuggingFaceTokenizer") == 0
                       ? "a directory with tokenizer.json"
                       : "the SentencePiece .model file");
    if (strcmp(a->tokenizer_type, "NullTokenizer") == 0 && a->vocab_size <= 0)
        return BAD("NullTokenizer needs --vocab-size");
    if (a->global_batch_size < 0 ||
        (a->global_batch_size && a->global_batch_size < a->micro_batch_size))
        return BAD("global batch size (%d) must be at least the micro batch size (%d)",
                   a->global_batch_size, a->micro_batch_size);
    if (a->eval_interval < 0 || a->eval_iters < 0 || a->log_interval <= 0)
        return BAD("--eval-interval, --eval-iters must be >= 0 and --log-interval > 0");
    if (a->save_interval && !a->save) return BAD("--save-interval needs --save");
    if (strcmp(a->device, "auto") != 0 && strcmp(a->device, "cpu") != 0 &&
        strcmp(a->device, "cuda") != 0)
        return BAD("argument --device: invalid choice: '%s' (choose auto, cpu, cuda)", a->device);
    return MT_OK;
}
