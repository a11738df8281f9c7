#!/usr/bin/env bash
# functional: mt-pretrain with DeepSeek's multi-latent attention (--multi-latent-attention). The
# loss falls; a query latent (--q-lora-rank) and the values' width change the losses; full
# recompute gives the same losses bitwise; YaRN (Megatron's MLA default) of factor 1 is RoPE, and
# its factor and mscales change the losses and export; MLA's unsupported choices are refused before
# training, each with its message (query groups; biases; --qk-layernorm; --rotary-interleaved;
# Llama 3's scaling; YaRN's flags without YaRN). A DeepSeek-V3-shaped run (a dense layer, then sigmoid
# routing with the expert bias, groups, a scaling factor and a shared expert) trains; with
# mt-convert ($MT_CONVERT) its checkpoint (and a dense MLA one) exports as Hugging Face
# DeepSeek-V3 and imports back to the same fine-tuning losses. With an MPI launcher ($MPIEXEC):
# 2 data-parallel ranks, 2 pipeline stages, 2 expert-parallel ranks, 2 tensor-parallel ranks
# (with and without sequence parallelism and the query latent) and 2 context-parallel ranks (also
# with TP 2 + SP, 4 ranks) give one rank's losses. With "cuda": on the GPU.
source "$(dirname "$0")/pretrain_common.sh"
need_mr_gpus "${1:-}"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
MLA=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
     --untie-embeddings-and-output-weights --multi-latent-attention --rope-type rope
     --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 12)
run() {  # name, then extra flags
  local n=$1; shift
  tiny_run "$d/$n.json" "${MLA[@]}" "$@" > "$d/$n.log" 2>&1 \
    || { echo "FAIL: run $n"; cat "$d/$n.log"; exit 1; }
}
run base --train-iters 24 --q-lora-rank 24
grep -q "Llama-style with MLA model" "$d/base.log" || { echo "FAIL: model line"; cat "$d/base.log"; exit 1; }
first=$(losses "$d/base.json" 1 1 | awk '{ print $2 }'); last=$(losses "$d/base.json" 24 24 | awk '{ print $2 }')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' \
  || { echo "FAIL: the loss did not fall ($first -> $last)"; exit 1; }
echo "ok: loss $first -> $last"
# the shapes reach the model: no query latent, other value heads
run noq --train-iters 4
run v16 --train-iters 4 --q-lora-rank 24 --v-head-dim 16
[ "$(losses "$d/base.json" 1 1)" != "$(losses "$d/noq.json" 1 1)" ] || { echo "FAIL: --q-lora-rank changed nothing"; exit 1; }
[ "$(losses "$d/base.json" 1 1)" != "$(losses "$d/v16.json" 1 1)" ] || { echo "FAIL: --v-head-dim changed nothing"; exit 1; }
echo "ok: --q-lora-rank and --v-head-dim change the losses"
# full recompute repeats the forward bitwise (the latents and the packed heads included)
run rec --train-iters 24 --q-lora-rank 24 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
[ "$(losses "$d/base.json" 1 24)" = "$(losses "$d/rec.json" 1 24)" ] || { echo "FAIL: full recompute differs"; exit 1; }
echo "ok: full recompute bitwise"
# --recompute-modules mla_up_proj (Megatron's): the heads made again before each attention
# backward, bitwise, in less memory; without the query latent (linear_q_proj reads the normed
# input, also recomputed with layernorm)
sel=(--recompute-granularity selective --recompute-modules)
run rup --train-iters 24 --q-lora-rank 24 "${sel[@]}" mla_up_proj
run rupnoq --train-iters 4 "${sel[@]}" mla_up_proj layernorm
[ "$(losses "$d/base.json" 1 24)" = "$(losses "$d/rup.json" 1 24)" ] || { echo "FAIL: mla_up_proj recompute differs"; exit 1; }
[ "$(losses "$d/noq.json" 1 4)" = "$(losses "$d/rupnoq.json" 1 4)" ] || { echo "FAIL: mla_up_proj + layernorm recompute differs"; exit 1; }
mem() { grep -o "memory (MB): [0-9.]*" "$d/$1.log" | awk '{ print $3 }'; }
awk -v a="$(mem base)" -v b="$(mem rup)" 'BEGIN { exit !(b < a) }' \
  || { echo "FAIL: mla_up_proj saves no memory ($(mem base) -> $(mem rup) MB)"; exit 1; }
echo "ok: mla_up_proj recompute bitwise, memory $(mem base) -> $(mem rup) MB"
# YaRN (Megatron's MLA default): factor 1 is plain RoPE (bitwise); a factor and the mscales change
# the losses and export as Hugging Face's rope_scaling, its attention_factor m(4, .9) / m(4, .8)
yarn=(); skip=0  # (MLA's flags without --rope-type rope)
for f in "${MLA[@]}"; do [ "$f" = --rope-type ] && skip=2; [ $skip -gt 0 ] && skip=$((skip - 1)) && continue; yarn+=("$f"); done
YARN=(--rotary-scaling-factor 4 --mscale 0.9 --mscale-all-dim 0.8 --original-max-position-embeddings 8
      --rotary-base 100)
tiny_run "$d/yarn1.json" "${yarn[@]}" --train-iters 4 --q-lora-rank 24 > "$d/yarn1.log" 2>&1 || { echo "FAIL: yarn1"; cat "$d/yarn1.log"; exit 1; }
[ "$(losses "$d/base.json" 1 4)" = "$(losses "$d/yarn1.json" 1 4)" ] || { echo "FAIL: YaRN of factor 1 is not RoPE"; exit 1; }
run rope100 --train-iters 4 --q-lora-rank 24 --rotary-base 100
run yarn --train-iters 4 --q-lora-rank 24 --rope-type yarn "${YARN[@]}" --save "$d/yarnck"
[ "$(losses "$d/rope100.json" 1 1)" != "$(losses "$d/yarn.json" 1 1)" ] || { echo "FAIL: YaRN changed nothing"; exit 1; }
echo "ok: YaRN of factor 1 is RoPE; YaRN's factor and mscales change the losses"
refused MLA "--rope-type foo|invalid choice: 'foo'" \
  "--position-embedding-type yarn|not --position-embedding-type yarn" \
  "--mscale 2|are YaRN's" \
  "--use-rope-scaling|--use-rope-scaling (Llama 3.x's) is for" \
  "--group-query-attention --num-query-groups 2|does not take --group-query-attention" \
  "--rotary-interleaved|interleaved pairs already" \
  "--qk-layernorm|--qk-layernorm is not supported yet" \
  "--v-head-dim 32|--v-head-dim (32) larger than" \
  "--recompute-modules mla_up_proj|needs --recompute-granularity selective"
nobias=(); for f in "${MLA[@]}"; do [ "$f" = --disable-bias-linear ] || nobias+=("$f"); done
refused nobias "|with biases is not supported yet"
plain=()  # (no MLA)
refused plain "${sel[@]} mla_up_proj|mla_up_proj with --multi-latent-attention"
echo "ok: refusals"
# DeepSeek-V3's shape: layer 0 dense, layer 1 MoE with sigmoid routing, the expert bias, groups,
# a scaling factor and a shared expert
DS=(--q-lora-rank 24 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32
    --moe-shared-expert-intermediate-size 32 --moe-layer-freq "[0]+[1]"
    --moe-router-score-function sigmoid --moe-router-enable-expert-bias
    --moe-router-num-groups 2 --moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5
    --moe-aux-loss-coeff 0 --moe-grouped-gemm --moe-token-dispatcher-type alltoall)
run ds --train-iters 24 "${DS[@]}"
grep -q "Mixtral-style MoE (4 experts, top-2) with MLA model" "$d/ds.log" || { echo "FAIL: model line"; cat "$d/ds.log"; exit 1; }
first=$(losses "$d/ds.json" 1 1 | awk '{ print $2 }'); last=$(losses "$d/ds.json" 24 24 | awk '{ print $2 }')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' \
  || { echo "FAIL: the DeepSeek-V3-shaped loss did not fall ($first -> $last)"; exit 1; }
echo "ok: DeepSeek-V3-shaped run, loss $first -> $last"
if [ -n "${MT_CONVERT:-}" ]; then  # exported as Hugging Face DeepSeek-V3 and imported back
  eb=(--moe-router-bias-update-rate 0.05)  # (an expert bias large enough to move the routing)
  run dsck --train-iters 4 "${DS[@]}" "${eb[@]}" --save "$d/dsck"
  "$MT_CONVERT" mt-to-hf "$d/dsck" "$d/dshf" 2> "$d/dsexport.log" || { echo "FAIL: DeepSeek-V3 export"; cat "$d/dsexport.log"; exit 1; }
  [ "$(jq -r '.model_type, .q_lora_rank, .kv_lora_rank, .qk_nope_head_dim, .qk_rope_head_dim, .v_head_dim,
      .first_k_dense_replace, .n_routed_experts, .n_group, .topk_group, .norm_topk_prob,
      .routed_scaling_factor, .n_shared_experts, .rope_interleave' "$d/dshf/config.json" | tr '\n' ' ')" \
    = "deepseek_v3 24 16 16 8 12 1 4 2 1 true 2.5 1 true " ] || { echo "FAIL: exported DeepSeek-V3 config"; cat "$d/dshf/config.json"; exit 1; }
  "$MT_CONVERT" hf-to-mt "$d/dshf" "$d/dsback" 2> "$d/dsimport.log" || { echo "FAIL: DeepSeek-V3 import"; cat "$d/dsimport.log"; exit 1; }
  grep -q '"decoder.layers.1.mlp.router.expert_bias"' "$d/dsback/iter_0000000/index.json" || { echo "FAIL: no expert bias in the import"; exit 1; }
  run dsft --train-iters 4 "${DS[@]}" "${eb[@]}" --load "$d/dsck" --finetune
  run dsftback --train-iters 4 "${DS[@]}" "${eb[@]}" --load "$d/dsback" --finetune
  [ "$(losses "$d/dsft.json" 1 4)" = "$(losses "$d/dsftback.json" 1 4)" ] || { echo "FAIL: the DeepSeek-V3 round trip changed the losses"; exit 1; }
  # MLA without a query latent and without experts: first_k_dense_replace = the layers
  run noqck --train-iters 4 --save "$d/noqck"
  "$MT_CONVERT" mt-to-hf "$d/noqck" "$d/noqhf" 2> "$d/noqexport.log" || { echo "FAIL: dense MLA export"; cat "$d/noqexport.log"; exit 1; }
  [ "$(jq -r '.model_type, .q_lora_rank, .first_k_dense_replace, .n_routed_experts' "$d/noqhf/config.json" | tr '\n' ' ')" = "deepseek_v3 null 2 null " ] \
    || { echo "FAIL: exported dense MLA config"; cat "$d/noqhf/config.json"; exit 1; }
  "$MT_CONVERT" hf-to-mt "$d/noqhf" "$d/noqback" 2> "$d/noqimport.log" || { echo "FAIL: dense MLA import"; cat "$d/noqimport.log"; exit 1; }
  run noqft --train-iters 4 --load "$d/noqck" --finetune
  run noqftback --train-iters 4 --load "$d/noqback" --finetune
  [ "$(losses "$d/noqft.json" 1 4)" = "$(losses "$d/noqftback.json" 1 4)" ] || { echo "FAIL: the dense MLA round trip changed the losses"; exit 1; }
  # DeepSeek-V3's shape but softmax routing (no expert bias): no Hugging Face config to export
  sm=(); for f in "${DS[@]}"; do case $f in --moe-router-score-function|sigmoid|--moe-router-enable-expert-bias) ;; *) sm+=("$f");; esac; done
  run smck --train-iters 4 "${sm[@]}" --save "$d/smck"
  "$MT_CONVERT" mt-to-hf "$d/smck" "$d/smhf" > "$d/smexport.log" 2>&1 && { echo "FAIL: MLA with softmax routing exported"; exit 1; }
  grep -q "no hf.config" "$d/smexport.log" || { echo "FAIL: export message"; cat "$d/smexport.log"; exit 1; }
  "$MT_CONVERT" mt-to-hf "$d/yarnck" "$d/yarnhf" 2> "$d/yarnexport.log" || { echo "FAIL: YaRN export"; cat "$d/yarnexport.log"; exit 1; }
  # (numbers as integers: jq versions print reals differently)
  got=$(jq -r '.rope_scaling | "\(.rope_type) \(.factor * 10 | round) \(.original_max_position_embeddings) \(.mscale * 10 | round) \(.mscale_all_dim * 10 | round) \(.attention_factor * 1e6 | round)"' "$d/yarnhf/config.json")
  [ "$got" = "yarn 40 8 9 8 1012479" ] || { echo "FAIL: exported YaRN: $got"; cat "$d/yarnhf/config.json"; exit 1; }
  [ "$(jq -r '.rope_parameters | "\(.rope_type) \(.rope_theta | round)"' "$d/yarnhf/config.json")" = "yarn 100" ] || { echo "FAIL: exported rope_parameters"; exit 1; }
  echo "ok: exported as Hugging Face DeepSeek-V3 (and dense MLA, and YaRN's rope_scaling) and imported back (the same fine-tuning losses); softmax routing not exported"
fi
if [ -n "${MPIEXEC:-}" ]; then
  mr() {  # name ranks, then extra flags
    local n=$1 np=$2; shift 2
    "$MPIEXEC" -n "$np" "$MT_PRETRAIN" "${tiny_args[@]}" "${MLA[@]}" --golden-values-out "$d/$n.json" \
      "$@" > "$d/$n.log" 2>&1 || { echo "FAIL: run $n"; cat "$d/$n.log"; exit 1; }
  }
  run one --q-lora-rank 24
  mr dp2 2 --q-lora-rank 24 --use-distributed-optimizer
  mr pp2 2 --q-lora-rank 24 --pipeline-model-parallel-size 2
  for n in dp2 pp2; do
    paste <(losses "$d/one.json" 1 12) <(losses "$d/$n.json" 1 12) | awk '{ print $2, $4 }' | close "$n" 1e-5
  done
  run dsone --train-iters 12 "${DS[@]}"
  mr dsep2 2 --train-iters 12 "${DS[@]}" --expert-model-parallel-size 2
  paste <(losses "$d/dsone.json" 1 12) <(losses "$d/dsep2.json" 1 12) | awk '{ print $2, $4 }' | close "DeepSeek-V3-shaped EP 2" 1e-5
  # tensor parallelism: each rank its heads (the up-projections column-parallel, linear_proj
  # row-parallel), the down-projections and latent norms whole on every rank
  mr tp2 2 --q-lora-rank 24 --tensor-model-parallel-size 2
  mr tpsp2 2 --q-lora-rank 24 --tensor-model-parallel-size 2 --sequence-parallel
  run noqone
  mr noqtp2 2 --tensor-model-parallel-size 2 --sequence-parallel  # (linear_q_proj's heads)
  mr noqtp2rup 2 --tensor-model-parallel-size 2 --sequence-parallel "${sel[@]}" mla_up_proj layernorm
  mr dstp2 2 --train-iters 12 "${DS[@]}" --tensor-model-parallel-size 2 --sequence-parallel
  # context parallelism: each rank 2 chunks of every sequence, the packed keys and values
  # all-gathered (also under TP 2 + SP on 4 ranks where there are as many)
  mr cp2 2 --q-lora-rank 24 --context-parallel-size 2
  cases="tp2 tpsp2 cp2"
  if [ "${1:-}" != cuda ] || [ "$(nvidia-smi -L | wc -l)" -ge 4 ]; then
    mr tp2cp2 4 --q-lora-rank 24 --tensor-model-parallel-size 2 --sequence-parallel --context-parallel-size 2
    cases="$cases tp2cp2"
  fi
  for n in $cases; do
    paste <(losses "$d/one.json" 1 12) <(losses "$d/$n.json" 1 12) | awk '{ print $2, $4 }' | close "$n" 1e-5
  done
  for n in noqtp2 noqtp2rup; do
    paste <(losses "$d/noqone.json" 1 12) <(losses "$d/$n.json" 1 12) | awk '{ print $2, $4 }' | close "no query latent, TP 2 + SP ($n)" 1e-5
  done
  paste <(losses "$d/dsone.json" 1 12) <(losses "$d/dstp2.json" 1 12) | awk '{ print $2, $4 }' | close "DeepSeek-V3-shaped TP 2 + SP" 1e-5
fi
echo "PASS"
