#!/usr/bin/env bash
# Whole-step benchmark: mt-pretrain on mock data for GPT-2 124M and 1.5B (bf16, T=1024, tied
# embeddings, V=50257 padded to 50304) on one GPU, and PyTorch's GPT-2 (transformers, bf16,
# fused AdamW) on the same shapes as the peer. Writes Google-Benchmark-style JSON for
# bench/compare.py: FLOPS by Megatron's formula, so the ratio is the tokens/s ratio.
#   bench/pretrain.sh BUILD_DIR OUT_DIR          (env: MT_PRETRAIN_ITERS=30, MT_PRETRAIN_CASES)
set -uo pipefail
b=$1; out=$2; mkdir -p "$out"
top=$(cd "$(dirname "$0")/.." && pwd)
iters=${MT_PRETRAIN_ITERS:-30}
# name layers hidden heads micro-batch
cases=${MT_PRETRAIN_CASES:-"gpt2_124M:12:768:12:16 gpt2_1558M:48:1600:25:8"}
echo '{"benchmarks": [' > "$out/pretrain.json"
sep=""
for c in $cases; do
  IFS=: read -r name L H NH MB <<< "$c"
  log="$out/pretrain_$name.log"
  "$b/apps/pretrain/mt-pretrain" --num-layers "$L" --hidden-size "$H" --num-attention-heads "$NH" \
    --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size "$MB" \
    --global-batch-size "$MB" --mock-data --tokenizer-type GPT2BPETokenizer --bf16 \
    --train-iters "$iters" --lr 6e-4 --lr-warmup-iters 2 --log-interval 10 --log-throughput \
    --device cuda > "$log" 2>&1
  s=$(grep '^\[summary\]' "$log")
  echo "$name: ${s:-FAILED (see $log)}"; [ -n "$s" ] || { tail -5 "$log"; continue; }
  ms=$(echo "$s" | sed -n 's/.*| \([0-9.]*\) ms\/iteration.*/\1/p')
  tf=$(echo "$s" | sed -n 's/.*| \([0-9.]*\) TFLOP\/s\/GPU.*/\1/p')
  tok=$(echo "$s" | sed -n 's/.*| \([0-9.]*\) tokens\/s |.*/\1/p')
  mem=$(echo "$s" | sed -n 's/.*memory (MB): \([0-9.]*\).*/\1/p')
  printf '%s{"name": "pretrain/cuda/%s_B%s_T1024", "run_type": "iteration", "real_time": %s, "time_unit": "ms", "FLOPS": %s, "tokens_per_second": %s, "memory_MB": %s}\n' \
    "$sep" "$name" "$MB" "$ms" "$(awk -v t="$tf" 'BEGIN { printf "%.6e", t * 1e12 }')" "$tok" "$mem" >> "$out/pretrain.json"
  sep=","
done
echo ']}' >> "$out/pretrain.json"
python3 "$top/bench/peers/peer_pretrain.py" "$out/peer_pretrain.json" $cases 2>&1 | tail -5
