"""Golden values for elementwise ops and casts, from PyTorch (CPU).
torch >= 2.4, numpy; seed 1234. Rerun: /opt/gv/bin/python gen_elementwise.py (from this directory).
Casts: torch's float32 -> bfloat16/float16 conversions (round to nearest even) on awkward values."""
import numpy as np
import torch

g = torch.Generator().manual_seed(1234)
x = torch.randn(7, 13, generator=g, dtype=torch.float64)
y = torch.randn(7, 13, generator=g, dtype=torch.float64)
np.save("ew_x.npy", x.numpy())
np.save("ew_y.npy", y.numpy())
np.save("ew_add.npy", (x + y).numpy())
np.save("ew_scale_0.37.npy", (0.37 * x).numpy())
np.save("ew_axpy_m1.5.npy", (y - 1.5 * x).numpy())

# awkward float32 values: ties, subnormals, overflow, signed zero, inf/nan
vals = [0.0, -0.0, 1.0, -1.0, 1.00390625, 1.01171875, 1.0078125, 3.14159265, 65504.0, 65520.0,
        1e-8, 6e-8, 3e-5, 6.1e-5, 1e-40, -2.5e-42, 3.4e38, float("inf"), float("-inf"), 1e30,
        -123.456, 0.1, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26]
vals += torch.randn(200, generator=g, dtype=torch.float32).mul(100).tolist()
f = torch.tensor(vals, dtype=torch.float32)
np.save("cast_f32.npy", f.numpy())
np.save("cast_bf16_bits.npy", f.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))
np.save("cast_f16_bits.npy", f.to(torch.float16).view(torch.int16).numpy().view(np.uint16))
