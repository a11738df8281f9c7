#!/usr/bin/env bash
# Context parallelism on long sequences: mt-pretrain --mock-data, a Llama-style model (RMSNorm,
# RoPE, GQA, SwiGLU, bf16) of 12 layers, hidden 1024, 16 heads of 64 (4 groups), at one micro-batch
# of T tokens, on one GPU and with --context-parallel-size 2 on two (each GPU half of every
# sequence). Prints mt-pretrain's summary lines (tokens/s of all GPUs, memory a GPU).
#   bench/cp.sh BUILD_DIR OUT_DIR      (env: MT_CP_T="8192 16384", MT_CP_ITERS=20, MT_CP_FLAGS:
#                                      more flags for the CP 2 runs, MT_PROFILE=1: the per-op times,
#                                      MT_CP_STREAMS=0: a rank's two chunks on one stream)
set -uo pipefail
b=$1; out=$2; mkdir -p "$out"
export MT_PROFILE=${MT_PROFILE:-0} MT_CP_STREAMS=${MT_CP_STREAMS:-1}
for T in ${MT_CP_T:-8192 16384}; do
  for cp in 1 2; do
    launch=(); more=()
    if [ "$cp" -gt 1 ]; then
      launch=(mpiexec -n "$cp" --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE=0 -x MT_PROFILE -x MT_CP_STREAMS)
      read -r -a more <<< "${MT_CP_FLAGS:-}"
    fi
    log="$out/cp${cp}_T$T.log"
    "${launch[@]}" "$b/apps/pretrain/mt-pretrain" --context-parallel-size "$cp" --num-layers 12 \
      --hidden-size 1024 --num-attention-heads 16 --group-query-attention --num-query-groups 4 \
      --ffn-hidden-size 2816 --swiglu --normalization RMSNorm --position-embedding-type rope \
      --disable-bias-linear --untie-embeddings-and-output-weights --attention-dropout 0 \
      --hidden-dropout 0 --seq-length "$T" --max-position-embeddings "$T" --micro-batch-size 1 \
      --global-batch-size 1 --mock-data --tokenizer-type NullTokenizer --vocab-size 31999 --bf16 \
      --train-iters "${MT_CP_ITERS:-20}" --lr 3e-4 --lr-warmup-iters 2 --log-interval 10 \
      --device cuda "${more[@]}" > "$log" 2>&1
    s=$(grep '^\[summary\]' "$log")
    echo "T=$T cp=$cp: ${s:-FAILED (see $log)}"
    [ -n "$s" ] || tail -5 "$log"
  done
done
