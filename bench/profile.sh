#!/usr/bin/env bash
# Where the step's time goes: mt-pretrain with MT_PROFILE=1 (per-operation GPU times, CUDA events)
# for GPT-2 124M and 1.5B on mock data, as bench/pretrain.sh runs them.
#   bench/profile.sh BUILD_DIR OUT_DIR     (env: MT_PROFILE_CASES as bench/pretrain.sh's cases,
#                                          MT_PROFILE_ITERS=20, MT_PROFILE_FLAGS: extra flags)
set -uo pipefail
b=$1; out=$2; mkdir -p "$out"
iters=${MT_PROFILE_ITERS:-20}
cases=${MT_PROFILE_CASES:-"gpt2_124M:12:768:12:16 gpt2_1558M:48:1600:25:8"}
for c in $cases; do
  IFS=: read -r name L H NH MB <<< "$c"
  MT_PROFILE=1 "$b/apps/pretrain/mt-pretrain" --num-layers "$L" --hidden-size "$H" \
    --attention-dropout 0 --hidden-dropout 0 \
    --num-attention-heads "$NH" --seq-length 1024 --max-position-embeddings 1024 \
    --micro-batch-size "$MB" --global-batch-size "$MB" --mock-data --tokenizer-type GPT2BPETokenizer \
    --bf16 --train-iters "$iters" --lr 6e-4 --lr-warmup-iters 2 --log-interval 10 --device cuda \
    ${MT_PROFILE_FLAGS:-} > "$out/profile_$name.log" 2>&1
  echo "== $name"; grep -A40 '^\[profile\]' "$out/profile_$name.log" || tail -5 "$out/profile_$name.log"
  grep '^\[summary\]' "$out/profile_$name.log"
done
