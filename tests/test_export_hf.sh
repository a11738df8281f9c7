#!/usr/bin/env bash
# functional: a checkpoint written by mt-pretrain exports to Hugging Face (mt-convert mt-to-hf) for
# GPT-2-, Llama-, Qwen2- (--add-qkv-bias) and Qwen3-shaped (--qk-layernorm) models, the config
# says so, and the export imports back (hf-to-mt) into the same weights.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
llama=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2)
for m in gpt2 llama qwen2 qwen3; do
  extra=(); [ $m = llama ] && extra=("${llama[@]}"); [ $m = qwen3 ] && extra=("${llama[@]}" --qk-layernorm)
  [ $m = qwen2 ] && extra=("${llama[@]}" --add-qkv-bias)
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
  # (Qwen2: the q, k and v biases exported, and no o_proj or MLP ones)
  if [ $m = qwen2 ]; then
    for t in q k v; do
      grep -q "\"model.layers.1.self_attn.${t}_proj.bias\"" "$d/$m-hf"/model*.safetensors \
        || { echo "FAIL: qwen2 export without the $t bias"; exit 1; }
    done
    grep -q 'o_proj.bias\|mlp.down_proj.bias' "$d/$m-hf"/model*.safetensors \
      && { echo "FAIL: qwen2 export with other biases"; exit 1; }
  fi
  "$MT_CONVERT" hf-to-mt "$d/$m-hf" "$d/$m-back" 2> "$d/$m-import.log" \
    || { echo "FAIL: $m re-import"; cat "$d/$m-import.log"; exit 1; }
  "$MT_CONVERT" mt-to-hf "$d/$m-back" "$d/$m-hf2" 2> "$d/$m-export2.log" \
    || { echo "FAIL: $m second export"; cat "$d/$m-export2.log"; exit 1; }
  cmp "$d/$m-hf/model.safetensors" "$d/$m-hf2/model.safetensors" \
    || { echo "FAIL: $m: the re-imported checkpoint exports other tensors"; exit 1; }
  echo "ok: $m exported ($(ls "$d/$m-hf" | tr '\n' ' ')) and imported back"
done
