"""PyTorch peer of bench_norm.c: LayerNorm/RMSNorm with the residual add in eager PyTorch (bf16):
forward h = x + r, out = norm(h); backward through aten's native norm backward plus the residual
gradient. Same shapes, names with /torch/, bytes counted as in bench_norm.c. JSON to argv[1]."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../bench/peers"))
from common import Results, time_cuda  # noqa: E402

res = Results()
N, eps = 16384, 1e-5
for C in (768, 1600, 4096):
    g = torch.Generator(device="cuda").manual_seed(42)
    def rnd(*s):
        return torch.rand(*s, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    x, r, dout, dres = rnd(N, C), rnd(N, C), rnd(N, C), rnd(N, C)
    w, b = rnd(C), rnd(C)
    h = x + r
    _, mean, rstd = torch.ops.aten.native_layer_norm(h, [C], w, b, eps)
    nbytes = 4 * N * C * 2
    shape = f"bf16_N{N}_C{C}"

    def ln_fwd():
        hh = x + r
        return F.layer_norm(hh, (C,), w, b, eps), hh

    def ln_bwd():
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(dout, h, [C], mean, rstd, w, b,
                                                               [True, True, True])
        return dx + dres, dw, db

    def rms_fwd():
        hh = x + r
        return F.rms_norm(hh, (C,), w, eps), hh

    hr = h.detach().requires_grad_()
    wr = w.detach().requires_grad_()
    yr = F.rms_norm(hr, (C,), wr, eps)

    def rms_bwd():
        dx, dw = torch.autograd.grad(yr, (hr, wr), dout, retain_graph=True)
        return dx + dres, dw

    res.add(f"layernorm_fwd/torch/{shape}", time_cuda(ln_fwd), bytes_per_iter=nbytes)
    res.add(f"layernorm_bwd/torch/{shape}", time_cuda(ln_bwd), bytes_per_iter=nbytes)
    res.add(f"rmsnorm_fwd/torch/{shape}", time_cuda(rms_fwd), bytes_per_iter=nbytes)
    res.add(f"rmsnorm_bwd/torch/{shape}", time_cuda(rms_bwd), bytes_per_iter=nbytes)
res.write()
