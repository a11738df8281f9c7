"""Golden values for rotary position embedding, from PyTorch (CPU, float64), layout (B,T,H,D):
- rope_half_*: Hugging Face's rotate_half formula (q*cos + rotate_half(q)*sin over the first
  rotary_dim = 8 of D = 12 channels, the rest unchanged), theta = 10000, positions 0..T-1;
- rope_inter_*: Meta's interleaved complex formulation (view_as_complex of (x[2i], x[2i+1]) times
  exp(i*angle)) over all D = 12 channels, theta = 500000, position ids (B,T) given.
Backward (dx for an upstream dout) by autograd. torch >= 2.4, numpy; seed 5.
Rerun: /opt/gv/bin/python gen_rope.py (from this directory)."""
import numpy as np
import torch

g = torch.Generator().manual_seed(5)
B, T, H, D = 2, 5, 3, 12
x = torch.randn(B, T, H, D, generator=g, dtype=torch.float64)
dout = torch.randn(B, T, H, D, generator=g, dtype=torch.float64)
pos_ids = torch.randint(0, 4096, (B, T), generator=g)


def inv_freq(rot, theta):
    return 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))


def rotate_half(v):
    v1, v2 = v[..., : v.shape[-1] // 2], v[..., v.shape[-1] // 2:]
    return torch.cat((-v2, v1), dim=-1)


def rope_half(xx, rot, theta):
    pos = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq(rot, theta))  # (T, rot/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    xr, xp = xx[..., :rot], xx[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def rope_inter(xx, rot, theta, pos):
    freqs = pos.to(torch.float64)[..., None] * inv_freq(rot, theta)  # (B, T, rot/2)
    cis = torch.polar(torch.ones_like(freqs), freqs)[:, :, None, :]
    xr = torch.view_as_complex(xx[..., :rot].reshape(B, T, H, rot // 2, 2).contiguous())
    out = torch.view_as_real(xr * cis).reshape(B, T, H, rot)
    return torch.cat((out, xx[..., rot:]), dim=-1)


def save(name, fn):
    xr = x.clone().requires_grad_(True)
    out = fn(xr)
    out.backward(dout)
    np.save(f"rope_{name}_out.npy", out.detach().numpy())
    np.save(f"rope_{name}_dx.npy", xr.grad.numpy())


np.save("rope_x.npy", x.numpy())
np.save("rope_dout.npy", dout.numpy())
np.save("rope_pos.npy", pos_ids.numpy())
save("half", lambda v: rope_half(v, 8, 10000.0))
save("inter", lambda v: rope_inter(v, 12, 500000.0, pos_ids))
