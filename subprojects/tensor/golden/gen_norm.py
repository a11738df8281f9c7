"""Golden values for LayerNorm and RMSNorm with the fused residual add, forward and backward,
from PyTorch (CPU, float64). torch >= 2.4, numpy; seed 2468. Rerun: /opt/gv/bin/python gen_norm.py
(from this directory). Shapes: B=2, T=7 (odd), C=40 (not a power of two); eps 1e-5.
h = x + residual; out = norm(h); the loss sum(out * dout) + sum(h * dresid) makes x.grad the
norm's input gradient plus a downstream residual gradient, as mt_*norm_bwd(dresid=...) returns."""
import numpy as np
import torch
import torch.nn.functional as F

B, T, C, eps = 2, 7, 40, 1e-5
g = torch.Generator().manual_seed(2468)
def rnd(*s, scale=1.0, shift=0.0):
    return (scale * torch.randn(*s, generator=g, dtype=torch.float64) + shift)

x = rnd(B, T, C, scale=2.0, shift=0.5).requires_grad_()
res = rnd(B, T, C).requires_grad_()
w = rnd(C, scale=0.5, shift=1.0).requires_grad_()
b = rnd(C, scale=0.5).requires_grad_()
dout = rnd(B, T, C)
dres = rnd(B, T, C)
for k, v in [("x", x), ("res", res), ("w", w), ("b", b), ("dout", dout), ("dres", dres)]:
    np.save(f"norm_{k}.npy", v.detach().numpy())

def run(kind):
    h = x + res
    if kind == "ln":
        out = F.layer_norm(h, (C,), w, b, eps)
        mean = h.mean(-1)
        rstd = torch.rsqrt(h.var(-1, unbiased=False) + eps)
        params = [x, w, b]
    else:
        rstd = torch.rsqrt(h.pow(2).mean(-1) + eps)
        out = h * rstd[..., None] * w
        mean = None
        params = [x, w]
    loss = (out * dout).sum() + (h * dres).sum()
    grads = torch.autograd.grad(loss, params)
    np.save(f"norm_{kind}_h.npy", h.detach().numpy())
    np.save(f"norm_{kind}_out.npy", out.detach().numpy())
    np.save(f"norm_{kind}_rstd.npy", rstd.detach().numpy())
    if mean is not None:
        np.save(f"norm_{kind}_mean.npy", mean.detach().numpy())
    np.save(f"norm_{kind}_dx.npy", grads[0].numpy())
    np.save(f"norm_{kind}_dw.npy", grads[1].numpy())
    if kind == "ln":
        np.save(f"norm_{kind}_db.npy", grads[2].numpy())

run("ln")
run("rms")
