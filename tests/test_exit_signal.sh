#!/usr/bin/env bash
# functional: --exit-signal-handler and --exit-duration-in-mins (Megatron's): SIGTERM during
# training saves a checkpoint after the current iteration and exits 0 with Megatron's message;
# resuming from it gives the losses of an uninterrupted run. A duration limit does the same.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'kill %1 2>/dev/null || true; rm -rf "$d"' EXIT
long=(--train-iters 100000 --log-interval 1)
"$MT_PRETRAIN" "${tiny_args[@]}" "${long[@]}" --exit-signal-handler --save "$d/ck" \
  --golden-values-out "$d/sig.json" > "$d/sig.log" 2>&1 &
for i in $(seq 600); do  # until a few iterations are logged (at most 60 s)
  [ "$(grep -c ' iteration ' "$d/sig.log")" -ge 4 ] && break
  sleep 0.1
done
kill -TERM %1; rc=0; wait %1 || rc=$?
[ $rc = 0 ] || { echo "FAIL: exit status $rc after SIGTERM"; cat "$d/sig.log"; exit 1; }
grep -q "exiting program after receiving SIGTERM." "$d/sig.log" || { echo "FAIL: no exit message"; cat "$d/sig.log"; exit 1; }
n=$(cat "$d/ck/latest_checkpointed_iteration.txt")
[ "$n" -ge 4 ] && [ "$n" -lt 100000 ] || { echo "FAIL: checkpoint at iteration '$n'"; exit 1; }
grep -q "validation loss at" "$d/sig.log" && { echo "FAIL: evaluated after SIGTERM"; exit 1; }
echo "ok: SIGTERM -> checkpoint at iteration $n, exit 0"
# resume to n+3 and compare with an uninterrupted run to n+3 (same --train-iters: same schedule)
m=$((n + 3))
"$MT_PRETRAIN" "${tiny_args[@]}" "${long[@]}" --load "$d/ck" --exit-interval $m \
  --golden-values-out "$d/resumed.json" > "$d/resumed.log" 2>&1 || { cat "$d/resumed.log"; exit 1; }
"$MT_PRETRAIN" "${tiny_args[@]}" "${long[@]}" --exit-interval $m \
  --golden-values-out "$d/full.json" > "$d/full.log" 2>&1 || { cat "$d/full.log"; exit 1; }
[ "$(losses "$d/resumed.json" $((n + 1)) $m)" = "$(losses "$d/full.json" $((n + 1)) $m)" ] \
  && [ "$(losses "$d/full.json" $((n + 1)) $m | wc -l)" = 3 ] \
  || { echo "FAIL: resumed losses differ"; paste <(losses "$d/full.json" $((n + 1)) $m) <(losses "$d/resumed.json" $((n + 1)) $m); exit 1; }
echo "ok: resumed iterations $((n + 1))..$m equal the uninterrupted run"
# a duration limit (0.001 min = 60 ms): stops early with the message and a checkpoint
"$MT_PRETRAIN" "${tiny_args[@]}" "${long[@]}" --exit-duration-in-mins 0.001 --save "$d/ck2" \
  > "$d/dur.log" 2>&1 || { echo "FAIL: duration exit status"; cat "$d/dur.log"; exit 1; }
grep -q "exiting program after 0.0" "$d/dur.log" && [ -f "$d/ck2/latest_checkpointed_iteration.txt" ] \
  || { echo "FAIL: duration exit"; cat "$d/dur.log"; exit 1; }
echo "ok: --exit-duration-in-mins stopped at iteration $(cat "$d/ck2/latest_checkpointed_iteration.txt") with a checkpoint"
