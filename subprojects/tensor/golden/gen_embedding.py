"""Golden values for token + position embedding forward and backward, from PyTorch (CPU, float64):
out = wte[ids] + wpe[t]; dwte and dwpe by autograd (index sums over repeated ids).
torch >= 2.4, numpy; seed 31. Rerun: /opt/gv/bin/python gen_embedding.py (from this directory).
V = 11, C = 24, B = 2, T = 5, the position table has 7 rows (rows >= T get no gradient)."""
import numpy as np
import torch

g = torch.Generator().manual_seed(31)
V, C, B, T, TP = 11, 24, 2, 5, 7
wte = torch.randn(V, C, generator=g, dtype=torch.float64)
wpe = torch.randn(TP, C, generator=g, dtype=torch.float64) * 0.1
ids = torch.randint(0, V, (B, T), generator=g)
ids[1, 3] = ids[0, 0]  # repeated ids accumulate
ids[1, 4] = ids[0, 0]
ids[0, 2] = V - 1
dout = torch.randn(B, T, C, generator=g, dtype=torch.float64)
a = wte.clone().requires_grad_(True)
p = wpe.clone().requires_grad_(True)
out = torch.nn.functional.embedding(ids, a) + p[torch.arange(T)]
out.backward(dout)
np.save("emb_wte.npy", wte.numpy())
np.save("emb_wpe.npy", wpe.numpy())
np.save("emb_ids.npy", ids.numpy())
np.save("emb_out.npy", out.detach().numpy())
np.save("emb_dout.npy", dout.numpy())
np.save("emb_dwte.npy", a.grad.numpy())
np.save("emb_dwpe.npy", p.grad.numpy())
