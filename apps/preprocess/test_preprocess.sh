#!/bin/sh
# functional: mt-preprocess-data on golden/input*.jsonl writes the bytes gen_preprocess.py wrote
# with megatron-core's IndexedDatasetBuilder (the tokens: tiktoken, sentencepiece).
#   test_preprocess.sh EXE GOLDEN_DIR gpt2|null|llama2|gptsp|hf
set -eu
exe=$1 golden=$2 case=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ "$case" = gpt2 ]; then
  "$exe" --input "$golden/input.jsonl" --json-keys text title --output-prefix "$out/gpt2" \
    --tokenizer-type GPT2BPETokenizer --append-eod --workers 2
  keys="text title"
elif [ "$case" = llama2 ]; then
  "$exe" --input "$golden/input.jsonl" --json-keys text title --output-prefix "$out/llama2" \
    --tokenizer-type Llama2Tokenizer --tokenizer-model "$golden/../../../subprojects/data/golden/sentencepiece/enc_bpe_llama.model" --append-eod
  keys="text title"
elif [ "$case" = hf ]; then
  "$exe" --input "$golden/input.jsonl" --json-keys text title --output-prefix "$out/hf" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$golden/../../../subprojects/data/golden/hf_encode/llama3" --append-eod
  keys="text title"
elif [ "$case" = gptsp ]; then
  "$exe" --input "$golden/input.jsonl" --output-prefix "$out/gptsp" \
    --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model "$golden/../../../subprojects/data/golden/sentencepiece/enc_uni_nfkc.model" --append-eod --workers 3
  keys="text"
  if "$exe" --input "$golden/input.jsonl" --output-prefix "$out/x" --tokenizer-type Llama2Tokenizer 2> "$out/err"; then
    echo "FAIL: Llama2Tokenizer without --tokenizer-model"; exit 1
  fi
  grep -q "tokenizer-model FILE is required" "$out/err" || { cat "$out/err"; exit 1; }
  if "$exe" --input "$golden/input.jsonl" --output-prefix "$out/x" --tokenizer-type Llama2Tokenizer --tokenizer-model "$golden/input.jsonl" 2> "$out/err"; then
    echo "FAIL: a JSONL file accepted as a SentencePiece model"; exit 1
  fi
  grep -q "input.jsonl" "$out/err" || { cat "$out/err"; exit 1; }
  # threads: the first bad document in input order is the error, whichever worker met it
  printf '{"text": "a"}\n{"text": "b"}\n{"text": 5}\n{"nope": "c"}\n{"text": "d"}\n' > "$out/bad.jsonl"
  if "$exe" --input "$out/bad.jsonl" --output-prefix "$out/x" --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model "$golden/../../../subprojects/data/golden/sentencepiece/enc_uni_nfkc.model" --workers 3 2> "$out/err"; then
    echo "FAIL: a document whose text is a number accepted"; exit 1
  fi
  grep -q "bad.jsonl line 3: 'text' is not text" "$out/err" || { cat "$out/err"; exit 1; }
else
  "$exe" --input "$golden/input_null.jsonl" --output-prefix "$out/null" \
    --tokenizer-type NullTokenizer --vocab-size 1000 --workers 1
  keys="text"
fi
for k in $keys; do
  for ext in bin idx; do
    cmp "$out/${case}_${k}_document.$ext" "$golden/${case}_${k}_document.$ext"
  done
done
echo "ok: $case outputs are byte-identical"
