#!/usr/bin/env bash
# functional / multirank ("dp2" as the argument): --rampup-batch-size against megatron-core.
# libs/train/golden/rampup.json (gen_rampup.py, also with --decrease-batch-size-if-needed: megatron-core's RampupBatchsizeNumMicroBatches-
# Calculator driven as Megatron's update_train_iters and train() drive it) lists, per case, the
# iteration count and each iteration's global batch size and consumed samples; mt-pretrain's
# training lines must show exactly those. Functional: the one-rank cases; the losses of the
# ramp's first batches equal a constant run at the start batch size; a checkpoint is written
# where the number of micro-batches changes (as Megatron's train() does) and a resume inside the
# ramp gives the uninterrupted run's losses. dp2: the two-rank case, and its losses equal one
# rank's with the same global batches.
source "$(dirname "$0")/pretrain_common.sh"
golden=$(cd "$(dirname "$0")/../libs/train/golden" && pwd)/rampup.json
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mode=${1:-functional}
base=("${nodrop[@]}" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --mock-data
      --tokenizer-type NullTokenizer --vocab-size 300 --lr 3e-3 --lr-warmup-samples 8 --seed 5
      --log-interval 1 --device "${MT_TEST_DEVICE:-cpu}" --distributed-timeout-minutes 1)
case_args() { # INDEX: the case's flags
  jq -r --argjson i "$1" '.cases[$i] | "--rampup-batch-size \(.rampup | map(tostring) | join(" "))
    --global-batch-size \(.global_batch_size) --micro-batch-size \(.micro_batch_size)
    --train-samples \(.train_samples)\(if .decrease_batch_size_if_needed then
    " --decrease-batch-size-if-needed" else "" end)"' "$golden" | tr -s ' \n' ' '
}
# the "train_iters gbs consumed" lines a run logged, and the golden case's
logged() {
  grep " iteration " "$1" | sed -n 's/.*iteration *[0-9]*\/ *\([0-9]*\) | consumed samples: *\([0-9]*\) |.*global batch size: *\([0-9]*\) |.*/\1 \3 \2/p'
}
want() {
  jq -r --argjson i "$1" '.cases[$i] | .train_iters as $n | .steps[] | "\($n) \(.[0]) \(.[1])"' "$golden"
}
check() { # INDEX LOG
  if [ "$(logged "$2")" = "$(want "$1")" ]; then
    echo "ok case $1 ($(case_args "$1")): $(want "$1" | wc -l) iterations as megatron-core's"
  else
    echo "FAIL case $1: logged (iterations, global batch, consumed) against megatron-core's"
    paste <(logged "$2") <(want "$1"); exit 1
  fi
}
n=$(jq '.cases | length' "$golden")
if [ "$mode" = dp2 ]; then
  for i in $(seq 0 $((n - 1))); do
    [ "$(jq --argjson i "$i" '.cases[$i].data_parallel_size' "$golden")" = 2 ] || continue
    # shellcheck disable=SC2046
    "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${base[@]}" $(case_args "$i") --golden-values-out "$d/dp2.json" \
      > "$d/dp2.log" 2>&1 || { cat "$d/dp2.log"; exit 1; }
    grep -q "2 rank(s)" "$d/dp2.log" || { echo "FAIL: not 2 ranks"; exit 1; }
    check "$i" "$d/dp2.log"
    # shellcheck disable=SC2046
    "$MT_PRETRAIN" "${base[@]}" $(case_args "$i") --golden-values-out "$d/dp1.json" > "$d/dp1.log" 2>&1 \
      || { cat "$d/dp1.log"; exit 1; }
    last=$(want "$i" | wc -l)
    rel_close "$d/dp1.json" "$d/dp2.json" 1 "$last" 1e-5 || { echo "FAIL: 2 ranks differ from 1"; exit 1; }
    echo "ok: 2 ranks give one rank's losses through the ramp"
  done
  exit 0
fi
for i in $(seq 0 $((n - 1))); do
  [ "$(jq --argjson i "$i" '.cases[$i].data_parallel_size' "$golden")" = 1 ] || continue
  # shellcheck disable=SC2046
  "$MT_PRETRAIN" "${base[@]}" $(case_args "$i") --golden-values-out "$d/c$i.json" > "$d/c$i.log" 2>&1 \
    || { cat "$d/c$i.log"; exit 1; }
  check "$i" "$d/c$i.log"
done
# case 0 ramps 4 -> 8 at iteration 6: its first 5 iterations are a constant run's at 4
"$MT_PRETRAIN" "${base[@]}" --global-batch-size 4 --micro-batch-size 2 --train-samples 200 \
  --golden-values-out "$d/const.json" > "$d/const.log" 2>&1 || { cat "$d/const.log"; exit 1; }
[ "$(losses "$d/c0.json" 1 5)" = "$(losses "$d/const.json" 1 5)" ] \
  || { echo "FAIL: the ramp's first batches differ from a constant run's"; paste <(losses "$d/c0.json" 1 6) <(losses "$d/const.json" 1 6); exit 1; }
[ "$(losses "$d/c0.json" 6 6)" != "$(losses "$d/const.json" 6 6)" ] \
  || { echo "FAIL: iteration 6 (batch 8) equals the constant run's (batch 4)"; exit 1; }
echo "ok: iterations 1..5 equal a constant run at global batch 4, iteration 6 not"
# checkpoints: every 4 iterations, and where the micro-batches change (before iterations 6, 9 and
# 11: at 5, 8 (already the interval's) and 10); resume from 8, inside the ramp
# shellcheck disable=SC2046
"$MT_PRETRAIN" "${base[@]}" $(case_args 0) --save "$d/ck" --save-interval 4 > "$d/s.log" 2>&1 \
  || { cat "$d/s.log"; exit 1; }
got=$(cd "$d/ck" && ls -d iter_* | tr '\n' ' ')
[ "$got" = "iter_0000004 iter_0000005 iter_0000008 iter_0000010 iter_0000012 iter_0000016 iter_0000018 " ] \
  || { echo "FAIL: checkpoints $got"; exit 1; }
echo "ok: checkpoints at $got"
echo 8 > "$d/ck/latest_checkpointed_iteration.txt"
# shellcheck disable=SC2046
"$MT_PRETRAIN" "${base[@]}" $(case_args 0) --load "$d/ck" --golden-values-out "$d/r.json" > "$d/r.log" 2>&1 \
  || { cat "$d/r.log"; exit 1; }
[ "$(losses "$d/r.json" 9 18)" = "$(losses "$d/c0.json" 9 18)" ] && [ "$(losses "$d/r.json" 9 18 | wc -l)" = 10 ] \
  || { echo "FAIL: resumed at 8 differs"; paste <(losses "$d/c0.json" 9 18) <(losses "$d/r.json" 9 18); exit 1; }
[ "$(logged "$d/r.log")" = "$(want 0 | tail -n 10)" ] || { echo "FAIL: resumed ramp differs"; exit 1; }
echo "ok: resumed at iteration 8 inside the ramp: iterations 9..18 identical"
# --decrease-batch-size-if-needed without a ramp: global batch 7 runs as 6 (micro-batch 2), the
# same samples and losses as --global-batch-size 6 (Megatron's iteration count still divides the
# samples by 7)
"$MT_PRETRAIN" "${base[@]}" --global-batch-size 7 --micro-batch-size 2 --train-samples 48 \
  --decrease-batch-size-if-needed --golden-values-out "$d/d7.json" > "$d/d7.log" 2>&1 || { cat "$d/d7.log"; exit 1; }
"$MT_PRETRAIN" "${base[@]}" --global-batch-size 6 --micro-batch-size 2 --train-samples 48 \
  --train-iters 0 --golden-values-out "$d/d6.json" > "$d/d6.log" 2>&1 || { cat "$d/d6.log"; exit 1; }
grep -q "decreasing batch size from 7 to 6 to keep divisiblity by micro_batch_size=2 \* data_parallel_size=1" "$d/d7.log" \
  && grep -q "global batch size:     6 |" "$d/d7.log" || { echo "FAIL: no decrease"; head -5 "$d/d7.log"; exit 1; }
n7=$(losses "$d/d7.json" 1 100 | wc -l); n6=$(losses "$d/d6.json" 1 100 | wc -l)
[ "$n7" -gt 0 ] && [ "$n7" -lt "$n6" ] && [ "$(losses "$d/d7.json" 1 "$n7")" = "$(losses "$d/d6.json" 1 "$n7")" ] \
  || { echo "FAIL: batch 7 decreased to 6 differs from batch 6"; paste <(losses "$d/d7.json" 1 9) <(losses "$d/d6.json" 1 9); exit 1; }
echo "ok: --decrease-batch-size-if-needed: batch 7 runs as 6, its $n7 losses batch 6's (48 samples: $n7 iterations as Megatron counts them with 7, $n6 with 6)"
