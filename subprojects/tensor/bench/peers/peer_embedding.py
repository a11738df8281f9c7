"""PyTorch peer of bench_embedding.c: wte[ids] + wpe[t] forward and its autograd backward into f32
gradient tables (embedding_dense_backward), bf16 activations; same Zipf-like ids and byte counts.
Usage: python peer_embedding.py OUT.json"""
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

for bwd, B, T, C, V in [(0, 8, 2048, 768, 50304), (1, 8, 2048, 768, 50304),
                        (0, 4, 2048, 4096, 50304), (1, 4, 2048, 4096, 50304)]:
    N = B * T
    u = torch.rand(B, T, device="cuda", generator=g, dtype=torch.float64)
    ids = ((V * u ** 3).long() % V)
    uniq = ids.unique().numel()
    wte = rnd(V, C, dt=torch.float32).requires_grad_(True)  # f32 master weights, bf16 compute
    wpe = rnd(T, C, dt=torch.float32).requires_grad_(True)
    pos = torch.arange(T, device="cuda")
    dout = rnd(B, T, C)
    if bwd:
        out = F.embedding(ids, wte.bfloat16()) + F.embedding(pos, wpe.bfloat16())
        fn = lambda: torch.ops.aten.embedding_dense_backward(dout.float(), ids, V, -1, False)
        nbytes = N * C * 2 + (uniq + T) * C * 8
    else:
        wb, pb = wte.detach().bfloat16(), wpe.detach().bfloat16()
        fn = lambda: F.embedding(ids, wb) + F.embedding(pos, pb)
        nbytes = N * C * 2 * 2
    res.add(f"embedding_{'bwd' if bwd else 'fwd'}/torch/bf16_B{B}_T{T}_C{C}_V{V}", time_cuda(fn),
            bytes_per_iter=nbytes)
res.write()
