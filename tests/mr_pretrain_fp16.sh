#!/usr/bin/env bash
# multirank: --fp16 with data parallelism. With a loss scale that never overflows, 2 ranks (and 2
# ranks with the distributed optimizer) follow one rank's losses up to the order of the fp32
# gradient sums (relative 1e-5). With one that overflows, both 2-rank runs skip the same
# iterations and log the same loss scales: found Inf/NaN is agreed over the ranks (each rank of
# the distributed optimizer checks only its shard). (Per rank the loss is scaled by S / 2 micro-
# batches instead of S / 4, so the overflow pattern of 1 rank differs, as in Megatron.)
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mr() { local name=$1; shift; "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" --fp16 --log-interval 1 \
  --golden-values-out "$d/$name.json" "$@" > "$d/$name.log" 2>&1 || { cat "$d/$name.log"; exit 1; }; }
scales() { grep -o "loss scale: [^|]*| .*number of skipped iterations: *[0-9]*" "$1" | sed 's/grad norm: [^|]*| //'; }
tiny_run "$d/dp1.json" --fp16 --initial-loss-scale 4096 > "$d/dp1.log"
mr dp2 --initial-loss-scale 4096
mr zero --initial-loss-scale 4096 --use-distributed-optimizer
grep -q "2 rank(s) on cpu, fp16" "$d/dp2.log" || { echo "FAIL: not 2 fp16 ranks"; cat "$d/dp2.log"; exit 1; }
fail=0
for run in dp2 zero; do
  paste <(losses "$d/dp1.json" 1 12) <(losses "$d/$run.json" 1 12) | awk -v run=$run '
    { n++; d = $2 - $4; if (d < 0) d = -d; if (d > 1e-5 * ($2 < 0 ? -$2 : $2)) { bad++; print "FAIL", run, $0 } }
    END { if (n != 12) { print "FAIL", run, "has", n, "losses"; exit 1 } if (bad) exit 1; print "ok", run, n, "fp16 losses match 1 rank" }' || fail=1
done
mr dp2o --initial-loss-scale 268435456 --loss-scale-window 3
mr zeroo --initial-loss-scale 268435456 --loss-scale-window 3 --use-distributed-optimizer
scales "$d/dp2o.log" > "$d/a"; scales "$d/zeroo.log" > "$d/b"
[ "$(wc -l < "$d/a")" = 12 ] && grep -q "skipped iterations:   1" "$d/a" && grep -q "skipped iterations:   0" "$d/a" \
  || { echo "FAIL: the overflow run shows no skipped and updated iterations"; cat "$d/dp2o.log"; exit 1; }
cmp -s "$d/a" "$d/b" || { echo "FAIL: loss scales differ with the distributed optimizer"; paste "$d/a" "$d/b"; exit 1; }
paste <(losses "$d/dp2o.json" 1 12) <(losses "$d/zeroo.json" 1 12) | awk '
  { n++; d = $2 - $4; if (d < 0) d = -d; if (d > 1e-5 * ($2 < 0 ? -$2 : $2)) { bad++; print "FAIL overflow", $0 } }
  END { if (n != 12 || bad) exit 1; print "ok overflow: 12 loss scales and skips identical, losses match" }' || fail=1
exit $fail
