"""Golden values for AdamW and SGD over 20 steps, from torch.optim (CPU, float64).
torch 2.15, numpy; seed 1234. Rerun: /opt/gv/bin/python gen_adamw.py (from this directory).
Params (registration order, flattened and concatenated): w1 [6,8], l1.bias [8], norm.weight [8],
w2 [5,6]. Weight decay only on the 2-D weights (Megatron's rule: no decay for 1-D and *.bias).
Params and grads are float32 values (exact in the C test); the math is float64.
  adamw:      lr_t = 1e-2 * (1 - t/40), betas (0.9, 0.999), eps 1e-8, wd 0.1
  adamw_clip: the same with grads x3 and clip_grad_norm_(max_norm=1.0) before each step
  sgd:        lr 0.05, momentum 0.9, wd 0.01 (torch SGD: L2 on the grad)
Files: p0 [94], grads [20,94] (step 5 has exact zeros), <cfg>_params [20,94] after each step,
<cfg>_norm [20] (total grad norm before clipping), zeros [20] (zero grads per step)."""
import numpy as np
import torch

SHAPES = [("l1.weight", (6, 8), True), ("l1.bias", (8,), False), ("norm.weight", (8,), False),
          ("l2.weight", (5, 6), True)]
STEPS = 20
g = torch.Generator().manual_seed(1234)
n = sum(int(np.prod(s)) for _, s, _ in SHAPES)
p0 = torch.randn(n, generator=g, dtype=torch.float32).double()
grads = torch.randn(STEPS, n, generator=g, dtype=torch.float32).double() * 0.5
grads[5, :3] = 0.0
grads[5, 50:52] = 0.0
np.save("p0.npy", p0.numpy())
np.save("grads.npy", grads.numpy())
np.save("zeros.npy", (grads == 0).sum(dim=1).double().numpy())


def split(flat):
    out, off = [], 0
    for _, s, _ in SHAPES:
        k = int(np.prod(s))
        out.append(flat[off:off + k].clone().reshape(s).requires_grad_(True))
        off += k
    return out


def run(name, make_opt, lr_of, grad_mul=1.0, clip=None):
    ps = split(p0)
    decay = [p for p, (_, _, d) in zip(ps, SHAPES) if d]
    nodecay = [p for p, (_, _, d) in zip(ps, SHAPES) if not d]
    opt = make_opt(decay, nodecay)
    hist, norms = [], []
    for t in range(STEPS):
        gs = split(grads[t] * grad_mul)
        for p, gg in zip(ps, gs):
            p.grad = gg.detach().clone()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(ps, clip)))
        else:
            norms.append(float(torch.linalg.vector_norm(grads[t] * grad_mul)))
        for grp in opt.param_groups:
            grp["lr"] = lr_of(t)
        opt.step()
        hist.append(torch.cat([p.detach().reshape(-1) for p in ps]))
    np.save(f"{name}_params.npy", torch.stack(hist).numpy())
    np.save(f"{name}_norm.npy", np.array(norms))


adam = lambda d, nd: torch.optim.AdamW([{"params": d, "weight_decay": 0.1},
                                        {"params": nd, "weight_decay": 0.0}],
                                       lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
run("adamw", adam, lambda t: 1e-2 * (1 - t / 40))
run("adamw_clip", adam, lambda t: 1e-2 * (1 - t / 40), grad_mul=3.0, clip=1.0)
sgd = lambda d, nd: torch.optim.SGD([{"params": d, "weight_decay": 0.01},
                                     {"params": nd, "weight_decay": 0.0}], lr=0.05, momentum=0.9)
run("sgd", sgd, lambda t: 0.05)
