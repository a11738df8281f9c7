#!/bin/sh
# functional: mt-preprocess-data on golden/input*.jsonl writes the bytes gen_preprocess.py wrote
# with megatron-core's IndexedDatasetBuilder.   test_preprocess.sh EXE GOLDEN_DIR gpt2|null
set -eu
exe=$1 golden=$2 case=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ "$case" = gpt2 ]; then
  "$exe" --input "$golden/input.jsonl" --json-keys text title --output-prefix "$out/gpt2" \
    --tokenizer-type GPT2BPETokenizer --append-eod --workers 2
  keys="text title"
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
