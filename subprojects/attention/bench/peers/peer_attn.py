"""PyTorch peer of bench_attn.c: SDPA in bf16 with its flash and its cuDNN backend
(torch.nn.attention.sdpa_kernel) on the same shapes and FLOP counts. q, k, v are (B,T,H,D)
tensors viewed as (B,H,T,D), as a QKV GEMM produces them. GQA: enable_gqa=True, or K/V
repeated to H heads where a backend rejects it (the name then ends in _rep).
Usage: python peer_attn.py OUT.json"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../bench/peers"))
from common import Results, time_cuda  # noqa: E402

SHAPES = [  # B, H, Hkv, T, D, causal: the same list as bench_attn.c
    (16, 12, 12, 1024, 64, 1), (8, 16, 16, 2048, 128, 1), (4, 16, 16, 4096, 128, 1),
    (4, 16, 16, 4096, 128, 0), (2, 32, 32, 8192, 128, 1), (2, 32, 8, 4096, 128, 1),
    (64, 12, 12, 1024, 64, 1),  # GPT-2 124M's B64 step
]
BACKENDS = [("torch_flash", SDPBackend.FLASH_ATTENTION), ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)]

res = Results()
for B, H, Hkv, T, D, causal in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(1)
    mk = lambda h: (torch.rand(B, T, h, D, device="cuda", generator=g, dtype=torch.bfloat16) * 2 - 1)
    q, k, v, dout = mk(H), mk(Hkv), mk(Hkv), mk(H)
    flops = 4.0 * B * H * T * T * D * (0.5 if causal else 1.0)
    kv = f"_KV{Hkv}" if Hkv != H else ""
    shape = f"B{B}_H{H}{kv}_T{T}_D{D}_{'causal' if causal else 'full'}"
    for name, backend in BACKENDS:
        for rep in ([False, True] if Hkv != H else [False]):
            qh = q.transpose(1, 2).detach().requires_grad_()
            kk = k.repeat_interleave(H // Hkv, dim=2) if rep else k
            vv = v.repeat_interleave(H // Hkv, dim=2) if rep else v
            kh = kk.transpose(1, 2).detach().requires_grad_()
            vh = vv.transpose(1, 2).detach().requires_grad_()
            gqa = Hkv != H and not rep
            suffix = "_rep" if rep else ""

            def fwd():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qh, kh, vh, is_causal=bool(causal),
                                                          enable_gqa=gqa)

            def fwdbwd():
                out = fwd()
                out.backward(dout.transpose(1, 2))

            try:
                ms = time_cuda(fwd)
                res.add(f"attn_fwd/{name}/{shape}{suffix}", ms, flops_per_iter=flops)
                ms = time_cuda(fwdbwd)
                res.add(f"attn_fwdbwd/{name}/{shape}{suffix}", ms, flops_per_iter=3.5 * flops)
                break  # native GQA worked: no need for the repeated variant
            except RuntimeError as e:
                print(f"{name} {shape}{suffix}: {str(e).splitlines()[0]}", file=sys.stderr)
res.write()
