#!/usr/bin/env bash
# multirank: a failure on one rank ends the whole job at once with that rank's error, instead of
# leaving the other rank in a collective until --distributed-timeout-minutes (here 1 minute).
# Only the last rank writes --metrics-jsonl, so an unwritable path fails there alone.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
t0=$(date +%s); rc=0
timeout 120 "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" --distributed-timeout-minutes 1 \
  --metrics-jsonl "$d/missing/dir/m.jsonl" > "$d/log" 2>&1 || rc=$?
dt=$(( $(date +%s) - t0 ))
grep -q "error on rank 1 of 2: .*cannot write --metrics-jsonl $d/missing/dir/m.jsonl" "$d/log" \
  || { echo "FAIL: no error naming rank 1 and the path (rc $rc)"; cat "$d/log"; exit 1; }
[ $rc != 0 ] && [ $rc != 124 ] || { echo "FAIL: rc $rc"; cat "$d/log"; exit 1; }
[ $dt -lt 45 ] || { echo "FAIL: took $dt s: the other rank waited for the timeout"; cat "$d/log"; exit 1; }
echo "ok: the job ended in $dt s with rc $rc: $(grep -o 'error on rank 1.*' "$d/log" | head -1)"
