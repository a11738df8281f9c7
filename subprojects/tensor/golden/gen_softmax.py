"""Golden values for softmax over the last dim (forward and backward), from PyTorch (CPU, float64).
torch >= 2.4, numpy; seed 2024. Rerun: /opt/gv/bin/python gen_softmax.py (from this directory).
Shape (5, 37): C is odd; one row is shifted by +80 to exercise the max subtraction."""
import numpy as np
import torch

g = torch.Generator().manual_seed(2024)
x = torch.randn(5, 37, generator=g, dtype=torch.float64) * 3
x[2] += 80.0
dy = torch.randn(5, 37, generator=g, dtype=torch.float64)
xr = x.clone().requires_grad_(True)
y = torch.softmax(xr, dim=-1)
y.backward(dy)
np.save("softmax_x.npy", x.numpy())
np.save("softmax_y.npy", y.detach().numpy())
np.save("softmax_dy.npy", dy.numpy())
np.save("softmax_dx.npy", xr.grad.numpy())
