#!/usr/bin/env bash
# Generation speed of mt-generate (bf16, greedy, one sequence) on the GPU against Hugging Face's
# generate() on the same random GPT-2 weights: bench/peers/peer_generate.py makes and saves the
# models and times transformers first; mt-convert imports them; mt-generate then decodes the same
# prompt with its KV cache (the default) and without (MT_KV_CACHE=0: the whole window every
# token), best of 3 runs each as its own stderr line reports (new tokens over the generation's
# wall time, prompt included). Writes Google-Benchmark-style JSON (tokens_per_second) for
# bench/compare.py.
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
done
echo ']}' >> "$out/generate.json"
