#!/usr/bin/env bash
# functional: --eod-mask-loss, --calculate-per-token-loss and --reset-position-ids (Megatron's
# loss_mask, its per-token loss reduction and its position_ids).
# 1. On "k EOD k EOD ..." (pretrain_common.sh's eod_corpus) each k predicts EOD exactly and each
#    EOD predicts a random k (ln 100 nats): unmasked, the loss cannot fall below ln(100)/2 = 2.30;
#    with the EOD inputs masked only the predictable half counts and it goes to ~0 (a mask on EOD
#    *targets* instead would leave the unpredictable half: >= 4.6).
# 2. Without masked tokens the per-token reduction is the mean's: bitwise the same 12 losses.
# 3. The per-token loss is one sum over the global batch's counted tokens: splitting the batch
#    into 4 micro-batches of 2 or 1 of 8 gives the same losses (relative 1e-5), where the default
#    (a mean of micro-batch means) does not, since the counts differ between micro-batches.
# 4. --reset-position-ids restarts positions after each EOD: on "k EOD k EOD ..." every position
#    is 0 or 1, so the learned position table's rows 2..31 get no gradient: iteration 1's zero
#    count (--log-num-zeros-in-grad) exceeds the default run's by exactly 30 x 64; on a corpus
#    without EOD tokens the losses are bitwise the default's.
#    "cuda" as the argument: the same on a GPU (fp32, deterministic kernels; CUDA graphs replay the
#    per-token loss's constant gradient).
MT_CUDA_FLAGS="--deterministic-mode"
source "$(dirname "$0")/pretrain_common.sh"
: "${MT_PREPROCESS:?}"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
eod_corpus "$d"
run() { eod_run "$d" "$@"; } # NAME DATA ITERS [flags]
last() { losses "$1" "$2" "$2" | awk '{ print $2 }'; }
run k_plain k 40
run k_mask k 40 --eod-mask-loss
run k_mask_pt k 40 --eod-mask-loss --calculate-per-token-loss
p=$(last "$d/k_plain.json" 40) m=$(last "$d/k_mask.json" 40) t=$(last "$d/k_mask_pt.json" 40)
echo "iteration 40: unmasked $p, --eod-mask-loss $m, with --calculate-per-token-loss $t"
awk -v p="$p" -v m="$m" -v t="$t" 'BEGIN { exit !(p > 2.0 && m < 0.5 && t < 0.5) }' \
  || { echo "FAIL: want unmasked > 2.0 (floor ln(100)/2) and masked < 0.5"; exit 1; }
echo "ok: masking EOD inputs leaves the predictable half"

run v_mean v 12
run v_pt v 12 --calculate-per-token-loss
[ "$(losses "$d/v_pt.json" 1 12)" = "$(losses "$d/v_mean.json" 1 12)" ] \
  || { echo "FAIL: per-token loss without masked tokens differs"; paste <(losses "$d/v_mean.json" 1 12) <(losses "$d/v_pt.json" 1 12); exit 1; }
echo "ok: --calculate-per-token-loss without masked tokens: 12 losses identical"

for mode in mean pt; do
  extra=(--eod-mask-loss); [ $mode = pt ] && extra+=(--calculate-per-token-loss)
  run "v_${mode}_mb2" v 12 "${extra[@]}"
  run "v_${mode}_mb8" v 12 "${extra[@]}" --micro-batch-size 8
done
[ "$(losses "$d/v_mean_mb2.json" 1 1)" != "$(losses "$d/v_mean.json" 1 1)" ] \
  || { echo "FAIL: --eod-mask-loss did not change the loss"; exit 1; }
rel_close "$d/v_pt_mb2.json" "$d/v_pt_mb8.json" 1 12 1e-5 \
  || { echo "FAIL: per-token loss depends on the micro-batch split"; exit 1; }
echo "ok: --calculate-per-token-loss: micro-batches of 2 and of 8 give the same losses"
! rel_close "$d/v_mean_mb2.json" "$d/v_mean_mb8.json" 2 12 3e-5 \
  || { echo "FAIL: the mean of micro-batch means should depend on the split"; exit 1; }
echo "ok: the default (mean of micro-batch means) depends on the split, as Megatron's"

run k_pos0 k 3 --log-num-zeros-in-grad
run k_pos1 k 3 --log-num-zeros-in-grad --reset-position-ids
z0=$(jq '.["num-zeros"].values["1"]' "$d/k_pos0.json") z1=$(jq '.["num-zeros"].values["1"]' "$d/k_pos1.json")
[ "$(awk -v a="$z0" -v b="$z1" 'BEGIN { print b - a }')" = 1920 ] \
  || { echo "FAIL: zero grads $z0 -> $z1 with --reset-position-ids, want +1920 (30 rows x 64)"; exit 1; }
echo "ok: --reset-position-ids: $z0 -> $z1 zero grads (position rows 2..31 unused)"
run n_plain n 8
run n_pos n 8 --reset-position-ids
[ "$(losses "$d/n_pos.json" 1 8)" = "$(losses "$d/n_plain.json" 1 8)" ] \
  || { echo "FAIL: --reset-position-ids without EOD tokens changed the losses"; exit 1; }
[ "$(losses "$d/k_pos1.json" 1 1)" != "$(losses "$d/k_pos0.json" 1 1)" ] \
  || { echo "FAIL: --reset-position-ids changed nothing with EOD tokens"; exit 1; }
echo "ok: --reset-position-ids: bitwise the default without EOD tokens, not with them"
