#!/usr/bin/env bash
# multirank: --eod-mask-loss and --calculate-per-token-loss across data-parallel ranks. Two ranks
# give one rank's losses with the same global batch (relative 1e-5, the order of the fp32 sums):
# the mean of micro-batch means averages over the ranks' micro-batches; the per-token loss
# divides the ranks' summed gradients by every rank's counted tokens (the reported loss is the
# ranks' loss sums over their token counts in both). Also with the distributed optimizer and
# overlapped reductions, and with 2 context-parallel ranks (each half of every sequence: their
# counted tokens differ, so each micro-batch's mean is over both ranks' counts). With
# --reset-position-ids (positions restarting after each EOD) too; and CP 2 x PP 2 interleaved.
source "$(dirname "$0")/pretrain_common.sh"
: "${MT_PREPROCESS:?}"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
eod_corpus "$d"
common=("${eod_args[@]}" --data-path "$d/v_text_document" --data-cache-path "$d/cache"
        --train-iters 12 --eval-interval 6 --eval-iters 2 --split 90,10,0)
for mode in mean pt pos; do
  extra=(--eod-mask-loss); [ $mode = pt ] && extra+=(--calculate-per-token-loss)
  [ $mode = pos ] && extra=(--reset-position-ids)  # (each rank's chunks of every document's positions)
  "$MT_PRETRAIN" "${common[@]}" "${extra[@]}" --golden-values-out "$d/$mode-1.json" \
    --metrics-jsonl "$d/$mode-1.jsonl" > "$d/$mode-1.log" 2>&1 || { cat "$d/$mode-1.log"; exit 1; }
  for v in dp zero cp; do
    more=(); [ $v = zero ] && more=(--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000)
    [ $v = cp ] && more=(--context-parallel-size 2)  # (each rank half of each sequence)
    "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${common[@]}" "${extra[@]}" "${more[@]}" \
      --golden-values-out "$d/$mode-$v.json" --metrics-jsonl "$d/$mode-$v.jsonl" > "$d/$mode-$v.log" 2>&1 \
      || { cat "$d/$mode-$v.log"; exit 1; }
    grep -q "2 rank(s)" "$d/$mode-$v.log" || { echo "FAIL: not 2 ranks"; cat "$d/$mode-$v.log"; exit 1; }
    rel_close "$d/$mode-1.json" "$d/$mode-$v.json" 1 12 1e-5 \
      || { echo "FAIL: $mode $v: 2 ranks differ from 1"; exit 1; }
    val() { jq -r 'select(.["validation lm loss"]) | .["validation lm loss"]' "$1"; }
    paste <(val "$d/$mode-1.jsonl") <(val "$d/$mode-$v.jsonl") | awk '
      { n++; r = ($1 - $2) / $1; if (r < 0) r = -r; if (r > 1e-5) bad++ } END { exit !(n >= 2 && !bad) }' \
      || { echo "FAIL: $mode $v: validation losses differ"; paste <(val "$d/$mode-1.jsonl") <(val "$d/$mode-$v.jsonl"); exit 1; }
    echo "ok $mode $v: 2 ranks give 1 rank's 12 losses and validation losses"
  done
done
# the interleaved schedule with CP 2 (4 layers, 2 chunks a stage): a micro-batch's loss scale
# (its ranks' counted tokens) is kept for its last chunk's forward, many forwards later
"$MT_PRETRAIN" "${common[@]}" --eod-mask-loss --num-layers 4 --golden-values-out "$d/v-1.json" \
  > "$d/v-1.log" 2>&1 || { cat "$d/v-1.log"; exit 1; }
"$MPIEXEC" -n 4 "$MT_PRETRAIN" "${common[@]}" --eod-mask-loss --num-layers 4 --context-parallel-size 2 \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --golden-values-out "$d/v-cp.json" > "$d/v-cp.log" 2>&1 || { cat "$d/v-cp.log"; exit 1; }
rel_close "$d/v-1.json" "$d/v-cp.json" 1 12 1e-5 \
  || { echo "FAIL: CP 2 x PP 2 interleaved differs from 1 rank"; exit 1; }
echo "ok: CP 2 x PP 2 interleaved gives 1 rank's 12 losses with --eod-mask-loss"
