#!/usr/bin/env bash
# functional: Megatron's ckpt-resume test. Train 12 iterations; separately train 6 (exit
# interval), save, and resume from that checkpoint to 12: iterations 7..12 must be identical,
# and so must the restored model, optimizer, schedule, loss scaler and data position that produce
# them (the logged learning rate, loss scale and grad norm too).
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
tiny_run "$d/full.json" > "$d/full.log"
tiny_run "$d/first.json" --exit-interval 6 --save "$d/ckpt" > "$d/first.log"
[ "$(cat "$d/ckpt/latest_checkpointed_iteration.txt")" = 6 ] || { echo "FAIL: no iteration-6 checkpoint"; exit 1; }
tiny_run "$d/second.json" --load "$d/ckpt" --save "$d/ckpt" > "$d/second.log"
grep -q "successfully loaded checkpoint from $d/ckpt .* at iteration 6" "$d/second.log" \
  || { echo "FAIL: the second run did not resume from iteration 6"; cat "$d/second.log"; exit 1; }
want=$(losses "$d/full.json" 7 12); got=$(losses "$d/second.json" 7 12)
echo "full run 7..12:"; echo "$want"; echo "resumed 7..12:"; echo "$got"
[ "$(echo "$want" | wc -l)" = 6 ] || { echo "FAIL: expected 6 losses"; exit 1; }
[ "$want" = "$got" ] || { echo "FAIL: resumed losses differ"; exit 1; }
[ "$(losses "$d/full.json" 1 6)" = "$(losses "$d/first.json" 1 6)" ] || { echo "FAIL: 1..6 differ"; exit 1; }
# the per-iteration fields of the logged iterations 7..12: the schedule's LR, the loss scale (the
# grad scaler's state with --fp16) and the grad norm (absent on a skipped step)
fields() {
  grep -E "\] iteration +[0-9]+/" "$1" | while IFS= read -r l; do
    it=$(echo "$l" | sed 's/.*iteration *\([0-9]*\)\/.*/\1/')
    [ "$it" -ge 7 ] && echo "$it$(echo "$l" | grep -o ' \(learning rate\|loss scale\|grad norm\): [^|]*' | tr -d '\n')"
  done; true
}
want=$(fields "$d/full.log"); got=$(fields "$d/second.log")
[ -n "$want" ] && [ "$want" = "$got" ] \
  || { echo "FAIL: resumed log fields differ"; echo "$want"; echo "resumed:"; echo "$got"; exit 1; }
echo "ok: resumed run identical"
