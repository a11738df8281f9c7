"""Golden values for mt_dropout, from an independent Philox4x32-10 (randomgen's) and PyTorch's
float32 arithmetic. randomgen >= 2.0, torch, numpy. Rerun: python gen_dropout.py (from this
directory). The rule (core's philox.h, mt_dropout_config): element e of sample id s is kept iff
word e % 4 of Philox4x32-10 with key (seed lo, seed hi) and counter (e // 4 as 64 bits, site << 32
| s as 64 bits) is below floor((1 - p) * 2**32); kept values are scaled by 1/(1-p) as a float."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../core/tools"))
import philox_ref  # noqa: E402 (randomgen's Philox)


gen = torch.Generator().manual_seed(1234)
seed, site = 0x1234_5678_9ABC, 5
ids = np.array([7, 123456789012, 3], dtype=np.int64)
for E in (40, 37):  # 40: the CUDA vector path; 37: rows that are not groups of 8
    x = torch.randn(len(ids), E, generator=gen, dtype=torch.float32)
    r = torch.randn(len(ids), E, generator=gen, dtype=torch.float32)
    np.save(f"drop_x_{E}.npy", x.numpy())
    np.save(f"drop_resid_{E}.npy", r.numpy())
    for p, tag in ((0.1, "p10"), (0.5, "p50")):
        m = torch.from_numpy(philox_ref.keep(seed, site, ids, E, p))
        scale = torch.tensor(1.0 / (1.0 - float(np.float32(p))), dtype=torch.float32)
        y = x * torch.where(m, scale, torch.zeros((), dtype=torch.float32))
        np.save(f"drop_{tag}_{E}.npy", y.numpy())
        np.save(f"drop_{tag}_resid_{E}.npy", (r + y).numpy())
np.save("drop_ids.npy", ids)
