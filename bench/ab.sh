#!/usr/bin/env bash
# Counterbalanced A/B of whole training steps: bench/pretrain.sh for A and for B in the order
# AB BA AB BA ... (each pair's order swapped, so a drift of the board or an advantage of the
# first run of a pair cancels), then the mean of the pairs' B/A - 1 with its standard error.
# Boards run at their power limit and one run of the same binary spreads: GPT-2 1.5B B=32 on an
# H200 (session 27) 55.1k-55.7k tokens/s in six runs, sd ~0.45% a run, so telling 0.3% apart
# takes about 6 pairs, and a single alternated pair tells nothing below ~1%.
#   bench/ab.sh BUILD_A BUILD_B OUT_DIR [PAIRS=4]
#   env: MT_AB_ENV_A, MT_AB_ENV_B ("VAR=value ..." for that side only), and bench/pretrain.sh's
#        (MT_PRETRAIN_CASES: one case, MT_PRETRAIN_ITERS, MT_PRETRAIN_DEVICE)
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: bench/ab.sh BUILD_A BUILD_B OUT_DIR [PAIRS]" >&2; exit 2; }
build_a=$1; build_b=$2; out=$3; pairs=${4:-4}
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"; : > "$out/runs.txt"
run() {  # side (A or B), pair
  local side=$1 k=$2 build envs
  if [ "$side" = A ]; then build=$build_a envs=${MT_AB_ENV_A:-}; else build=$build_b envs=${MT_AB_ENV_B:-}; fi
  env $envs MT_PRETRAIN_PEER=0 "$top/bench/pretrain.sh" "$build" "$out/$side$k" > "$out/$side$k.txt" 2>&1
  local tok; tok=$(grep -o '| [0-9.]* tokens/s |' "$out/$side$k.txt" | head -1 | tr -dc '0-9.')
  [ -n "$tok" ] || { echo "$side (pair $k): no result (see $out/$side$k.txt)"; tail -3 "$out/$side$k.txt"; exit 1; }
  echo "$k $side $tok" >> "$out/runs.txt"
  echo "pair $k $side: $tok tokens/s$(grep -o '| GPU [0-9]* MHz [0-9]* W' "$out/$side$k.txt" | head -1)"
}
for k in $(seq 1 "$pairs"); do
  if [ $((k % 2)) = 1 ]; then run A "$k"; run B "$k"; else run B "$k"; run A "$k"; fi
done
awk '{ v[$1, $2] = $3; n = $1 > n ? $1 : n }
  END {
    for (k = 1; k <= n; k++) { d[k] = v[k, "B"] / v[k, "A"] - 1; s += d[k]; ta += v[k, "A"]; tb += v[k, "B"] }
    m = s / n; for (k = 1; k <= n; k++) q += (d[k] - m) ^ 2
    sd = n > 1 ? sqrt(q / (n - 1)) : 0
    printf "A mean %.0f, B mean %.0f tokens/s; B/A - 1 over %d pairs: %+.2f%% (sd of a pair %.2f%%, standard error %.2f%%)\n",
      ta / n, tb / n, n, 100 * m, 100 * sd, 100 * sd / sqrt(n) }' "$out/runs.txt" | tee "$out/summary.txt"
