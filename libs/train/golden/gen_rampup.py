#!/usr/bin/env python3
"""Golden batch-size ramps for mt-pretrain's --rampup-batch-size, from megatron-core.

For each case: megatron-core's RampupBatchsizeNumMicroBatchesCalculator (the module file alone,
so torch is not needed) driven as Megatron's training does it: update_train_iters (from
megatron/training/training.py, which the megatron-core wheel does not ship; transcribed below)
gives the iteration count, then each iteration updates the calculator at the consumed samples
and consumes the current global batch. Writes rampup.json: per case the flags and, per
iteration, the global batch size and the consumed samples after it.

    pip install --no-deps megatron-core   (tested with 0.16.1)
    python3 gen_rampup.py > rampup.json
"""
import importlib.metadata
import importlib.util
import json
import sys

dist = importlib.metadata.distribution("megatron-core")
path = next(f for f in dist.files if str(f).endswith("megatron/core/num_microbatches_calculator.py"))
spec = importlib.util.spec_from_file_location("nmc", dist.locate_file(path))
nmc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nmc)

# (start, increment, ramp-up samples, global batch, micro batch, data-parallel size, train samples,
#  decrease_batch_size_if_needed)
CASES = [
    (4, 4, 60, 16, 2, 1, 200, False),
    (2, 2, 50, 12, 2, 1, 150, False),
    (4, 4, 37, 16, 2, 2, 131, False),  # ramp samples not a multiple of the increments; DP=2
    (8, 8, 100, 16, 4, 1, 90, False),  # training ends inside the ramp
    (3, 3, 30, 12, 2, 1, 100, True),  # 3, 6, 9, 12 run as 2, 6, 8, 12
]


def update_train_iters(rampup, gbs, train_samples):
    """megatron/training/training.py:update_train_iters, sample-based with rampup."""
    iterations = 0
    consumed_samples = 0
    while consumed_samples <= int(rampup[2]) and consumed_samples <= train_samples:
        nmc.update_num_microbatches(consumed_samples, consistency_check=False)
        consumed_samples += nmc.get_current_global_batch_size()
        iterations += 1
    nmc.update_num_microbatches(0, consistency_check=False)
    if train_samples > consumed_samples:
        iterations += (train_samples - consumed_samples) // gbs
    return iterations


out = []
for start, inc, ramp, gbs, mbs, dp, samples, decrease in CASES:
    nmc.unset_num_microbatches_calculator()
    nmc.init_num_microbatches_calculator(0, [start, inc, ramp], gbs, mbs, dp, decrease)
    iters = update_train_iters([start, inc, ramp], gbs, samples)
    consumed, steps = 0, []
    for _ in range(iters):  # megatron's train(): update at the consumed samples, then step
        nmc.update_num_microbatches(consumed, consistency_check=True)
        b = nmc.get_num_microbatches() * mbs * dp
        consumed += b
        steps.append([b, consumed])
    out.append({"rampup": [start, inc, ramp], "global_batch_size": gbs, "micro_batch_size": mbs,
                "data_parallel_size": dp, "train_samples": samples, "train_iters": iters,
                "decrease_batch_size_if_needed": decrease,
                "steps": steps})
json.dump({"megatron_core": dist.version, "cases": out}, sys.stdout)
print()
