#!/usr/bin/env bash
# functional: bad command lines are refused before anything starts, with Megatron-style messages
# and exit status 2 (argparse's), and nothing is written.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
set +e  # the commands below are meant to fail
fail=0
expect() {  # message, then flags appended to the tiny model's
  local want=$1; shift
  "$MT_PRETRAIN" "${tiny_args[@]}" --save "$d/ckpt" "$@" > "$d/out" 2>&1; local rc=$?
  if [ $rc != 2 ] || ! grep -qF -- "$want" "$d/out"; then
    echo "FAIL: $* -> rc $rc, want 2 and '$want':"; cat "$d/out"; fail=1
  else echo "ok: $*: $(tail -1 "$d/out")"; fi
  [ ! -e "$d/ckpt" ] || { echo "FAIL: $* wrote a checkpoint"; fail=1; }
}
expect "unrecognized arguments: --no-such-flag" --no-such-flag
expect "argument --num-layers: invalid int value: 'two'" --num-layers two
expect "argument --lr: expected one argument" --lr
expect "cannot specify both fp16 and bf16" --bf16 --fp16
expect "can only specify one of lr-warmup-fraction and lr-warmup-iters" --lr-warmup-fraction 0.1
expect "max_position_embeddings (16) must be at least seq_length (32)" --max-position-embeddings 16
expect "argument --normalization: invalid choice: 'BatchNorm'" --normalization BatchNorm
expect "hidden size (64) must be divisible by the number of attention heads (5)" --num-attention-heads 5
expect "tensor, pipeline and context parallelism are not supported yet" --tensor-model-parallel-size 2
expect "NullTokenizer needs --vocab-size" --vocab-size 0
"$MT_PRETRAIN" --num-layers 2 > "$d/out" 2>&1; rc=$?
{ [ $rc = 2 ] && grep -q "hidden-size is required" "$d/out"; } || { echo "FAIL: missing required flag"; cat "$d/out"; fail=1; }
# an inconsistent batch is found once the world size is known, still before training
"$MT_PRETRAIN" "${tiny_args[@]}" --global-batch-size 7 > "$d/out" 2>&1; rc=$?
{ [ $rc != 0 ] && grep -q "global batch size (7) is not divisible by micro batch size (2) times data parallel size (1)" "$d/out"; } \
  || { echo "FAIL: global batch check"; cat "$d/out"; fail=1; }
exit $fail
