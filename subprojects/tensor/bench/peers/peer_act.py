"""PyTorch peer of bench_act.c: GELU (tanh) forward/backward and Megatron's SwiGLU
(silu(x1) * x2 on the two halves of x) forward/backward in eager PyTorch (bf16). Same shapes,
names with /torch/, bytes counted as in bench_act.c. JSON to argv[1]."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../bench/peers"))
from common import Results, time_cuda  # noqa: E402

res = Results()
N = 16384
g = torch.Generator(device="cuda").manual_seed(42)
def rnd(*s):
    return torch.rand(*s, device="cuda", dtype=torch.bfloat16, generator=g) * 8 - 4

for Fw in (3072, 6400):
    x, dy = rnd(N, Fw), rnd(N, Fw)
    shape = f"bf16_N{N}_F{Fw}"
    res.add(f"gelu_fwd/torch/{shape}", time_cuda(lambda: F.gelu(x, approximate="tanh")),
            bytes_per_iter=2 * N * Fw * 2)
    res.add(f"gelu_bwd/torch/{shape}",
            time_cuda(lambda: torch.ops.aten.gelu_backward(dy, x, approximate="tanh")),
            bytes_per_iter=3 * N * Fw * 2)
    del x, dy

Fh = 4096
x, dy = rnd(N, 2 * Fh), rnd(N, Fh)
shape = f"bf16_N{N}_F{Fh}"

def swiglu(t):
    a, b = torch.chunk(t, 2, dim=-1)
    return F.silu(a) * b

xr = x.detach().requires_grad_()
yr = swiglu(xr)
res.add(f"swiglu_fwd/torch/{shape}", time_cuda(lambda: swiglu(x)), bytes_per_iter=3 * N * Fh * 2)
res.add(f"swiglu_bwd/torch/{shape}",
        time_cuda(lambda: torch.autograd.grad(yr, xr, dy, retain_graph=True)),
        bytes_per_iter=5 * N * Fh * 2)
res.write()
