#!/usr/bin/env bash
# functional: --load of a checkpoint saved by a different model fails before training with
# torch's load_state_dict messages (a size mismatch names the parameter and both shapes; a
# parameter the checkpoint lacks is a missing key, a tensor the model lacks an unexpected one), and the checkpoint is left as it was. A
# schedule that differs from the checkpoint's fails as Megatron's OptimizerParamScheduler does,
# unless --override-opt_param-scheduler (this run's) or --use-checkpoint-opt_param-scheduler
# (the checkpoint's: the learning rates of the run that saved it). --use-checkpoint-args takes the
# model's shape from the checkpoint.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
tiny_run "$d/a.json" --exit-interval 4 --save "$d/ckpt" > "$d/save.log" 2>&1 \
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
expect "OptimizerParamScheduler: class input value 0.001 and checkpoint value 0.003 for learning rate do not match" --lr 1e-3
expect "class input value linear and checkpoint value cosine for learning rate decay style do not match" --lr-decay-style linear
expect "size mismatch for embedding.word_embeddings.weight: copying a param with shape [384, 64] from checkpoint, the shape in current model is [384, 128]" --hidden-size 128
expect 'Missing key(s) in state_dict: "decoder.layers.2.input_layernorm.weight"' --num-layers 3
expect 'Unexpected key(s) in state_dict: "decoder.layers.1.' --num-layers 1
# the checkpoint's schedule: iterations 5..12 log the learning rates of a run with its settings
tiny_run "$d/full.json" > "$d/full.log" 2>&1 || { echo "FAIL: the full run"; exit 1; }
lrs() { grep -E " iteration +([5-9]|1[0-2])/" "$1" | grep -o "iteration *[0-9]*\|learning rate: [^|]*" | tr '\n' ' '; }
tiny_run "$d/use.json" --load "$d/ckpt" --lr 1e-3 --lr-decay-style linear \
  --use-checkpoint-opt_param-scheduler > "$d/use.log" 2>&1 || { echo "FAIL: use-checkpoint run"; tail -5 "$d/use.log"; exit 1; }
[ -n "$(lrs "$d/full.log")" ] && [ "$(lrs "$d/full.log")" = "$(lrs "$d/use.log")" ] \
  || { echo "FAIL: --use-checkpoint-opt_param-scheduler's learning rates"; lrs "$d/full.log"; echo; lrs "$d/use.log"; fail=1; }
tiny_run "$d/over.json" --load "$d/ckpt" --lr 1e-3 --override-opt_param-scheduler > "$d/over.log" 2>&1 \
  || { echo "FAIL: override run"; tail -5 "$d/over.log"; exit 1; }
[ "$(lrs "$d/full.log")" != "$(lrs "$d/over.log")" ] || { echo "FAIL: --override-opt_param-scheduler kept the checkpoint's"; fail=1; }
[ $fail = 0 ] && echo "ok: the schedule's settings: refused when they differ, overridden, or the checkpoint's"
# --use-checkpoint-args: the saved model shape wins over the flags given (Megatron's force=True),
# so a run given another shape resumes the saved model: iterations 5..12 as the full run's
tiny_run "$d/uca.json" --num-layers 3 --hidden-size 128 --ffn-hidden-size 100 --swiglu \
  --load "$d/ckpt" --use-checkpoint-args > "$d/uca.log" 2>&1 \
  || { echo "FAIL: --use-checkpoint-args run"; tail -5 "$d/uca.log"; exit 1; }
want=$(losses "$d/full.json" 5 12); got=$(losses "$d/uca.json" 5 12)
[ "$(echo "$want" | wc -l)" = 8 ] && [ "$want" = "$got" ] \
  || { echo "FAIL: --use-checkpoint-args losses"; paste <(echo "$want") <(echo "$got"); fail=1; }
"$MT_PRETRAIN" "${tiny_args[@]}" --use-checkpoint-args > "$d/out" 2>&1
grep -q "use-checkpoint-args requires --load argument" "$d/out" || { echo "FAIL: --use-checkpoint-args without --load"; fail=1; }
[ $fail = 0 ] && echo "ok: --use-checkpoint-args resumed the saved shape"
exit $fail
