"""PyTorch peer of bench_reduce.c: sum of squares (x.float().square().sum(), as a grad-norm
step does per tensor), zero count ((x == 0).sum()) and the bias-gradient column sum (x.sum(0) to f32).
Usage: python peer_reduce.py OUT.json"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../bench/peers"))
from common import Results, time_cuda  # noqa: E402

res = Results()
g = torch.Generator(device="cuda").manual_seed(1)
rnd = lambda *s, dt=torch.bfloat16, lo=-1.0, hi=1.0: (torch.rand(*s, device="cuda", generator=g) * (hi - lo) + lo).to(dt)
dname = {torch.bfloat16: "bf16", torch.float32: "f32"}

for op, dt, R, C in [(0, torch.bfloat16, 1 << 14, 1 << 14), (0, torch.float32, 1 << 14, 1 << 14),
                     (1, torch.bfloat16, 1 << 14, 1 << 14), (2, torch.bfloat16, 16384, 768),
                     (2, torch.bfloat16, 16384, 4096)]:
    x = rnd(R, C, dt=dt)
    if op == 0:
        fn, name = lambda: torch.linalg.vector_norm(x, dtype=torch.float32), f"sumsq/torch/{dname[dt]}_{R * C >> 20}M"
    elif op == 1:
        fn, name = lambda: (x == 0).sum(), f"count_zero/torch/{dname[dt]}_{R * C >> 20}M"
    else:
        fn, name = lambda: x.sum(0, dtype=torch.float32), f"colsum/torch/{dname[dt]}_R{R}_C{C}"
    res.add(name, time_cuda(fn), bytes_per_iter=R * C * x.element_size())
    del x
res.write()
