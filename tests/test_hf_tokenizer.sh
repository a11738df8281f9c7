#!/usr/bin/env bash
# functional: --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR (Megatron's flags) trains
# with transformers' vocabulary size and eos token (subprojects/data/golden/hf_tokenizers: tiny
# BPE, Unigram and WordPiece tokenizers and what AutoTokenizer says of them): Megatron's padded
# vocabulary line, and the eod that --eod-mask-loss masks. The eod check: documents "k EOD" with
# the tokenizer's eos id as EOD (written as ids with NullTokenizer); masking EOD inputs leaves the
# predictable half (k -> EOD), so the loss goes to ~0; with a wrong eod it could not fall below
# half the entropy of k.
source "$(dirname "$0")/pretrain_common.sh"
: "${MT_PREPROCESS:?}"
g=$(cd "$(dirname "$0")/../subprojects/data/golden/hf_tokenizers" && pwd)
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
base=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
      --global-batch-size 8 --lr 3e-3 --lr-warmup-iters 2 --seed 5 --log-interval 10
      --device "${MT_TEST_DEVICE:-cpu}" --tokenizer-type HuggingFaceTokenizer)
for t in bpe unigram wordpiece; do
  v=$(jq ".$t.vocab_size" "$g/expected.json")
  p=$(( (v + 127) / 128 * 128 ))
  "$MT_PRETRAIN" "${base[@]}" --tokenizer-model "$g/$t" --mock-data --train-iters 3 > "$d/$t.log" 2>&1 \
    || { echo "FAIL: $t"; cat "$d/$t.log"; exit 1; }
  want=" > padded vocab (size: $v) with $((p - v)) dummy tokens (new size: $p)"
  grep -qxF -- "$want" "$d/$t.log" || { echo "FAIL: $t: want '$want'"; head -3 "$d/$t.log"; exit 1; }
  echo "ok $t:$want"
done
# bpe's eos is 300, unigram's 2: corpora of "k EOD" with k from the rest of each vocabulary
for t in bpe unigram; do
  e=$(jq ".$t.eod" "$g/expected.json")
  awk -v e="$e" -v lo=$([ $t = bpe ] && echo 0 || echo 3) -v n=$([ $t = bpe ] && echo 100 || echo 42) \
    'BEGIN { srand(3); for (i = 0; i < 6000; i++) printf "{\"text\": \"%d %d\"}\n", lo + int(rand() * n), e }' > "$d/$t.jsonl"
  "$MT_PREPROCESS" --input "$d/$t.jsonl" --output-prefix "$d/$t" --tokenizer-type NullTokenizer \
    --vocab-size 300 --workers 1 > /dev/null
  "$MT_PRETRAIN" "${base[@]}" --tokenizer-model "$g/$t" --data-path "$d/${t}_text_document" --split 100,0,0 \
    --data-cache-path "$d/cache" --train-iters 40 --eod-mask-loss --golden-values-out "$d/$t.json" > "$d/$t-k.log" 2>&1 \
    || { echo "FAIL: $t k EOD"; cat "$d/$t-k.log"; exit 1; }
  l=$(losses "$d/$t.json" 40 40 | awk '{ print $2 }')
  awk -v l="$l" 'BEGIN { exit !(l < 0.5) }' || { echo "FAIL: $t: masked loss $l at iteration 40, want < 0.5 (eod $e)"; exit 1; }
  echo "ok $t: with eod $e masked, iteration 40's loss $l"
done
# Llama2Tokenizer and GPTSentencePieceTokenizer with a SentencePiece model (golden/sentencepiece:
# sentencepiece's vocab_size() and eos_id(), 2 in unigram.model, moved to 1 in bpe.model): the
# padded vocabulary line, and the eod masked on "k EOD" data (k from 3 up)
s=$(cd "$(dirname "$0")/../subprojects/data/golden/sentencepiece" && pwd)
for t in unigram:Llama2Tokenizer bpe:GPTSentencePieceTokenizer; do
  m=${t%%:*} ty=${t#*:}
  v=$(jq ".[\"$m.model\"].vocab_size" "$s/expected.json") e=$(jq ".[\"$m.model\"].eod" "$s/expected.json")
  p=$(( (v + 127) / 128 * 128 ))
  sp=("${base[@]/HuggingFaceTokenizer/$ty}")
  "$MT_PRETRAIN" "${sp[@]}" --tokenizer-model "$s/$m.model" --mock-data --train-iters 3 > "$d/$m.log" 2>&1 \
    || { echo "FAIL: $ty"; cat "$d/$m.log"; exit 1; }
  want=" > padded vocab (size: $v) with $((p - v)) dummy tokens (new size: $p)"
  grep -qxF -- "$want" "$d/$m.log" && grep -qxF "> building $ty tokenizer ..." "$d/$m.log" \
    || { echo "FAIL: $ty $m: want '$want'"; head -3 "$d/$m.log"; exit 1; }
  awk -v e="$e" -v n=$((v - 3)) \
    'BEGIN { srand(3); for (i = 0; i < 6000; i++) printf "{\"text\": \"%d %d\"}\n", 3 + int(rand() * n), e }' > "$d/sp$m.jsonl"
  "$MT_PREPROCESS" --input "$d/sp$m.jsonl" --output-prefix "$d/sp$m" --tokenizer-type NullTokenizer \
    --vocab-size 300 --workers 1 > /dev/null
  "$MT_PRETRAIN" "${sp[@]}" --tokenizer-model "$s/$m.model" --data-path "$d/sp${m}_text_document" --split 100,0,0 \
    --data-cache-path "$d/cache" --train-iters 40 --eod-mask-loss --golden-values-out "$d/sp$m.json" > "$d/sp$m-k.log" 2>&1 \
    || { echo "FAIL: $ty k EOD"; cat "$d/sp$m-k.log"; exit 1; }
  l=$(losses "$d/sp$m.json" 40 40 | awk '{ print $2 }')
  awk -v l="$l" 'BEGIN { exit !(l < 0.5) }' || { echo "FAIL: $ty: masked loss $l at iteration 40, want < 0.5 (eod $e)"; exit 1; }
  echo "ok $ty ($m.model):$want; with eod $e masked, iteration 40's loss $l"
done
