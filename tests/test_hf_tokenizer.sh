#!/usr/bin/env bash
# functional: --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR, and Llama2Tokenizer or
# GPTSentencePieceTokenizer --tokenizer-model FILE (Megatron's flags), train with the vocabulary
# size and eos token that transformers and sentencepiece give (subprojects/data/golden/
# hf_tokenizers: tiny BPE, Unigram and WordPiece tokenizers; golden/sentencepiece: unigram and BPE
# models): Megatron's tokenizer and padded-vocabulary lines, and the eod that --eod-mask-loss
# masks. The eod check: documents "k EOD" with the tokenizer's eos id as EOD (written as ids with
# NullTokenizer); masking EOD inputs leaves the predictable half (k -> EOD), so the loss goes to
# ~0; with a wrong eod it could not fall below half the entropy of k.
source "$(dirname "$0")/pretrain_common.sh"
: "${MT_PREPROCESS:?}"
g=$(cd "$(dirname "$0")/../subprojects/data/golden/hf_tokenizers" && pwd)
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
base=("${nodrop[@]}" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
      --global-batch-size 8 --lr 3e-3 --lr-warmup-iters 2 --seed 5 --log-interval 10
      --device "${MT_TEST_DEVICE:-cpu}")
# padded TAG TYPE MODEL V: Megatron's tokenizer lines for vocabulary size V
padded() {
  local p=$(( ($4 + 127) / 128 * 128 ))
  "$MT_PRETRAIN" "${base[@]}" --tokenizer-type "$2" --tokenizer-model "$3" --mock-data --train-iters 3 \
    > "$d/$1.log" 2>&1 || { echo "FAIL: $1"; cat "$d/$1.log"; exit 1; }
  local want=" > padded vocab (size: $4) with $((p - $4)) dummy tokens (new size: $p)"
  grep -qxF -- "$want" "$d/$1.log" && grep -qxF "> building $2 tokenizer ..." "$d/$1.log" \
    || { echo "FAIL: $1: want '$want'"; head -3 "$d/$1.log"; exit 1; }
  echo "ok $1 ($2):$want"
}
# masked TAG TYPE MODEL EOD LO N: "k EOD" with k in [LO, LO+N), --eod-mask-loss, 40 iterations
masked() {
  awk -v e="$4" -v lo="$5" -v n="$6" \
    'BEGIN { srand(3); for (i = 0; i < 6000; i++) printf "{\"text\": \"%d %d\"}\n", lo + int(rand() * n), e }' > "$d/$1.jsonl"
  "$MT_PREPROCESS" --input "$d/$1.jsonl" --output-prefix "$d/$1" --tokenizer-type NullTokenizer \
    --vocab-size 300 --workers 1 > /dev/null
  "$MT_PRETRAIN" "${base[@]}" --tokenizer-type "$2" --tokenizer-model "$3" --data-path "$d/${1}_text_document" \
    --split 100,0,0 --data-cache-path "$d/cache" --train-iters 40 --eod-mask-loss \
    --golden-values-out "$d/$1.json" > "$d/$1-k.log" 2>&1 || { echo "FAIL: $1 k EOD"; cat "$d/$1-k.log"; exit 1; }
  local l
  l=$(losses "$d/$1.json" 40 40 | awk '{ print $2 }')
  awk -v l="$l" 'BEGIN { exit !(l < 0.5) }' || { echo "FAIL: $1: masked loss $l at iteration 40, want < 0.5 (eod $4)"; exit 1; }
  echo "ok $1: with eod $4 masked, iteration 40's loss $l"
}
for t in bpe unigram wordpiece; do
  padded "hf_$t" HuggingFaceTokenizer "$g/$t" "$(jq ".$t.vocab_size" "$g/expected.json")"
done
# bpe's eos is 300, unigram's 2: k from the rest of each vocabulary
masked hf_bpe HuggingFaceTokenizer "$g/bpe" "$(jq .bpe.eod "$g/expected.json")" 0 100
masked hf_unigram HuggingFaceTokenizer "$g/unigram" "$(jq .unigram.eod "$g/expected.json")" 3 42
# Llama2Tokenizer and GPTSentencePieceTokenizer with a SentencePiece model (golden/sentencepiece:
# sentencepiece's vocab_size() and eos_id(), 2 in unigram.model, moved to 1 in bpe.model)
s=$(cd "$(dirname "$0")/../subprojects/data/golden/sentencepiece" && pwd)
for t in unigram:Llama2Tokenizer bpe:GPTSentencePieceTokenizer; do
  m=${t%%:*} ty=${t#*:}
  v=$(jq ".[\"$m.model\"].vocab_size" "$s/expected.json") e=$(jq ".[\"$m.model\"].eod" "$s/expected.json")
  padded "sp_$m" "$ty" "$s/$m.model" "$v"
  masked "sp_$m" "$ty" "$s/$m.model" "$e" 3 $((v - 3))
done
