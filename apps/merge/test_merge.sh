#!/bin/sh
# functional: mt-merge-datasets on a directory holding ds_a and ds_c writes the bytes of
# megatron-core's IndexedDatasetBuilder.add_index of the two (golden ds_merged, gen_gpt.py), as
# tools/merge_datasets.py does (sorted names); a .bin without its .idx, a dtype that differs and
# an empty directory are errors that name the problem.
#   test_merge.sh EXE DATA_GOLDEN_DIR MT_PREPROCESS
set -eu
exe=$1 golden=$2 preprocess=$3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir "$d/in" "$d/empty"
cp "$golden/ds_c.bin" "$golden/ds_c.idx" "$golden/ds_a.bin" "$golden/ds_a.idx" "$d/in/"
echo "not a dataset" > "$d/in/notes.txt"
"$exe" --input "$d/in" --output-prefix "$d/merged" 2> "$d/log"
cmp "$d/merged.bin" "$golden/ds_merged.bin"
cmp "$d/merged.idx" "$golden/ds_merged.idx"
echo "ok: ds_a + ds_c are megatron-core's ds_merged, byte for byte"
expect_fail() { # TEXT DIR
  if "$exe" --input "$2" --output-prefix "$d/x" 2> "$d/err"; then echo "FAIL: accepted $2"; exit 1; fi
  grep -q "$1" "$d/err" || { echo "FAIL: want '$1' in:"; cat "$d/err"; exit 1; }
  echo "ok: refused: $(cat "$d/err")"
}
cp "$golden/ds_b.bin" "$d/in/ds_b.bin"
expect_fail "no .idx file for: $d/in/ds_b.idx" "$d/in"
rm "$d/in/ds_b.bin"
mkdir "$d/in2" "$d/in3"
cp "$golden/ds_a.bin" "$golden/ds_a.idx" "$d/in2/"
# a valid dataset of int32 tokens (vocabulary 70,000) beside ds_a's uint16 ones
printf '{"text": "1 2 69999"}\n' > "$d/big.jsonl"
"$preprocess" --input "$d/big.jsonl" --output-prefix "$d/in2/z" --tokenizer-type NullTokenizer \
  --vocab-size 70000 > /dev/null 2>&1
mv "$d/in2/z_text_document.bin" "$d/in2/z.bin" && mv "$d/in2/z_text_document.idx" "$d/in2/z.idx"
expect_fail "add_index $d/in2/z: dtype code 4 != writer's 8" "$d/in2"
# an index that does not fit its .bin (its dtype byte changed): the reader's error, named
cp "$golden/ds_a.bin" "$golden/ds_a.idx" "$d/in3/"
cp "$d/merged.bin" "$d/in3/z.bin" && cp "$d/merged.idx" "$d/in3/z.idx"
printf '\004' | dd of="$d/in3/z.idx" bs=1 seek=17 conv=notrunc 2> /dev/null
expect_fail "in3/z" "$d/in3"
expect_fail "no .bin/.idx pairs" "$d/empty"
