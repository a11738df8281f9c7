#!/usr/bin/env bash
# gpu: mt-pretrain's CUDA graph of the forward and backward (4 micro-batches per iteration: the
# first runs eagerly, the second is captured, the rest replay) gives bitwise the losses and grad
# norms of the run without graphs (MT_CUDA_GRAPHS=0); with "fp16" the loss scale overflows and
# grows, so the graph is captured again for each new scale.
n=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$n" -ge 1 ] || { echo "SKIP: needs 1 GPU, found 0"; exit 77; }
export MT_TEST_DEVICE=cuda MT_TEST_FLAGS="--bf16 --deterministic-mode"
[ "${1:-}" = fp16 ] && export MT_TEST_FLAGS="--fp16 --initial-loss-scale 268435456 --loss-scale-window 3 --deterministic-mode"
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
MT_CUDA_GRAPHS=0 MT_LOG_LEVEL=debug tiny_run "$d/eager.json" > "$d/eager.log" 2>&1
MT_LOG_LEVEL=debug tiny_run "$d/graph.json" > "$d/graph.log" 2>&1
if grep -q "CUDA graph: captured" "$d/eager.log"; then echo "FAIL: MT_CUDA_GRAPHS=0 captured a graph"; exit 1; fi
caps=$(grep -c "CUDA graph: captured" "$d/graph.log" || true)
[ "$caps" -ge 1 ] || { echo "FAIL: no graph captured"; tail -20 "$d/graph.log"; exit 1; }
echo "graph captures: $caps"
want=$(losses "$d/eager.json" 1 12); got=$(losses "$d/graph.json" 1 12)
echo "without graphs:"; echo "$want"; echo "with graphs:"; echo "$got"
[ "$(echo "$want" | wc -l)" = 12 ] || { echo "FAIL: expected 12 losses"; exit 1; }
[ "$want" = "$got" ] || { echo "FAIL: losses differ"; exit 1; }
norms() { grep " iteration " "$1" | grep -o 'iteration *[0-9]*\|grad norm: [^|]*\|loss scale: [^|]*' | tr '\n' ' '; }
[ "$(norms "$d/eager.log")" = "$(norms "$d/graph.log")" ] \
  || { echo "FAIL: logged grad norms or loss scales differ"; norms "$d/eager.log"; echo; norms "$d/graph.log"; exit 1; }
echo "ok: identical with and without CUDA graphs"
