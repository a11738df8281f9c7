#!/usr/bin/env bash
# gpu: a bf16 run at GPT-2's attention shape (T=1024, 12 heads of 64: the wgmma backward's many
# tiles per block, which the tiny runs never reach), without --deterministic-mode (the fused
# attention backward, autotuned GEMMs), takes every step: no iteration skipped or stopped for
# Inf/NaN gradients, the loss falls, and each step's loss is within 5e-3 (relative) of the
# --deterministic-mode run's (other attention kernels, no autotuning; at 124M they agreed to 4e-5
# over 10 steps). (Sessions 17-20 benchmarked runs whose every step had NaN gradients.) With
# --recompute-modules mlp_act the deterministic run ends with bitwise the same checkpoint (weights
# and optimizer state): the MLP's activation, recomputed in the backward (on sm_90a by the dX
# GEMM's epilogue), is the forward's.
n=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$n" -ge 1 ] || { echo "SKIP: needs 1 GPU, found 0"; exit 77; }
set -euo pipefail
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
run() {
  "$MT_PRETRAIN" --attention-dropout 0 --hidden-dropout 0 --num-layers 2 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 \
    --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 4 --mock-data \
    --tokenizer-type GPT2BPETokenizer --bf16 --lr 1e-3 --lr-warmup-iters 1 --train-iters 8 \
    --log-interval 1 --device cuda --golden-values-out "$1.json" "${@:2}" > "$1" 2>&1 \
    || { tail -20 "$1"; echo "FAIL: mt-pretrain $* failed"; exit 1; }
}
run "$d/log"
run "$d/det" --deterministic-mode --save "$d/ck_det" --save-interval 8
run "$d/act" --deterministic-mode --save "$d/ck_act" --save-interval 8 \
  --recompute-granularity selective --recompute-modules mlp_act
grep -E " iteration +[0-9]+/" "$d/log" | sed 's/.*\(iteration *[0-9]*\/\).*\(lm loss: [^|]*\).*\(number of skipped iterations: *[0-9]*\).*/\1 \2 \3/'
if grep -E " iteration +[0-9]+/" "$d/log" | grep -qv "number of skipped iterations:   0"; then
  { grep -E "Inf/NaN" "$d/log" | head -3 || true; }; echo "FAIL: iterations skipped"; exit 1
fi
first=$(jq -r '.["lm loss"].values["1"]' "$d/log.json"); last=$(jq -r '.["lm loss"].values["8"]' "$d/log.json")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' \
  || { echo "FAIL: lm loss $first -> $last did not fall"; exit 1; }
paste <(jq -r '.["lm loss"].values | to_entries[] | .value' "$d/log.json") \
      <(jq -r '.["lm loss"].values | to_entries[] | .value' "$d/det.json") |
  awk '{ r = ($1 - $2) / $2; if (r < 0) r = -r; printf "step %d: %s (deterministic %s) rel %.2e\n", NR, $1, $2, r
         if (r > 5e-3 || NF != 2) bad = 1 } END { exit bad || NR != 8 }' \
  || { echo "FAIL: the fast path's losses leave the deterministic run's"; exit 1; }
cmp "$d/ck_det/iter_0000008/rank_00000.safetensors" "$d/ck_act/iter_0000008/rank_00000.safetensors" \
  || { echo "FAIL: the checkpoint after 8 steps with mlp_act differs from the one without"; exit 1; }
echo "ok: 8 steps taken, lm loss $first -> $last, within 5e-3 of --deterministic-mode;" \
  "with mlp_act the same checkpoint bitwise"
