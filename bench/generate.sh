#!/usr/bin/env bash
# Generation speed of mt-generate (bf16, greedy, one sequence) on the GPU against Hugging Face's
# generate() on the same random GPT-2 weights: bench/peers/peer_generate.py makes and saves the
# models and times transformers first; mt-convert imports them; mt-generate then decodes the same
# prompt with its KV cache (the default) and without (MT_KV_CACHE=0: the whole window every
# token), best of 3 runs each as its own stderr line reports (new tokens over the generation's
# wall time, prompt included); then mt-serve's continuous batching: one request alone, then 8 at
# once (the new tokens of all over the wall time). Writes Google-Benchmark-style JSON
# (tokens_per_second) for bench/compare.py.
# The models (GBs at 1.5B) live in a scratch directory, removed at the end.
#   bench/generate.sh BUILD_DIR OUT_DIR   (env: MT_GEN_CASES, a case name:layers:hidden:heads:new;
#                                          MT_GEN_DEVICE=cpu to try it without a GPU)
set -uo pipefail
b=$1; out=$2; mkdir -p "$out"
top=$(cd "$(dirname "$0")/.." && pwd)
cases=${MT_GEN_CASES:-"gpt2_124m:12:768:12:256 gpt2_1.5b:48:1600:25:128"}
dev=${MT_GEN_DEVICE:-cuda}
m=$(mktemp -d); trap 'rm -rf "$m"' EXIT
python3 "$top/bench/peers/peer_generate.py" "$m" $cases 2>&1 | grep -v Warning | tail -4
cp "$m/peer_generate.json" "$out/" 2>/dev/null
prompt=$(cat "$m/prompt.txt" 2>/dev/null) || { echo "generate: the peer wrote no prompt"; exit 1; }
echo '{"benchmarks": [' > "$out/generate.json"
sep=""
for c in $cases; do
  IFS=: read -r name L H NH N <<< "$c"
  "$b/apps/convert/mt-convert" hf-to-mt "$m/hf_$name" "$m/mt_$name" > "$out/convert_$name.log" 2>&1 \
    || { echo "$name: mt-convert failed"; tail -3 "$out/convert_$name.log"; continue; }
  for kv in 1 0; do
    best=0
    for r in 1 2 3; do
      MT_KV_CACHE=$kv "$b/apps/generate/mt-generate" --load "$m/mt_$name" --prompt-ids "$prompt" \
        --tokens-to-generate "$N" --greedy --tokenizer-type NullTokenizer --device "$dev" \
        > "$out/gen_${name}_kv$kv.out" 2> "$out/gen_${name}_kv$kv.log" || { tail -3 "$out/gen_${name}_kv$kv.log"; break; }
      t=$(sed -n 's/.*: \([0-9.]*\) tokens\/s.*/\1/p' "$out/gen_${name}_kv$kv.log")
      best=$(awk -v a="$best" -v b="${t:-0}" 'BEGIN { print (b > a ? b : a) }')
    done
    echo "$name: mt-generate $N tokens, $([ $kv = 1 ] && echo "KV cache" || echo "no KV cache"): $best tokens/s"
    bn=$([ $kv = 1 ] && echo generate || echo generate_nokv)
    printf '%s{"name": "%s/cuda/%s_P16_N%s", "run_type": "iteration", "real_time": %s, "time_unit": "ms", "tokens_per_second": %s}\n' \
      "$sep" "$bn" "$name" "$N" "$(awk -v t="$best" -v n="$N" 'BEGIN { print (t > 0 ? 1000 * n / t : 0) }')" "$best" >> "$out/generate.json"
    sep=","
  done
  # mt-serve (continuous batching, greedy): one request alone, then 8 at once, each one prompt of
  # its own; the rates are the new tokens the server reports over the wall time
  sl="$out/serve_$name.log"
  "$b/apps/generate/mt-serve" --load "$m/mt_$name" --port 0 --device "$dev" --max-requests 10 \
    --tokenizer-type GPT2BPETokenizer > "$sl" 2>&1 &
  sp=$!
  for _ in $(seq 600); do grep -q "listening on" "$sl" && break; sleep 0.1; done
  url=$(grep -o "http://[0-9.:]*/api" "$sl") || { echo "$name: mt-serve did not start"; tail -3 "$sl"; kill $sp; continue; }
  body() { echo "{\"prompts\": [\"In the beginning God created the heaven and the earth, $1\"], \"tokens_to_generate\": $N, \"temperature\": 0}"; }
  curl -s -X PUT -d "$(body 0)" "$url" > /dev/null # (warm-up: the graphs' capture, autotuning)
  t0=$(date +%s.%N); curl -s -X PUT -d "$(body 1)" "$url" > /dev/null; t1=$(date +%s.%N)
  pids=()
  for i in $(seq 2 9); do curl -s -X PUT -d "$(body "$i")" "$url" > /dev/null & pids+=($!); done
  wait "${pids[@]}"; t2=$(date +%s.%N); wait $sp
  made() { sed -n "s/.*request \($1\): 1 prompt, \([0-9]*\) new tokens.*/\2/p" "$sl" | awk '{ s += $1 } END { print s + 0 }'; }
  one=$(awk -v n="$(made 2)" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", n / (b - a) }')
  eight=$(awk -v n="$(made '[3-9]\|10')" -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", n / (b - a) }')
  echo "$name: mt-serve, one request alone: $one tokens/s; 8 requests at once: $eight tokens/s in all"
  for k in 1 8; do
    r=$([ $k = 1 ] && echo "$one" || echo "$eight")
    printf '%s{"name": "serve/cuda/%s_R%s_N%s", "run_type": "iteration", "real_time": %s, "time_unit": "ms", "tokens_per_second": %s}\n' \
      "$sep" "$name" "$k" "$N" "$(awk -v t="$r" -v n="$N" -v k="$k" 'BEGIN { print (t > 0 ? 1000 * n * k / t : 0) }')" "$r" >> "$out/generate.json"
  done
done
echo ']}' >> "$out/generate.json"
