#!/usr/bin/env bash
# multirank: pipeline parallelism in mt-pretrain (--pipeline-model-parallel-size, Megatron's 1F1B
# schedule over point-to-point sends). 2 and 4 stages of the tiny GPT (2 and 4 layers), also as
# PP 2 x DP 2 (distributed optimizer, overlapped reduction and parameter gather, evaluation
# between steps) and PP 2 x TP 2 with sequence parallelism, give one rank's losses, grad norms
# (the stages' squares summed, the last stage's copy of the tied embedding not counted) and
# params norms with the same global batch, up to the order of the fp32 sums (relative 1e-5); so do
# an untied Llama-shaped model, full recomputation, uneven splits, dropout, and validation. fp16 with an
# overflowing loss scale skips the same steps (Inf/NaN found on any stage). Checkpoints hold the
# unsharded tensors: PP 2 resumes bitwise, and its checkpoint resumes into PP 1 and PP 4. The
# interleaved schedule (2 chunks a stage) gives one rank's losses the same ways.
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mr() {  # ranks name flags...
  local n=$1 name=$2; shift 2
  "$MPIEXEC" -n "$n" "$MT_PRETRAIN" "${tiny_args[@]}" --golden-values-out "$d/$name.json" "$@" \
    > "$d/$name.log" 2>&1 || { cat "$d/$name.log"; exit 1; }
}
one() {  # name flags...: the same on one rank
  local name=$1; shift
  tiny_run "$d/$name.json" "$@" > "$d/$name.log" 2>&1 || { cat "$d/$name.log"; exit 1; }
}
vloss() { grep -o "validation loss at iteration [0-9]* on validation set | lm loss value: [0-9.E+-]*" "$1" | awk '{ print $NF }'; }
fail=0
same() {  # base run tol: losses, grad norms, params norms and validation losses of run = base's
  local base=$1 run=$2
  paste <(losses "$d/$base.json" 1 12 | cut -d' ' -f2) <(losses "$d/$run.json" 1 12 | cut -d' ' -f2) \
    | close "$run losses" 1e-5 || fail=1
  [ "$(losses "$d/$run.json" 1 12 | wc -l)" = 12 ] || { echo "FAIL: $run has not 12 losses"; fail=1; }
  if [ -s "$d/$base.jsonl" ]; then
    paste <(gnorms "$d/$base.jsonl") <(gnorms "$d/$run.jsonl") | close "$run grad norms" 1e-4 || fail=1
    paste <(pnorms "$d/$base.log") <(pnorms "$d/$run.log") | close "$run params norms" 1e-4 || fail=1
  fi
  if grep -q "validation loss" "$d/$base.log"; then
    paste <(vloss "$d/$base.log") <(vloss "$d/$run.log") | close "$run validation losses" 1e-5 || fail=1
  fi
}
obs() { echo --metrics-jsonl "$d/$1.jsonl" --log-params-norm --eval-interval 4 --eval-iters 1; }
one pp1 $(obs pp1)
mr 2 pp2 --pipeline-model-parallel-size 2 $(obs pp2)
grep -q "tensor parallel 1 x data parallel 1 x pipeline parallel 2" "$d/pp2.log" \
  || { echo "FAIL: not PP 2"; cat "$d/pp2.log"; exit 1; }
mr 4 pp2dp2 --pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce \
  --overlap-param-gather --ddp-bucket-size 3000 $(obs pp2dp2)
grep -q "tensor parallel 1 x data parallel 2 x pipeline parallel 2" "$d/pp2dp2.log" \
  || { echo "FAIL: not PP 2 x DP 2"; cat "$d/pp2dp2.log"; exit 1; }
# (the reductions overlapped with the last backward, the embedding's after its two copies' sum;
# and without the distributed optimizer, an untied Llama shape below)
mr 4 pp2dp2b --pipeline-model-parallel-size 2 --overlap-grad-reduce --ddp-bucket-size 3000 $(obs pp2dp2b)
mr 4 pp2tp2 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 \
  --make-vocab-size-divisible-by 64 --sequence-parallel $(obs pp2tp2)
for run in pp2 pp2dp2 pp2dp2b pp2tp2; do same pp1 $run; done
# four layers: 4 stages (middle stages send and receive both ways; the first waits for 3
# micro-batches' gradients), full recomputation, and an untied Llama-shaped model on 2 stages
l4=(--num-layers 4)
one l4 "${l4[@]}" $(obs l4)
mr 4 pp4 "${l4[@]}" --pipeline-model-parallel-size 4 $(obs pp4)
mr 2 pp2rc "${l4[@]}" --pipeline-model-parallel-size 2 --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 2 $(obs pp2rc)
# uneven splits (Megatron's --decoder-first/last-pipeline-num-layers): 3 + 1 layers, 2 + 1 + 1
mr 2 ppu2 "${l4[@]}" --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3 $(obs ppu2)
mr 3 ppu3 "${l4[@]}" --pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 2 $(obs ppu3)
for run in pp4 pp2rc ppu2 ppu3; do same l4 $run; done
llama=("${l4[@]}" --normalization RMSNorm --position-embedding-type rope --swiglu
       --untie-embeddings-and-output-weights --disable-bias-linear --group-query-attention
       --num-query-groups 2)
one ll1 "${llama[@]}" $(obs ll1)
mr 2 ll2 "${llama[@]}" --pipeline-model-parallel-size 2 $(obs ll2)
mr 4 ll2dp2 "${llama[@]}" --pipeline-model-parallel-size 2 --use-distributed-optimizer \
  --overlap-grad-reduce --ddp-bucket-size 3000 $(obs ll2dp2)
same ll1 ll2; same ll1 ll2dp2
# hidden and attention dropout: masks keyed by (site, sample), so the stages drop what one does
hd=(--hidden-dropout 0.1 --attention-dropout 0.1)
one hd1 "${hd[@]}"
mr 2 hd2 "${hd[@]}" --pipeline-model-parallel-size 2
[ "$(losses "$d/hd1.json" 2 12)" != "$(losses "$d/pp1.json" 2 12)" ] \
  || { echo "FAIL: dropout changed no loss"; exit 1; }
same hd1 hd2
# fp16, a dynamic loss scale that overflows at first: every stage skips the same steps
f16=(--fp16 --initial-loss-scale 1e7 --hysteresis 1)
one f1 "${f16[@]}"
mr 2 f2 "${f16[@]}" --pipeline-model-parallel-size 2
scales() { grep -o "loss scale: [^|]*|.*number of skipped iterations: *[0-9]*" "$1" | sed 's/grad norm: [^|]*| //'; }
[ "$(scales "$d/f1.log")" = "$(scales "$d/f2.log")" ] && scales "$d/f2.log" | grep -q "skipped iterations:   1" \
  || { echo "FAIL: fp16 PP 2 scales/skips differ from PP 1's"; paste <(scales "$d/f1.log") <(scales "$d/f2.log"); exit 1; }
paste <(losses "$d/f1.json" 2 12 | cut -d' ' -f2) <(losses "$d/f2.json" 2 12 | cut -d' ' -f2) \
  | close "fp16 PP 2 losses" 1e-5 || fail=1
# resume: PP 2 (4 layers) to iteration 6, then PP 2 (bitwise the uninterrupted run), PP 1 and PP 4
p2=("${l4[@]}" --pipeline-model-parallel-size 2)
mr 2 p2full "${p2[@]}"
mr 2 first "${p2[@]}" --exit-interval 6 --save "$d/ck"
cp -r "$d/ck" "$d/ck1"; cp -r "$d/ck" "$d/ck4"
mr 2 resume "${p2[@]}" --load "$d/ck"
[ "$(losses "$d/p2full.json" 7 12)" = "$(losses "$d/resume.json" 7 12)" ] \
  || { echo "FAIL: PP 2 resume differs"; paste <(losses "$d/p2full.json" 7 12) <(losses "$d/resume.json" 7 12); exit 1; }
echo "ok PP 2 resume: 6 losses identical"
grep -q "successfully loaded checkpoint from .* \[ t 0/1, p 1/2 \]" "$d/resume.log" \
  || { echo "FAIL: no load line"; cat "$d/resume.log"; exit 1; }
one resume1 "${l4[@]}" --load "$d/ck1"
mr 4 resume4 "${l4[@]}" --pipeline-model-parallel-size 4 --load "$d/ck4"
for run in resume1 resume4; do
  [ "$(losses "$d/$run.json" 7 12 | wc -l)" = 6 ] || { echo "FAIL: $run has not 6 losses"; fail=1; }
  paste <(losses "$d/p2full.json" 7 12 | cut -d' ' -f2) <(losses "$d/$run.json" 7 12 | cut -d' ' -f2) \
    | close "$run losses (from the PP 2 checkpoint)" 1e-5 || fail=1
done
if [ -n "${MT_CONVERT:-}" ]; then  # the unsharded checkpoint exports to Hugging Face
  "$MT_CONVERT" mt-to-hf "$d/ck1" "$d/hf" 2> "$d/export.log" \
    || { echo "FAIL: export of the PP 2 checkpoint"; cat "$d/export.log"; exit 1; }
  [ "$(jq -r .n_layer "$d/hf/config.json")" = 4 ] || { echo "FAIL: exported config"; cat "$d/hf/config.json"; exit 1; }
  echo "ok PP 2 checkpoint exported to Hugging Face"
fi
# the interleaved schedule (--num-layers-per-virtual-pipeline-stage 1: 2 chunks a stage, the
# activations round the ring twice): one rank's losses, norms and validation, also with DP 2
# (distributed optimizer, reductions started by each chunk's last backward, parameter gather),
# TP 2 with SP, full recomputation, an untied Llama shape, an uneven split, and 4 stages of 2
# chunks (8 layers; the first stage's warm-up is every forward); a PP 2 x 2 chunks checkpoint
# resumes bitwise and into PP 1
v2=("${l4[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1)
mr 2 v2 "${v2[@]}" $(obs v2)
grep -q "tensor parallel 1 x data parallel 1 x pipeline parallel 2" "$d/v2.log" \
  || { echo "FAIL: not PP 2"; cat "$d/v2.log"; exit 1; }
mr 4 v2dp2 "${v2[@]}" --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
  --ddp-bucket-size 3000 $(obs v2dp2)
mr 4 v2tp2 "${v2[@]}" --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 \
  --sequence-parallel $(obs v2tp2)
mr 2 v2rc "${v2[@]}" --recompute-granularity full --recompute-method uniform \
  --recompute-num-layers 1 $(obs v2rc)
# micro-batches through the chunks in groups of 4 instead of P (Megatron's
# --microbatch-group-size-per-virtual-pipeline-stage)
mr 2 v2g4 "${v2[@]}" --microbatch-group-size-per-virtual-pipeline-stage 4 $(obs v2g4)
for run in v2 v2dp2 v2tp2 v2rc v2g4; do same l4 $run; done
mr 2 llv2 "${llama[@]}" --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 \
  $(obs llv2)
mr 4 llv2dp2 "${llama[@]}" --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 \
  --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000 $(obs llv2dp2)
same ll1 llv2; same ll1 llv2dp2  # (untied: no bucket waits for the embedding's sum)
# uneven (Megatron's: the first rank's 2 layers over its 2 chunks, the last rank's 4 likewise)
l6=(--num-layers 6)
one l6 "${l6[@]}" $(obs l6)
mr 2 vu "${l6[@]}" --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 \
  --decoder-first-pipeline-num-layers 2 $(obs vu)
same l6 vu
l8=(--num-layers 8)
one l8 "${l8[@]}" $(obs l8)
mr 4 v4 "${l8[@]}" --pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 $(obs v4)
same l8 v4
mr 2 v2full "${v2[@]}"
mr 2 v2first "${v2[@]}" --exit-interval 6 --save "$d/ckv"
cp -r "$d/ckv" "$d/ckv1"
mr 2 v2resume "${v2[@]}" --load "$d/ckv"
[ "$(losses "$d/v2full.json" 7 12)" = "$(losses "$d/v2resume.json" 7 12)" ] \
  || { echo "FAIL: interleaved resume differs"; paste <(losses "$d/v2full.json" 7 12) <(losses "$d/v2resume.json" 7 12); exit 1; }
one v2resume1 "${l4[@]}" --load "$d/ckv1"
paste <(losses "$d/v2full.json" 7 12 | cut -d' ' -f2) <(losses "$d/v2resume1.json" 7 12 | cut -d' ' -f2) \
  | close "PP 1 losses from the interleaved checkpoint" 1e-5 || fail=1
echo "ok interleaved resume: bitwise on PP 2 x 2 chunks, and into PP 1"
# Megatron's checks: 4 micro-batches on 3 stages; a split that does not divide the layers
"$MPIEXEC" -n 3 "$MT_PRETRAIN" "${tiny_args[@]}" --num-layers 6 --pipeline-model-parallel-size 3 \
  --num-virtual-stages-per-pipeline-rank 2 > "$d/badv.log" 2>&1 && { echo "FAIL: M 4 ran on 3 stages"; exit 1; }
grep -q "The remainder of M (the total micro-batches) divided by N" "$d/badv.log" \
  || { echo "FAIL: micro-batch message"; cat "$d/badv.log"; exit 1; }
"$MT_PRETRAIN" "${tiny_args[@]}" --num-layers 4 --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 3 > "$d/badv2.log" 2>&1 && { echo "FAIL: 3-layer chunks of 2"; exit 1; }
grep -q "number of layers per pipeline stage must be divisible number of layers per virtual pipeline stage" "$d/badv2.log" \
  || { echo "FAIL: chunk message"; cat "$d/badv2.log"; exit 1; }
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" "${v2[@]}" --microbatch-group-size-per-virtual-pipeline-stage 5 \
  > "$d/badv3.log" 2>&1 && { echo "FAIL: groups of 5 of 4 micro-batches"; exit 1; }
grep -q "The number of contiguous micro-batches in a virtual pipeline stage should range in \[PP=2 , M=4\]" "$d/badv3.log" \
  || { echo "FAIL: group message"; cat "$d/badv3.log"; exit 1; }
echo "ok: the interleaved schedule's bad shapes refused"
# a world that the stages do not divide is refused before anything starts
"$MPIEXEC" -n 2 "$MT_PRETRAIN" "${tiny_args[@]}" --pipeline-model-parallel-size 2 \
  --tensor-model-parallel-size 2 > "$d/bad.log" 2>&1 && { echo "FAIL: 2 ranks ran TP 2 x PP 2"; exit 1; }
grep -q "world size (2) is not divisible by tensor model parallel size (2) times pipeline model parallel size (2)" "$d/bad.log" \
  || { echo "FAIL: world size message"; cat "$d/bad.log"; exit 1; }
echo "ok: world size 2 refused for TP 2 x PP 2"
exit $fail
