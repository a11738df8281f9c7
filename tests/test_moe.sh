#!/usr/bin/env bash
# functional: mt-pretrain with Mixtral-style MoE layers (--num-experts). The loss falls; the log
# line carries Megatron's load_balancing_loss and z_loss keys (about 1 for a balanced router: E
# times the mean of f_e P_e) and the metrics JSONL their per-iteration values; the aux loss's
# coefficient changes the gradients (and so the losses after the first step); mt-convert
# exports the checkpoint as a Hugging Face Mixtral and imports it back; token dropping
# (--moe-expert-capacity-factor, padded or not, both policies). With an MPI launcher
# ($MPIEXEC): 2 data-parallel ranks (also with the distributed optimizer and overlapped buckets,
# and with hidden dropout), 2 pipeline stages and 2 tensor-parallel ranks (each holding its share
# of every expert; also with sequence parallelism; also with biases) give one rank's losses and
# router losses, also with token dropping; so do 2 expert-parallel ranks (with the distributed
# optimizer, 4 data-parallel ranks, tensor and sequence parallelism, 2 stages, full recompute,
# biases, token dropping padded or not), and their checkpoint resumes on one rank. Group-limited
# routing changes the losses; bad groups are refused. Shared experts (gated: Qwen2-MoE's) change
# the losses, recompute bitwise, give one rank's losses under TP + SP and EP, and export as a
# Hugging Face Qwen2-MoE that imports back. --moe-layer-freq's dense layers (int and list forms)
# too, also over pipeline stages, and in Qwen2-MoE's mlp_only_layers. Sigmoid scores change the
# losses and give one rank's under TP + SP and EP. A Qwen3-MoE shape (--qk-layernorm, a dense
# first layer) exports as Hugging Face's qwen3_moe and imports back. With "cuda": on the GPU.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
moe=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
     --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2
     --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 0.01
     --moe-z-loss-coeff 0.001 --moe-grouped-gemm --moe-token-dispatcher-type alltoall)
MOE=("${moe[@]}")  # (the runs' flags; without --disable-bias-linear for the biased ones)
moe_bias=(); for f in "${moe[@]}"; do [ "$f" = --disable-bias-linear ] || moe_bias+=("$f"); done
run() {  # name, then extra flags
  local n=$1; shift
  tiny_run "$d/$n.json" "${MOE[@]}" --metrics-jsonl "$d/$n.jsonl" "$@" > "$d/$n.log" 2>&1 \
    || { echo "FAIL: run $n"; cat "$d/$n.log"; exit 1; }
}
run base --train-iters 24 --save "$d/ckpt"
grep -q "Mixtral-style MoE (4 experts, top-2)" "$d/base.log" || { echo "FAIL: model line"; cat "$d/base.log"; exit 1; }
first=$(losses "$d/base.json" 1 1 | awk '{ print $2 }'); last=$(losses "$d/base.json" 24 24 | awk '{ print $2 }')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' \
  || { echo "FAIL: the loss did not fall ($first -> $last)"; exit 1; }
echo "ok: loss $first -> $last"
lb=$(grep -o "load_balancing_loss: [0-9.E+-]*" "$d/base.log" | awk '{ print $2 }')
z=$(grep -o "z_loss: [0-9.E+-]*" "$d/base.log" | awk '{ print $2 }')
[ "$(echo "$lb" | wc -l)" = 7 ] && [ "$(echo "$z" | wc -l)" = 7 ] \
  || { echo "FAIL: router losses not on every log line"; cat "$d/base.log"; exit 1; }
echo "$lb" | awk '{ if (!($1 >= 0.9 && $1 < 2)) bad = 1 } END { exit bad }' \
  || { echo "FAIL: load_balancing_loss out of [0.9, 2): $lb"; exit 1; }
[ "$(jq -s '[.[] | select(.load_balancing_loss > 0 and .z_loss > 0)] | length' "$d/base.jsonl")" = 24 ] \
  || { echo "FAIL: metrics JSONL lacks the router losses"; head -2 "$d/base.jsonl"; exit 1; }
echo "ok: router losses logged ($(echo $lb | tr ' ' ','))"
# the coefficients reach the gradients: without them the first loss is the same, the later not
run nocoef --train-iters 4 --moe-aux-loss-coeff 0 --moe-z-loss-coeff 0
grep -q "load_balancing_loss\|z_loss" "$d/nocoef.log" && { echo "FAIL: router losses logged without coefficients"; exit 1; }
[ "$(losses "$d/base.json" 1 1)" = "$(losses "$d/nocoef.json" 1 1)" ] || { echo "FAIL: first loss differs"; exit 1; }
[ "$(losses "$d/base.json" 2 4)" != "$(losses "$d/nocoef.json" 2 4)" ] || { echo "FAIL: the coefficients changed nothing"; exit 1; }
echo "ok: coefficients change the steps, not the first loss"
# token dropping: a capacity above the tokens drops nothing (= dropless, bitwise); capacity 0.5
# changes the first loss; padding every expert to its capacity changes nothing but the GEMMs'
# shapes; the position policy keeps other tokens than the probs policy
run dropless4 --train-iters 4
run cap100 --train-iters 4 --moe-expert-capacity-factor 100
run drop --train-iters 4 --moe-expert-capacity-factor 0.5
run droppad --train-iters 4 --moe-expert-capacity-factor 0.5 --moe-pad-expert-input-to-capacity
run droppos --train-iters 4 --moe-expert-capacity-factor 0.5 --moe-token-drop-policy position
[ "$(losses "$d/dropless4.json" 1 4)" = "$(losses "$d/cap100.json" 1 4)" ] || { echo "FAIL: capacity 100 dropped"; exit 1; }
[ "$(losses "$d/dropless4.json" 1 1)" != "$(losses "$d/drop.json" 1 1)" ] || { echo "FAIL: capacity 0.5 dropped nothing"; exit 1; }
[ "$(losses "$d/drop.json" 1 1)" != "$(losses "$d/droppos.json" 1 1)" ] || { echo "FAIL: the position policy kept the same tokens"; exit 1; }
paste <(losses "$d/drop.json" 1 4) <(losses "$d/droppad.json" 1 4) | awk '{ print $2, $4 }' | close "padded to capacity" 1e-6
# 64 experts, top-1, 64 tokens a micro-batch: experts without tokens (the last one too, at some
# layer); padded to a capacity above the tokens every expert has rows: the same losses
# the router's options reach the model: pre-softmax probabilities, a scaling factor
run presoft --train-iters 4 --moe-router-pre-softmax --moe-router-topk-scaling-factor 2
[ "$(losses "$d/dropless4.json" 1 1)" != "$(losses "$d/presoft.json" 1 1)" ] || { echo "FAIL: --moe-router-pre-softmax changed nothing"; exit 1; }
# --moe-router-dtype fp32 (Megatron's: the router in fp32) is what the router does anyway: the same
# losses, bitwise; fp64 and other values are refused
run rdt --train-iters 4 --moe-router-dtype fp32
[ "$(losses "$d/dropless4.json" 1 4)" = "$(losses "$d/rdt.json" 1 4)" ] || { echo "FAIL: --moe-router-dtype fp32 changed the losses"; exit 1; }
refused MOE "--moe-router-dtype fp64|--moe-router-dtype fp64 is not supported yet" \
        "--moe-router-dtype bf16|invalid choice: 'bf16'"
echo "ok: --moe-router-dtype fp32 (bitwise the default), fp64 and bf16 refused"
# group-limited routing (Megatron's --moe-router-num-groups / --moe-router-group-topk; mt-moe's
# golden cases check the choice): each token's 2 experts from the better of 2 groups of 2, so the
# first loss changes; bad groups get Megatron's messages before anything runs
run grouped --train-iters 4 --moe-router-num-groups 2 --moe-router-group-topk 1 --save "$d/gckpt"
[ "$(losses "$d/dropless4.json" 1 1)" != "$(losses "$d/grouped.json" 1 1)" ] || { echo "FAIL: group-limited routing changed nothing"; exit 1; }
refused MOE "--moe-router-group-topk 1|moe_router_num_groups must be specified" \
        "--moe-router-num-groups 3 --moe-router-group-topk 1|num_moe_experts (4) should be divisible by moe_router_num_groups (3)" \
        "--moe-router-num-groups 2 --moe-router-group-topk 3|moe_router_group_topk (3) should be smaller than moe_router_num_groups (2)"
echo "ok: group-limited routing ($(losses "$d/grouped.json" 1 1 | awk '{print $2}') first loss; bad groups refused)"
if [ -n "${MT_CONVERT:-}" ]; then  # (Mixtral routes otherwise: no Hugging Face config to export)
  "$MT_CONVERT" mt-to-hf "$d/gckpt" "$d/ghf" > "$d/gexport.log" 2>&1 && { echo "FAIL: group-routed MoE exported as Mixtral"; exit 1; }
  grep -q "no hf.config" "$d/gexport.log" || { echo "FAIL: export message"; cat "$d/gexport.log"; exit 1; }
  echo "ok: a group-routed checkpoint is not exported as Mixtral"
fi
# sigmoid scores (Megatron's --moe-router-score-function sigmoid; mt-moe's golden cases check the
# routing and gradients) change the losses, also with groups and a scaling factor; the checkpoint
# has no Hugging Face config; bad combinations are refused
run sig --train-iters 4 --moe-router-score-function sigmoid --save "$d/sigck"
run siggroup --train-iters 4 --moe-router-score-function sigmoid --moe-router-num-groups 2 --moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5
[ "$(losses "$d/dropless4.json" 1 1)" != "$(losses "$d/sig.json" 1 1)" ] || { echo "FAIL: sigmoid scores changed nothing"; exit 1; }
[ "$(losses "$d/sig.json" 1 1)" != "$(losses "$d/siggroup.json" 1 1)" ] || { echo "FAIL: sigmoid groups changed nothing"; exit 1; }
refused MOE "--moe-router-score-function sigmoid --moe-router-pre-softmax|--moe-router-pre-softmax is the softmax score function's" \
        "--moe-router-score-function sqrtsoftplus|sqrtsoftplus is not supported yet" \
        "--moe-router-score-function relu|invalid choice: 'relu'" \
        "--moe-router-enable-expert-bias|Expert bias for aux-loss-free routing only supports sigmoid score function"
if [ -n "${MT_CONVERT:-}" ]; then
  "$MT_CONVERT" mt-to-hf "$d/sigck" "$d/sighf" > "$d/sigexport.log" 2>&1 && { echo "FAIL: sigmoid-routed MoE exported"; exit 1; }
fi
echo "ok: sigmoid scores ($(losses "$d/sig.json" 1 1 | awk '{print $2}') first loss; with groups $(losses "$d/siggroup.json" 1 1 | awk '{print $2}'); bad combinations refused)"
# the per-sequence load-balancing loss (--moe-router-load-balancing-type seq_aux_loss; mt-moe's
# golden cases check it): logged under Megatron's seq_load_balancing_loss key, the same first
# loss, other later ones than aux_loss's
run seqaux --train-iters 4 --moe-router-load-balancing-type seq_aux_loss
grep -q "seq_load_balancing_loss: [0-9]" "$d/seqaux.log" || { echo "FAIL: no seq_load_balancing_loss in the log"; cat "$d/seqaux.log"; exit 1; }
[ "$(jq -s '[.[] | select(.seq_load_balancing_loss > 0)] | length' "$d/seqaux.jsonl")" = 4 ] || { echo "FAIL: metrics lack seq_load_balancing_loss"; exit 1; }
[ "$(losses "$d/dropless4.json" 1 1)" = "$(losses "$d/seqaux.json" 1 1)" ] || { echo "FAIL: seq_aux_loss changed the first loss"; exit 1; }
[ "$(losses "$d/dropless4.json" 2 4)" != "$(losses "$d/seqaux.json" 2 4)" ] || { echo "FAIL: seq_aux_loss changed nothing"; exit 1; }
echo "ok: seq_aux_loss ($(grep -o "seq_load_balancing_loss: [0-9.E+-]*" "$d/seqaux.log" | tail -1))"
# the expert bias (Megatron's --moe-router-enable-expert-bias, aux-loss-free balancing; mt-moe's
# golden cases check the routing and the update): zero at first (the same first loss), then it
# moves the routing; it is checkpointed (the routers' expert_bias) and a resume from iteration 6
# gives the same losses; without sigmoid scores it is refused with Megatron's message
eb=(--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.05)
run sig12 --moe-router-score-function sigmoid
run eb "${eb[@]}"
run ebfirst "${eb[@]}" --exit-interval 6 --save "$d/ebck"
[ "$(losses "$d/sig12.json" 1 1)" = "$(losses "$d/eb.json" 1 1)" ] || { echo "FAIL: the expert bias changed the first loss"; exit 1; }
[ "$(losses "$d/sig12.json" 2 12)" != "$(losses "$d/eb.json" 2 12)" ] || { echo "FAIL: the expert bias changed nothing"; exit 1; }
grep -q '"decoder.layers.1.mlp.router.expert_bias"' "$d/ebck/iter_0000006/index.json" || { echo "FAIL: no expert bias in the checkpoint"; ls "$d/ebck/iter_0000006"; exit 1; }
run ebres "${eb[@]}" --load "$d/ebck"
[ "$(losses "$d/eb.json" 7 12)" = "$(losses "$d/ebres.json" 7 12)" ] || { echo "FAIL: the resumed expert-bias run differs"; paste <(losses "$d/eb.json" 7 12) <(losses "$d/ebres.json" 7 12); exit 1; }
echo "ok: the expert bias (losses $(losses "$d/eb.json" 12 12 | awk '{print $2}') against $(losses "$d/sig12.json" 12 12 | awk '{print $2}') at 12; resumed bitwise; refused without sigmoid)"
# shared experts (Megatron's --moe-shared-expert-intermediate-size, gated: --moe-shared-expert-gate)
# change the first loss; full recompute repeats them bitwise; bad combinations are refused
sh=(--moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate)
run shared --train-iters 4 "${sh[@]}"
[ "$(losses "$d/dropless4.json" 1 1)" != "$(losses "$d/shared.json" 1 1)" ] || { echo "FAIL: shared experts changed nothing"; exit 1; }
run sharednog --train-iters 4 --moe-shared-expert-intermediate-size 32
[ "$(losses "$d/shared.json" 1 1)" != "$(losses "$d/sharednog.json" 1 1)" ] || { echo "FAIL: the shared experts' gate changed nothing"; exit 1; }
run sharedrec --train-iters 4 "${sh[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
[ "$(losses "$d/shared.json" 1 4)" = "$(losses "$d/sharedrec.json" 1 4)" ] || { echo "FAIL: full recompute changed the shared experts' losses"; exit 1; }
refused MOE "--moe-shared-expert-gate|--moe-shared-expert-gate needs --moe-shared-expert-intermediate-size" \
        "--moe-shared-expert-intermediate-size 30 --tensor-model-parallel-size 4|is not divisible by --tensor-model-parallel-size (4)"
tiny_run "$d/bad.json" "${moe_bias[@]}" "${sh[@]}" --train-iters 1 > "$d/bad.log" 2>&1 && { echo "FAIL: shared experts with biases accepted"; exit 1; }
grep -qF "bias is not supported in the shared experts" "$d/bad.log" || { echo "FAIL: biases message"; cat "$d/bad.log"; exit 1; }
tiny_run "$d/bad.json" --train-iters 1 --moe-shared-expert-intermediate-size 32 > "$d/bad.log" 2>&1 && { echo "FAIL: shared experts without experts accepted"; exit 1; }
grep -qF "needs --num-experts" "$d/bad.log" || { echo "FAIL: no-experts message"; cat "$d/bad.log"; exit 1; }
echo "ok: shared experts ($(losses "$d/shared.json" 1 1 | awk '{print $2}') first loss, recomputed bitwise; bad combinations refused)"
if [ -n "${MT_CONVERT:-}" ]; then  # Qwen2-MoE's shape: qkv biases, all-expert softmax, gated shared expert
  run qmoe --train-iters 4 "${sh[@]}" --add-qkv-bias --moe-router-pre-softmax --save "$d/qck"
  "$MT_CONVERT" mt-to-hf "$d/qck" "$d/qhf" 2> "$d/qexport.log" || { echo "FAIL: Qwen2-MoE export"; cat "$d/qexport.log"; exit 1; }
  [ "$(jq -r '.model_type, .num_experts, .shared_expert_intermediate_size, .norm_topk_prob' "$d/qhf/config.json" | tr '\n' ' ')" = "qwen2_moe 4 32 false " ] \
    || { echo "FAIL: exported Qwen2-MoE config"; cat "$d/qhf/config.json"; exit 1; }
  "$MT_CONVERT" hf-to-mt "$d/qhf" "$d/qback" 2> "$d/qimport.log" || { echo "FAIL: Qwen2-MoE import"; cat "$d/qimport.log"; exit 1; }
  run qft --train-iters 4 "${sh[@]}" --add-qkv-bias --moe-router-pre-softmax --load "$d/qck" --finetune
  run qftback --train-iters 4 "${sh[@]}" --add-qkv-bias --moe-router-pre-softmax --load "$d/qback" --finetune
  [ "$(losses "$d/qft.json" 1 4)" = "$(losses "$d/qftback.json" 1 4)" ] || { echo "FAIL: the Qwen2-MoE round trip changed the losses"; exit 1; }
  run sgck --train-iters 4 --moe-shared-expert-intermediate-size 32 --save "$d/sgck"
  "$MT_CONVERT" mt-to-hf "$d/sgck" "$d/sghf" > "$d/sgexport.log" 2>&1 && { echo "FAIL: ungated shared experts exported"; exit 1; }
  grep -q "no hf.config" "$d/sgexport.log" || { echo "FAIL: ungated export message"; cat "$d/sgexport.log"; exit 1; }
  echo "ok: exported as Hugging Face Qwen2-MoE and imported back (the same fine-tuning losses); ungated shared experts not exported"
fi
# --moe-layer-freq: dense MLPs in some layers (Megatron's int N, one MoE layer in N, and its list
# expression give the same model); full recompute over groups of a MoE and a dense layer and
# moe_act recompute are bitwise; a pattern of the wrong length gets Megatron's message
run freq --train-iters 4 --num-layers 4 --moe-layer-freq 2
run freql --train-iters 4 --num-layers 4 --moe-layer-freq "[1,0]*2"
run freq4 --train-iters 4 --num-layers 4
[ "$(losses "$d/freq.json" 1 4)" = "$(losses "$d/freql.json" 1 4)" ] || { echo "FAIL: --moe-layer-freq 2 and [1,0]*2 differ"; exit 1; }
[ "$(losses "$d/freq.json" 1 1)" != "$(losses "$d/freq4.json" 1 1)" ] || { echo "FAIL: --moe-layer-freq 2 changed nothing"; exit 1; }
run freqrec --train-iters 4 --num-layers 4 --moe-layer-freq 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
run freqact --train-iters 4 --num-layers 4 --moe-layer-freq 2 --recompute-granularity selective --recompute-modules moe_act layernorm
[ "$(losses "$d/freq.json" 1 4)" = "$(losses "$d/freqrec.json" 1 4)" ] || { echo "FAIL: full recompute changed the mixed layers' losses"; exit 1; }
[ "$(losses "$d/freq.json" 1 4)" = "$(losses "$d/freqact.json" 1 4)" ] || { echo "FAIL: moe_act recompute changed the mixed layers' losses"; exit 1; }
tiny_run "$d/bad.json" "${MOE[@]}" --train-iters 1 --num-layers 4 --moe-layer-freq "[1]*3" > "$d/bad.log" 2>&1 && { echo "FAIL: a short pattern accepted"; exit 1; }
grep -qF "Invalid length of moe_layer_pattern: 3, expected 4" "$d/bad.log" || { echo "FAIL: pattern message"; cat "$d/bad.log"; exit 1; }
echo "ok: --moe-layer-freq ($(losses "$d/freq.json" 1 1 | awk '{print $2}') first loss; recomputed bitwise; a short pattern refused)"
if [ -n "${MT_CONVERT:-}" ]; then  # Qwen2-MoE with a dense first layer: its mlp_only_layers
  qm=("${sh[@]}" --add-qkv-bias --moe-router-pre-softmax --num-layers 4 --moe-layer-freq "[0]+[1]*3")
  run qmix --train-iters 4 "${qm[@]}" --save "$d/qmck"
  "$MT_CONVERT" mt-to-hf "$d/qmck" "$d/qmhf" 2> "$d/qmexport.log" || { echo "FAIL: mixed Qwen2-MoE export"; cat "$d/qmexport.log"; exit 1; }
  [ "$(jq -c '.mlp_only_layers' "$d/qmhf/config.json")" = "[0]" ] || { echo "FAIL: mlp_only_layers"; cat "$d/qmhf/config.json"; exit 1; }
  "$MT_CONVERT" hf-to-mt "$d/qmhf" "$d/qmback" 2> "$d/qmimport.log" || { echo "FAIL: mixed Qwen2-MoE import"; cat "$d/qmimport.log"; exit 1; }
  run qmft --train-iters 4 "${qm[@]}" --load "$d/qmck" --finetune
  run qmftback --train-iters 4 "${qm[@]}" --load "$d/qmback" --finetune
  [ "$(losses "$d/qmft.json" 1 4)" = "$(losses "$d/qmftback.json" 1 4)" ] || { echo "FAIL: the mixed Qwen2-MoE round trip changed the losses"; exit 1; }
  run mixmix --train-iters 4 --num-layers 4 --moe-layer-freq 2 --save "$d/mmck"
  "$MT_CONVERT" mt-to-hf "$d/mmck" "$d/mmhf" > "$d/mmexport.log" 2>&1 && { echo "FAIL: Mixtral with dense layers exported"; exit 1; }
  # Qwen3-MoE: Qwen3's per-head norms, experts without a shared one, a dense first layer
  q3=(--num-layers 4 --moe-layer-freq "[0]+[1]*3" --qk-layernorm)
  run q3 --train-iters 4 "${q3[@]}" --save "$d/q3ck"
  "$MT_CONVERT" mt-to-hf "$d/q3ck" "$d/q3hf" 2> "$d/q3export.log" || { echo "FAIL: Qwen3-MoE export"; cat "$d/q3export.log"; exit 1; }
  [ "$(jq -r '.model_type, .num_experts, .norm_topk_prob, (.mlp_only_layers | tostring)' "$d/q3hf/config.json" | tr '\n' ' ')" = "qwen3_moe 4 true [0] " ] \
    || { echo "FAIL: exported Qwen3-MoE config"; cat "$d/q3hf/config.json"; exit 1; }
  grep -q '"model.layers.1.self_attn.k_norm.weight"' "$d/q3hf"/model*.safetensors || { echo "FAIL: Qwen3-MoE export without the k norms"; exit 1; }
  "$MT_CONVERT" hf-to-mt "$d/q3hf" "$d/q3back" 2> "$d/q3import.log" || { echo "FAIL: Qwen3-MoE import"; cat "$d/q3import.log"; exit 1; }
  run q3ft --train-iters 4 "${q3[@]}" --load "$d/q3ck" --finetune
  run q3ftback --train-iters 4 "${q3[@]}" --load "$d/q3back" --finetune
  [ "$(losses "$d/q3ft.json" 1 4)" = "$(losses "$d/q3ftback.json" 1 4)" ] || { echo "FAIL: the Qwen3-MoE round trip changed the losses"; exit 1; }
  echo "ok: Qwen2-MoE with a dense layer exported (mlp_only_layers [0]) and imported back; Mixtral with dense layers not exported; Qwen3-MoE exported and imported back"
fi
# Megatron's --recompute-modules moe_act (and layernorm) with MoE: the same losses, bitwise
run recact --train-iters 4 --recompute-granularity selective --recompute-modules moe_act layernorm
[ "$(losses "$d/dropless4.json" 1 4)" = "$(losses "$d/recact.json" 1 4)" ] || { echo "FAIL: moe_act recompute changed the losses"; exit 1; }
run sparse --train-iters 4 --num-experts 64 --moe-router-topk 1
run sparsepad --train-iters 4 --num-experts 64 --moe-router-topk 1 --moe-expert-capacity-factor 100 --moe-pad-expert-input-to-capacity
paste <(losses "$d/sparse.json" 1 4) <(losses "$d/sparsepad.json" 1 4) | awk '{ print $2, $4 }' | close "experts without tokens" 1e-6
echo "ok: token dropping ($(losses "$d/dropless4.json" 1 1 | awk '{print $2}') dropless, $(losses "$d/drop.json" 1 1 | awk '{print $2}') at capacity 0.5)"
if [ -n "${MT_CONVERT:-}" ]; then
  "$MT_CONVERT" mt-to-hf "$d/ckpt" "$d/hf" 2> "$d/export.log" || { echo "FAIL: export"; cat "$d/export.log"; exit 1; }
  [ "$(jq -r '.model_type, .num_local_experts, .num_experts_per_tok' "$d/hf/config.json" | tr '\n' ' ')" = "mixtral 4 2 " ] \
    || { echo "FAIL: exported config"; cat "$d/hf/config.json"; exit 1; }
  "$MT_CONVERT" hf-to-mt "$d/hf" "$d/back" 2> "$d/import.log" || { echo "FAIL: import"; cat "$d/import.log"; exit 1; }
  echo "ok: exported as Hugging Face Mixtral and imported back"
fi
if [ -n "${MPIEXEC:-}" ]; then
  mr() {  # name ranks, then extra flags
    local n=$1 np=$2; shift 2
    "$MPIEXEC" -n "$np" "$MT_PRETRAIN" "${tiny_args[@]}" "${MOE[@]}" --golden-values-out "$d/$n.json" \
      --metrics-jsonl "$d/$n.jsonl" "$@" > "$d/$n.log" 2>&1 || { echo "FAIL: run $n"; cat "$d/$n.log"; exit 1; }
  }
  run one
  run onedrop --hidden-dropout 0.1
  mr dp2 2
  mr zero 2 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000
  mr pp2 2 --pipeline-model-parallel-size 2
  # the interleaved schedule: 2 chunks of 1 layer a stage (the router losses' layer means)
  run one4 --num-layers 4
  mr ppv2 2 --num-layers 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
  mr tp2 2 --tensor-model-parallel-size 2  # each rank its share of every expert
  mr tpsp2 2 --tensor-model-parallel-size 2 --sequence-parallel  # (Megatron's MoE + TP setting)
  mr dpdrop 2 --hidden-dropout 0.1         # the MoE output's dropout masks are the samples'
  run onecap --moe-expert-capacity-factor 0.5 --moe-pad-expert-input-to-capacity
  mr dpcap 2 --moe-expert-capacity-factor 0.5 --moe-pad-expert-input-to-capacity
  mr tpcap 2 --moe-expert-capacity-factor 0.5 --tensor-model-parallel-size 2
  # expert parallelism: each rank holds 2 of the 4 experts, the rows go by all-to-all
  ep=(--expert-model-parallel-size 2)
  mr ep2 2 "${ep[@]}" --expert-tensor-parallel-size 1  # (= TP: Megatron's default)
  mr ep2zero 2 "${ep[@]}" --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000
  mr ep2dp4 4 "${ep[@]}" --use-distributed-optimizer  # (experts' grads over 2 ranks holding each)
  mr ep2tp2 4 "${ep[@]}" --tensor-model-parallel-size 2 --sequence-parallel
  mr ep2pp2 4 "${ep[@]}" --pipeline-model-parallel-size 2
  mr ep2rec 2 "${ep[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
  # with token dropping: each rank drops its own tokens (padded: every rank sends each expert
  # its region, whatever the routing)
  mr ep2cap 2 "${ep[@]}" --moe-expert-capacity-factor 0.5 --moe-pad-expert-input-to-capacity
  run onedropc --moe-expert-capacity-factor 0.5
  mr ep2drop 2 "${ep[@]}" --moe-expert-capacity-factor 0.5
  # a checkpoint of expert-parallel ranks (each writes its experts, by global index) resumed
  # on one rank: iterations 7..12 as one rank's
  mr ep2first 2 "${ep[@]}" --use-distributed-optimizer --exit-interval 6 --save "$d/epck"
  run fromep --load "$d/epck"
  grep -q "successfully loaded checkpoint from $d/epck .* at iteration 6" "$d/fromep.log" \
    || { echo "FAIL: the one-rank run did not resume from the expert-parallel checkpoint"; cat "$d/fromep.log"; exit 1; }
  paste <(losses "$d/one.json" 7 12) <(losses "$d/fromep.json" 7 12) | awk '{ print $2, $4 }' | close "resumed from expert parallel" 1e-5
  # and on 2 expert-parallel ranks again (each reads its experts; the others' are not unexpected)
  "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${MOE[@]}" "${ep[@]}" --use-distributed-optimizer \
    --load "$d/epck" --golden-values-out "$d/ep2second.json" > "$d/ep2second.log" 2>&1 \
    || { echo "FAIL: EP 2 resume"; cat "$d/ep2second.log"; exit 1; }
  paste <(losses "$d/one.json" 7 12) <(losses "$d/ep2second.json" 7 12) | awk '{ print $2, $4 }' | close "EP 2 resumed on EP 2" 1e-5
  if [ -n "${MT_CONVERT:-}" ]; then  # a Hugging Face Mixtral's import fine-tuned with EP 2
    run fromhf --load "$d/back" --finetune
    mr fromhf_ep2 2 "${ep[@]}" --load "$d/back" --finetune
    paste <(losses "$d/fromhf.json" 1 12) <(losses "$d/fromhf_ep2.json" 1 12) | awk '{ print $2, $4 }' | close "HF import fine-tuned on EP 2" 1e-5
  fi
  if [ -n "${MT_CONVERT:-}" ]; then  # (every expert's tensors, whichever rank wrote them)
    "$MT_CONVERT" mt-to-hf "$d/epck" "$d/ephf" 2> "$d/epexport.log" || { echo "FAIL: export of the EP checkpoint"; cat "$d/epexport.log"; exit 1; }
    [ "$(jq -r .num_local_experts "$d/ephf/config.json")" = 4 ] || { echo "FAIL: EP export's config"; exit 1; }
    echo "ok: the expert-parallel checkpoint exported as a Hugging Face Mixtral"
  fi
  # shared experts: tensor- and sequence-parallel as a dense MLP, beside expert parallelism
  run ones "${sh[@]}"
  mr tpsp2s 2 "${sh[@]}" --tensor-model-parallel-size 2 --sequence-parallel
  mr ep2s 2 "${sh[@]}" "${ep[@]}"
  # --moe-layer-freq: dense and MoE layers over 2 pipeline stages, TP + SP, EP
  fq=(--num-layers 4 --moe-layer-freq 2)
  run onef "${fq[@]}"
  mr pp2f 2 "${fq[@]}" --pipeline-model-parallel-size 2
  mr tpsp2f 2 "${fq[@]}" --tensor-model-parallel-size 2 --sequence-parallel
  mr ep2f 2 "${fq[@]}" "${ep[@]}"
  # sigmoid scores with tensor and sequence parallelism and expert parallelism
  run onesig --moe-router-score-function sigmoid
  mr tpsp2sig 2 --moe-router-score-function sigmoid --tensor-model-parallel-size 2 --sequence-parallel
  mr ep2sig 2 --moe-router-score-function sigmoid "${ep[@]}"
  # the expert bias: the tokens per expert summed over the data-parallel ranks (and EP's)
  run oneeb "${eb[@]}"
  mr dp2eb 2 "${eb[@]}"
  mr ep2eb 2 "${eb[@]}" "${ep[@]}"
  mr tpsp2eb 2 "${eb[@]}" --tensor-model-parallel-size 2 --sequence-parallel
  mr pp2eb 2 "${eb[@]}" --pipeline-model-parallel-size 2  # (each stage its routers' biases)
  # seq_aux_loss: each sequence's counts, on its rank (DP, EP) or routed whole (TP + SP)
  sq=(--moe-router-load-balancing-type seq_aux_loss)
  run oneseq "${sq[@]}"
  mr dp2seq 2 "${sq[@]}"
  mr ep2seq 2 "${sq[@]}" "${ep[@]}"
  mr tpsp2seq 2 "${sq[@]}" --tensor-model-parallel-size 2 --sequence-parallel
  for n in dp2seq ep2seq tpsp2seq; do
    paste <(losses "$d/oneseq.json" 1 12) <(losses "$d/$n.json" 1 12) | awk '{ print $2, $4 }' | close "$n losses" 1e-5
    paste <(jq -r .seq_load_balancing_loss "$d/oneseq.jsonl") <(jq -r .seq_load_balancing_loss "$d/$n.jsonl") \
      | close "$n seq_load_balancing_loss" 1e-5
  done
  MOE=("${moe_bias[@]}")  # experts with biases (fc2's added once under TP)
  run oneb
  mr tp2b 2 --tensor-model-parallel-size 2
  mr tpsp2b 2 --tensor-model-parallel-size 2 --sequence-parallel
  mr ep2b 2 "${ep[@]}"  # (experts with biases run one GEMM each)
  MOE=("${moe[@]}")
  router() { jq -r '"\(.load_balancing_loss) \(.z_loss)"' "$1"; }
  for n in dp2 zero pp2 ppv2 tp2 tpsp2 dpdrop dpcap tpcap tp2b tpsp2b ep2 ep2zero ep2dp4 ep2tp2 ep2pp2 ep2rec ep2b ep2cap ep2drop tpsp2s ep2s pp2f tpsp2f ep2f tpsp2sig ep2sig dp2eb ep2eb tpsp2eb pp2eb; do
    ref=one; [ $n = dpdrop ] && ref=onedrop; [ $n = ppv2 ] && ref=one4; [ $n = dpcap ] || [ $n = tpcap ] || [ $n = ep2cap ] && ref=onecap
    [ $n = ep2drop ] && ref=onedropc
    [ $n = tpsp2s ] || [ $n = ep2s ] && ref=ones
    [ $n = pp2f ] || [ $n = tpsp2f ] || [ $n = ep2f ] && ref=onef
    [ $n = tpsp2sig ] || [ $n = ep2sig ] && ref=onesig
    [ $n = dp2eb ] || [ $n = ep2eb ] || [ $n = tpsp2eb ] || [ $n = pp2eb ] && ref=oneeb
    [ $n = tp2b ] || [ $n = tpsp2b ] || [ $n = ep2b ] && ref=oneb
    paste <(losses "$d/$ref.json" 1 12) <(losses "$d/$n.json" 1 12) | awk '{ print $2, $4 }' | close "$n losses" 1e-5
    paste -d' ' <(router "$d/$ref.jsonl") <(router "$d/$n.jsonl") | awk '{ print $1, $3; print $2, $4 }' \
      | close "$n router losses" 1e-5
  done
  [ "$(losses "$d/one.json" 2 12)" != "$(losses "$d/onedrop.json" 2 12)" ] || { echo "FAIL: dropout changed nothing"; exit 1; }
fi
