#!/usr/bin/env bash
# functional: a checkpoint written by mt-pretrain exports to Hugging Face (mt-convert mt-to-hf) for
# GPT-2-, Llama-, Qwen2- (--add-qkv-bias), Qwen3- (--qk-layernorm) and StableLM-shaped
# (LayerNorm, --rotary-percent) models, the config
# says so, and the export imports back (hf-to-mt) into the same weights; scaled rotary frequencies
# (Llama 3's, linear, YaRN) export as Hugging Face's rope_scaling.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
llama=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2)
stablelm=(--position-embedding-type rope --swiglu --disable-bias-linear --untie-embeddings-and-output-weights
          --group-query-attention --num-query-groups 2 --rotary-percent 0.25)
for m in gpt2 llama qwen2 qwen3 stablelm; do
  extra=(); [ $m = llama ] && extra=("${llama[@]}"); [ $m = qwen3 ] && extra=("${llama[@]}" --qk-layernorm)
  [ $m = stablelm ] && extra=("${stablelm[@]}")
  [ $m = qwen2 ] && extra=("${llama[@]}" --add-qkv-bias)
  tiny_run "$d/$m.json" --train-iters 4 --save "$d/$m-ckpt" "${extra[@]}" > "$d/$m.log"
  "$MT_CONVERT" mt-to-hf "$d/$m-ckpt" "$d/$m-hf" 2> "$d/$m-export.log" \
    || { echo "FAIL: $m export"; cat "$d/$m-export.log"; exit 1; }
  got=$(jq -r .model_type "$d/$m-hf/config.json")
  [ "$got" = $m ] || { echo "FAIL: $m exported as model_type $got"; exit 1; }
  [ "$(jq -r .vocab_size "$d/$m-hf/config.json")" = 301 ] || { echo "FAIL: $m vocab"; exit 1; }
  # (StableLM: the partial rotary embeddings and the LayerNorms' biases)
  if [ $m = stablelm ]; then
    [ "$(jq -r '.rope_parameters.partial_rotary_factor * 100 | round' "$d/$m-hf/config.json")" = 25 ] \
      || { echo "FAIL: stablelm partial_rotary_factor"; cat "$d/$m-hf/config.json"; exit 1; }
    grep -q '"model.layers.1.post_attention_layernorm.bias"' "$d/$m-hf"/model*.safetensors \
      || { echo "FAIL: stablelm export without the norm biases"; exit 1; }
  fi
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
# scaled rotary frequencies export as Hugging Face's rope_scaling (and rope_parameters):
# Llama 3.x's (Megatron's fixed 1, 4, 8192), linear, YaRN (its attention_factor m(4, 1) / m(4, 0))
# (numbers as integers: jq versions print reals differently)
for s in "llama3 4 1 4 8192 null|--use-rope-scaling --rope-scaling-factor 4" \
         "linear 2 null null null null|--rotary-seq-len-interpolation-factor 2" \
         "yarn 4 null null 16 1138629|--position-embedding-type yarn --rotary-scaling-factor 4 --original-max-position-embeddings 16"; do
  tiny_run "$d/s.json" --train-iters 4 --save "$d/s-ckpt" "${llama[@]}" ${s#*|} > "$d/s.log" 2>&1 \
    || { echo "FAIL: ${s#*|}"; cat "$d/s.log"; exit 1; }
  "$MT_CONVERT" mt-to-hf "$d/s-ckpt" "$d/s-hf" 2> "$d/s-export.log" || { echo "FAIL: ${s#*|} export"; cat "$d/s-export.log"; exit 1; }
  got=$(jq -r 'def i: if . then round else . end; .rope_scaling | "\(.rope_type) \(.factor | i) \(.low_freq_factor | i) \(.high_freq_factor | i) \(.original_max_position_embeddings) \(.attention_factor // null | if . then . * 1e6 | round else . end)"' "$d/s-hf/config.json")
  [ "$got" = "${s%%|*}" ] || { echo "FAIL: ${s#*|} exported rope_scaling '$got', want '${s%%|*}'"; cat "$d/s-hf/config.json"; exit 1; }
  [ "$(jq -r .rope_parameters.rope_type "$d/s-hf/config.json")" = "${s%% *}" ] || { echo "FAIL: ${s#*|} rope_parameters"; exit 1; }
  rm -rf "$d/s-ckpt" "$d/s-hf"
  echo "ok: ${s#*|} exported as rope_scaling ${s%%|*}"
done
