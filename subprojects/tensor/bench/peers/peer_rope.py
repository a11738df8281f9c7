"""PyTorch peer of bench_rope.c: the Hugging Face rotate_half formula and Meta's interleaved
complex formulation in eager (cos/sin tables precomputed, as the models cache them), bf16 (B,T,H,D).
Usage: python peer_rope.py OUT.json"""
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



def rotate_half(v):
    h = v.shape[-1] // 2
    return torch.cat((-v[..., h:], v[..., :h]), dim=-1)


for inter, B, T, H, D in [(0, 8, 2048, 32, 128), (1, 8, 2048, 32, 128), (0, 16, 1024, 12, 64)]:
    x = rnd(B, T, H, D)
    inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device="cuda", dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(T, device="cuda", dtype=torch.float32), inv)
    if inter:
        cis = torch.polar(torch.ones_like(freqs), freqs)[None, :, None, :]

        def fn():
            xc = torch.view_as_complex(x.float().reshape(B, T, H, D // 2, 2))
            return torch.view_as_real(xc * cis).flatten(3).to(x.dtype)
    else:
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos()[None, :, None, :].to(x.dtype), emb.sin()[None, :, None, :].to(x.dtype)
        fn = lambda: x * cos + rotate_half(x) * sin
    res.add(f"rope_fwd_{'interleaved' if inter else 'half'}/torch/bf16_B{B}_T{T}_H{H}_D{D}",
            time_cuda(fn), bytes_per_iter=x.numel() * 2 * 2)
res.write()
