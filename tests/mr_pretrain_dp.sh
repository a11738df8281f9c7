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
# --overlap-grad-reduce with many small buckets: each bucket's all-reduce (reduce-scatter) starts
# from the backward; a bucket started before its gradients are final would change the losses.
for v in dp2 zero; do
  extra=(); [ $v = zero ] && extra=(--use-distributed-optimizer)
  "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${extra[@]}" --overlap-grad-reduce \
    --ddp-bucket-size 3000 --golden-values-out "$d/$v-ov.json" > "$d/$v-ov.log" 2>&1 \
    || { cat "$d/$v-ov.log"; exit 1; }
  "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${extra[@]}" \
    --ddp-bucket-size 3000 --golden-values-out "$d/$v-nov.json" > "$d/$v-nov.log" 2>&1 \
    || { cat "$d/$v-nov.log"; exit 1; }
  [ "$(losses "$d/$v-ov.json" 1 12)" = "$(losses "$d/$v-nov.json" 1 12)" ] \
    || { echo "FAIL: $v with --overlap-grad-reduce differs"; paste <(losses "$d/$v-nov.json" 1 12) <(losses "$d/$v-ov.json" 1 12); exit 1; }
  echo "ok $v overlap: 12 losses identical to the reduction after the backward"
done
# the output layer in token slices (--logits-chunks) writes its weight gradient before the
# backward proper; overlapped small buckets must still wait for it
for ov in "" --overlap-grad-reduce; do
  "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" --use-distributed-optimizer $ov --ddp-bucket-size 3000 \
    --logits-chunks 3 --golden-values-out "$d/lc$ov.json" > "$d/lc.log" 2>&1 || { cat "$d/lc.log"; exit 1; }
done
[ "$(losses "$d/lc--overlap-grad-reduce.json" 1 12)" = "$(losses "$d/lc.json" 1 12)" ] \
  || { echo "FAIL: --logits-chunks 3 with --overlap-grad-reduce differs"; exit 1; }
echo "ok zero overlap with --logits-chunks 3: 12 losses identical"
# --overlap-param-gather: each bucket's all-gather of the updated params waits for the forward to
# reach its level (on the host the gather runs there); a bucket gathered after the forward read
# it would change the losses. Evaluation and --log-params-norm read the params between steps.
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" --use-distributed-optimizer --overlap-grad-reduce \
  --overlap-param-gather --ddp-bucket-size 3000 --eval-interval 4 --eval-iters 1 --log-params-norm \
  --golden-values-out "$d/zpg.json" > "$d/zpg.log" 2>&1 || { cat "$d/zpg.log"; exit 1; }
[ "$(losses "$d/zpg.json" 1 12)" = "$(losses "$d/zero-nov.json" 1 12)" ] \
  || { echo "FAIL: --overlap-param-gather differs"; paste <(losses "$d/zero-nov.json" 1 12) <(losses "$d/zpg.json" 1 12); exit 1; }
grep -q "params norm" "$d/zpg.log" || { echo "FAIL: no params norm"; cat "$d/zpg.log"; exit 1; }
echo "ok zero overlap-param-gather: 12 losses identical"
# --grad-reduce-in-bf16 (all-reduce, and overlapped reduce-scatters of many buckets): the grads
# are rounded to bf16 for the reduction, so the losses move off the fp32 ones, but stay within
# bf16's rounding of DP=1's (relative 1e-2).
for v in dp2 zero; do
  extra=(); [ $v = zero ] && extra=(--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000)
  "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${extra[@]}" --grad-reduce-in-bf16 \
    --golden-values-out "$d/$v-bf16.json" > "$d/$v-bf16.log" 2>&1 || { cat "$d/$v-bf16.log"; exit 1; }
  [ "$(losses "$d/$v-bf16.json" 2 12)" != "$(losses "$d/dp2.json" 2 12)" ] \
    || { echo "FAIL: $v --grad-reduce-in-bf16 gave the fp32 reduction's losses"; exit 1; }
  paste <(losses "$d/dp1.json" 1 12) <(losses "$d/$v-bf16.json" 1 12) | awk -v run=$v-bf16 '
    { n++; d = $2 - $4; if (d < 0) d = -d; if (d > 1e-2 * ($2 < 0 ? -$2 : $2)) { bad++; print "FAIL", run, $0 } }
    END { if (n != 12 || bad) exit 1; print "ok", run, n, "losses within 1e-2 of DP=1" }' || exit 1
done
grep -q "2 rank(s)" "$d/dp2.log" || { echo "FAIL: not 2 ranks"; cat "$d/dp2.log"; exit 1; }
# Resume with the distributed optimizer: 2 ranks to iteration 6, then 2 ranks resume (bitwise the
# uninterrupted run) and 1 rank resumes (optimizer shards resharded from DP=2 to DP=1).
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" --use-distributed-optimizer --exit-interval 6 \
  --save "$d/zck" > "$d/zfirst.log" 2>&1 || { cat "$d/zfirst.log"; exit 1; }
cp -r "$d/zck" "$d/zck1"
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" --use-distributed-optimizer --load "$d/zck" \
  --golden-values-out "$d/zresume.json" > "$d/zresume.log" 2>&1 || { cat "$d/zresume.log"; exit 1; }
tiny_run "$d/zresume1.json" --use-distributed-optimizer --load "$d/zck1" > "$d/zresume1.log" 2>&1 \
  || { cat "$d/zresume1.log"; exit 1; }
[ "$(losses "$d/zero.json" 7 12)" = "$(losses "$d/zresume.json" 7 12)" ] \
  || { echo "FAIL: ZeRO-1 resume differs"; paste <(losses "$d/zero.json" 7 12) <(losses "$d/zresume.json" 7 12); exit 1; }
echo "ok zero resume: 6 losses identical"
fail=0
for run in dp2 zero zresume1; do
  from=1; [ $run = zresume1 ] && from=7
  paste <(losses "$d/dp1.json" $from 12) <(losses "$d/$run.json" $from 12) | awk -v run=$run -v want=$((13 - from)) '
    { n++; d = $2 - $4; if (d < 0) d = -d; if (d > 1e-5 * ($2 < 0 ? -$2 : $2)) { bad++; print "FAIL", run, $0 } }
    END { if (n != want) { print "FAIL", run, "has", n, "losses"; exit 1 } if (bad) exit 1; print "ok", run, n, "losses match" }' || fail=1
done
exit $fail
