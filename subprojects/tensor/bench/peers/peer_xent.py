"""PyTorch peer of bench_xent.c: F.cross_entropy (ignore_index=-100, mean) over the first V
columns of padded logits, forward only and forward + backward, in eager; bytes counted as ours.
Usage: python peer_xent.py OUT.json"""
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

for bwd, dt, N, V, Vp in [(1, torch.bfloat16, 16384, 50257, 50304), (1, torch.bfloat16, 8192, 50257, 50304),
                          (0, torch.bfloat16, 16384, 50257, 50304), (1, torch.float32, 8192, 50257, 50304)]:
    logits = rnd(N, Vp, dt=dt, lo=-8, hi=8).requires_grad_(bwd == 1)
    t = (torch.arange(N, device="cuda") * 7919) % V

    def fn():
        loss = F.cross_entropy(logits[:, :V], t, ignore_index=-100)
        if bwd:
            loss.backward()
            logits.grad = None

    es = logits.element_size()
    res.add(f"xent_{'fwd_bwd' if bwd else 'fwd'}/torch/{dname[dt]}_N{N}_V{V}_Vp{Vp}", time_cuda(fn),
            bytes_per_iter=(2 if bwd else 1) * N * Vp * es)
    del logits
    torch.cuda.empty_cache()
res.write()
