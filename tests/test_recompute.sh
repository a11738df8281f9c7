#!/usr/bin/env bash
# functional: activation recomputation changes memory, never the numbers. mt-pretrain's loss curve
# with --recompute-granularity full (uniform 1, uniform 2, block 1 over 3 layers) and selective
# (with and without --recompute-modules mlp_act and layernorm) is identical to the curve without, and Megatron's
# invalid combinations are refused before training.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
tiny_run "$d/base.json" --num-layers 3 > "$d/base.log"
want=$(losses "$d/base.json" 1 12)
[ "$(echo "$want" | wc -l)" = 12 ] || { echo "FAIL: expected 12 losses"; cat "$d/base.log"; exit 1; }
echo "without recomputation:"; echo "$want"
check() {  # name, flags...
  local name=$1; shift
  tiny_run "$d/$name.json" --num-layers 3 "$@" > "$d/$name.log" \
    || { echo "FAIL: $name did not run"; cat "$d/$name.log"; exit 1; }
  got=$(losses "$d/$name.json" 1 12)
  [ "$want" = "$got" ] || { echo "FAIL: $name losses differ:"; echo "$got"; exit 1; }
  echo "ok: $name identical"
}
check uniform1 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
check uniform2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
check block1 --recompute-granularity full --recompute-method block --recompute-num-layers 1
check selective --recompute-granularity selective
check mlp_act --recompute-granularity selective --recompute-modules core_attn mlp_act
check layernorm --recompute-granularity selective --recompute-modules layernorm mlp_act
refuse() {  # expected message, flags...
  local msg=$1; shift
  if tiny_run "$d/bad.json" --num-layers 3 "$@" > "$d/bad.log" 2>&1; then
    echo "FAIL: accepted $*"; exit 1
  fi
  grep -qF -e "$msg" "$d/bad.log" || { echo "FAIL: $* did not say '$msg':"; cat "$d/bad.log"; exit 1; }
  echo "ok: refused $*"
}
refuse 'recompute_method must be "block" or "uniform"' --recompute-granularity full
refuse 'recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 3' \
  --recompute-granularity full --recompute-method block --recompute-num-layers 4
refuse 'recompute method is not yet supported for selective' \
  --recompute-granularity selective --recompute-method uniform
refuse "invalid choice: 'partial'" --recompute-granularity partial
refuse '--recompute-modules needs --recompute-granularity selective' --recompute-modules mlp_act
refuse '--recompute-modules mlp is not supported yet' --recompute-granularity selective \
  --recompute-modules mlp
refuse 'Invalid choice for recompute_modules: attn' --recompute-granularity selective \
  --recompute-modules attn
# --logits-chunks (the output layer and cross-entropy in token slices): the same curve up to the
# order of the output layer's weight-gradient sums
tiny_run "$d/chunks.json" --num-layers 3 --logits-chunks 3 > "$d/chunks.log" \
  || { echo "FAIL: --logits-chunks 3 did not run"; cat "$d/chunks.log"; exit 1; }
got=$(losses "$d/chunks.json" 1 12)
paste <(echo "$want") <(echo "$got") | awk '{ r = ($2 - $4) / $2; if (r < 0) r = -r;  # iter loss
  if ($1 != $3 || r > 1e-5) { print "FAIL: --logits-chunks 3: " $3 " " $4 " against " $2; bad = 1 } }
  END { exit bad }' || exit 1
echo "ok: --logits-chunks 3 within 1e-5"
