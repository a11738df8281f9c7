"""Golden values for GEMM and nn.Linear forward/backward, from PyTorch (CPU, float64).
torch >= 2.4, numpy; seed 1357. Rerun: /opt/gv/bin/python gen_gemm.py (from this directory).
Linear: x (13, 40) @ W(24, 40)^T + b, plain and through GELU (tanh); backward from dy (13, 24).
Batched: c (3, 5, 6) = 0.5 * a^T b + 0.25 * c0 with a stored (3, 9, 5) and b (3, 9, 6)."""
import numpy as np
import torch
import torch.nn.functional as F

g = torch.Generator().manual_seed(1357)
def rnd(*s):
    return torch.randn(*s, generator=g, dtype=torch.float64)

x, w, b, dy = rnd(13, 40), rnd(24, 40) * 0.3, rnd(24), rnd(13, 24)
for k, v in [("x", x), ("w", w), ("b", b), ("dy", dy)]:
    np.save(f"gemm_{k}.npy", v.numpy())
pre = x @ w.T + b
np.save("gemm_linear.npy", pre.numpy())
np.save("gemm_linear_gelu.npy", F.gelu(pre, approximate="tanh").numpy())
np.save("gemm_dx.npy", (dy @ w).numpy())
np.save("gemm_dw.npy", (dy.T @ x).numpy())
np.save("gemm_db.npy", dy.sum(0).numpy())

a, bb, c0 = rnd(3, 9, 5), rnd(3, 9, 6), rnd(3, 5, 6)
np.save("gemm_ba.npy", a.numpy())
np.save("gemm_bb.npy", bb.numpy())
np.save("gemm_bc0.npy", c0.numpy())
np.save("gemm_bc.npy", (0.5 * a.transpose(1, 2) @ bb + 0.25 * c0).numpy())
