#!/usr/bin/env bash
# functional: mt-generate. The tiny GPT-2, Llama, Qwen2, Qwen3, Mixtral, Qwen2-MoE and DeepSeek-V3
# (its expert bias, a buffer, loaded: without it the continuation differs) of mt-convert's tests,
# imported, give transformers' greedy continuation of a prompt
# (apps/generate/golden/expected.json, float64 there, fp32 here: the smallest top-2 logit gap on
# the way is 0.012, Qwen2-MoE's); the KV cache's continuation is the whole window's (MT_KV_CACHE=0) for chunked and one-token prompts; sampling is reproducible
# from its seed, varies with it, and top_k 1 is greedy; a checkpoint mt-pretrain just wrote
# continues a prompt; bad requests are refused with a message.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
golden=$(dirname "$0")/../apps/generate/golden/expected.json
fixtures=$(dirname "$0")/../apps/convert/golden
fail=0
gen() { "$MT_GENERATE" --tokenizer-type NullTokenizer --device "${MT_TEST_DEVICE:-cpu}" "$@"; }
for m in gpt2 llama qwen2 qwen3 mixtral qwen2_moe qwen2_moe_mixed deepseek_v3; do
  "$MT_CONVERT" hf-to-mt "$fixtures/logits_$m" "$d/$m" > /dev/null 2>&1 || { echo "FAIL: import $m"; exit 1; }
  prompt=$(jq -r ".$m.prompt | map(tostring) | join(\",\")" "$golden")
  want=$(jq -r ".$m.greedy | map(tostring) | join(\",\")" "$golden")
  got=$(gen --load "$d/$m" --prompt-ids "$prompt" --tokens-to-generate 10 --greedy) || { echo "FAIL: $m: mt-generate failed"; exit 1; }
  if [ "$got" = "$want" ]; then echo "ok $m greedy: $got"; else echo "FAIL $m greedy: $got, transformers $want"; fail=1; fi
done
# the KV cache (prompt chunks of MT_KV_CHUNK tokens, then one token at a time) against the whole
# window every token (MT_KV_CACHE=0): the same continuation, greedy and sampled
long=$(for i in $(seq 1 14); do echo $(( (i * 37) % 100 )); done | paste -sd,)
for m in gpt2 llama qwen2 qwen3 mixtral qwen2_moe qwen2_moe_mixed deepseek_v3; do
  for how in "--greedy" "--temperature 0.9 --seed 4"; do
    base=$(MT_KV_CACHE=0 gen --load "$d/$m" --prompt-ids "$long" --tokens-to-generate 12 $how)
    kv=$(MT_KV_CHUNK=4 gen --load "$d/$m" --prompt-ids "$long" --tokens-to-generate 12 $how)
    kv1=$(MT_KV_CHUNK=1 gen --load "$d/$m" --prompt-ids "$long" --tokens-to-generate 12 $how)
    if [ -n "$base" ] && [ "$kv" = "$base" ] && [ "$kv1" = "$base" ]; then echo "ok $m KV cache ($how): $kv"
    else echo "FAIL $m KV cache ($how): chunks of 4 $kv, of 1 $kv1, no cache $base"; fail=1; fi
  done
done
# sampling (Llama): the same seed the same tokens, another seed others, top_k 1 the greedy ones
s1=$(gen --load "$d/llama" --prompt-ids 17,3,88 --tokens-to-generate 12 --temperature 1.2 --top_p 0.95 --seed 5)
s2=$(gen --load "$d/llama" --prompt-ids 17,3,88 --tokens-to-generate 12 --temperature 1.2 --top_p 0.95 --seed 5)
s3=$(gen --load "$d/llama" --prompt-ids 17,3,88 --tokens-to-generate 12 --temperature 1.2 --top_p 0.95 --seed 6)
g1=$(gen --load "$d/llama" --prompt-ids 17,3,88 --tokens-to-generate 12 --greedy)
k1=$(gen --load "$d/llama" --prompt-ids 17,3,88 --tokens-to-generate 12 --top_k 1 --seed 9)
{ [ "$s1" = "$s2" ] && [ "$s1" != "$s3" ] && [ "$g1" = "$k1" ] && [ "$(echo "$s1" | tr ',' '\n' | wc -l)" = 15 ]; } \
  && echo "ok sampling: seed 5 $s1; seed 6 $s3" || { echo "FAIL sampling: $s1 / $s2 / $s3; greedy $g1, top_k 1 $k1"; fail=1; }
# a checkpoint of mt-pretrain (GPT-2-shaped: it keeps the Hugging Face config)
tiny_run "$d/p.json" --save "$d/ck" > "$d/p.log" 2>&1 || { cat "$d/p.log"; exit 1; }
out=$(gen --load "$d/ck" --prompt-ids 1,2,3 --tokens-to-generate 8 --seed 3) || { echo "FAIL: generate from mt-pretrain's checkpoint"; exit 1; }
echo "$out" | grep -qE '^1,2,3(,[0-9]+){8}$' && [ "$(echo "$out" | tr ',' '\n' | sort -n | tail -1)" -le 300 ] \
  && echo "ok from mt-pretrain's checkpoint: $out" || { echo "FAIL: $out"; fail=1; }
# refusals
expect() {  # message, then flags
  local want=$1; shift
  "$MT_GENERATE" "$@" > "$d/out" 2>&1; local rc=$?
  if [ $rc = 0 ] || ! grep -qF -- "$want" "$d/out"; then echo "FAIL: $* -> rc $rc:"; cat "$d/out"; fail=1
  else echo "ok refused: $(tail -1 "$d/out")"; fi
}
set +e
expect "give one of --prompt and --prompt-ids" --load "$d/llama"
expect "prompt token 100 is outside the vocabulary of 100" --load "$d/llama" --prompt-ids 1,100 --tokenizer-type NullTokenizer
expect "not comma-separated token ids" --load "$d/llama" --prompt-ids 1,x --tokenizer-type NullTokenizer
expect "top_p 1.5 out of range" --load "$d/llama" --prompt-ids 1 --top_p 1.5 --tokenizer-type NullTokenizer
expect "unrecognized arguments: --bogus" --bogus
expect "latest_checkpointed_iteration" --load "$d/none" --prompt-ids 1 --tokenizer-type NullTokenizer
cp -r "$d/deepseek_v3" "$d/dsnobias"  # (a checkpoint without the model's buffer: no zeros instead)
jq 'del(.tensors["decoder.layers.1.mlp.router.expert_bias"])' "$d/deepseek_v3/iter_0000000/index.json" \
  > "$d/dsnobias/iter_0000000/index.json"
expect "the checkpoint has no 'decoder.layers.1.mlp.router.expert_bias'" --load "$d/dsnobias" --prompt-ids 1 --tokenizer-type NullTokenizer
exit $fail
