"""Timing helper for PyTorch peer benchmarks: CUDA events, warm-up, median of repeats, and
Google-Benchmark-style JSON output so bench/compare.py reads ours and theirs alike."""
import json
import sys

import torch


def time_cuda(fn, warmup=5, iters=20):
    """Median milliseconds of fn() over iters runs, timed with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def time_train_step(model, x, warmup=3, iters=10):
    """Median milliseconds of one training step of a causal LM on tokens x (the loss against x as
    labels, backward, fused AdamW at lr 6e-4), or None when it runs out of memory."""
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)

    def step():
        opt.zero_grad(set_to_none=True)
        model(x, labels=x).loss.backward()
        opt.step()
    try:
        return time_cuda(step, warmup=warmup, iters=iters)
    except torch.OutOfMemoryError:
        return None


def report(res, label, name, x, ms, flops, extra=""):
    """Records a training step's median ms (None: out of memory) as `label` in res and prints its
    tokens/s (tokens x: (B, T)) and peak memory; then frees the cached memory for the next case
    (the caller drops its model first)."""
    if ms is None:
        print(f"{name}: out of memory", file=sys.stderr)
    else:
        res.add(label, ms, flops_per_iter=flops)
        print(f"{name}: {x.numel() / ms * 1e3:.0f} tokens/s{extra}, peak memory "
              f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MB", file=sys.stderr)


def free_memory():
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


class Results:
    def __init__(self):
        self.rows = []

    def add(self, name, ms, bytes_per_iter=None, flops_per_iter=None):
        row = {"name": name, "real_time": ms * 1e3, "time_unit": "us", "run_type": "iteration"}
        if bytes_per_iter:
            row["bytes_per_second"] = bytes_per_iter / (ms * 1e-3)
        if flops_per_iter:
            row["FLOPS"] = flops_per_iter / (ms * 1e-3)
        self.rows.append(row)
        print(f"{name}: {ms:.4f} ms", file=sys.stderr)

    def write(self, path=None):
        path = path or (sys.argv[1] if len(sys.argv) > 1 else "/dev/stdout")
        with open(path, "w") as f:
            json.dump({"context": {"device": torch.cuda.get_device_name(0)},
                       "benchmarks": self.rows}, f, indent=1)
