"""Golden values for attention forward/backward, from torch SDPA in float64 on the CPU (autograd
for gradients). torch >= 2.4, numpy; seed 1234. Rerun: /opt/gv/bin/python gen_attn.py (here).
Stored as float32. Per case <name>: q (B,T,H,D), k, v (B,T,Hkv,D), dout; out, lse (B,H,T), dq, dk, dv.
Cases with document masks (docs > 0) also store ks (B,T): each query's first key, Megatron's
--reset-attention-mask on rows with `docs` random EOD positions (the token after an EOD starts a
document; the EOD ends its own), applied as SDPA's boolean attn_mask.
Cases with attention dropout (p > 0) also store ids (B,) i64, each row's sample id, and compute
softmax, the mask and P V by hand: weight (b,h,i,j) is kept iff word ((i & 1) << 1) | (j & 1) of
Philox4x32-10 (randomgen's, an implementation independent of ours) with key (DROP_SEED lo, hi)
and counter ((h T2 + i // 2) T2 + j // 2, DROP_SITE << 32 | id), T2 = ceil(T / 2), is below
floor((1 - p) 2^32); kept weights are scaled by 1/(1-p) (mt_attn_config.dropout)."""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../core/tools"))
import philox_ref  # noqa: E402 (randomgen's Philox)

# name, B, T, H, Hkv, D, causal, scale (0: 1/sqrt(D)), docs (EOD tokens a row; 0: no masks)
CASES = [
    ("mha_t16_d64_causal", 2, 16, 4, 4, 64, 1, 0.0),
    ("mqa_t1_d64", 1, 1, 2, 1, 64, 0, 0.0),
    ("gqa4_t70_d40_causal", 1, 70, 4, 1, 40, 1, 0.0),
    ("gqa8_t33_d96", 1, 33, 8, 1, 96, 0, 0.0),
    ("gqa2_t67_d64_s0.3", 1, 67, 4, 2, 64, 0, 0.3),
    ("gqa2_t67_d64_causal", 1, 67, 4, 2, 64, 1, 0.0),
    ("gqa2_t67_d64_docs", 2, 67, 4, 2, 64, 1, 0.0, 5),
    ("mha_t40_d40_docs", 1, 40, 2, 2, 40, 1, 0.0, 3),
    # ..., docs, dropout p (new cases go last: the earlier ones keep their random draws)
    ("mha_t40_d64_drop", 2, 40, 4, 4, 64, 1, 0.0, 0, 0.2),
    ("gqa2_t33_d40_drop", 1, 33, 4, 2, 40, 0, 0.0, 0, 0.5),
    ("gqa2_t67_d64_docs_drop", 2, 67, 4, 2, 64, 1, 0.0, 5, 0.1),
]
DROP_SEED, DROP_SITE = 0x1234_5678_9ABC, 3


def keep_mask(ids, H, T, p):  # (B,H,T,T) bool
    return torch.from_numpy(philox_ref.attn_keep(DROP_SEED, DROP_SITE, ids, H, T, p))


g = torch.Generator().manual_seed(1234)


def rnd(*shape):  # float32 values (what the tests feed), computed on in float64
    return torch.randn(*shape, generator=g).double().requires_grad_()


def key_starts(B, T, docs):  # megatron's _get_ltor_masks_and_position_ids, as first keys
    ks = torch.zeros(B, T, dtype=torch.int64)
    for b in range(B):
        eods = set(torch.randperm(T, generator=g)[:docs].tolist())
        start = 0
        for t in range(T):
            ks[b, t] = start
            if t in eods:
                start = t + 1
    return ks


for name, B, T, H, Hkv, D, causal, scale, *more in CASES:
    docs = more[0] if more else 0
    drop = more[1] if len(more) > 1 else 0.0
    q = rnd(B, T, H, D)
    k = rnd(B, T, Hkv, D)
    v = rnd(B, T, Hkv, D)
    dout = rnd(B, T, H, D).detach()
    sc = scale if scale else 1.0 / math.sqrt(D)
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))  # (B,heads,T,D)
    allowed, extra = None, []
    if docs:
        ks = key_starts(B, T, docs)
        j = torch.arange(T)
        allowed = (j[None, None, :] >= ks[:, :, None]) & (j[None, None, :] <= j[None, :, None])
        allowed = allowed[:, None]  # (B,1,T,T)
        extra = [("ks", ks)]
    s = torch.einsum("bhid,bhjd->bhij", qh, kh.repeat_interleave(H // Hkv, dim=1)) * sc
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    elif causal:
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    if drop:
        ids = torch.tensor([11 + 1000 * b for b in range(B)], dtype=torch.int64)
        pd = torch.softmax(s, dim=-1) * keep_mask(ids.numpy(), H, T, drop) / (1.0 - float(np.float32(drop)))
        out = (pd @ vh.repeat_interleave(H // Hkv, dim=1)).transpose(1, 2)
        extra.append(("ids", ids))
    else:
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed,
                                             is_causal=bool(causal) and allowed is None, scale=sc,
                                             enable_gqa=True).transpose(1, 2)
    out.backward(dout)
    for key, t in extra + [("q", q), ("k", k), ("v", v), ("dout", dout), ("out", out), ("lse", lse),
                   ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)]:
        a = t.detach().numpy() if key == "ids" else t.detach().float().numpy()
        np.save(f"attn_{name}_{key}.npy", a)  # float32: a few KiB

# Forwards over cached keys (a KV cache's decoding and chunked prefill): Tq queries, the last Tq of
# Tk positions, over Tk keys; causal query i sees keys j <= i + Tk - Tq (the bottom-right causal
# mask, as a boolean attn_mask: SDPA's is_causal aligns top-left when Tq != Tk). out and lse only.
# name, B, Tq, Tk, H, Hkv, D, causal
KV_CASES = [
    ("kv_mha_q1_k37_d64_causal", 2, 1, 37, 4, 4, 64, 1),
    ("kv_gqa2_q5_k21_d40_causal", 1, 5, 21, 4, 2, 40, 1),
    ("kv_mqa_q7_k13_d64", 1, 7, 13, 4, 1, 64, 0),
    ("kv_gqa2_q70_k300_d128_causal", 1, 70, 300, 4, 2, 128, 1),
]


def prefix_attention(q, k, v, causal):
    """out (B,Tq,H,D) and lse (B,H,Tq) of q's Tq queries, the last of k's Tk positions."""
    (B, Tq, H, D), Tk, Hkv = q.shape, k.shape[1], k.shape[2]
    sc = 1.0 / math.sqrt(D)
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    i, j = torch.arange(Tq)[:, None], torch.arange(Tk)[None, :]
    allowed = (j <= i + Tk - Tq) if causal else torch.ones(Tq, Tk, dtype=torch.bool)
    s = torch.einsum("bhid,bhjd->bhij", qh, kh.repeat_interleave(H // Hkv, dim=1)) * sc
    lse = torch.logsumexp(s.masked_fill(~allowed, float("-inf")), dim=-1)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed, scale=sc,
                                         enable_gqa=True).transpose(1, 2)
    return out, lse


for name, B, Tq, Tk, H, Hkv, D, causal in KV_CASES:
    q = rnd(B, Tq, H, D).detach()
    k = rnd(B, Tk, Hkv, D).detach()
    v = rnd(B, Tk, Hkv, D).detach()
    out, lse = prefix_attention(q, k, v, causal)
    for key, t in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)):
        np.save(f"attn_{name}_{key}.npy", t.float().numpy())

# Backwards over a key prefix (context parallelism: a rank's chunk of Tq queries, the last of the
# Tk positions, over the keys up to them): the KV cases' bottom-right mask, with dout and the
# gradients (dk, dv over all Tk keys).
# name, B, Tq, Tk, H, Hkv, D, causal
KVB_CASES = [
    ("kvb_gqa2_q6_k20_d40_causal", 2, 6, 20, 4, 2, 40, 1),
    ("kvb_mha_q16_k48_d64_causal", 1, 16, 48, 4, 4, 64, 1),
    ("kvb_mqa_q5_k9_d64", 1, 5, 9, 4, 1, 64, 0),
]
for name, B, Tq, Tk, H, Hkv, D, causal in KVB_CASES:
    q = rnd(B, Tq, H, D)
    k = rnd(B, Tk, Hkv, D)
    v = rnd(B, Tk, Hkv, D)
    dout = rnd(B, Tq, H, D).detach()
    out, lse = prefix_attention(q, k, v, causal)
    out.backward(dout)
    for key, t in (("q", q), ("k", k), ("v", v), ("dout", dout), ("out", out), ("lse", lse),
                   ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
        np.save(f"attn_{name}_{key}.npy", t.detach().float().numpy())
