#!/usr/bin/env bash
# multigpu: expert parallelism on GPUs. A Mixtral-style model's loss curve on 2 GPUs that each
# hold 2 of its 4 experts (the rows exchanged by NCCL all-to-all) equals one GPU's, in fp32
# within 1e-4 and in bf16 within 1e-2 (the experts' GEMMs see other row counts); also with the
# distributed optimizer and overlapped buckets; and DeepSeek-style routing with a shared expert and
# a dense layer. Needs 2 GPUs and an MPI launcher ($MPIEXEC).
source "$(dirname "$0")/pretrain_common.sh"
n=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$n" -ge 2 ] || { echo "skip: needs 2 GPUs, found $n"; exit 77; }
[ -n "${MPIEXEC:-}" ] || { echo "skip: no MPI launcher"; exit 77; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
moe=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
     --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2
     --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 0.01
     --device cuda)
for dt in fp32 bf16; do
  x=(); tol=1e-4; [ $dt = bf16 ] && x=(--bf16) && tol=1e-2
  tiny_run "$d/one$dt.json" "${moe[@]}" "${x[@]}" > "$d/one.log" 2>&1 || { cat "$d/one.log"; exit 1; }
  for v in ep2 ep2zero; do
    y=(); [ $v = ep2zero ] && y=(--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000)
    "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${moe[@]}" "${x[@]}" "${y[@]}" \
      --expert-model-parallel-size 2 --golden-values-out "$d/$v$dt.json" > "$d/$v.log" 2>&1 \
      || { cat "$d/$v.log"; exit 1; }
    grep -q "expert parallel 2" "$d/$v.log" || { echo "FAIL: $v not expert-parallel"; cat "$d/$v.log"; exit 1; }
    paste <(losses "$d/one$dt.json" 1 12) <(losses "$d/$v$dt.json" 1 12) | awk '{ print $2, $4 }' \
      | close "$dt $v losses" $tol || exit 1
  done
done
# DeepSeek-style routing (sigmoid scores with the expert bias, the tokens per expert summed over
# the GPUs), a gated shared expert and a dense layer (--moe-layer-freq), fp32: 2 GPUs' losses
# equal one GPU's
ds=(--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.05
    --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate --num-layers 4 --moe-layer-freq "[0]+[1]*3")
tiny_run "$d/oneds.json" "${moe[@]}" "${ds[@]}" > "$d/oneds.log" 2>&1 || { cat "$d/oneds.log"; exit 1; }
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${moe[@]}" "${ds[@]}" --expert-model-parallel-size 2 \
  --golden-values-out "$d/ep2ds.json" > "$d/ep2ds.log" 2>&1 || { cat "$d/ep2ds.log"; exit 1; }
paste <(losses "$d/oneds.json" 1 12) <(losses "$d/ep2ds.json" 1 12) | awk '{ print $2, $4 }' \
  | close "fp32 ep2 sigmoid, expert bias, shared expert, a dense layer" 1e-4 || exit 1
