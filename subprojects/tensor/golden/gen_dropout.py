"""Golden values for mt_dropout, from an independent Philox4x32-10 (randomgen's) and PyTorch's
float32 arithmetic. randomgen >= 2.0, torch, numpy. Rerun: python gen_dropout.py (from this
directory). The rule (core's philox.h, mt_dropout_config): element e of sample id s is kept iff
word e % 4 of Philox4x32-10 with key (seed lo, seed hi) and counter (e // 4 as 64 bits, site << 32
| s as 64 bits) is below floor((1 - p) * 2**32); kept values are scaled by 1/(1-p) as a float."""
import numpy as np
import torch
from randomgen import Philox


def words(seed, stream, nblocks):
    """The 4 * nblocks words of blocks 0.. of `stream` (randomgen steps the 128-bit counter by one
    before each block, so it starts one below)."""
    g = Philox(number=4, width=32)
    st = g.state
    ctr = ((stream << 64) - 1) % (1 << 128)
    st["state"]["counter"] = np.array([(ctr >> (32 * i)) & 0xFFFFFFFF for i in range(4)], np.uint32)
    st["state"]["key"] = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)
    st["buffer_pos"] = 4
    g.state = st
    return np.array(g.random_raw(4 * nblocks), dtype=np.uint64).astype(np.uint32)


def mask(seed, site, ids, E, p):
    p32 = np.float32(p)
    thr = min(int((1.0 - float(p32)) * 2.0**32), 2**32 - 1)
    rows = []
    for s in ids:
        stream = (site << 32) | (int(s) & 0xFFFFFFFF)
        w = words(seed, stream, (E + 3) // 4)[:E]
        rows.append(w.astype(np.uint64) < thr)
    return np.array(rows)


gen = torch.Generator().manual_seed(1234)
seed, site = 0x1234_5678_9ABC, 5
ids = np.array([7, 123456789012, 3], dtype=np.int64)
for E in (40, 37):  # 40: the CUDA vector path; 37: rows that are not groups of 8
    x = torch.randn(len(ids), E, generator=gen, dtype=torch.float32)
    r = torch.randn(len(ids), E, generator=gen, dtype=torch.float32)
    np.save(f"drop_x_{E}.npy", x.numpy())
    np.save(f"drop_resid_{E}.npy", r.numpy())
    for p, tag in ((0.1, "p10"), (0.5, "p50")):
        m = torch.from_numpy(mask(seed, site, ids, E, p))
        scale = torch.tensor(1.0 / (1.0 - float(np.float32(p))), dtype=torch.float32)
        y = x * torch.where(m, scale, torch.zeros((), dtype=torch.float32))
        np.save(f"drop_{tag}_{E}.npy", y.numpy())
        np.save(f"drop_{tag}_resid_{E}.npy", (r + y).numpy())
np.save("drop_ids.npy", ids)
