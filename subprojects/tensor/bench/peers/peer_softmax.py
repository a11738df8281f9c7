"""PyTorch peer of bench_softmax.c: torch.softmax forward and its backward
(torch._softmax_backward_data) in eager on the same shapes and byte counts.
Usage: python peer_softmax.py OUT.json"""
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

for bwd, dt, R, C in [(0, torch.bfloat16, 65536, 1024), (1, torch.bfloat16, 65536, 1024),
                      (0, torch.float32, 16384, 4096), (1, torch.float32, 16384, 4096),
                      (0, torch.bfloat16, 8192, 50304)]:
    x, dy = rnd(R, C, dt=dt, lo=-4, hi=4), rnd(R, C, dt=dt)
    y = torch.softmax(x, -1)
    if bwd:
        fn = lambda: torch._softmax_backward_data(dy, y, -1, dt)
    else:
        fn = lambda: torch.softmax(x, -1)
    es = x.element_size()
    res.add(f"softmax_{'bwd' if bwd else 'fwd'}/torch/{dname[dt]}_R{R}_C{C}", time_cuda(fn),
            bytes_per_iter=(3 if bwd else 2) * R * C * es)
    del x, dy, y
res.write()
