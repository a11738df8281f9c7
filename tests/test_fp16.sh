#!/usr/bin/env bash
# functional: --fp16 with Megatron's loss scaling.
# (a) fp16 training (a scale that never overflows) follows the fp32 run: at every iteration the
#     loss differs, and by less than 2^-10 relative (twice fp16's unit roundoff 2^-11: the loss is
#     a mean of terms computed from fp16-rounded activations).
# (b) Overflow: from --initial-loss-scale 2^28 the scaled gradients overflow fp16. Every logged
#     loss scale must follow DynamicGradScaler.update (re-implemented below in awk from the skip
#     flags: hysteresis 2, window 3, x0.5 / x2), skipped iterations print no grad norm and do not
#     step the LR schedule (the LR of each line is the fp32 run's after as many updates), and
#     they leave the model unchanged: the losses up to the first update equal an --lr 0 run's.
# (c) --min-loss-scale bounds the backoff; a run that overflows at every iteration never changes
#     the model (all losses equal the --lr 0 run's).
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
run() { local name=$1; shift; tiny_run "$d/$name.json" --log-interval 1 "$@" > "$d/$name.log" 2>&1 \
  || { cat "$d/$name.log"; exit 1; }; }
# per logged iteration: "iteration lr scale skipped grad_norm_or_-"
fields() {
  awk -F'|' '/ iteration +[0-9]+\// {
    it = $1; sub(/.*iteration +/, "", it); sub(/\/.*/, "", it); lr = "-"; sc = "-"; sk = "-"; gn = "-"
    for (i = 2; i <= NF; i++) {
      f = $i; sub(/^ +/, "", f); sub(/ +$/, "", f)
      if (f ~ /^learning rate: /) { sub(/^learning rate: /, "", f); lr = f }
      if (f ~ /^loss scale: /) { sub(/^loss scale: /, "", f); sc = f }
      if (f ~ /^grad norm: /) { sub(/^grad norm: /, "", f); gn = f }
      if (f ~ /^number of skipped iterations: /) { sub(/^number of skipped iterations: +/, "", f); sk = f }
    }
    print it, lr, sc, sk, gn }' "$1"
}

# (a)
run f32
run f16 --fp16 --initial-loss-scale 4096
grep -q "cpu, fp16," "$d/f16.log" || { echo "FAIL: not an fp16 run"; cat "$d/f16.log"; exit 1; }
paste <(losses "$d/f32.json" 1 12) <(losses "$d/f16.json" 1 12) | awk '
  { n++; r = ($4 - $2) / $2; if (r < 0) r = -r; if (r > max) max = r
    if (r >= 2^-10) { bad++; print "FAIL: iteration", $1, "fp32", $2, "fp16", $4, "relative", r } }
  END { if (n != 12) { print "FAIL: expected 12 losses, got", n; exit 1 }
        if (bad) exit 1
        if (max == 0) { print "FAIL: fp16 losses are the fp32 ones: fp16 not exercised"; exit 1 }
        printf "ok (a): 12 fp16 losses within %.1e of fp32 (max relative %.2e)\n", 2^-10, max }'
[ "$(fields "$d/f16.log" | awk '$4 != 0' | wc -l)" = 0 ] || { echo "FAIL: (a) skipped iterations"; exit 1; }

# (b)
run ovf --fp16 --initial-loss-scale 268435456 --loss-scale-window 3
run lr0 --fp16 --initial-loss-scale 4096 --lr 0
fields "$d/ovf.log" > "$d/ovf.f"
fields "$d/f32.log" > "$d/f32.f"
echo "iteration lr scale skipped grad-norm:"; cat "$d/ovf.f"
awk -v s=268435456 -v hyst=2 -v win=3 '
  FNR == NR { lr0[$1] = $2; next }                    # the fp32 run: LR after n schedule steps
  BEGIN { ht = hyst; gt = 0; good = 0; lr0[0] = "0.000000E+00" }  # --lr-warmup-init 0
  { n++
    if ($4 == 1) { gt = 0; ht--; if (ht <= 0) { s = s / 2; if (s < 1) s = 1 } }
    else if ($4 == 0) { good++; gt++; if (gt == win) { gt = 0; ht = hyst; s = s * 2; grew++ } }
    else { print "FAIL: iteration", $1, "skipped count", $4; bad++ }
    if ($4 == 1 && good == 0) lead++
    if ($4 == 1 && good > 0) late++
    if (sprintf("%.1f", s) != $3) { print "FAIL: iteration", $1, "loss scale", $3, "want", sprintf("%.1f", s); bad++ }
    if (($4 == 1) != ($5 == "-")) { print "FAIL: iteration", $1, "grad norm", $5, "skipped", $4; bad++ }
    if ($2 != lr0[good]) { print "FAIL: iteration", $1, "learning rate", $2, "want", lr0[good], "(after", good, "updates)"; bad++ }
  }
  END { if (n != 12) { print "FAIL: 12 log lines expected, got", n; exit 1 }
        if (bad) exit 1
        if (lead < 2 || good < 1 || !grew || !late) {
          print "FAIL: the run does not show backoff, growth and a later overflow (lead", lead, "good", good, "grew", grew, "late", late ")"; exit 1 }
        print "ok (b): 12 loss scales follow DynamicGradScaler;", lead, "leading skips,", good, "updates,", late, "later skips" }' \
  "$d/f32.f" "$d/ovf.f"
# k leading skips leave the model as it was; the first update (iteration k+1) runs at the schedule's
# step 0, LR 0 (warm-up from --lr-warmup-init 0), so the model first changes at iteration k+2
k=$(awk '$4 == 1 { k++; next } { exit } END { print k + 0 }' "$d/ovf.f")
[ "$(losses "$d/ovf.json" 1 $((k + 2)))" = "$(losses "$d/lr0.json" 1 $((k + 2)))" ] \
  || { echo "FAIL: the $k skipped iterations changed the model"; paste <(losses "$d/ovf.json" 1 12) <(losses "$d/lr0.json" 1 12); exit 1; }
[ "$(losses "$d/ovf.json" $((k + 3)) $((k + 3)))" != "$(losses "$d/lr0.json" $((k + 3)) $((k + 3)))" ] \
  || { echo "FAIL: the second update after the skips did not change the model"; exit 1; }
grep -q "number of nan iterations:   0 |" "$d/ovf.log" && ! grep -q "number of nan iterations: *[1-9]" "$d/ovf.log" \
  || { echo "FAIL: overflowing gradients with a finite loss are no nan iterations"; exit 1; }
echo "ok (b): losses 1..$((k + 2)) equal the --lr 0 run's, $((k + 3)) differs"

# (c)
run floor --fp16 --initial-loss-scale 1099511627776 --min-loss-scale 274877906944 --hysteresis 1
want=$(for i in $(seq 1 12); do e=$((40 - i)); [ $e -lt 38 ] && e=38; echo "$i $(awk -v e=$e 'BEGIN { printf "%.1f", 2^e }') 1"; done)
got=$(fields "$d/floor.log" | awk '{ print $1, $3, $4 }')
[ "$got" = "$want" ] || { echo "FAIL: (c) loss scales"; paste <(echo "$want") <(echo "$got"); exit 1; }
[ "$(losses "$d/floor.json" 1 12)" = "$(losses "$d/lr0.json" 1 12)" ] \
  || { echo "FAIL: (c) 12 skipped iterations changed the model"; exit 1; }
echo "ok (c): the scale stops at --min-loss-scale; 12 skipped iterations left the model unchanged"
