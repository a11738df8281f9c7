#!/usr/bin/env bash
# functional: a bf16 run whose gradients turn Inf/NaN (a learning rate of 1e30 blows the weights
# up after the first step) stops at that step with an error naming the parameters, as Megatron's
# --check-for-nan-in-loss-and-grad does; with --no-check-for-nan-in-loss-and-grad it skips the
# steps instead, says so once, and counts them in the training line.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
set +e
tiny_run "$d/a.json" --bf16 --lr 1e30 --lr-warmup-iters 0 --log-interval 1 > "$d/stop.log" 2>&1
rc=$?
set -e
cat "$d/stop.log" | cut -c1-300
[ "$rc" != 0 ] || { echo "FAIL: the run did not stop"; exit 1; }
grep -q "MT_ERR_NUMERIC.*iteration 2: Inf/NaN in the gradients.*embedding.word_embeddings.weight" \
  "$d/stop.log" || { echo "FAIL: no error naming the parameters at iteration 2"; exit 1; }
! grep -q " iteration *2/" "$d/stop.log" || { echo "FAIL: iteration 2 was logged as taken"; exit 1; }
tiny_run "$d/b.json" --bf16 --lr 1e30 --lr-warmup-iters 0 --log-interval 1 \
  --no-check-for-nan-in-loss-and-grad > "$d/skip.log" 2>&1
[ "$(grep -c "the step is skipped" "$d/skip.log")" = 1 ] || { echo "FAIL: want one warning"; exit 1; }
grep -q " iteration *12/.*number of skipped iterations:   1 " "$d/skip.log" \
  || { grep " iteration " "$d/skip.log" | tail -2; echo "FAIL: skipped steps not counted"; exit 1; }
echo "ok: stops at the first Inf/NaN gradients; with the flag skips them"
