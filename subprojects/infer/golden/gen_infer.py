"""Goldens of test_infer: transformers' sampling warpers (TemperatureLogitsWarper, TopKLogitsWarper,
TopPLogitsWarper, in generate()'s order) and the softmax after them, for random logits (6 rows of
64, one with tied values at the top-k boundary), under several settings; greedy (temperature 0) is
argmax. Files: logits.npy (6, 64) f32, configs.npy (C, 3) f64 (temperature, top_k, top_p),
probs.npy (C, 6, 64) f64.
Versions: torch (CPU), transformers 5.24.0. Seed 11. Rerun from this directory: python3 gen_infer.py"""
import numpy as np
import torch
from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)

torch.manual_seed(11)
R, V = 6, 64
logits = (torch.randn(R, V) * 2.5).float()
logits[5, :8] = 3.0  # ties: top_k 5 keeps all 8 equal values
configs = [(1.0, 0, 0.0), (0.7, 0, 0.0), (1.0, 5, 0.0), (1.0, 0, 0.9), (0.8, 10, 0.95),
           (1.3, 3, 0.5), (1.0, 64, 0.3), (2.0, 20, 0.0), (0.0, 0, 0.0), (1.0, 1, 0.0)]
probs = []
for t, k, p in configs:
    s = logits.double().clone()
    if t == 0.0 or k == 1:  # generate(do_sample=False): argmax
        pr = torch.zeros_like(s)
        pr[torch.arange(R), s.argmax(-1)] = 1.0
        probs.append(pr.numpy())
        continue
    s = TemperatureLogitsWarper(t)(None, s)
    if k > 0:
        s = TopKLogitsWarper(k)(None, s)
    if 0.0 < p < 1.0:
        s = TopPLogitsWarper(p)(None, s)
    probs.append(torch.softmax(s, -1).numpy())
np.save("logits.npy", logits.numpy())
np.save("configs.npy", np.array(configs, dtype=np.float64))
np.save("probs.npy", np.stack(probs))
print("kept per config:", [(c, int((pr > 0).sum())) for c, pr in zip(configs, probs)])
