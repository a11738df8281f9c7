#!/usr/bin/env bash
# functional: --load of a checkpoint saved by a different model fails before training with
# torch's load_state_dict messages (a size mismatch names the parameter and both shapes; a
# parameter the checkpoint lacks is a missing key), and the checkpoint is left as it was.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
tiny_run "$d/a.json" --train-iters 4 --save "$d/ckpt" > "$d/save.log" 2>&1 \
  || { echo "FAIL: the saving run"; tail -5 "$d/save.log"; exit 1; }
sum() { find "$d/ckpt" -type f | sort | xargs md5sum; }
before=$(sum)
fail=0
expect() {  # message, then flags replacing the tiny model's
  local want=$1; shift
  "$MT_PRETRAIN" "${tiny_args[@]}" "$@" --load "$d/ckpt" --save "$d/ckpt" --save-interval 1 \
    > "$d/out" 2>&1; local rc=$?
  if [ $rc = 0 ] || ! grep -qF -- "$want" "$d/out"; then
    echo "FAIL: $* -> rc $rc, want an error with '$want':"; tail -5 "$d/out"; fail=1
  else echo "ok: $*: $(tail -1 "$d/out")"; fi
  grep -qE " iteration +[0-9]+/" "$d/out" && { echo "FAIL: $* trained"; fail=1; }
  [ "$(sum)" = "$before" ] || { echo "FAIL: $* changed the checkpoint"; fail=1; }
}
set +e
expect "size mismatch for embedding.word_embeddings.weight: copying a param with shape [384, 64] from checkpoint, the shape in current model is [384, 128]" --hidden-size 128
expect 'Missing key(s) in state_dict: "decoder.layers.2.input_layernorm.weight"' --num-layers 3
exit $fail
