#!/usr/bin/env bash
# functional: a checkpoint written by mt-pretrain exports to Hugging Face (mt-convert mt-to-hf) for
# GPT-2-, Llama- and Qwen3-shaped (--qk-layernorm) models, the config says so, and the export
# imports back (hf-to-mt).
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
llama=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2)
for m in gpt2 llama qwen3; do
  extra=(); [ $m = llama ] && extra=("${llama[@]}"); [ $m = qwen3 ] && extra=("${llama[@]}" --qk-layernorm)
  tiny_run "$d/$m.json" --train-iters 4 --save "$d/$m-ckpt" "${extra[@]}" > "$d/$m.log"
  "$MT_CONVERT" mt-to-hf "$d/$m-ckpt" "$d/$m-hf" 2> "$d/$m-export.log" \
    || { echo "FAIL: $m export"; cat "$d/$m-export.log"; exit 1; }
  got=$(jq -r .model_type "$d/$m-hf/config.json")
  [ "$got" = $m ] || { echo "FAIL: $m exported as model_type $got"; exit 1; }
  [ "$(jq -r .vocab_size "$d/$m-hf/config.json")" = 301 ] || { echo "FAIL: $m vocab"; exit 1; }
  # (Qwen3: the per-head q and k norms exported, not dropped as a Llama would)
  if [ $m = qwen3 ]; then
    grep -q '"model.layers.1.self_attn.k_norm.weight"' "$d/$m-hf"/model*.safetensors \
      || { echo "FAIL: qwen3 export without the k norms"; exit 1; }
  fi
  "$MT_CONVERT" hf-to-mt "$d/$m-hf" "$d/$m-back" 2> "$d/$m-import.log" \
    || { echo "FAIL: $m re-import"; cat "$d/$m-import.log"; exit 1; }
  echo "ok: $m exported ($(ls "$d/$m-hf" | tr '\n' ' ')) and imported back"
done
