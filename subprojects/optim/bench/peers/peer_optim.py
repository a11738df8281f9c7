"""torch peer of bench_optim.c: torch.optim.AdamW(fused=True) over the same GPT-2 124M and 1.5B
parameter sets (fp32 params and grads; decay on weights, none on 1-D params), step only and with
clip_grad_norm_(1.0, foreach=True) before it. Bytes per parameter as in bench_optim.c (28; +4 with
clipping). Usage: python peer_optim.py OUT.json"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../bench/peers"))
from common import Results, time_cuda  # noqa: E402

V, T = 50304, 1024


def gpt2_shapes(C, L):
    shapes = [(V, C), (T, C)]
    for _ in range(L):
        shapes += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,),
                   (C, 4 * C), (C,)]
    return shapes + [(C,), (C,)]


res = Results()
for tag, C, L in (("124M", 768, 12), ("1.5B", 1600, 48)):
    params = [torch.full(s, 0.01, device="cuda", requires_grad=True) for s in gpt2_shapes(C, L)]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    n = sum(p.numel() for p in params)
    groups = [{"params": [p for p in params if p.dim() > 1], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() == 1], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-4, fused=True)
    res.add(f"adamw/torch/f32_{tag}", time_cuda(opt.step), bytes_per_iter=28 * n)

    def clip_step():
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()

    res.add(f"adamw_clip/torch/f32_{tag}", time_cuda(clip_step), bytes_per_iter=32 * n)
    del opt, params, groups
    torch.cuda.empty_cache()
res.write()
