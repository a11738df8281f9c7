#!/usr/bin/env bash
# functional: --reset-attention-mask (Megatron's document masks: a token attends only to the
# tokens of its own document, the EOD ending it included). What each token may see comes from
# mt_data_doc_starts (checked against megatron-core's attention_mask in test_gpt) and the model's
# key starts (test_doc_mask: a packed document gives exactly the logits and gradients it gives
# alone). Here, the plumbing through mt-pretrain:
# 1. On short documents (pretrain_common.sh's v corpus) the mask changes the first loss.
# 2. With --no-create-attention-mask-in-dataloader Megatron has no mask to reset: a warning, and
#    the losses are bitwise the default's.
# 3. On a corpus without EOD tokens the losses are bitwise the default's.
# "cuda" as the argument: the same on a GPU (bf16, head dim 64: the tensor-core kernels), and the
# CUDA graph's replays read each micro-batch's key starts (bitwise the run without graphs).
MT_CUDA_FLAGS="--bf16 --deterministic-mode"
source "$(dirname "$0")/pretrain_common.sh"
: "${MT_PREPROCESS:?}"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
eod_corpus "$d"
shape=(); [ "${1:-}" = cuda ] && shape=(--hidden-size 128 --num-attention-heads 2)
run() { eod_run "$d" "$@" "${shape[@]}"; } # NAME DATA ITERS [flags]
run v_plain v 8
run v_docs v 8 --reset-attention-mask
run v_docs_pos v 8 --reset-attention-mask --reset-position-ids
run v_nomask v 8 --reset-attention-mask --no-create-attention-mask-in-dataloader
echo "iteration 1: default $(losses "$d/v_plain.json" 1 1), --reset-attention-mask $(losses "$d/v_docs.json" 1 1)"
[ "$(losses "$d/v_docs.json" 1 1)" != "$(losses "$d/v_plain.json" 1 1)" ] \
  || { echo "FAIL: --reset-attention-mask did not change the loss"; exit 1; }
[ "$(losses "$d/v_docs_pos.json" 1 1)" != "$(losses "$d/v_docs.json" 1 1)" ] \
  || { echo "FAIL: --reset-position-ids changed nothing beside --reset-attention-mask"; exit 1; }
awk '{ if ($2 != $2 + 0 || $2 > 7) exit 1 }' <(losses "$d/v_docs_pos.json" 1 8) \
  || { echo "FAIL: losses with document masks"; losses "$d/v_docs_pos.json" 1 8; exit 1; }
echo "ok: --reset-attention-mask changes the loss on short documents"
grep -q "WARNING: --reset-attention-mask does nothing with --no-create-attention-mask-in-dataloader" "$d/v_nomask.log" \
  || { echo "FAIL: no warning"; cat "$d/v_nomask.log"; exit 1; }
[ "$(losses "$d/v_nomask.json" 1 8)" = "$(losses "$d/v_plain.json" 1 8)" ] \
  || { echo "FAIL: with --no-create-attention-mask-in-dataloader the losses differ"; exit 1; }
echo "ok: with --no-create-attention-mask-in-dataloader a warning and the default's losses"
run n_plain n 8
run n_docs n 8 --reset-attention-mask
[ "$(losses "$d/n_docs.json" 1 8)" = "$(losses "$d/n_plain.json" 1 8)" ] \
  || { echo "FAIL: --reset-attention-mask without EOD tokens changed the losses"; exit 1; }
echo "ok: --reset-attention-mask without EOD tokens: bitwise the default"
if [ "${1:-}" = cuda ]; then
  MT_CUDA_GRAPHS=0 run v_eager v 8 --reset-attention-mask --reset-position-ids
  [ "$(losses "$d/v_eager.json" 1 8)" = "$(losses "$d/v_docs_pos.json" 1 8)" ] \
    || { echo "FAIL: CUDA graphs change the losses with document masks"; paste <(losses "$d/v_eager.json" 1 8) <(losses "$d/v_docs_pos.json" 1 8); exit 1; }
  echo "ok: bitwise the same with and without CUDA graphs"
fi
