"""Golden values for reductions, from PyTorch (CPU, float64): sum, sum of squares, L2 norm, the
number of zeros, and the column sum over leading dims (bias gradient).
torch >= 2.4, numpy; seed 11. Rerun: /opt/gv/bin/python gen_reduce.py (from this directory).
x is (2, 7, 37) with 9 exact zeros; column sums reduce (2, 7) -> 37 columns."""
import numpy as np
import torch

g = torch.Generator().manual_seed(11)
x = torch.randn(2, 7, 37, generator=g, dtype=torch.float64)
x.view(-1)[torch.randperm(x.numel(), generator=g)[:9]] = 0.0
np.save("reduce_x.npy", x.numpy())
np.save("reduce_all.npy", np.array([x.sum().item(), (x * x).sum().item(),
                                    torch.linalg.vector_norm(x).item(),
                                    (x == 0).sum().item()], dtype=np.float64))
np.save("reduce_colsum.npy", x.sum(dim=(0, 1)).numpy())
