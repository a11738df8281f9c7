#!/usr/bin/env bash
# multirank: data parallelism. The loss curve of 2 ranks (and of 2 ranks with the distributed
# optimizer) equals one rank's with the same global batch, up to the order of the fp32 gradient
# sums (relative 1e-5).
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
tiny_run "$d/dp1.json" > "$d/dp1.log"
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" --golden-values-out "$d/dp2.json" > "$d/dp2.log" 2>&1 \
  || { cat "$d/dp2.log"; exit 1; }
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" --use-distributed-optimizer \
  --golden-values-out "$d/zero.json" > "$d/zero.log" 2>&1 || { cat "$d/zero.log"; exit 1; }
grep -q "2 rank(s)" "$d/dp2.log" || { echo "FAIL: not 2 ranks"; cat "$d/dp2.log"; exit 1; }
fail=0
for run in dp2 zero; do
  paste <(losses "$d/dp1.json" 1 12) <(losses "$d/$run.json" 1 12) | awk -v run=$run '
    { n++; d = $2 - $4; if (d < 0) d = -d; if (d > 1e-5 * ($2 < 0 ? -$2 : $2)) { bad++; print "FAIL", run, $0 } }
    END { if (n != 12) { print "FAIL", run, "has", n, "losses"; exit 1 } if (bad) exit 1; print "ok", run, n, "losses match" }' || fail=1
done
exit $fail
