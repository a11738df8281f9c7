#!/usr/bin/env bash
# functional: sliding-window attention (Megatron's --window-size L,0: each token attends itself
# and the L tokens before). The window's masks come from libs/model's key starts (hf_golden_
# mistral_window: transformers' Mistral with a sliding window); here, the plumbing through
# mt-pretrain:
# 1. A window of 4 changes the losses; -1 (none) and a window spanning the sequence (31 of 32)
#    give the default's losses bitwise.
# 2. With --reset-attention-mask both masks apply: on short documents the window and the
#    documents each change the losses; without EOD tokens it is bitwise the window alone, and a
#    window spanning the sequence is bitwise the documents alone.
# 3. Bad values and --context-parallel-size are refused; the window is restored from a
#    checkpoint's args (--use-checkpoint-args), the resumed steps bitwise the uninterrupted run's.
# 4. With mt-convert ($MT_CONVERT): a Llama-shaped run exports as Hugging Face Mistral with
#    sliding_window L + 1 and imports back (the same fine-tuning losses). With mt-generate
#    ($MT_GENERATE): past the window it runs without a KV cache, within it with one, both giving
#    the uncached run's tokens.
# "cuda" as the argument: the same on a GPU (bf16, head dim 64: the tensor-core kernels), and
# the CUDA graph's replays are bitwise the run without graphs.
MT_CUDA_FLAGS="--bf16 --deterministic-mode"
source "$(dirname "$0")/pretrain_common.sh"
: "${MT_PREPROCESS:?}"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
eod_corpus "$d"
shape=(); [ "${1:-}" = cuda ] && shape=(--hidden-size 128 --num-attention-heads 2)
llama=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights)
run() { eod_run "$d" "$@" "${llama[@]}" "${shape[@]}"; } # NAME DATA ITERS [flags]
same() { [ "$(losses "$d/$1.json" 1 8)" = "$(losses "$d/$2.json" 1 8)" ] || { echo "FAIL: $3"; paste <(losses "$d/$1.json" 1 8) <(losses "$d/$2.json" 1 8); exit 1; }; }
differ() { [ "$(losses "$d/$1.json" 1 1)" != "$(losses "$d/$2.json" 1 1)" ] || { echo "FAIL: $3"; exit 1; }; }
run k_plain k 8
run k_w4 k 8 --window-size 4,0
run k_none k 8 --window-size "(-1, 0)"
run k_w31 k 8 --window-size 31,0
differ k_w4 k_plain "--window-size 4,0 changed nothing"
same k_none k_plain "--window-size -1,0 is not the default"
same k_w31 k_plain "a window spanning the sequence is not the default"
echo "ok: a window of 4 changes the losses ($(losses "$d/k_plain.json" 1 1 | awk '{print $2}') -> $(losses "$d/k_w4.json" 1 1 | awk '{print $2}')); -1 and 31 are the default's bitwise"
run v_docs v 8 --reset-attention-mask
run v_w4 v 8 --window-size 4,0
run v_docs_w4 v 8 --reset-attention-mask --window-size 4,0
run v_docs_w31 v 8 --reset-attention-mask --window-size 31,0
differ v_docs_w4 v_docs "the window changed nothing beside the documents"
differ v_docs_w4 v_w4 "the documents changed nothing beside the window"
same v_docs_w31 v_docs "a spanning window changed the documents' losses"
run n_w4 n 8 --window-size 4,0
run n_docs_w4 n 8 --window-size 4,0 --reset-attention-mask
same n_docs_w4 n_w4 "document masks without EOD tokens changed the window's losses"
echo "ok: with --reset-attention-mask both masks apply"
if [ "${1:-}" = cuda ]; then
  MT_CUDA_GRAPHS=0 run v_eager v 8 --reset-attention-mask --window-size 4,0
  same v_eager v_docs_w4 "CUDA graphs change the losses with a window"
  MT_CUDA_GRAPHS=0 run k_w4_eager k 8 --window-size 4,0
  same k_w4_eager k_w4 "CUDA graphs change the window's losses"
  echo "ok: bitwise the same with and without CUDA graphs"
fi
refused llama "--window-size 4,2|only causal windows (R = 0)" \
  "--window-size four|invalid tuple value: 'four'" \
  "--window-size 4|invalid tuple value: '4'" \
  "--window-size -2,0|L must be -1 (no window) or more" \
  "--window-size 4,0 --context-parallel-size 2|--window-size with --context-parallel-size"
echo "ok: bad windows refused"
run k_ck k 8 --window-size 4,0 --exit-interval 4 --save "$d/ck"
run k_resume k 8 --load "$d/ck" --use-checkpoint-args  # (the window from the checkpoint's args)
[ "$(losses "$d/k_resume.json" 5 8)" = "$(losses "$d/k_w4.json" 5 8)" ] \
  || { echo "FAIL: the resumed run lost the window"; paste <(losses "$d/k_resume.json" 5 8) <(losses "$d/k_w4.json" 5 8); exit 1; }
echo "ok: the window restored from the checkpoint"
if [ -n "${MT_CONVERT:-}" ]; then
  "$MT_CONVERT" mt-to-hf "$d/ck" "$d/hf" 2> "$d/export.log" || { echo "FAIL: export"; cat "$d/export.log"; exit 1; }
  [ "$(jq -r '"\(.model_type) \(.sliding_window)"' "$d/hf/config.json")" = "mistral 5" ] \
    || { echo "FAIL: exported config"; cat "$d/hf/config.json"; exit 1; }
  "$MT_CONVERT" hf-to-mt "$d/hf" "$d/back" 2> "$d/import.log" || { echo "FAIL: import"; cat "$d/import.log"; exit 1; }
  run ft k 4 --window-size 4,0 --load "$d/ck" --finetune
  run ftback k 4 --window-size 4,0 --load "$d/back" --finetune
  [ "$(losses "$d/ft.json" 1 4)" = "$(losses "$d/ftback.json" 1 4)" ] || { echo "FAIL: the round trip changed the losses"; exit 1; }
  echo "ok: exported as Hugging Face Mistral (sliding_window 5) and imported back"
fi
# 5. --window-attn-skip-freq (Megatron's full-attention layers among the windowed ones; Qwen2's
#    max_window_layers): "[0,1]" windows layer 1 only, unlike a window everywhere or nowhere; 1
#    (every layer full) is bitwise no window, "[1,1]" the window everywhere, 2 "[1,0]"; a Qwen2-
#    shaped run exports with layer_types and max_window_layers and imports back
qw=(--add-qkv-bias --window-size 4,0)
run q_plain k 8 --add-qkv-bias
run q_w4 k 8 "${qw[@]}"
run q_mix k 8 "${qw[@]}" --window-attn-skip-freq "[0,1]"
run q_full k 8 "${qw[@]}" --window-attn-skip-freq 1
run q_all k 8 "${qw[@]}" --window-attn-skip-freq "[1]*2"
run q_two k 8 "${qw[@]}" --window-attn-skip-freq 2
run q_10 k 8 "${qw[@]}" --window-attn-skip-freq "[1,0]"
differ q_mix q_w4 "--window-attn-skip-freq [0,1] is the window everywhere"
differ q_mix q_plain "--window-attn-skip-freq [0,1] is no window"
same q_full q_plain "--window-attn-skip-freq 1 is not full attention everywhere"
same q_all q_w4 "--window-attn-skip-freq [1]*2 is not the window everywhere"
same q_two q_10 "--window-attn-skip-freq 2 is not [1,0]"
refused llama "--window-size 4,0 --window-attn-skip-freq [1]|Invalid length of window_attn_skip_freq: 1, expected 2" \
  "--window-size 4,0 --window-attn-skip-freq [1,0] --reset-attention-mask|--window-attn-skip-freq with --reset-attention-mask"
echo "ok: --window-attn-skip-freq windows the layers it names"
if [ -n "${MT_CONVERT:-}" ]; then
  run q_ck k 4 "${qw[@]}" --window-attn-skip-freq "[0,1]" --save "$d/qck"
  "$MT_CONVERT" mt-to-hf "$d/qck" "$d/qhf" 2> "$d/qexport.log" || { echo "FAIL: Qwen2 export"; cat "$d/qexport.log"; exit 1; }
  [ "$(jq -r '"\(.model_type) \(.use_sliding_window) \(.sliding_window) \(.max_window_layers) \(.layer_types | join(","))"' "$d/qhf/config.json")" \
    = "qwen2 true 5 1 full_attention,sliding_attention" ] || { echo "FAIL: exported Qwen2 config"; cat "$d/qhf/config.json"; exit 1; }
  "$MT_CONVERT" hf-to-mt "$d/qhf" "$d/qback" 2> "$d/qimport.log" || { echo "FAIL: Qwen2 import"; cat "$d/qimport.log"; exit 1; }
  run q_ft k 4 "${qw[@]}" --window-attn-skip-freq "[0,1]" --load "$d/qck" --finetune
  run q_ftback k 4 "${qw[@]}" --window-attn-skip-freq "[0,1]" --load "$d/qback" --finetune
  [ "$(losses "$d/q_ft.json" 1 4)" = "$(losses "$d/q_ftback.json" 1 4)" ] || { echo "FAIL: the Qwen2 round trip changed the losses"; exit 1; }
  if [ -n "${MT_GENERATE:-}" ]; then  # (the import's layers windowed as the original's)
    qgen() { MT_KV_CACHE=0 "$MT_GENERATE" --load "$1" --tokenizer-type NullTokenizer --greedy --print-ids \
               --device "${MT_TEST_DEVICE:-cpu}" --prompt-ids 5,6,7,8,9,10,11 --tokens-to-generate 6 2>> "$d/qgen.err" | tail -1; }
    a=$(qgen "$d/qck"); b=$(qgen "$d/qback")
    [ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: generation from the Qwen2 import: '$a' vs '$b'"; cat "$d/qgen.err"; exit 1; }
  fi
  echo "ok: exported as Hugging Face Qwen2 (layer_types, max_window_layers 1) and imported back"
fi
if [ -n "${MT_GENERATE:-}" ]; then  # generation past the window: without a KV cache, as asked
  gen() { "$MT_GENERATE" --load "$d/ck" --tokenizer-type NullTokenizer --greedy --print-ids \
            --device "${MT_TEST_DEVICE:-cpu}" "$@" 2> "$d/gen.err" | tail -1; }
  a=$(gen --prompt-ids 5,6,7,8,9,10,11 --tokens-to-generate 6)
  grep -q "no KV cache" "$d/gen.err" || { echo "FAIL: no note"; cat "$d/gen.err"; exit 1; }
  b=$(MT_KV_CACHE=0 gen --prompt-ids 5,6,7,8,9,10,11 --tokens-to-generate 6)
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: generation past the window: '$a' vs '$b'"; exit 1; }
  c=$(gen --prompt-ids 5,6 --tokens-to-generate 3)  # (within the window: with the KV cache)
  grep -q "(KV cache)" "$d/gen.err" || { echo "FAIL: no KV cache within the window"; cat "$d/gen.err"; exit 1; }
  d2=$(MT_KV_CACHE=0 gen --prompt-ids 5,6 --tokens-to-generate 3)
  [ -n "$c" ] && [ "$c" = "$d2" ] || { echo "FAIL: generation within the window: '$c' vs '$d2'"; exit 1; }
  echo "ok: generation past the window (no KV cache) and within it (KV cache) give the uncached tokens"
fi
