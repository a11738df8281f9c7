"""Golden values for rotary position embedding, from PyTorch (CPU, float64), layout (B,T,H,D):
- rope_half_*: Hugging Face's rotate_half formula (q*cos + rotate_half(q)*sin over the first
  rotary_dim = 8 of D = 12 channels, the rest unchanged), theta = 10000, positions 0..T-1;
- rope_inter_*: Meta's interleaved complex formulation (view_as_complex of (x[2i], x[2i+1]) times
  exp(i*angle)) over all D = 12 channels, theta = 500000, position ids (B,T) given.
Backward (dx for an upstream dout) by autograd. torch >= 2.4, numpy; seed 5.
- rope_{llama3,yarn,yarnnt,linear,longrope_short,longrope_long}_*: scaled frequencies from
  transformers' own
  ROPE_INIT_FUNCTIONS (its Llama 3, YaRN and linear rope_parameters, fp32): the inverse
  frequencies (_invf) and cos/sin factor (_attn), and the rotation with them (in fp64, positions
  pos_ids % 16 for yarn, 0..T-1 else, so the fp32 frequencies' rounding stays below 1e-6).
  transformers >= 5.
Rerun: /opt/gv/bin/python gen_rope.py (from this directory)."""
import numpy as np
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

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


def rope_half(xx, rot, theta, invf=None, attn=1.0):
    pos = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq(rot, theta) if invf is None else invf)  # (T, rot/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, :, None, :] * attn, emb.sin()[None, :, None, :] * attn
    xr, xp = xx[..., :rot], xx[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def rope_inter(xx, rot, theta, pos, invf=None, attn=1.0):
    invf = inv_freq(rot, theta) if invf is None else invf
    freqs = pos.to(torch.float64)[..., None] * invf  # (B, T, rot/2)
    cis = torch.polar(torch.full_like(freqs, attn), freqs)[:, :, None, :]
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


def hf_freqs(name, rot, params, max_pos=4096, seq_len=None):
    """transformers' inverse frequencies and cos/sin factor for rope_parameters params (seq_len:
    LongRoPE's choice of factors)."""
    cfg = LlamaConfig(hidden_size=H * D, num_attention_heads=H, head_dim=D,
                      max_position_embeddings=max_pos,
                      rope_parameters=dict(params, rope_theta=10000.0,
                                           partial_rotary_factor=rot / D))
    invf, attn = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu", seq_len=seq_len)
    np.save(f"rope_{name}_invf.npy", invf.numpy())
    np.save(f"rope_{name}_attn.npy", np.array([attn], dtype=np.float64))
    return invf.to(torch.float64), float(attn)


# Llama 3: original 256 positions put pairs 0-1 above, 2 between and 3-5 below the band
f, a = hf_freqs("llama3", 12, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 256})
save("llama3", lambda v: rope_half(v, 12, 10000.0, f, a))
# YaRN as DeepSeek's (interleaved, partial) with a cos/sin factor != 1: ramp over pairs 0-2
f, a = hf_freqs("yarn", 8, {"rope_type": "yarn", "factor": 40.0, "beta_fast": 32,
                            "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.5,
                            "original_max_position_embeddings": 64})
save("yarn", lambda v: rope_inter(v, 8, 10000.0, pos_ids % 16, f, a))
# YaRN unrounded (truncate false), factor from m(4, 1) alone
f, a = hf_freqs("yarnnt", 12, {"rope_type": "yarn", "factor": 4.0, "truncate": False,
                               "original_max_position_embeddings": 512})
save("yarnnt", lambda v: rope_half(v, 12, 10000.0, f, a))
f, a = hf_freqs("linear", 10, {"rope_type": "linear", "factor": 2.5})
save("linear", lambda v: rope_half(v, 10, 10000.0, f, a))
# LongRoPE (Phi-3's): per-pair divisors, short below the original 16 positions, long above;
# cos/sin times sqrt(1 + ln(64 / 16) / ln 16) (factor from max_position_embeddings 64)
lr = {"rope_type": "longrope", "original_max_position_embeddings": 16,
      "short_factor": [1.0, 1.5, 2.0, 3.0, 5.0], "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0]}
f, a = hf_freqs("longrope_short", 10, lr, max_pos=64)
save("longrope_short", lambda v: rope_half(v, 10, 10000.0, f, a))
f, a = hf_freqs("longrope_long", 10, lr, max_pos=64, seq_len=17)
save("longrope_long", lambda v: rope_half(v, 10, 10000.0, f, a))
