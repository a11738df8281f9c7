# Shared by the mt-pretrain functional and multirank tests: a tiny GPT on mock data.
# Usage: source it, then `tiny_run OUT_JSON [extra flags]` runs mt-pretrain ($MT_PRETRAIN).
set -euo pipefail
tiny_args=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
           --micro-batch-size 2 --global-batch-size 8 --mock-data --tokenizer-type NullTokenizer
           --vocab-size 300 --train-iters 12 --lr 3e-3 --lr-decay-style cosine
           --lr-warmup-iters 2 --log-interval 4 --seed 7 --device "${MT_TEST_DEVICE:-cpu}"
           --distributed-timeout-minutes 1 ${MT_TEST_FLAGS:-})
tiny_run() {
  local out=$1; shift
  "$MT_PRETRAIN" "${tiny_args[@]}" --golden-values-out "$out" "$@"
}
# losses OUT_JSON FROM TO: "step loss" lines of a golden-values file
losses() {
  jq -r --argjson a "$2" --argjson b "$3" '.["lm loss"].values | to_entries[] |
    select((.key|tonumber) >= $a and (.key|tonumber) <= $b) | "\(.key) \(.value)"' "$1" | sort -n
}
