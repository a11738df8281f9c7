"""Golden values for the fused softmax cross-entropy over a padded vocab, from PyTorch (CPU, float64):
F.cross_entropy(logits[:, :V], targets, ignore_index=-100) and its gradient.
torch >= 2.4, numpy; seed 77. Rerun: /opt/gv/bin/python gen_xent.py (from this directory).
N = 7 tokens, V = 37 real columns padded to Vp = 40 (padding holds large junk that must be ignored);
one target is ignored (-100), one is V - 1. Gradients are zero in the padded columns."""
import numpy as np
import torch
import torch.nn.functional as F

g = torch.Generator().manual_seed(77)
N, V, Vp = 7, 37, 40
logits = torch.randn(N, Vp, generator=g, dtype=torch.float64) * 2
logits[:, V:] = 50.0
logits[4] += 30.0
targets = torch.randint(0, V, (N,), generator=g)
targets[1] = -100
targets[5] = V - 1
dloss = torch.randn(N, generator=g, dtype=torch.float64)


def grads(reduction, upstream):
    x = logits[:, :V].clone().requires_grad_(True)
    loss = F.cross_entropy(x, targets, ignore_index=-100, reduction=reduction)
    loss.backward(upstream)
    d = torch.zeros(N, Vp, dtype=torch.float64)
    d[:, :V] = x.grad
    return loss.detach(), d


losses, d_tok = grads("none", dloss)
mean, d_mean = grads("mean", torch.tensor(1.0, dtype=torch.float64))
count = (targets != -100).sum().item()
np.save("xent_logits.npy", logits.numpy())
np.save("xent_targets.npy", targets.numpy())
np.save("xent_dloss.npy", dloss.numpy())
np.save("xent_losses.npy", losses.numpy())
np.save("xent_stats.npy", np.array([mean.item(), count], dtype=np.float64))
np.save("xent_dlogits_tok.npy", d_tok.numpy())
np.save("xent_dlogits_mean.npy", d_mean.numpy())
