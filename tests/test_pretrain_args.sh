#!/usr/bin/env bash
# functional: bad command lines are refused before anything starts, with Megatron-style messages
# and exit status 2 (argparse's), and nothing is written.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
set +e  # the commands below are meant to fail
fail=0
expect() {  # message, then flags appended to the tiny model's
  local want=$1; shift
  "$MT_PRETRAIN" "${tiny_args[@]}" --save "$d/ckpt" "$@" > "$d/out" 2>&1; local rc=$?
  if [ $rc != 2 ] || ! grep -qF -- "$want" "$d/out"; then
    echo "FAIL: $* -> rc $rc, want 2 and '$want':"; cat "$d/out"; fail=1
  else echo "ok: $*: $(tail -1 "$d/out")"; fi
  [ ! -e "$d/ckpt" ] || { echo "FAIL: $* wrote a checkpoint"; fail=1; }
}
expect "unrecognized arguments: --no-such-flag" --no-such-flag
expect "argument --num-layers: invalid int value: 'two'" --num-layers two
expect "argument --lr: expected one argument" --lr
expect "cannot specify both fp16 and bf16" --bf16 --fp16
expect "--min-loss-scale (8) must be positive and at most --initial-loss-scale (4)" --fp16 --initial-loss-scale 4 --min-loss-scale 8
expect "--hysteresis must be positive, got 0" --fp16 --hysteresis 0
expect "argument --hysteresis: invalid int value: '1.5'" --fp16 --hysteresis 1.5
expect "--loss-scale must be positive, got -1" --fp16 --loss-scale -1
expect "can only specify one of lr-warmup-fraction and lr-warmup-iters" --lr-warmup-fraction 0.1
expect "max_position_embeddings (16) must be at least seq_length (32)" --max-position-embeddings 16
expect "argument --normalization: invalid choice: 'BatchNorm'" --normalization BatchNorm
expect "hidden size (64) must be divisible by the number of attention heads (5)" --num-attention-heads 5
expect "--overlap-param-gather only supported with distributed optimizer" --overlap-param-gather --overlap-grad-reduce
expect "Must use --overlap-param-gather with --overlap-grad-reduce" --overlap-param-gather --use-distributed-optimizer
expect "Number of layers should be divisible by the pipeline-model-parallel size (--num-layers 2, --pipeline-model-parallel-size 3)" --pipeline-model-parallel-size 3
expect "seq-length should be a multiple of 2 * context-parallel-size" --context-parallel-size 3
expect "argument --cp-comm-type: invalid choice: 'ring'" --cp-comm-type ring
expect "--expert-tensor-parallel-size 2: only the tensor-parallel size (1) is supported yet" --num-experts 4 --disable-bias-linear --expert-tensor-parallel-size 2
expect "--context-parallel-size 2 with --reset-attention-mask or --attention-dropout is not supported yet" --context-parallel-size 2 --reset-attention-mask
# rotary scaling: for rotary embeddings, one at a time, YaRN's flags with YaRN only
expect "--use-rope-scaling (Llama 3.x's) is for --position-embedding-type rope" --use-rope-scaling
expect "--rope-scaling-factor must be positive, got 0" --position-embedding-type rope --use-rope-scaling --rope-scaling-factor 0
expect "--rotary-seq-len-interpolation-factor is for --position-embedding-type rope" --position-embedding-type rope --use-rope-scaling --rotary-seq-len-interpolation-factor 2
expect "--rotary-seq-len-interpolation-factor must be at least 1, got 0.5" --position-embedding-type rope --rotary-seq-len-interpolation-factor 0.5
expect "--rope-type yarn is multi-latent attention's" --position-embedding-type rope --rope-type yarn
expect "are YaRN's" --position-embedding-type rope --rotary-scaling-factor 4
expect "--rotary-scaling-factor (-1), --original-max-position-embeddings (4096), --beta-fast (32) and --beta-slow (1) must be positive" --position-embedding-type yarn --rotary-scaling-factor -1
expect "argument --position-embedding-type: invalid choice: 'alibi'" --position-embedding-type alibi
# mixture of experts: what the MoE layers do not take yet, and bad routing settings
moe=(--num-experts 4 --disable-bias-linear)
expect "Number of experts should be a multiple of expert model parallel_size." "${moe[@]}" --expert-model-parallel-size 3
expect "num_experts must be non None to use expert model parallelism" --expert-model-parallel-size 2
expect "--moe-router-topk (5) must be in [1, --num-experts (4)]" "${moe[@]}" --moe-router-topk 5
expect "--moe-router-load-balancing-type sinkhorn is not supported yet" "${moe[@]}" --moe-router-load-balancing-type sinkhorn
expect "--moe-router-score-function sqrtsoftplus is not supported yet" "${moe[@]}" --moe-router-score-function sqrtsoftplus
expect "argument --moe-token-dispatcher-type: invalid choice: 'a2a'" "${moe[@]}" --moe-token-dispatcher-type a2a
expect "--moe-aux-loss-coeff (-1) and --moe-z-loss-coeff (0) must not be negative" "${moe[@]}" --moe-aux-loss-coeff -1
expect "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity" "${moe[@]}" --moe-pad-expert-input-to-capacity
expect "argument --moe-token-drop-policy: invalid choice: 'random'" "${moe[@]}" --moe-expert-capacity-factor 1 --moe-token-drop-policy random
expect "--moe-expert-capacity-factor with --sequence-parallel is not supported yet" "${moe[@]}" --moe-expert-capacity-factor 1 --tensor-model-parallel-size 2 --sequence-parallel
expect "number of layers at middle stage: 0 must be divisible by the middle pipeline model parallel size 1" --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 2
expect "an uneven pipeline split (--decoder-first/last-pipeline-num-layers) needs --pipeline-model-parallel-size > 1" --decoder-last-pipeline-num-layers 1
expect "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 1" --pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
expect "--seq-length (32) must be a multiple of --tensor-model-parallel-size (3)" --tensor-model-parallel-size 3 --num-attention-heads 3 --num-query-groups 3 --group-query-attention --hidden-size 63 --ffn-hidden-size 63 --sequence-parallel
expect "--num-attention-heads (4) is not divisible by --tensor-model-parallel-size (3)" --tensor-model-parallel-size 3
expect "--num-query-groups (2) is not divisible by --tensor-model-parallel-size (4)" --tensor-model-parallel-size 4 --group-query-attention --num-query-groups 2
expect "NullTokenizer needs --vocab-size" --vocab-size 0
expect "expected iteration-based training" --train-samples 96
expect "expected sample-based learning rate decay" --train-iters 0 --train-samples 96 --lr-decay-iters 5
expect "--hidden-dropout 1: dropout probability has to be in [0, 1)" --hidden-dropout 1
expect "--transformer-impl transformer_engine: only 'local'" --transformer-impl transformer_engine
expect "--no-position-embedding without rotary embeddings" --no-position-embedding
expect "argument --timing-log-level: invalid choice: 3" --timing-log-level 3
expect "--logits-chunks 0: want 1 to the micro-batch's tokens" --logits-chunks 0
expect "--ffn-hidden-size must be positive, got -5" --ffn-hidden-size -5
expect "--kv-channels must be positive, got -4" --kv-channels -4
expect "--adam-beta1: Invalid beta parameter at index 0: 1.5" --adam-beta1 1.5
expect "--adam-beta2: Invalid beta parameter at index 1: -0.1" --adam-beta2 -0.1
expect "--adam-eps: Invalid epsilon value: -1" --adam-eps -1
expect "--sgd-momentum: Invalid momentum value: -0.5" --optimizer sgd --sgd-momentum -0.5
expect "argument --distributed-backend: invalid choice: 'mpi' (choose from 'nccl', 'gloo')" --distributed-backend mpi
expect "argument --attention-backend: invalid choice: 'cudnn'" --attention-backend cudnn
expect "--dataloader-type cyclic is not supported: only 'single'" --dataloader-type cyclic
expect "argument --ckpt-format: invalid choice: 'pickle'" --ckpt-format pickle
expect "--rotary-percent must be in (0, 1], got 1.5" --position-embedding-type rope --rotary-percent 1.5
expect "--rotary-percent needs rotary position embeddings" --rotary-percent 0.5
expect "--rotary-percent 0.1875 rotates 3 of the 16 channels of a head" --position-embedding-type rope --rotary-percent 0.1875
expect "HuggingFaceTokenizer needs --tokenizer-model" --tokenizer-type HuggingFaceTokenizer
expect "expected no batch-size rampup for iteration-based training" --rampup-batch-size 2 2 16
S=(--train-iters 0 --train-samples 96 --lr-warmup-iters 0) # sample-based, as a ramp needs
expect "expected the following format: --rampup-batch-size <start batch size> <batch size incerement> <ramp-up samples>" "${S[@]}" --rampup-batch-size 2 2
expect "start batch size should be positive, got 0." "${S[@]}" --rampup-batch-size 0 2 16
expect "batch size increment should be positive, got -2." "${S[@]}" --rampup-batch-size 2 -2 16
expect "ramp-up samples should be non-negative, got -1." "${S[@]}" --rampup-batch-size 2 2 -1
expect "invalid literal for int() with base 10: '2.5'" "${S[@]}" --rampup-batch-size 2.5 2 16
# the ramp against the global batch (8) and micro-batch x data-parallel size (2): once the world
# size is known, still before training
for c in "10 2 16|expected global batch size to be greater than or equal to start batch size, got 8 and 10" \
         "2 4 16|expected global batch size interval (6) to be divisible by global batch size increment (4)" \
         "3 5 16|current global batch size (3) is not divisible by micro-batch-size (2) times data parallel size (1)" \
         "8 2 16|nothing to ramp up to global batch size 8"; do
  "$MT_PRETRAIN" "${tiny_args[@]}" "${S[@]}" --save "$d/ckpt" --rampup-batch-size ${c%%|*} > "$d/out" 2>&1; rc=$?
  { [ $rc != 0 ] && grep -qF -- "${c#*|}" "$d/out" && ! grep -qE " iteration +[0-9]+/" "$d/out" && [ ! -e "$d/ckpt" ]; } \
    || { echo "FAIL: --rampup-batch-size ${c%%|*}"; cat "$d/out"; fail=1; }
done
expect "argument --empty-unused-memory-level: invalid choice: 3" --empty-unused-memory-level 3
# the interleaved schedule (megatron/training/arguments.py's messages)
expect "When interleaved schedule is used, pipeline-model-parallel size should be greater than 1" --num-layers-per-virtual-pipeline-stage 1
expect "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank cannot be set at the same time" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --num-virtual-stages-per-pipeline-rank 1
expect "number of layers per pipeline stage must be divisible number of layers per virtual pipeline stage" --num-layers 6 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2
expect "Number of layers should be divisible by the pipeline-model-parallel size times --num-virtual-stages-per-pipeline-rank" --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2
expect "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree when enable uneven pipeline parallelism" --num-layers 4 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 2 --num-layers-per-virtual-pipeline-stage 1
expect "number of layers at first stage: 3must be divisible by virtual pipelineparallel degree 2" --num-layers 4 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3 --num-virtual-stages-per-pipeline-rank 2
"$MT_PRETRAIN" --num-layers 2 > "$d/out" 2>&1; rc=$?
{ [ $rc = 2 ] && grep -q "hidden-size is required" "$d/out"; } || { echo "FAIL: missing required flag"; cat "$d/out"; fail=1; }
# --exit-on-missing-checkpoint: a --load directory without a checkpoint is an error (Megatron's
# message), not a fresh start
"$MT_PRETRAIN" "${tiny_args[@]}" --load "$d/none" --exit-on-missing-checkpoint > "$d/out" 2>&1; rc=$?
{ [ $rc != 0 ] && grep -qF ">> '--exit-on-missing-checkpoint' set ... exiting. <<" "$d/out" \
  && ! grep -qE " iteration +[0-9]+/" "$d/out"; } || { echo "FAIL: --exit-on-missing-checkpoint"; cat "$d/out"; fail=1; }
# an inconsistent batch is found once the world size is known, still before training
"$MT_PRETRAIN" "${tiny_args[@]}" --global-batch-size 7 > "$d/out" 2>&1; rc=$?
{ [ $rc != 0 ] && grep -q "global batch size (7) is not divisible by micro batch size (2) times data parallel size (1)" "$d/out"; } \
  || { echo "FAIL: global batch check"; cat "$d/out"; fail=1; }
# Megatron's implementation switches that are always on here (and its TensorBoard switches and
# backend choices that name what runs here) are accepted, dropout 0 too, and
# sample-based training (--train-samples/--lr-warmup-samples) equals the iteration-based run.
set -e
tiny_run "$d/iters.json" > "$d/iters.log"
samples=()
for ((i = 0; i < ${#tiny_args[@]}; i++)); do  # tiny_args with its iteration flags in samples
  case ${tiny_args[i]} in
    --train-iters) samples+=(--train-samples $((tiny_args[i + 1] * 8))); i=$((i + 1)) ;;
    --lr-warmup-iters) samples+=(--lr-warmup-samples $((tiny_args[i + 1] * 8))); i=$((i + 1)) ;;
    *) samples+=("${tiny_args[i]}") ;;
  esac
done
"$MT_PRETRAIN" "${samples[@]}" --golden-values-out "$d/samples.json" --use-flash-attn \
  --use-mcore-models --transformer-impl local --attention-dropout 0 --hidden-dropout 0.0 \
  --no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-dropout-fusion \
  --no-gradient-accumulation-fusion --attention-softmax-in-fp32 --sequence-parallel \
  --timing-log-level 1 --tensorboard-dir "$d/tb" --log-timers-to-tensorboard \
  --log-validation-ppl-to-tensorboard --log-memory-to-tensorboard --log-world-size-to-tensorboard \
  --log-loss-scale-to-tensorboard --distributed-backend nccl --attention-backend auto \
  --dataloader-type single --ckpt-format torch_dist --rotary-percent 1.0 \
  --cross-entropy-loss-fusion --apply-query-key-layer-scaling --manual-gc \
  --no-async-tensor-model-parallel-allreduce --no-create-attention-mask-in-dataloader \
  --no-persist-layer-norm --empty-unused-memory-level 1 \
  > "$d/samples.log" 2>&1 || { echo "FAIL: sample-based run"; cat "$d/samples.log"; exit 1; }
grep -q "^\[profile\] per iteration" "$d/samples.log" && grep -q "WARNING: --tensorboard-dir" "$d/samples.log" \
  || { echo "FAIL: --timing-log-level 1 gave no profile or --tensorboard-dir no warning"; cat "$d/samples.log"; fail=1; }
if [ "$(losses "$d/iters.json" 1 12)" = "$(losses "$d/samples.json" 1 12)" ] \
   && [ "$(losses "$d/iters.json" 1 12 | wc -l)" = 12 ]; then
  echo "ok: --train-samples 96 --lr-warmup-samples 16 gives the 12 losses of --train-iters 12 --lr-warmup-iters 2"
else
  echo "FAIL: sample-based losses differ"; paste <(losses "$d/iters.json" 1 12) <(losses "$d/samples.json" 1 12); fail=1
fi
exit $fail
