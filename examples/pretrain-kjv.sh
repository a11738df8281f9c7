#!/usr/bin/env bash
# The main job: pretrain a small GPT on the King James Bible (public domain, Debian's bible-kjv),
# tokenized with GPT-2's BPE by mt-preprocess-data, on the GPU if there is one, else on the CPU;
# with periodic evaluation, a checkpoint and a PNG plot of the train and validation loss, then
# a few sentences generated from the checkpoint.
#   bash examples/pretrain-kjv.sh [OUT_DIR]       (env: MT_ITERS, MT_DEVICE=auto|cpu|cuda,
#                                                   MT_NO_INSTALL=1: use what is installed, e.g.
#                                                   offline with OUT_DIR/kjv.jsonl already there)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$top/build-kjv/run}" && cd "${1:-$top/build-kjv/run}" && pwd)
cd "$top"
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
need=""
for p in meson ninja-build pkg-config gcc g++ libjansson-dev libbenchmark-dev openmpi-bin \
         libopenmpi-dev jq bible-kjv gnuplot-nox; do
  dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ] && [ "${MT_NO_INSTALL:-0}" != 1 ]; then
  echo "== installing:$need"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
fi
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cuda=disabled; command -v nvcc >/dev/null && cuda=enabled
gpus=0; command -v nvidia-smi >/dev/null && gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
dev=${MT_DEVICE:-auto}; [ "$dev" = auto ] && { [ "$gpus" -gt 0 ] && dev=cuda || dev=cpu; }

# The GPU's own target (Hopper: 90a, for the wgmma kernels); none without a GPU.
arch=""
if [ "$gpus" -gt 0 ]; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ' || true)
fi
if [ "$arch" = 90 ]; then arch=90a; fi

b=$top/build-kjv/build
if [ ! -f "$b/build.ninja" ]; then
  meson setup "$b" -Dcuda=$cuda -Dbuildtype=release -Dtests=disabled -Dbenchmarks=disabled \
    ${arch:+-Dgpu_arch=$arch} >/dev/null
fi
ninja -C "$b" apps/pretrain/mt-pretrain apps/preprocess/mt-preprocess-data apps/generate/mt-generate >/dev/null
echo "== built mt-pretrain, mt-preprocess-data and mt-generate (CUDA $cuda, device $dev)"

# The corpus: one JSON document per chapter (1189 chapters, 4.3 MB of text).
if [ ! -f "$out/kjv.jsonl" ]; then
  bible "Gen1:1-Rev22:21" 2>/dev/null | awk '
    NF == 0 { next }
    /^[0-9A-Z][A-Za-z ]* [0-9]+$/ { if (buf != "") print buf; buf = ""; next }
    { sub(/^ +[0-9]+ /, ""); sub(/^ +/, ""); buf = (buf == "" ? $0 : buf " " $0) }
    END { print buf }' | jq -R -c '{text: .}' > "$out/kjv.jsonl"
fi
echo "== corpus: $(wc -l < "$out/kjv.jsonl") documents, $(wc -c < "$out/kjv.jsonl") bytes"
"$b/apps/preprocess/mt-preprocess-data" --input "$out/kjv.jsonl" --output-prefix "$out/kjv" \
  --tokenizer-type GPT2BPETokenizer --append-eod --workers 2

if [ "$dev" = cuda ]; then  # GPT-2 small shape, shorter context
  model="--num-layers 6 --hidden-size 512 --num-attention-heads 8 --seq-length 256
         --max-position-embeddings 256 --micro-batch-size 16 --global-batch-size 64 --bf16"
  iters=${MT_ITERS:-600}; eval_int=100
else                        # small enough for two CPU cores
  model="--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 64
         --max-position-embeddings 64 --micro-batch-size 8 --global-batch-size 16"
  iters=${MT_ITERS:-300}; eval_int=50
fi
rm -rf "$out/ckpt"
# (no dropout: Megatron's default 0.1 slows a short run on a small corpus, as llm.c trains)
"$b/apps/pretrain/mt-pretrain" $model --device "$dev" --attention-dropout 0 --hidden-dropout 0 \
  --data-path "$out/kjv_text_document" --split 949,50,1 --data-cache-path "$out/cache" \
  --tokenizer-type GPT2BPETokenizer --train-iters "$iters" --lr 1e-3 --min-lr 1e-4 \
  --lr-decay-style cosine --lr-warmup-iters $((iters / 20)) --weight-decay 0.1 --clip-grad 1.0 \
  --adam-beta2 0.95 --eval-interval "$eval_int" --eval-iters 10 --log-interval 10 --log-throughput \
  --save "$out/ckpt" --save-interval "$iters" --metrics-jsonl "$out/metrics.jsonl" \
  --golden-values-out "$out/golden_values.json" | tee "$out/train.log"

# Unigram entropy of the training tokens (nats), the bar the loss must clear.
H=$(od -An -v -tu2 "$out/kjv_text_document.bin" | tr -s ' ' '\n' | grep -v '^$' | sort -n | uniq -c |
    awk '{ c[NR] = $1; n += $1 } END { for (i in c) h -= c[i] / n * log(c[i] / n); printf "%.3f", h }')
jq -r 'select(.["lm loss"]) | "\(.iteration) \(.["lm loss"])"' "$out/metrics.jsonl" > "$out/train.dat"
jq -r 'select(.["validation lm loss"]) | "\(.iteration) \(.["validation lm loss"])"' \
  "$out/metrics.jsonl" > "$out/valid.dat"
if ! command -v gnuplot >/dev/null; then
  echo "== no gnuplot (MT_NO_INSTALL=1?): no plot"
else gnuplot <<EOG
set terminal png size 900,560
set output "$out/loss.png"
set title "mt-pretrain on the King James Bible ($dev)"
set xlabel "iteration"; set ylabel "lm loss (nats)"; set grid
plot "$out/train.dat" with lines title "train", "$out/valid.dat" with linespoints pt 7 title "validation"
EOG
fi
echo "== unigram entropy of the corpus: $H nats/token; last validation loss: $(tail -1 "$out/valid.dat" | cut -d' ' -f2)"
echo "== plot: $out/loss.png; metrics: $out/metrics.jsonl; checkpoint: $out/ckpt"
# What the model learned: the checkpoint continues a prompt (top-p sampling, a fixed seed).
echo "== mt-generate from the checkpoint:"
"$b/apps/generate/mt-generate" --load "$out/ckpt" --device "$dev" --prompt "And God said" \
  --tokens-to-generate 40 --temperature 0.8 --top_p 0.9 --seed 1
