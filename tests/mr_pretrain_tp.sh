#!/usr/bin/env bash
# multirank: tensor parallelism in mt-pretrain (--tensor-model-parallel-size). 2 ranks as one
# tensor-parallel group (each holding its half of every split weight and its heads, MLP units and
# vocabulary columns), and 4 ranks as TP 2 x DP 2 with the distributed optimizer, give one rank's
# losses, grad norms (the split weights' squares summed over the group, the whole ones counted
# once) and params norms with the same global batch, up to the order of the fp32 sums (relative
# 1e-5); so do both with --sequence-parallel, also with recomputation and --logits-chunks. Checkpoints hold the unsharded tensors: TP 2 resumes bitwise, and its checkpoint resumes
# into TP 1 and into TP 2 x DP 2. (--make-vocab-size-divisible-by 64 at TP 2 pads the vocabulary
# to TP 1's 384 rows, Megatron padding to a multiple of 128 x TP otherwise.)
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
tp2=(--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64)
mr() {  # ranks name flags...
  local n=$1 name=$2; shift 2
  "$MPIEXEC" -n "$n" "$MT_PRETRAIN" "${tiny_args[@]}" --golden-values-out "$d/$name.json" "$@" \
    > "$d/$name.log" 2>&1 || { cat "$d/$name.log"; exit 1; }
}
tiny_run "$d/tp1.json" --metrics-jsonl "$d/tp1.jsonl" --log-params-norm > "$d/tp1.log"
mr 2 tp2 "${tp2[@]}" --metrics-jsonl "$d/tp2.jsonl" --log-params-norm
mr 4 tp2dp2 "${tp2[@]}" --use-distributed-optimizer --metrics-jsonl "$d/tp2dp2.jsonl" --log-params-norm
# sequence parallelism: the norms' and row-parallel biases' gradient shares summed once a step
# (4 micro-batches here), with the reduction overlapped with the backward on 4 ranks
mr 2 sp2 "${tp2[@]}" --sequence-parallel --metrics-jsonl "$d/sp2.jsonl" --log-params-norm
mr 4 sp2dp2 "${tp2[@]}" --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce \
  --ddp-bucket-size 3000 --metrics-jsonl "$d/sp2dp2.jsonl" --log-params-norm
# (and with the parameters' all-gather beside the next forward, evaluation between steps)
mr 4 sp2pg "${tp2[@]}" --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce \
  --overlap-param-gather --ddp-bucket-size 3000 --eval-interval 4 --eval-iters 1 \
  --metrics-jsonl "$d/sp2pg.jsonl" --log-params-norm
grep -q "tensor parallel 2 x data parallel 1" "$d/tp2.log" || { echo "FAIL: not TP 2"; cat "$d/tp2.log"; exit 1; }
grep -q "tensor parallel 2 x data parallel 2" "$d/tp2dp2.log" || { echo "FAIL: not TP 2 x DP 2"; cat "$d/tp2dp2.log"; exit 1; }
grep -q "padded vocab (size: 301) with 83 dummy tokens (new size: 384)" "$d/tp2.log" \
  || { echo "FAIL: padded vocab"; grep "padded vocab" "$d/tp2.log"; exit 1; }
fail=0
# and with activation recomputation (full, and the selective norms) and the output layer in token
# slices (the gathered rows' slices, their dX reduce-scattered once)
mr 2 sprf "${tp2[@]}" --sequence-parallel --recompute-granularity full --recompute-method uniform \
  --recompute-num-layers 1 --metrics-jsonl "$d/sprf.jsonl" --log-params-norm
mr 2 sprs "${tp2[@]}" --sequence-parallel --recompute-granularity selective --recompute-modules \
  layernorm mlp_act --metrics-jsonl "$d/sprs.jsonl" --log-params-norm
mr 2 splc "${tp2[@]}" --sequence-parallel --logits-chunks 3 --metrics-jsonl "$d/splc.jsonl" \
  --log-params-norm
for run in tp2 tp2dp2 sp2 sp2dp2 sp2pg sprf sprs splc; do
  paste <(losses "$d/tp1.json" 1 12 | cut -d' ' -f2) <(losses "$d/$run.json" 1 12 | cut -d' ' -f2) \
    | close "$run losses" 1e-5 || fail=1
  [ "$(losses "$d/$run.json" 1 12 | wc -l)" = 12 ] || { echo "FAIL: $run has not 12 losses"; fail=1; }
  paste <(gnorms "$d/tp1.jsonl") <(gnorms "$d/$run.jsonl") | close "$run grad norms" 1e-4 || fail=1
  paste <(pnorms "$d/tp1.log") <(pnorms "$d/$run.log") | close "$run params norms" 1e-3 || fail=1
done
# hidden dropout: the masks are keyed by the whole tensor's elements, so TP 2 and SP 2 (each rank
# drawing its window of the rows) drop what TP 1 drops (attention dropout, per-rank streams as
# Megatron's, differs by design: off here)
hd=(--hidden-dropout 0.1)
tiny_run "$d/hd1.json" "${hd[@]}" > "$d/hd1.log"
mr 2 hdtp2 "${tp2[@]}" "${hd[@]}"
mr 2 hdsp2 "${tp2[@]}" "${hd[@]}" --sequence-parallel
mr 4 hdsp2dp2 "${tp2[@]}" "${hd[@]}" --sequence-parallel --use-distributed-optimizer
[ "$(losses "$d/hd1.json" 2 12)" != "$(losses "$d/tp2.json" 2 12)" ] \
  || { echo "FAIL: --hidden-dropout 0.1 changed no loss"; exit 1; }
for run in hdtp2 hdsp2 hdsp2dp2; do
  paste <(losses "$d/hd1.json" 1 12 | cut -d' ' -f2) <(losses "$d/$run.json" 1 12 | cut -d' ' -f2) \
    | close "$run losses (hidden dropout)" 1e-5 || fail=1
done
# fp16 with a dynamic loss scale that overflows at first: the tensor-parallel ranks find the same
# Inf/NaN (mt-optim's model-parallel reduction), so TP 2 + SP skips the steps TP 1 skips and
# keeps its scale; the losses within fp16's rounding of the row-parallel partial sums, which are
# summed in fp16 (relative 1e-4, a fifth of fp16's unit roundoff; session 32 measured 7.9e-6)
f16=(--fp16 --initial-loss-scale 1e7 --hysteresis 1)
tiny_run "$d/f1.json" "${f16[@]}" > "$d/f1.log"
mr 2 f2 "${tp2[@]}" "${f16[@]}" --sequence-parallel
scales() { grep -o "loss scale: [^|]*|.*number of skipped iterations: *[0-9]*" "$1" | sed 's/grad norm: [^|]*| //'; }
[ "$(scales "$d/f1.log")" = "$(scales "$d/f2.log")" ] && scales "$d/f2.log" | grep -q "skipped iterations:   1" \
  || { echo "FAIL: fp16 TP 2 scales/skips differ from TP 1's"; paste <(scales "$d/f1.log") <(scales "$d/f2.log"); exit 1; }
paste <(losses "$d/f1.json" 2 12 | cut -d' ' -f2) <(losses "$d/f2.json" 2 12 | cut -d' ' -f2) \
  | close "fp16 TP 2 + SP losses" 1e-4 || fail=1
# resume: TP 2 to iteration 6, then TP 2 (bitwise the uninterrupted run), TP 1 and TP 2 x DP 2
mr 2 first "${tp2[@]}" --exit-interval 6 --save "$d/ck"
cp -r "$d/ck" "$d/ck1"; cp -r "$d/ck" "$d/ck4"
mr 2 resume "${tp2[@]}" --load "$d/ck"
[ "$(losses "$d/tp2.json" 7 12)" = "$(losses "$d/resume.json" 7 12)" ] \
  || { echo "FAIL: TP 2 resume differs"; paste <(losses "$d/tp2.json" 7 12) <(losses "$d/resume.json" 7 12); exit 1; }
echo "ok TP 2 resume: 6 losses identical"
grep -q "successfully loaded checkpoint from .* \[ t 1/2, p 0/1 \]" "$d/resume.log" \
  || { echo "FAIL: no load line"; cat "$d/resume.log"; exit 1; }
tiny_run "$d/resume1.json" --load "$d/ck1" > "$d/resume1.log" 2>&1 || { cat "$d/resume1.log"; exit 1; }
if [ -n "${MT_CONVERT:-}" ]; then  # the unsharded checkpoint exports to Hugging Face as TP 1's does
  "$MT_CONVERT" mt-to-hf "$d/ck1" "$d/hf" 2> "$d/export.log" && "$MT_CONVERT" hf-to-mt "$d/hf" "$d/back" 2>> "$d/export.log" \
    || { echo "FAIL: export of the TP 2 checkpoint"; cat "$d/export.log"; exit 1; }
  [ "$(jq -r .n_embd "$d/hf/config.json")" = 64 ] || { echo "FAIL: exported config"; cat "$d/hf/config.json"; exit 1; }
  echo "ok TP 2 checkpoint exported to Hugging Face and imported back"
fi
mr 4 resume4 "${tp2[@]}" --use-distributed-optimizer --load "$d/ck4"
for run in resume1 resume4; do
  [ "$(losses "$d/$run.json" 7 12 | wc -l)" = 6 ] || { echo "FAIL: $run has not 6 losses"; fail=1; }
  paste <(losses "$d/tp2.json" 7 12 | cut -d' ' -f2) <(losses "$d/$run.json" 7 12 | cut -d' ' -f2) \
    | close "$run losses (from the TP 2 checkpoint)" 1e-5 || fail=1
done
exit $fail
