"""Golden loss scales from megatron-core's DynamicGradScaler (pip megatron-core 0.16.1, torch
2.15, CPU: torch.tensor's device argument is dropped). Rerun: /opt/gv/bin/python gen_scaler.py.
initial 256, min 16, growth x2, backoff x0.5, window 4, hysteresis 2; found_inf pattern below
(also in tests/test_scaler.c). scaler_scale.npy [len(PATTERN)]: the scale after each update."""
import numpy as np
import torch

_tensor = torch.tensor
torch.tensor = lambda *a, **k: _tensor(*a, **{x: y for x, y in k.items() if x != "device"})
from megatron.core.optimizer.grad_scaler import DynamicGradScaler  # noqa: E402

PATTERN = "0000000011010111110000000001111111111111100001000010"
s = DynamicGradScaler(initial_scale=256.0, min_scale=16.0, growth_factor=2.0, backoff_factor=0.5,
                      growth_interval=4, hysteresis=2)
out = []
for c in PATTERN:
    s.update(c == "1")
    out.append(float(s.scale))
np.save("scaler_scale.npy", np.array(out))
