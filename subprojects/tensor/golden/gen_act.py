"""Golden values for GELU (tanh), SiLU, sigmoid and SwiGLU forward/backward, from PyTorch (CPU, float64).
torch >= 2.4, numpy; seed 4321. Rerun: /opt/gv/bin/python gen_act.py (from this directory).
SwiGLU follows Megatron: x (..., 2F) -> silu(x[..., :F]) * x[..., F:]."""
import numpy as np
import torch
import torch.nn.functional as F

g = torch.Generator().manual_seed(4321)
x = (3 * torch.randn(7, 24, generator=g, dtype=torch.float64)).requires_grad_()
dout = torch.randn(7, 24, generator=g, dtype=torch.float64)
np.save("act_x.npy", x.detach().numpy())
np.save("act_dout.npy", dout.numpy())
for name, fn in [("gelu", lambda t: F.gelu(t, approximate="tanh")), ("silu", F.silu)]:
    y = fn(x)
    (dx,) = torch.autograd.grad(y, x, dout)
    np.save(f"act_{name}.npy", y.detach().numpy())
    np.save(f"act_{name}_dx.npy", dx.numpy())

# sigmoid (the shared experts' gate, Megatron's moe_shared_expert_gate); appended after the
# others' draws so that their files do not change (session 41)
y = torch.sigmoid(x)
(dx,) = torch.autograd.grad(y, x, dout)
np.save("act_sigmoid.npy", y.detach().numpy())
np.save("act_sigmoid_dx.npy", dx.numpy())

# SwiGLU on the fused (7, 2*12) input; dglu is the (7, 12) upstream gradient
dglu = torch.randn(7, 12, generator=g, dtype=torch.float64)
a, b = torch.chunk(x, 2, dim=-1)
y = F.silu(a) * b
(dx,) = torch.autograd.grad(y, x, dglu)
np.save("act_swiglu_dout.npy", dglu.numpy())
np.save("act_swiglu.npy", y.detach().numpy())
np.save("act_swiglu_dx.npy", dx.numpy())
