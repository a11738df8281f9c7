#!/usr/bin/env bash
# functional: multi-token prediction in mt-pretrain (Megatron's --mtp-num-layers and
# --mtp-loss-scaling-factor). The depths' math is libs/model's (hf_golden_mtp_llama and
# _mtp_gpt2: megatron.core's GPTModel with its MTP block); here, the plumbing:
# 1. Two depths train (Llama's shape): the log line, --metrics-jsonl and --golden-values-out carry
#    "mtp_1 loss" and "mtp_2 loss" (Megatron's keys), and every loss falls.
# 2. With --mtp-loss-scaling-factor 0 the decoder's losses are bitwise a run without MTP's (the
#    depths add parameters and work, nothing to the decoder's path); the default factor changes
#    them.
# 3. A checkpoint resumes bitwise (the depths' weights and Adam state come back); its args restore
#    the depths (--use-checkpoint-args); a run without them refuses it (unexpected keys).
# 4. With MoE (sigmoid scores and the expert bias) the depth's layer is MoE too: its router loss
#    is logged with the decoder's, and a resume is bitwise (its expert bias comes back).
# 5. Bad values and unsupported combinations are refused before training.
# 6. mt-generate ($MT_GENERATE) runs the checkpoint's decoder (the depths are for training only).
# 7. With mt-convert ($MT_CONVERT): DeepSeek-V3's shape exports its depth as the hub's
#    model.layers.L with num_nextn_predict_layers and imports back to the same fine-tuning losses.
# ($MPIEXEC): DP 2, TP 2 with sequence parallelism, PP 2 (untied, tied, interleaved) and CP 2 give
# one rank's losses, MTP losses and grad norms (relative 1e-5; eh_proj and the depths' norms whole on
# every tensor-parallel rank; the depths on the last stage, with a copy of the embedding).
# "cuda" as the argument: the same on a GPU in bf16 (with $MPIEXEC in fp32, as the comparisons
# need: a GPU a rank), and the CUDA graph's replays are bitwise the run without graphs.
MT_CUDA_FLAGS="--bf16 --deterministic-mode"
[ -n "${MPIEXEC:-}" ] && MT_CUDA_FLAGS="--deterministic-mode"
source "$(dirname "$0")/pretrain_common.sh"
need_mr_gpus "${1:-}"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
llama=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2)
run() {  # name flags...
  local n=$1; shift
  tiny_run "$d/$n.json" "${shape[@]}" --metrics-jsonl "$d/$n.jsonl" "$@" > "$d/$n.log" 2>&1 \
    || { echo "FAIL: run $n"; cat "$d/$n.log"; exit 1; }
}
shape=("${llama[@]}")
key_losses() {  # file key from to
  jq -r --arg k "$2" --argjson a "$3" --argjson b "$4" '.[$k].values | to_entries[] |
    select((.key|tonumber) >= $a and (.key|tonumber) <= $b) | "\(.key) \(.value)"' "$1" | sort -n
}
run plain
run mtp2 --mtp-num-layers 2
for k in 1 2; do
  grep -q " lm loss: [0-9.E+-]* |.* mtp_$k loss: [0-9.E+-]* |" "$d/mtp2.log" \
    || { echo "FAIL: no mtp_$k loss in the log line"; grep iteration "$d/mtp2.log"; exit 1; }
  [ "$(jq -c "select(.[\"mtp_$k loss\"] != null)" "$d/mtp2.jsonl" | wc -l)" = 12 ] \
    || { echo "FAIL: mtp_$k loss missing from --metrics-jsonl"; exit 1; }
  first=$(key_losses "$d/mtp2.json" "mtp_$k loss" 1 1 | awk '{print $2}')
  last=$(key_losses "$d/mtp2.json" "mtp_$k loss" 12 12 | awk '{print $2}')
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' \
    || { echo "FAIL: mtp_$k loss $first -> $last does not fall"; exit 1; }
  echo "ok: mtp_$k loss $first -> $last"
done
awk -v a="$(losses "$d/mtp2.json" 1 1 | awk '{print $2}')" -v b="$(losses "$d/mtp2.json" 12 12 | awk '{print $2}')" \
  'BEGIN { exit !(b < a - 0.2) }' || { echo "FAIL: lm loss does not fall with MTP"; exit 1; }
run zero --mtp-num-layers 1 --mtp-loss-scaling-factor 0
[ "$(losses "$d/zero.json" 1 12)" = "$(losses "$d/plain.json" 1 12)" ] \
  || { echo "FAIL: factor 0 changed the decoder's losses"; paste <(losses "$d/zero.json" 1 12) <(losses "$d/plain.json" 1 12); exit 1; }
[ "$(losses "$d/mtp2.json" 3 3)" != "$(losses "$d/plain.json" 3 3)" ] \
  || { echo "FAIL: the MTP losses' gradient changed nothing (iteration 3; 1 runs at LR 0)"; exit 1; }
echo "ok: factor 0 leaves the decoder's losses bitwise; the default factor changes them"
# recomputation (full: the decoder's layers; selective: every layer's norms and MLP activation,
# the depths' too) and the output layer in slices: the same losses (on the CPU bitwise with
# recomputation, within 1e-5 with slices; on the GPU in bf16 within 2e-3)
run rcfull --mtp-num-layers 2 --recompute-granularity full --recompute-method uniform \
  --recompute-num-layers 1
run rcsel --mtp-num-layers 2 --recompute-granularity selective --recompute-modules layernorm mlp_act
run chunks --mtp-num-layers 2 --logits-chunks 3
for r in rcfull rcsel chunks; do
  tol=0; [ "$r" = chunks ] && tol=1e-5
  [ "${1:-}" = cuda ] && tol=2e-3  # (bf16: fused and separate kernels round apart)
  for k in "lm loss" "mtp_1 loss" "mtp_2 loss"; do
    paste <(key_losses "$d/mtp2.json" "$k" 1 12 | awk '{print $2}') \
          <(key_losses "$d/$r.json" "$k" 1 12 | awk '{print $2}') \
      | close "$r $k" "$tol" || exit 1
  done
done
# --calculate-per-token-loss: the depths' token sums, divided with the decoder's by its tokens
run pertok --mtp-num-layers 2 --calculate-per-token-loss
awk -v a="$(key_losses "$d/pertok.json" "mtp_1 loss" 1 1 | awk '{print $2}')" \
    -v b="$(key_losses "$d/pertok.json" "mtp_1 loss" 12 12 | awk '{print $2}')" \
  'BEGIN { exit !(b < a - 0.2) }' || { echo "FAIL: per-token loss: mtp_1 loss does not fall"; exit 1; }
echo "ok: recomputation and logits slices give the same losses; per-token loss trains the depths"
# resume: iterations 7..12 of the lm and MTP losses bitwise
run first --mtp-num-layers 2 --exit-interval 6 --save "$d/ck"
run second --mtp-num-layers 2 --load "$d/ck"
run third --load "$d/ck" --use-checkpoint-args
for f in second third; do
  for k in "lm loss" "mtp_1 loss" "mtp_2 loss"; do
    [ "$(key_losses "$d/$f.json" "$k" 7 12)" = "$(key_losses "$d/mtp2.json" "$k" 7 12)" ] \
      && [ "$(key_losses "$d/$f.json" "$k" 7 12 | wc -l)" = 6 ] \
      || { echo "FAIL: $f: resumed $k differs"; paste <(key_losses "$d/$f.json" "$k" 7 12) <(key_losses "$d/mtp2.json" "$k" 7 12); exit 1; }
  done
done
echo "ok: resumed bitwise (also with the depths from the checkpoint's args)"
# with MoE (DeepSeek-V3's kind: sigmoid scores and the expert bias, a buffer of each router, the
# depth's too): the depth's layer is MoE as the last layer; the losses and router loss logged,
# and a resume bitwise
moe=(--mtp-num-layers 1 --num-experts 4 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 0.01
     --moe-router-score-function sigmoid --moe-router-enable-expert-bias)
run moe "${moe[@]}"
grep -q " lm loss: [^|]*| load_balancing_loss: [^|]*| mtp_1 loss: [^|]*|" "$d/moe.log" \
  || { echo "FAIL: MoE with MTP: the log line"; grep iteration "$d/moe.log"; exit 1; }
run moefirst "${moe[@]}" --exit-interval 6 --save "$d/moeck"
run moesecond "${moe[@]}" --load "$d/moeck"
for k in "lm loss" "mtp_1 loss"; do
  [ "$(key_losses "$d/moesecond.json" "$k" 7 12)" = "$(key_losses "$d/moe.json" "$k" 7 12)" ] \
    || { echo "FAIL: MoE with MTP: resumed $k differs"; exit 1; }
done
echo "ok: MoE with MTP (sigmoid scores, expert bias) trains and resumes bitwise"
tiny_run "$d/bad.json" "${llama[@]}" --load "$d/ck" > "$d/nomtp.log" 2>&1 \
  && { echo "FAIL: a run without MTP loaded the MTP checkpoint"; exit 1; }
grep -q 'Unexpected key(s) in state_dict: "mtp.layers.0' "$d/nomtp.log" \
  || { echo "FAIL: want unexpected keys"; cat "$d/nomtp.log"; exit 1; }
refused llama "--mtp-num-layers -1|--mtp-num-layers must be positive" \
  "--mtp-num-layers 32|leaves no target in a sequence of --seq-length 32" \
  "--mtp-num-layers 1 --mtp-loss-scaling-factor -1|--mtp-loss-scaling-factor must not be negative" \
  "--mtp-num-layers 1 --context-parallel-size 2 --position-embedding-type learned_absolute|not supported yet with learned absolute position embeddings" \
  "--mtp-num-layers 1 --pipeline-model-parallel-size 2 --position-embedding-type learned_absolute|not supported yet with learned absolute position embeddings"
echo "ok: bad MTP flags refused"
if [ "${1:-}" = cuda ]; then
  MT_CUDA_GRAPHS=0 run eager --mtp-num-layers 2
  for k in "lm loss" "mtp_1 loss" "mtp_2 loss"; do
    [ "$(key_losses "$d/eager.json" "$k" 1 12)" = "$(key_losses "$d/mtp2.json" "$k" 1 12)" ] \
      || { echo "FAIL: CUDA graphs change the $k"; exit 1; }
  done
  echo "ok: bitwise the same with and without CUDA graphs"
fi
if [ -n "${MT_CONVERT:-}" ]; then
  # DeepSeek-V3's shape exports its depth as the hub's model.layers.L (enorm, hnorm, eh_proj,
  # shared_head.norm, the copies of the embedding and head) with num_nextn_predict_layers, and
  # imports back to the same fine-tuning losses; another family's depths are not exported (a
  # warning)
  ds=(--multi-latent-attention --rope-type rope --kv-lora-rank 16 --qk-head-dim 16
      --qk-pos-emb-head-dim 8 --v-head-dim 12 --q-lora-rank 24 --num-experts 4 --moe-router-topk 2
      --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 32 --moe-layer-freq "[0]+[1]"
      --moe-router-score-function sigmoid --moe-router-enable-expert-bias
      --moe-router-bias-update-rate 0.05 --moe-aux-loss-coeff 0 --mtp-num-layers 1)
  shape=("${llama[@]:0:7}")  # (MLA: no query groups)
  run dsck "${ds[@]}" --train-iters 4 --save "$d/dsck"
  "$MT_CONVERT" mt-to-hf "$d/dsck" "$d/dshf" 2> "$d/dsexport.log" || { echo "FAIL: export"; cat "$d/dsexport.log"; exit 1; }
  [ "$(jq -r '"\(.model_type) \(.num_hidden_layers) \(.num_nextn_predict_layers)"' "$d/dshf/config.json")" = "deepseek_v3 2 1" ] \
    || { echo "FAIL: exported config"; cat "$d/dshf/config.json"; exit 1; }
  for t in enorm.weight hnorm.weight eh_proj.weight shared_head.norm.weight embed_tokens.weight \
      shared_head.head.weight mlp.gate.e_score_correction_bias self_attn.kv_a_proj_with_mqa.weight; do
    grep -q "\"model.layers.2.$t\"" "$d/dshf/model.safetensors.index.json" 2>/dev/null \
      || grep -q "model.layers.2.$t" "$d/dshf/"*.safetensors \
      || { echo "FAIL: no model.layers.2.$t in the export"; exit 1; }
  done
  "$MT_CONVERT" hf-to-mt "$d/dshf" "$d/dsback" 2> "$d/dsimport.log" || { echo "FAIL: import"; cat "$d/dsimport.log"; exit 1; }
  grep -q "importing 1 multi-token prediction layer" "$d/dsimport.log" || { echo "FAIL: import log"; cat "$d/dsimport.log"; exit 1; }
  run dsft "${ds[@]}" --train-iters 4 --load "$d/dsck" --finetune
  run dsftback "${ds[@]}" --train-iters 4 --load "$d/dsback" --finetune
  for k in "lm loss" "mtp_1 loss"; do
    [ "$(key_losses "$d/dsft.json" "$k" 1 4)" = "$(key_losses "$d/dsftback.json" "$k" 1 4)" ] \
      || { echo "FAIL: the DeepSeek-V3 round trip changed the $k"; exit 1; }
  done
  shape=("${llama[@]}")
  "$MT_CONVERT" mt-to-hf "$d/ck" "$d/llamahf" 2> "$d/llamaexport.log" || { echo "FAIL: Llama export"; cat "$d/llamaexport.log"; exit 1; }
  grep -q "multi-token prediction layer(s) (mtp.layers.\*) are not exported" "$d/llamaexport.log" \
    || { echo "FAIL: no warning"; cat "$d/llamaexport.log"; exit 1; }
  echo "ok: DeepSeek-V3's MTP layer exported and imported back (the same fine-tuning losses); Llama's not exported, with a warning"
fi
if [ -n "${MT_GENERATE:-}" ]; then
  out=$("$MT_GENERATE" --load "$d/ck" --tokenizer-type NullTokenizer --greedy --print-ids \
          --device "${MT_TEST_DEVICE:-cpu}" --prompt-ids 5,6,7 --tokens-to-generate 4 2> "$d/gen.err" | tail -1)
  [ -n "$out" ] || { echo "FAIL: mt-generate"; cat "$d/gen.err"; exit 1; }
  echo "ok: mt-generate from the MTP checkpoint: $out"
  if [ -n "${MT_CONVERT:-}" ]; then  # (and from the DeepSeek-V3 import: its args' depth)
    a=$("$MT_GENERATE" --load "$d/dsback" --tokenizer-type NullTokenizer --greedy --print-ids \
          --device "${MT_TEST_DEVICE:-cpu}" --prompt-ids 5,6,7 --tokens-to-generate 4 2> "$d/gen.err" | tail -1)
    b=$("$MT_GENERATE" --load "$d/dsck" --tokenizer-type NullTokenizer --greedy --print-ids \
          --device "${MT_TEST_DEVICE:-cpu}" --prompt-ids 5,6,7 --tokens-to-generate 4 2>> "$d/gen.err" | tail -1)
    [ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: generation from the import: '$a' vs '$b'"; cat "$d/gen.err"; exit 1; }
    echo "ok: mt-generate from the DeepSeek-V3 import gives the original's tokens: $a"
  fi
fi
if [ -n "${MPIEXEC:-}" ]; then
  mr() {  # ranks name flags...
    local n=$1 name=$2; shift 2
    "$MPIEXEC" -n "$n" "$MT_PRETRAIN" "${tiny_args[@]}" "${llama[@]}" --mtp-num-layers 2 \
      --golden-values-out "$d/$name.json" --metrics-jsonl "$d/$name.jsonl" "$@" \
      > "$d/$name.log" 2>&1 || { cat "$d/$name.log"; exit 1; }
  }
  mr 2 dp2 --use-distributed-optimizer
  mr 2 sp2 --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --sequence-parallel
  # pipeline parallelism: the depths on the last stage with a copy of the embedding (its gradient
  # summed with the first stage's), untied and tied, and with the interleaved schedule
  mr 2 pp2 --pipeline-model-parallel-size 2
  # context parallelism: the trainer rolls the whole sequences, each rank takes its chunks of the
  # rolls, and each depth's gradient is a mean over every rank's counted tokens
  mr 2 cp2 --context-parallel-size 2
  tied=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
        --group-query-attention --num-query-groups 2)
  tiny_run "$d/tied1.json" "${tied[@]}" --mtp-num-layers 2 --metrics-jsonl "$d/tied1.jsonl" \
    > "$d/tied1.log" 2>&1 || { cat "$d/tied1.log"; exit 1; }
  "$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${tied[@]}" --mtp-num-layers 2 \
    --pipeline-model-parallel-size 2 --golden-values-out "$d/tiedpp2.json" \
    --metrics-jsonl "$d/tiedpp2.jsonl" > "$d/tiedpp2.log" 2>&1 || { cat "$d/tiedpp2.log"; exit 1; }
  run l4 --mtp-num-layers 2 --num-layers 4
  mr 2 pp2v --num-layers 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
  for pair in mtp2:dp2 mtp2:sp2 mtp2:pp2 mtp2:cp2 tied1:tiedpp2 l4:pp2v; do
    a=${pair%%:*} r=${pair#*:}
    for k in "lm loss" "mtp_1 loss" "mtp_2 loss"; do
      paste <(key_losses "$d/$a.json" "$k" 1 12 | awk '{print $2}') \
            <(key_losses "$d/$r.json" "$k" 1 12 | awk '{print $2}') | close "$r $k" 1e-5 || exit 1
    done
    paste <(gnorms "$d/$a.jsonl") <(gnorms "$d/$r.jsonl") | close "$r grad norms" 1e-5 || exit 1
  done
fi
echo "ok: multi-token prediction"
