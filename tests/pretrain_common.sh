# Shared by the mt-pretrain functional and multirank tests: a tiny GPT on mock data.
# Usage: source it, then `tiny_run OUT_JSON [extra flags]` runs mt-pretrain ($MT_PRETRAIN).
set -euo pipefail
# A script given "cuda" as its first argument runs on the GPU with $MT_CUDA_FLAGS (set before
# sourcing this), or is skipped (exit 77) where there is none.
if [ "${1:-}" = cuda ]; then
  [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 1 ] || { echo "SKIP: needs 1 GPU, found 0"; exit 77; }
  export MT_TEST_DEVICE=cuda MT_TEST_FLAGS="${MT_CUDA_FLAGS:-}"
fi
# Megatron's default dropout (0.1) is on; the tests that do not test it train without (as before
# it existed), so that their numbers are the model's alone
nodrop=(--attention-dropout 0 --hidden-dropout 0)
# need_mr_gpus "$1": a script run with "cuda" under $MPIEXEC puts a rank on each GPU: skipped (77)
# with fewer than 2
need_mr_gpus() {
  if [ "${1:-}" = cuda ] && [ -n "${MPIEXEC:-}" ]; then
    local n; n=$(nvidia-smi -L 2>/dev/null | wc -l)
    [ "$n" -ge 2 ] || { echo "skip: needs 2 GPUs, found $n"; exit 77; }
  fi
}
tiny_args=("${nodrop[@]}" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
           --micro-batch-size 2 --global-batch-size 8 --mock-data --tokenizer-type NullTokenizer
           --vocab-size 300 --train-iters 12 --lr 3e-3 --lr-decay-style cosine
           --lr-warmup-iters 2 --log-interval 4 --seed 7 --device "${MT_TEST_DEVICE:-cpu}"
           --distributed-timeout-minutes 1 ${MT_TEST_FLAGS:-})
tiny_run() {
  local out=$1; shift
  "$MT_PRETRAIN" "${tiny_args[@]}" --golden-values-out "$out" "$@"
}
# refused BASE "FLAGS|MESSAGE"...: tiny_run with the flags of the array named BASE, then each set
# of FLAGS, is refused before training with MESSAGE in its output ($d/bad.log; $d: the test's dir)
refused() {
  local -n base=$1; shift
  local bad
  for bad in "$@"; do
    tiny_run "$d/bad.json" "${base[@]}" --train-iters 1 ${bad%%|*} > "$d/bad.log" 2>&1 \
      && { echo "FAIL: ${bad%%|*} accepted"; exit 1; }
    grep -qF -- "${bad#*|}" "$d/bad.log" || { echo "FAIL: ${bad%%|*}: want '${bad#*|}'"; cat "$d/bad.log"; exit 1; }
  done
}
# losses OUT_JSON FROM TO: "step loss" lines of a golden-values file
losses() {
  jq -r --argjson a "$2" --argjson b "$3" '.["lm loss"].values | to_entries[] |
    select((.key|tonumber) >= $a and (.key|tonumber) <= $b) | "\(.key) \(.value)"' "$1" | sort -n
}
# The parallel runs' comparisons (tests/mr_pretrain_tp.sh, mr_pretrain_pp.sh): close WHAT TOL
# reads "want got" pairs and fails on a relative difference above TOL (or on none to compare);
# gnorms JSONL / pnorms LOG: the grad norms of --metrics-jsonl, the params norms of the log.
close() {  # what tol: pairs "want got" on stdin
  awk -v what="$1" -v tol="$2" '{ n++; d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1;
    if (d > tol * m) { bad++; print "FAIL", what, $0 }
    if (m > 0 && d / m > worst) worst = d / m }
    END { if (n == 0) { print "FAIL", what, "nothing to compare"; exit 1 } if (bad) exit 1;
          printf "ok %s: %d values match (largest relative difference %.1e)\n", what, n, worst }'
}
gnorms() { jq -r '.["grad norm"] // empty' "$1"; }
pnorms() { grep -o "params norm: [0-9.]*" "$1" | awk '{ print $3 }'; }
# eod_corpus DIR: DIR/k_text_document, one-token documents k < 100 each followed by EOD (token
# 300 of NullTokenizer --vocab-size 300): "k EOD k EOD ...", where every k predicts EOD and every
# EOD a random k (ln 100 nats); DIR/v_text_document, documents of 1-40 random tokens (mostly short), so the
# count of EOD inputs varies from micro-batch to micro-batch; DIR/n_text_document, documents of
# 30 random tokens and no EOD token anywhere. Needs $MT_PREPROCESS.
eod_corpus() {
  awk 'BEGIN { srand(3); for (i = 0; i < 6000; i++) printf "{\"text\": \"%d\"}\n", int(rand() * 100) }' > "$1/k.jsonl"
  awk 'BEGIN { srand(4); for (i = 0; i < 3000; i++) { n = 1 + int(rand() ^ 3 * 40); s = "";
         for (j = 0; j < n; j++) s = s (j ? " " : "") int(rand() * 100);
         printf "{\"text\": \"%s\"}\n", s } }' > "$1/v.jsonl"
  for c in k v; do
    "$MT_PREPROCESS" --input "$1/$c.jsonl" --output-prefix "$1/$c" --tokenizer-type NullTokenizer \
      --vocab-size 300 --append-eod --workers 1 > /dev/null
  done
  awk 'BEGIN { srand(5); for (i = 0; i < 400; i++) { s = ""; for (j = 0; j < 30; j++) s = s (j ? " " : "") int(rand() * 300); printf "{\"text\": \"%s\"}\n", s } }' > "$1/n.jsonl"
  "$MT_PREPROCESS" --input "$1/n.jsonl" --output-prefix "$1/n" --tokenizer-type NullTokenizer \
    --vocab-size 300 --workers 1 > /dev/null  # no --append-eod
}
# eod_run DIR NAME DATA ITERS [flags]: mt-pretrain with eod_args on DIR/DATA_text_document,
# golden values to DIR/NAME.json (the log, DIR/NAME.log, printed if it fails)
eod_run() {
  local d=$1 n=$2 data=$3 it=$4; shift 4
  "$MT_PRETRAIN" "${eod_args[@]}" --data-path "$d/${data}_text_document" --data-cache-path "$d/cache" \
    --train-iters "$it" --golden-values-out "$d/$n.json" "$@" > "$d/$n.log" 2>&1 \
    || { echo "FAIL: run $n"; cat "$d/$n.log"; exit 1; }
}
eod_args=("${nodrop[@]}" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
          --micro-batch-size 2 --global-batch-size 8 --tokenizer-type NullTokenizer --vocab-size 300
          --lr 3e-3 --lr-warmup-iters 2 --seed 5 --log-interval 4 --split 100,0,0
          --device "${MT_TEST_DEVICE:-cpu}" --distributed-timeout-minutes 1 ${MT_TEST_FLAGS:-})
# rel_close A.json B.json FROM TO TOL: each step's losses within relative TOL (prints the worst)
rel_close() {
  paste <(losses "$1" "$3" "$4") <(losses "$2" "$3" "$4") | awk -v tol="$5" '
    { n++; d = $2 - $4; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r }
    END { printf "%d losses, largest relative difference %.2e\n", n, w; exit !(n > 0 && w <= tol) }'
}
