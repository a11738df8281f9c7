#!/usr/bin/env bash
# multirank: context parallelism (--context-parallel-size). Each sequence is cut into 2 cp chunks,
# rank r holding chunks r and 2 cp - 1 - r; each layer's keys and values are all-gathered, and
# their gradients reduce-scattered back. The loss curve of CP 2 and CP 4 (GPT-2: learned
# positions, biases; Llama: RoPE, GQA, SwiGLU), of CP 2 x DP 2 with the distributed optimizer,
# overlapped buckets and full recompute, and with logits chunks and evaluation, equals one rank's
# (relative 1e-5), and so do CP 2 x TP 2 (with and without sequence parallelism) and CP 2 x PP 2
# (Megatron's rank order tp-cp-dp-pp; also interleaved), and MoE's (losses and router losses; with EP, TP); a CP 2
# checkpoint resumes on one rank and on CP 2. With
# "cuda": on 2 GPUs (fp32 1e-4, bf16 1e-2; also 512-token sequences, whose 128-token chunks take
# mt-attention's key-prefix kernels unpadded), else on the CPU over MPI.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
dev=(); tol=1e-5
if [ "${1:-}" = cuda ]; then
  n=$(nvidia-smi -L 2>/dev/null | wc -l)
  [ "$n" -ge 2 ] || { echo "skip: needs 2 GPUs, found $n"; exit 77; }
  dev=(--device cuda); tol=1e-4
fi
[ -n "${MPIEXEC:-}" ] || { echo "skip: no MPI launcher"; exit 77; }
llama=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2)
one() {  # name, then flags
  local n=$1; shift
  tiny_run "$d/$n.json" "${dev[@]}" --metrics-jsonl "$d/$n.jsonl" "$@" > "$d/$n.log" 2>&1 \
    || { echo "FAIL: run $n"; cat "$d/$n.log"; exit 1; }
}
# FLOPs per token of a run's JSONL (TFLOP/s/GPU x ranks / tokens/s) from iteration 2 on
flops() { jq -r --argjson n "$2" 'select(.iteration >= 2 and ."tokens per s" != null) |
  ."TFLOP/s/GPU" * $n * 1e12 / ."tokens per s"' "$1"; }
mr() {  # name ranks reference tolerance, then flags
  local n=$1 np=$2 ref=$3 t=$4; shift 4
  "$MPIEXEC" -n "$np" "$MT_PRETRAIN" "${tiny_args[@]}" "${dev[@]}" --golden-values-out "$d/$n.json" \
    --metrics-jsonl "$d/$n.jsonl" "$@" > "$d/$n.log" 2>&1 || { echo "FAIL: run $n"; cat "$d/$n.log"; exit 1; }
  grep -q "context parallel" "$d/$n.log" || { echo "FAIL: $n not context-parallel"; cat "$d/$n.log"; exit 1; }
  paste <(losses "$d/$ref.json" 1 12) <(losses "$d/$n.json" 1 12) | awk '{ print $2, $4 }' \
    | close "$n losses" "$t" || exit 1
}
one gpt
one llama "${llama[@]}"
mr gpt_cp2 2 gpt $tol --context-parallel-size 2
mr llama_cp2 2 llama $tol "${llama[@]}" --context-parallel-size 2
# Megatron's FLOPs count the whole sequence, whose attention is quadratic: the same per token
paste <(flops "$d/gpt.jsonl" 1) <(flops "$d/gpt_cp2.jsonl" 2) | close "FLOPs per token" 2e-3 \
  || { echo "FAIL: FLOPs per token"; exit 1; }
if [ -z "${dev[*]}" ]; then  # (4 ranks: the CPU only)
  mr gpt_cp4 4 gpt $tol --context-parallel-size 4 --cp-comm-type a2a  # (all-gathered all the same)
  mr llama_cp2dp2 4 llama $tol "${llama[@]}" --context-parallel-size 2 --use-distributed-optimizer \
    --overlap-grad-reduce --ddp-bucket-size 3000 --recompute-granularity full \
    --recompute-method uniform --recompute-num-layers 1
  mr llama_cp2tp2 4 llama $tol "${llama[@]}" --context-parallel-size 2 --tensor-model-parallel-size 2 \
    --sequence-parallel
  mr gpt_cp2tp2 4 gpt $tol --context-parallel-size 2 --tensor-model-parallel-size 2
  mr gpt_cp2pp2 4 gpt $tol --context-parallel-size 2 --pipeline-model-parallel-size 2
  # and the interleaved schedule (4 layers, 2 chunks a stage; each slot's loss scale kept)
  one gpt4 --num-layers 4
  mr gpt_cp2ppv2 4 gpt4 $tol --num-layers 4 --context-parallel-size 2 \
    --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
  # mixture of experts: the load-balancing loss over the group's tokens (Megatron's tp_cp
  # reduce of the tokens per expert), z's mean over them; with expert parallelism beside
  moe=("${llama[@]}" --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64
       --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 --moe-grouped-gemm)
  one moe "${moe[@]}"
  mr moe_cp2 2 moe $tol "${moe[@]}" --context-parallel-size 2
  mr moe_cp2ep2 4 moe $tol "${moe[@]}" --context-parallel-size 2 --expert-model-parallel-size 2
  mr moe_cp2tp2 4 moe $tol "${moe[@]}" --context-parallel-size 2 --tensor-model-parallel-size 2 \
    --sequence-parallel
  one moe_tok "${moe[@]}" --calculate-per-token-loss
  mr moe_tok_cp2 2 moe_tok $tol "${moe[@]}" --calculate-per-token-loss --context-parallel-size 2
  router() { jq -r 'select(.load_balancing_loss != null) | "\(.load_balancing_loss) \(.z_loss)"' "$1"; }
  # a CP 2 x EP 2 checkpoint (experts written per expert-data-parallel rank) resumed on one rank
  "$MPIEXEC" -n 4 "$MT_PRETRAIN" "${tiny_args[@]}" "${moe[@]}" --context-parallel-size 2 \
    --expert-model-parallel-size 2 --exit-interval 6 --save "$d/moeck" > "$d/moefirst.log" 2>&1 \
    || { echo "FAIL: run moefirst"; cat "$d/moefirst.log"; exit 1; }
  one moe_resumed "${moe[@]}" --load "$d/moeck"
  grep -q "at iteration 6" "$d/moe_resumed.log" || { echo "FAIL: no MoE resume"; cat "$d/moe_resumed.log"; exit 1; }
  paste <(losses "$d/moe.json" 7 12) <(losses "$d/moe_resumed.json" 7 12) | awk '{ print $2, $4 }' \
    | close "CP 2 x EP 2 resumed on one rank" "$tol" || { echo "FAIL: MoE resume"; exit 1; }
  for n in moe_cp2 moe_cp2ep2 moe_cp2tp2 moe_tok_cp2; do
    ref=moe; [ $n = moe_tok_cp2 ] && ref=moe_tok
    paste -d' ' <(router "$d/$ref.jsonl") <(router "$d/$n.jsonl") | awk '{ print $1, $3; print $2, $4 }' \
      | close "$n router losses" $tol || { echo "FAIL: $n router losses"; exit 1; }
  done
fi
one gpt_lc --logits-chunks 3 --eval-interval 6 --eval-iters 2
mr gpt_cp2_lc 2 gpt_lc $tol --context-parallel-size 2 --logits-chunks 3 --eval-interval 6 --eval-iters 2
grep "validation loss" "$d/gpt_lc.log" | grep -o "lm loss value: [^|]*" > "$d/v1"
grep "validation loss" "$d/gpt_cp2_lc.log" | grep -o "lm loss value: [^|]*" > "$d/v2"
[ -s "$d/v1" ] && paste -d' ' <(awk '{ print $4 }' "$d/v1") <(awk '{ print $4 }' "$d/v2") \
  | close "validation losses" "$tol" || { echo "FAIL: validation losses"; exit 1; }
if [ "${1:-}" = cuda ]; then  # bf16
  one gpt_bf16 --bf16
  mr gpt_cp2_bf16 2 gpt_bf16 1e-2 --bf16 --context-parallel-size 2
  # chunks of 128 tokens, heads of 64 and 128: mt-attention's tensor-core kernels over the key
  # prefix as it is (MT_ATTN_PREFIX_ALIGN), no padded queries, a rank's chunks on two streams.
  # (--lr 1e-3: at 3e-3 this Llama's bf16 curve spikes and one GPU alone moved 0.75% at step 10
  # with only its attention grid's order changed, on an H100; at 1e-3 every path within 3e-4)
  long=(--bf16 --seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --lr 1e-3)
  one gpt_long "${long[@]}" --hidden-size 128 --num-attention-heads 2
  mr gpt_long_cp2 2 gpt_long 1e-2 "${long[@]}" --hidden-size 128 --num-attention-heads 2 \
    --context-parallel-size 2
  one llama_long "${llama[@]}" "${long[@]}" --hidden-size 256 --num-attention-heads 2 --num-query-groups 1
  mr llama_long_cp2 2 llama_long 1e-2 "${llama[@]}" "${long[@]}" --hidden-size 256 \
    --num-attention-heads 2 --num-query-groups 1 --context-parallel-size 2
fi
# a CP 2 checkpoint resumed on one rank: iterations 7..12 as one rank's
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${dev[@]}" "${llama[@]}" --context-parallel-size 2 \
  --exit-interval 6 --save "$d/ck" > "$d/first.log" 2>&1 || { echo "FAIL: run first"; cat "$d/first.log"; exit 1; }
one resumed "${llama[@]}" --load "$d/ck"
grep -q "at iteration 6" "$d/resumed.log" || { echo "FAIL: no resume"; cat "$d/resumed.log"; exit 1; }
paste <(losses "$d/llama.json" 7 12) <(losses "$d/resumed.json" 7 12) | awk '{ print $2, $4 }' \
  | close "resumed from CP 2" "$tol"
# and on 2 context-parallel ranks again
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${dev[@]}" "${llama[@]}" --context-parallel-size 2 \
  --load "$d/ck" --golden-values-out "$d/resumed2.json" > "$d/resumed2.log" 2>&1 \
  || { echo "FAIL: CP 2 resume on CP 2"; cat "$d/resumed2.log"; exit 1; }
paste <(losses "$d/llama.json" 7 12) <(losses "$d/resumed2.json" 7 12) | awk '{ print $2, $4 }' \
  | close "CP 2 resumed on CP 2" "$tol"
