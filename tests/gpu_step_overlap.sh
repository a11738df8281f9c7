#!/usr/bin/env bash
# gpu: mt-pretrain's optimizer update beside the next forward (each bucket's update on its own
# stream, the forward waiting at the bucket's level) gives bitwise the run with the update in line
# (MT_STEP_OVERLAP=0): training losses, grad norms, params norms, validation losses and the
# checkpoints. The update starts 20 ms late (MT_STEP_OVERLAP_DELAY_MS), so a forward that did not
# wait for it would read stale params; small buckets (several a layer, the embeddings' apart)
# make the forward wait at every level; evaluation and checkpoints read the params between steps;
# 4 micro-batches per iteration (the first forward waits, the others find the update done).
n=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$n" -ge 1 ] || { echo "SKIP: needs 1 GPU, found 0"; exit 77; }
export MT_TEST_DEVICE=cuda MT_TEST_FLAGS="--bf16 --deterministic-mode"
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
flags=(--ddp-bucket-size 3000 --eval-interval 4 --eval-iters 2 --log-params-norm --log-interval 1
       --save-interval 6)
MT_STEP_OVERLAP=0 tiny_run "$d/inline.json" "${flags[@]}" --save "$d/ck_inline" > "$d/inline.log" 2>&1 \
  || { echo "FAIL: the run without overlap"; tail -20 "$d/inline.log"; exit 1; }
MT_STEP_OVERLAP_DELAY_MS=20 tiny_run "$d/overlap.json" "${flags[@]}" --save "$d/ck_overlap" > "$d/overlap.log" 2>&1 \
  || { echo "FAIL: the run with overlap"; tail -20 "$d/overlap.log"; exit 1; }
want=$(losses "$d/inline.json" 1 12); got=$(losses "$d/overlap.json" 1 12)
echo "update in line:"; echo "$want"; echo "update beside the forward:"; echo "$got"
[ "$(echo "$want" | wc -l)" = 12 ] || { echo "FAIL: expected 12 losses"; exit 1; }
[ "$want" = "$got" ] || { echo "FAIL: losses differ"; exit 1; }
lines() { grep " iteration \|validation" "$1" | grep -o 'iteration *[0-9]*\|lm loss[^|]*\|grad norm: [^|]*\|params norm: [^|]*' | tr '\n' ' '; }
[ -n "$(lines "$d/inline.log" | grep -o 'params norm' | head -1)" ] || { echo "FAIL: no params norm logged"; exit 1; }
[ "$(grep -c validation "$d/inline.log")" -ge 3 ] || { echo "FAIL: no validation lines"; exit 1; }
[ "$(lines "$d/inline.log")" = "$(lines "$d/overlap.log")" ] \
  || { echo "FAIL: logged losses, grad norms, params norms or validation losses differ"; lines "$d/inline.log"; echo; lines "$d/overlap.log"; exit 1; }
for it in iter_0000006 iter_0000012; do
  cmp "$d/ck_inline/$it/rank_00000.safetensors" "$d/ck_overlap/$it/rank_00000.safetensors" \
    || { echo "FAIL: $it checkpoints differ"; exit 1; }
done
echo "ok: identical with the update in line and beside the next forward"
