"""Golden values for mt-tp, from torch on the whole (unsharded) tensors, float64 math on float32
inputs. torch (CPU), numpy; seed 4321. Rerun: python gen_tp.py (from this directory).
The tests shard these tensors as Megatron does (column-parallel rows, row-parallel columns, the
vocabulary's rows and columns) and must reassemble these results on any tensor-parallel size.
  mlp:   x [N,C], fc1 w1 [F,C] b1 [F], GELU (tanh), fc2 w2 [C,F] b2 [C]: y [N,C]; with dy [N,C]
         (loss = sum(y * dy)): dx, dw1, db1, dw2, db2.
  embed: wte [VP,C] (VP = the padded vocabulary), ids [N] in [0, V): emb [N,C]; dwte for dout
         = demb [N,C].
  xent:  logits [N,VP], targets [N] in [0, V) with two ignored (-100), dloss [N]: losses [N] =
         F.cross_entropy(logits[:, :V], targets, reduction='none'), dlogits = d(sum(losses *
         dloss))/dlogits (zero on the padding columns).
N 16, C 16, F 64, V 37, VP 48 (every size divides by 1, 2, 4 and 8)."""
import numpy as np
import torch
import torch.nn.functional as F

N, C, FF, V, VP = 16, 16, 64, 37, 48
g = torch.Generator().manual_seed(4321)


def rnd(*shape, scale=1.0):
    return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale).double()


def save(name, t):
    np.save(name + ".npy", t.detach().double().numpy())


x = rnd(N, C).requires_grad_(True)
w1 = rnd(FF, C, scale=0.3).requires_grad_(True)
b1 = rnd(FF, scale=0.1).requires_grad_(True)
w2 = rnd(C, FF, scale=0.2).requires_grad_(True)
b2 = rnd(C, scale=0.1).requires_grad_(True)
dy = rnd(N, C)
y = F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)
(y * dy).sum().backward()
for k, t in dict(mlp_x=x, mlp_w1=w1, mlp_b1=b1, mlp_w2=w2, mlp_b2=b2, mlp_dy=dy, mlp_y=y).items():
    save(k, t)
for k, t in dict(mlp_dx=x, mlp_dw1=w1, mlp_db1=b1, mlp_dw2=w2, mlp_db2=b2).items():
    save(k, t.grad)

wte = rnd(VP, C).requires_grad_(True)
ids = torch.randint(0, V, (N,), generator=g)
ids[3] = ids[7]  # a repeated id: its gradient rows add
demb = rnd(N, C)
emb = F.embedding(ids, wte)
(emb * demb).sum().backward()
save("embed_wte", wte)
save("embed_ids", ids)
save("embed_out", emb)
save("embed_dout", demb)
save("embed_dwte", wte.grad)

logits = rnd(N, VP, scale=3.0).requires_grad_(True)
targets = torch.randint(0, V, (N,), generator=g)
targets[2] = -100
targets[11] = -100
targets[5] = V - 1  # the last real column
dloss = rnd(N).abs() + 0.1
losses = F.cross_entropy(logits[:, :V], targets, reduction="none", ignore_index=-100)
(losses * dloss).sum().backward()
save("xent_logits", logits)
save("xent_targets", targets)
save("xent_dloss", dloss)
save("xent_losses", losses)
save("xent_dlogits", logits.grad)
