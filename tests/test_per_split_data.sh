#!/usr/bin/env bash
# functional: --train-data-path/--valid-data-path (megatron's blend_per_split). The train split is
# the whole train prefix (the same losses as --data-path PREFIX --split 100,0,0), validation reads
# the valid prefix (other losses than validating on the train prefix), and wrong combinations of
# data flags stop with exit 2 before anything is written.
source "$(dirname "$0")/pretrain_common.sh"
: "${MT_PREPROCESS:?}"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
# two corpora of NullTokenizer documents (space-separated ids < 300) with different statistics
awk 'BEGIN { srand(11); for (i = 0; i < 200; i++) { n = 20 + int(rand() * 60); s = "";
       for (j = 0; j < n; j++) s = s (j ? " " : "") int(rand() * 100);
       printf "{\"text\": \"%s\"}\n", s } }' > "$d/a.jsonl"
awk 'BEGIN { srand(12); for (i = 0; i < 200; i++) { n = 20 + int(rand() * 60); s = "";
       for (j = 0; j < n; j++) s = s (j ? " " : "") 100 + int(rand() * 199);
       printf "{\"text\": \"%s\"}\n", s } }' > "$d/b.jsonl"
for c in a b; do
  "$MT_PREPROCESS" --input "$d/$c.jsonl" --output-prefix "$d/$c" --tokenizer-type NullTokenizer \
    --vocab-size 300 --append-eod --workers 1 > /dev/null
done
A=$d/a_text_document B=$d/b_text_document
args=("${nodrop[@]}" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
      --global-batch-size 4 --tokenizer-type NullTokenizer --vocab-size 300 --train-iters 8
      --lr 3e-3 --seed 5 --log-interval 4 --eval-interval 4 --eval-iters 2
      --data-cache-path "$d/cache" --device "${MT_TEST_DEVICE:-cpu}")
val() { jq -r 'select(.["validation lm loss"]) | .["validation lm loss"]' "$1"; }
"$MT_PRETRAIN" "${args[@]}" --train-data-path "$A" --valid-data-path "$B" --test-data-path "$B" \
  --golden-values-out "$d/ps.json" --metrics-jsonl "$d/ps.jsonl" > "$d/ps.log" || { cat "$d/ps.log"; exit 1; }
"$MT_PRETRAIN" "${args[@]}" --data-path "$A" --split 100,0,0 \
  --golden-values-out "$d/ref.json" > "$d/ref.log" || { cat "$d/ref.log"; exit 1; }
"$MT_PRETRAIN" "${args[@]}" --train-data-path "$A" --valid-data-path "$A" \
  --metrics-jsonl "$d/aa.jsonl" > "$d/aa.log" || { cat "$d/aa.log"; exit 1; }
[ "$(losses "$d/ps.json" 1 8)" = "$(losses "$d/ref.json" 1 8)" ] \
  || { echo "FAIL: train losses differ from --data-path A --split 100,0,0"; paste <(losses "$d/ps.json" 1 8) <(losses "$d/ref.json" 1 8); exit 1; }
echo "ok: 8 train losses equal --data-path A --split 100,0,0"
[ "$(val "$d/ps.jsonl" | wc -l)" -ge 2 ] || { echo "FAIL: no validation on B"; cat "$d/ps.log"; exit 1; }
[ "$(val "$d/ps.jsonl")" != "$(val "$d/aa.jsonl")" ] \
  || { echo "FAIL: validating on B gives A's losses"; exit 1; }
t=$(jq -r 'select(.["test lm loss"]) | .["test lm loss"]' "$d/ps.jsonl")
[ -n "$t" ] && grep -q "validation loss at iteration 8 on test set" "$d/ps.log" \
  || { echo "FAIL: no test evaluation at the end"; cat "$d/ps.log"; exit 1; }
echo "ok: test loss on B at the end: $t"
echo "ok: validation on B: $(val "$d/ps.jsonl" | tr '\n' ' ')(on A: $(val "$d/aa.jsonl" | tr '\n' ' '))"
# the same blends read from files: --data-args-path and --per-split-data-args-path (JSON lists or
# strings, as megatron reads them)
echo "$A" > "$d/data_args.txt"
printf '{"train": ["%s"], "valid": "%s", "test": ["%s"]}\n' "$A" "$B" "$B" > "$d/per_split.json"
"$MT_PRETRAIN" "${args[@]}" --data-args-path "$d/data_args.txt" --split 100,0,0 \
  --golden-values-out "$d/fa.json" > "$d/fa.log" || { cat "$d/fa.log"; exit 1; }
"$MT_PRETRAIN" "${args[@]}" --per-split-data-args-path "$d/per_split.json" \
  --golden-values-out "$d/fps.json" --metrics-jsonl "$d/fps.jsonl" > "$d/fps.log" || { cat "$d/fps.log"; exit 1; }
[ "$(losses "$d/fa.json" 1 8)" = "$(losses "$d/ref.json" 1 8)" ] \
  && [ "$(losses "$d/fps.json" 1 8)" = "$(losses "$d/ps.json" 1 8)" ] \
  && [ "$(val "$d/fps.jsonl")" = "$(val "$d/ps.jsonl")" ] \
  || { echo "FAIL: blends from files differ from the flags"; exit 1; }
echo "ok: --data-args-path and --per-split-data-args-path equal the flags"
# --skip-train --load: no training, the validation and test passes of the loaded iteration
"$MT_PRETRAIN" "${args[@]}" --train-data-path "$A" --valid-data-path "$B" --test-data-path "$B" \
  --save "$d/ck" > "$d/ck.log" || { cat "$d/ck.log"; exit 1; }
"$MT_PRETRAIN" "${args[@]}" --train-data-path "$A" --valid-data-path "$B" --test-data-path "$B" \
  --load "$d/ck" --skip-train > "$d/skip.log" || { cat "$d/skip.log"; exit 1; }
grep -q "skipping training (--skip-train is on)" "$d/skip.log" \
  && grep -q "validation loss at iteration 8 on validation set" "$d/skip.log" \
  && grep -q "validation loss at iteration 8 on test set" "$d/skip.log" \
  && ! grep -q " iteration .*/ .*consumed samples" "$d/skip.log" \
  || { echo "FAIL: --skip-train"; cat "$d/skip.log"; exit 1; }
echo "ok: --skip-train --load evaluated iteration 8 without training"
bad() {  # expected message, flags...
  local want=$1; shift
  mkdir -p "$d/bad"
  local rc=0
  "$MT_PRETRAIN" "${args[@]}" --save "$d/bad/ck" "$@" > "$d/bad.log" 2>&1 || rc=$?
  [ $rc = 2 ] && grep -q -- "$want" "$d/bad.log" && [ ! -e "$d/bad/ck" ] \
    || { echo "FAIL: $* gave rc $rc:"; cat "$d/bad.log"; exit 1; }
  echo "ok: $* -> $(grep -o -- "$want.*" "$d/bad.log" | head -1)"
}
bad "mutually exclusive" --data-path "$A" --train-data-path "$A"
bad "need --train-data-path" --valid-data-path "$B"
bad "needs weight prefix pairs" --train-data-path 0.5 "$A" 0.5
bad "cannot read --data-args-path $d/none.txt" --data-args-path "$d/none.txt"
echo '{"train": 5}' > "$d/bad.json"
bad "\"train\" must be a list or a string" --per-split-data-args-path "$d/bad.json"
