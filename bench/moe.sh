#!/usr/bin/env bash
# Whole-step benchmark of Mixtral-style MoE models: mt-pretrain on mock data (bf16, T=1024,
# RMSNorm, RoPE, GQA, SwiGLU experts, top-k routing with the load-balancing loss) on one GPU, and
# Hugging Face's MixtralForCausalLM (bf16, SDPA, fused AdamW) on the same shapes as the peer.
# Writes Google-Benchmark-style JSON for bench/compare.py (FLOPS by Megatron's formula: the ratio
# is the tokens/s ratio).
#   bench/moe.sh BUILD_DIR OUT_DIR     (env: MT_MOE_ITERS=20, MT_MOE_CASES, MT_MOE_PEER=0,
#                                       MT_MOE_RANKS=1, MT_MOE_EP=1)
# A case is name:layers:hidden:heads:groups:expert_ffn:experts:topk:vocab:micro-batch.
# MT_MOE_RANKS > 1: that many data-parallel GPUs under mpiexec (the global batch grows with
# them), MT_MOE_EP of them holding each expert's share (--expert-model-parallel-size); the
# results' names end in _dpN_epM and report tokens/s of all GPUs together.
set -uo pipefail
b=$1; out=$2; mkdir -p "$out"
top=$(cd "$(dirname "$0")/.." && pwd)
source "$top/bench/summary.sh"
iters=${MT_MOE_ITERS:-20}
ranks=${MT_MOE_RANKS:-1}; ep=${MT_MOE_EP:-1}
launch=(); tag=""
if [ "$ranks" -gt 1 ]; then
  launch=(mpiexec -n "$ranks" --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE=0)
  tag="_dp${ranks}_ep$ep"
fi
cases=${MT_MOE_CASES:-"moe_8x2_h2048:4:2048:16:4:5632:8:2:32000:8 moe_16x4_h1024:8:1024:16:4:1408:16:4:32000:8"}
echo '{"benchmarks": [' > "$out/moe.json"
sep=""
for c in $cases; do
  IFS=: read -r name L H NH G F E K V MB <<< "$c"
  log="$out/moe_${name}_B$MB$tag.log"
  "${launch[@]}" "$b/apps/pretrain/mt-pretrain" --expert-model-parallel-size "$ep" --num-layers "$L" --hidden-size "$H" --num-attention-heads "$NH" \
    --group-query-attention --num-query-groups "$G" --ffn-hidden-size "$F" --num-experts "$E" \
    --moe-router-topk "$K" --moe-aux-loss-coeff 0.01 --swiglu --normalization RMSNorm \
    --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights \
    --attention-dropout 0 --hidden-dropout 0 --seq-length 1024 --max-position-embeddings 1024 \
    --micro-batch-size "$MB" --global-batch-size $((MB * ranks)) --mock-data --tokenizer-type NullTokenizer \
    --vocab-size $((V - 1)) --bf16 --train-iters "$iters" --lr 6e-4 --lr-warmup-iters 2 \
    --log-interval 10 --log-throughput --device cuda > "$log" 2>&1
  s=$(grep '^\[summary\]' "$log")
  echo "${name}_B$MB$tag: ${s:-FAILED (see $log)}"
  [ -n "$s" ] || { tail -5 "$log"; continue; }
  grep -o "load_balancing_loss: [^|]*" "$log" | tail -1
  echo "$sep$(summary_json "moe/cuda/${name}_B$MB${tag}_T1024" "$s")" >> "$out/moe.json"
  sep=","
done
echo ']}' >> "$out/moe.json"
[ "${MT_MOE_PEER:-1}" = 0 ] || [ "$ranks" -gt 1 ] || python3 "$top/bench/peers/peer_moe.py" "$out/peer_moe.json" $cases 2>&1 | tail -4
