#!/usr/bin/env bash
# gpu: the ckpt-resume test of test_ckpt_resume.sh on the GPU (fp32, or bf16 with "bf16", or fp16
# with a loss scale that overflows and grows with "fp16").
n=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$n" -ge 1 ] || { echo "SKIP: needs 1 GPU, found 0"; exit 77; }
# --deterministic-mode: the fast attention backward adds dQ with fp32 atomics (run-to-run
# rounding); the bitwise comparison needs the deterministic kernels, as in Megatron's tests.
export MT_TEST_FLAGS=--deterministic-mode
[ "${1:-}" = bf16 ] && export MT_TEST_FLAGS="--bf16 --deterministic-mode"
[ "${1:-}" = fp16 ] && export MT_TEST_FLAGS="--fp16 --initial-loss-scale 268435456 --loss-scale-window 3 --deterministic-mode"
MT_TEST_DEVICE=cuda exec bash "$(dirname "$0")/test_ckpt_resume.sh"
