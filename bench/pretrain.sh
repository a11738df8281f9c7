#!/usr/bin/env bash
# Whole-step benchmark: mt-pretrain on mock data for GPT-2 124M and 1.5B (bf16, T=1024, tied
# embeddings, V=50257 padded to 50304) on one GPU, and PyTorch's GPT-2 (transformers, bf16,
# fused AdamW) on the same shapes as the peer. Writes Google-Benchmark-style JSON for
# bench/compare.py: FLOPS by Megatron's formula, so the ratio is the tokens/s ratio.
#   bench/pretrain.sh BUILD_DIR OUT_DIR          (env: MT_PRETRAIN_ITERS=30, MT_PRETRAIN_CASES,
#                                                 MT_PRETRAIN_PEER=0: no PyTorch peer,
#                                                 MT_PRETRAIN_DEVICE=cpu: a dry run of the script)
# A case is name:layers:hidden:heads:micro-batch[:m1+m2[:chunks[:global-batch]]]; m1+m2 (- for
# none) adds --recompute-granularity selective --recompute-modules m1 m2, chunks (- for none)
# --logits-chunks, global-batch --global-batch-size (default the micro-batch: one micro-batch an
# iteration; larger accumulates gradients over global / micro micro-batches, and the case runs
# MT_PRETRAIN_ITERS micro-batches' worth of iterations, at least 4). Each case
# also reports what llm.c (train_gpt2.cu, its defaults) allocates at the same shape and batch
# (llmc_mib below), the issue's memory bound.
set -uo pipefail
b=$1; out=$2; mkdir -p "$out"
top=$(cd "$(dirname "$0")/.." && pwd)
source "$top/bench/summary.sh"
iters=${MT_PRETRAIN_ITERS:-30}
# name layers hidden heads micro-batch [recomputed modules]
# (the plain shapes against PyTorch; the others within llm.c's memory at their batch)
cases=${MT_PRETRAIN_CASES:-"gpt2_124M:12:768:12:16 gpt2_124M:12:768:12:16:-:4 gpt2_124M:12:768:12:64:-:4 gpt2_124M:12:768:12:128:-:8 gpt2_1558M:48:1600:25:8 gpt2_1558M:48:1600:25:8:mlp_act+layernorm gpt2_1558M:48:1600:25:16:mlp_act gpt2_1558M:48:1600:25:32:mlp_act gpt2_1558M:48:1600:25:48:mlp_act"}
# llm.c's device allocations in MiB for layers, hidden, heads, B (T=1024, Vp=50304), from the sizes
# in its train_gpt2.cu with the defaults (-w 1 master weights, -r 1 GELU recomputed, cuDNN
# attention): bf16 params and grads, fp32 AdamW m, v and master weights; per layer 14 (B,T,C)
# bf16 activations (ln1, atty, attproj, residual2, ln2, fcproj, residual3, qkvr 3, fch 4) and
# fp32 norm statistics and attention stats (NH per token); the (B,T,Vp) output and scratch. Like
# ours, it leaves out the 32 MiB cuBLASLt workspace, cuDNN's workspace and the CUDA context.
llmc_mib() {
  awk -v L="$1" -v C="$2" -v NH="$3" -v B="$4" 'BEGIN {
    T = 1024; Vp = 50304; BT = B * T
    P = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    bf = BT * C + 7 * L * BT * C + 4 * L * BT * C + 4 * BT * C + BT * C + 3 * L * BT * C
    out = 3 * C; if (NH * T > out) out = NH * T; if (Vp > out) out = Vp
    bf += BT * out + 4 * BT * C + BT * C
    f32 = 4 * L * BT + L * B * NH * T + 2 * BT + BT
    printf "%.1f", (16 * P + 2 * bf + 4 * f32) / 1048576 }'
}
# The GPU's SM clock and power draw while a case runs (nvidia-smi every 200 ms; the mean of the
# samples in the run's second half, past start-up and autotuning): machines of one kind differ by
# several percent in the step's rate (the board runs at its power limit), and this tells why.
smi_start() {
  command -v nvidia-smi > /dev/null || return 0
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 200 > "$1" 2>&1 &
  smi_pid=$!
}
smi_stop() {
  [ -n "${smi_pid:-}" ] || return 0
  kill "$smi_pid" 2> /dev/null; wait "$smi_pid" 2> /dev/null; smi_pid=""
  awk -F', *' '$1 ~ /^[0-9.]+$/ { c[n] = $1; w[n] = $2; n++ }
    END { if (n < 4) exit; for (i = int(n / 2); i < n; i++) { sc += c[i]; sw += w[i]; k++ }
          printf " | GPU %.0f MHz %.0f W", sc / k, sw / k }' "$1"
}
[ -x "$(command -v nvidia-smi)" ] && nvidia-smi --query-gpu=name,power.limit,clocks.max.sm \
  --format=csv,noheader | sed 's/^/GPU (name, power limit, max SM clock): /'
echo '{"benchmarks": [' > "$out/pretrain.json"
sep=""
peer_cases=""
for c in $cases; do
  IFS=: read -r name L H NH MB rc lc gbs <<< "$c"
  extra=(); tag=""; GB=${gbs:-$MB}; it=$iters
  if [ -n "${rc:-}" ] && [ "$rc" != - ]; then
    extra=(--recompute-granularity selective --recompute-modules ${rc//+/ }); tag=_rc-$rc
  fi
  if [ -n "${lc:-}" ] && [ "$lc" != - ]; then extra+=(--logits-chunks "$lc"); tag=${tag}_lc$lc; fi
  if [ "$GB" != "$MB" ]; then
    tag=${tag}_gbs$GB; it=$((iters * MB / GB)); [ "$it" -ge 4 ] || it=4
  fi
  [ -n "$tag" ] || peer_cases="$peer_cases $name:$L:$H:$NH:$MB"
  log="$out/pretrain_${name}_B$MB$tag.log"
  smi_start "$log.smi"
  "$b/apps/pretrain/mt-pretrain" --num-layers "$L" --hidden-size "$H" --num-attention-heads "$NH" \
    --attention-dropout 0 --hidden-dropout 0 \
    --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size "$MB" \
    --global-batch-size "$GB" --mock-data --tokenizer-type GPT2BPETokenizer --bf16 \
    --train-iters "$it" --lr 6e-4 --lr-warmup-iters 2 --log-interval 10 --log-throughput \
    --device "${MT_PRETRAIN_DEVICE:-cuda}" "${extra[@]}" > "$log" 2>&1
  gpu=$(smi_stop "$log.smi")
  s=$(grep '^\[summary\]' "$log")
  llmc=$(llmc_mib "$L" "$H" "$NH" "$MB")
  echo "${name}_B$MB$tag: ${s:-FAILED (see $log)} | llm.c allocates $llmc MB$gpu"
  [ -n "$s" ] || { tail -5 "$log"; continue; }
  # a bf16 step skipped for Inf/NaN gradients is a bug, and a rate of skipped steps means nothing
  sk=$("$top/ci/skipped-iterations" "$log")
  if [ "$sk" != 0 ]; then
    echo "${name}_B$MB$tag: INVALID, $sk iterations skipped (Inf/NaN gradients); not recorded"
    grep -m1 'Inf/NaN' "$log"
    continue
  fi
  echo "$sep$(summary_json "pretrain/cuda/${name}_B${MB}_T1024$tag" "$s" ", \"llmc_memory_MB\": $llmc")" >> "$out/pretrain.json"
  sep=","
done
echo ']}' >> "$out/pretrain.json"
[ "${MT_PRETRAIN_PEER:-1}" = 0 ] || \
  python3 "$top/bench/peers/peer_pretrain.py" "$out/peer_pretrain.json" $peer_cases 2>&1 | tail -5
