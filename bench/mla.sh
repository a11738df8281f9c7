#!/usr/bin/env bash
# Whole-step benchmark of DeepSeek-style multi-latent attention (MLA): mt-pretrain on mock data
# (bf16, T=1024, RMSNorm, MLA with --rope-type rope, dense SwiGLU MLPs) on one GPU, and Hugging
# Face's DeepseekV3ForCausalLM on the same shapes (every layer dense, bf16, SDPA, fused AdamW) as
# the peer. Writes Google-Benchmark-style JSON for bench/compare.py (FLOPS by Megatron's MLA
# formula: the ratio is the tokens/s ratio).
#   bench/mla.sh BUILD_DIR OUT_DIR     (env: MT_MLA_ITERS=20, MT_MLA_CASES, MT_MLA_PEER=0)
# A case is name:layers:hidden:heads:q_lora:kv_lora:qk_head:qk_pos:v_head:ffn:vocab:micro-batch
# (q_lora 0: none, linear_q_proj).
set -uo pipefail
b=$1; out=$2; mkdir -p "$out"
top=$(cd "$(dirname "$0")/.." && pwd)
source "$top/bench/summary.sh"
iters=${MT_MLA_ITERS:-20}
# (DeepSeek-V2-Lite's attention: 16 heads of 128 + 64 rotary, values of 128, a kv latent of 512)
cases=${MT_MLA_CASES:-"mla_lite_h2048:4:2048:16:0:512:128:64:128:10944:32000:4"}
echo '{"benchmarks": [' > "$out/mla.json"
sep=""
for c in $cases; do
  IFS=: read -r name L H NH QR KR DN DR DV F V MB <<< "$c"
  log="$out/mla_${name}_B$MB.log"
  q=(); [ "$QR" -gt 0 ] && q=(--q-lora-rank "$QR")
  "$b/apps/pretrain/mt-pretrain" --num-layers "$L" --hidden-size "$H" --num-attention-heads "$NH" \
    --multi-latent-attention --rope-type rope "${q[@]}" --kv-lora-rank "$KR" --qk-head-dim "$DN" \
    --qk-pos-emb-head-dim "$DR" --v-head-dim "$DV" --ffn-hidden-size "$F" --swiglu \
    --normalization RMSNorm --norm-epsilon 1e-6 --position-embedding-type rope \
    --disable-bias-linear --untie-embeddings-and-output-weights --attention-dropout 0 \
    --hidden-dropout 0 --seq-length 1024 --max-position-embeddings 1024 \
    --micro-batch-size "$MB" --global-batch-size "$MB" --mock-data --tokenizer-type NullTokenizer \
    --vocab-size $((V - 1)) --bf16 --train-iters "$iters" --lr 6e-4 --lr-warmup-iters 2 \
    --log-interval 10 --log-throughput --device cuda > "$log" 2>&1
  s=$(grep '^\[summary\]' "$log")
  echo "${name}_B$MB: ${s:-FAILED (see $log)}"
  [ -n "$s" ] || { tail -5 "$log"; continue; }
  echo "$sep$(summary_json "mla/cuda/${name}_B${MB}_T1024" "$s")" >> "$out/mla.json"
  sep=","
done
echo ']}' >> "$out/mla.json"
[ "${MT_MLA_PEER:-1}" = 0 ] || python3 "$top/bench/peers/peer_mla.py" "$out/peer_mla.json" $cases 2>&1 | tail -4
