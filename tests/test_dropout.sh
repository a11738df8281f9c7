#!/usr/bin/env bash
# functional: --hidden-dropout and --attention-dropout (Megatron's). The masks themselves are
# checked against independent references in the libraries (test_dropout: randomgen's Philox;
# test_attn and hf_golden_*: torch and transformers given those masks). Here, mt-pretrain:
# 1. Dropout changes the training losses; each kind alone changes them too; without the flags
#    both are 0.1 (Megatron's default).
# 2. The masks belong to the samples (their global indices), not to micro-batch rows: with
#    --calculate-per-token-loss (whose loss does not depend on the micro-batch split) a global
#    batch of 8 as 4 micro-batches of 2 or 2 of 4 gives bitwise the same losses (CPU only: on a
#    GPU GEMMs of other shapes round differently).
# 3. Full recomputation draws the forward's masks again, and selective recomputation (mlp_act,
#    layernorm: the GEMMs with the bias gradients of the dropped outputs) changes nothing: bitwise
#    the same losses.
# 4. Validation runs without dropout: --eval-iters over a model that has not trained (lr 0)
#    gives the no-dropout validation loss, bitwise.
# 5. A probability outside [0, 1) is refused before training.
# "cuda" as the argument: the same on a GPU (bf16; the attention on its generic kernels), and
# bitwise the same with and without CUDA graphs (each micro-batch's sample ids replayed).
MT_CUDA_FLAGS="--bf16 --deterministic-mode"
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
run() {  # NAME [flags]
  local n=$1; shift
  tiny_run "$d/$n.json" "$@" > "$d/$n.log" 2>&1 || { echo "FAIL: run $n"; cat "$d/$n.log"; exit 1; }
}
drop=(--hidden-dropout 0.1 --attention-dropout 0.1)
run none
run both "${drop[@]}"
run hidden --hidden-dropout 0.1
run attn --attention-dropout 0.1
for v in both hidden attn; do
  [ "$(losses "$d/$v.json" 1 1)" != "$(losses "$d/none.json" 1 1)" ] \
    || { echo "FAIL: $v dropout did not change the first loss"; exit 1; }
done
awk '{ if ($2 != $2 + 0 || $2 > 6.5) exit 1 }' <(losses "$d/both.json" 1 12) \
  || { echo "FAIL: losses with dropout"; losses "$d/both.json" 1 12; exit 1; }
echo "ok: dropout changes the losses (iteration 1: none $(losses "$d/none.json" 1 1 | cut -d' ' -f2), hidden + attention $(losses "$d/both.json" 1 1 | cut -d' ' -f2))"
# Megatron's default: both 0.1 (tiny_args starts with pretrain_common.sh's zeros, left out here)
[ "${tiny_args[*]:0:4}" = "${nodrop[*]}" ] || { echo "FAIL: tiny_args does not start with nodrop"; exit 1; }
"$MT_PRETRAIN" "${tiny_args[@]:4}" --golden-values-out "$d/default.json" > "$d/default.log" 2>&1 \
  || { echo "FAIL: run default"; cat "$d/default.log"; exit 1; }
[ "$(losses "$d/default.json" 1 12)" = "$(losses "$d/both.json" 1 12)" ] \
  || { echo "FAIL: the default is not --hidden-dropout 0.1 --attention-dropout 0.1"; exit 1; }
echo "ok: the default is Megatron's (hidden and attention dropout 0.1)"
if [ "${1:-}" != cuda ]; then  # (on a GPU the GEMMs of other shapes round differently)
  run tok2 "${drop[@]}" --calculate-per-token-loss --micro-batch-size 2
  run tok4 "${drop[@]}" --calculate-per-token-loss --micro-batch-size 4
  [ "$(losses "$d/tok2.json" 1 12)" = "$(losses "$d/tok4.json" 1 12)" ] \
    || { echo "FAIL: the masks depend on the micro-batch split"; paste <(losses "$d/tok2.json" 1 12) <(losses "$d/tok4.json" 1 12); exit 1; }
  echo "ok: micro-batches of 2 and of 4: bitwise the same losses"
fi
run full "${drop[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
[ "$(losses "$d/full.json" 1 12)" = "$(losses "$d/both.json" 1 12)" ] \
  || { echo "FAIL: full recomputation changes the losses with dropout"; exit 1; }
echo "ok: full recomputation: bitwise the same losses"
# (on a GPU mlp_act at this tiny shape is not bitwise even without dropout: layernorm only there)
mods=(mlp_act layernorm); [ "${1:-}" = cuda ] && mods=(layernorm)
run sel "${drop[@]}" --recompute-granularity selective --recompute-modules "${mods[@]}"
[ "$(losses "$d/sel.json" 1 12)" = "$(losses "$d/both.json" 1 12)" ] \
  || { echo "FAIL: selective recomputation (${mods[*]}) changes the losses with dropout"; exit 1; }
echo "ok: selective recomputation (${mods[*]}): bitwise the same losses"
val() { grep "validation loss at iteration 4 on validation set" "$d/$1.log" | sed 's/.*lm loss value: \([^ ]*\).*/\1/' | tr '\n' ' '; }
run val0 --lr 0 --eval-interval 4 --eval-iters 2 --train-iters 4
run val1 --lr 0 --eval-interval 4 --eval-iters 2 --train-iters 4 "${drop[@]}"
[ -n "$(val val0)" ] && [ "$(val val0)" = "$(val val1)" ] \
  || { echo "FAIL: validation with dropout configured: $(val val1), without $(val val0)"; exit 1; }
[ "$(losses "$d/val0.json" 1 1)" != "$(losses "$d/val1.json" 1 1)" ] \
  || { echo "FAIL: lr 0 training loss unchanged by dropout"; exit 1; }
echo "ok: validation without dropout ($(val val1))"
for bad in "--hidden-dropout 1" "--attention-dropout -0.1" "--hidden-dropout 1.5"; do
  if tiny_run "$d/bad.json" $bad > "$d/bad.log" 2>&1; then echo "FAIL: accepted $bad"; exit 1; fi
  grep -q "dropout probability has to be in \[0, 1)" "$d/bad.log" \
    || { echo "FAIL: $bad:"; cat "$d/bad.log"; exit 1; }
done
echo "ok: probabilities outside [0, 1) refused"
if [ "${1:-}" = cuda ]; then
  MT_CUDA_GRAPHS=0 run eager "${drop[@]}"
  [ "$(losses "$d/eager.json" 1 12)" = "$(losses "$d/both.json" 1 12)" ] \
    || { echo "FAIL: CUDA graphs change the losses with dropout"; exit 1; }
  echo "ok: bitwise the same with and without CUDA graphs"
fi
