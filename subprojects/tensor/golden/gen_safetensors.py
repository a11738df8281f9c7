"""safetensors files written by the reference implementation (pip safetensors >= 0.4, torch).
Rerun: /opt/gv/bin/python gen_safetensors.py (from this directory). No randomness."""
import torch
from safetensors.torch import save_file

t = {
    "a.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.25,
    "b.bias": torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16),
    "c.ids": torch.tensor([[1, -2], [3, 2**40]], dtype=torch.int64),
    "d.half": torch.tensor([0.5, -1.0], dtype=torch.float16),
    "e.empty": torch.zeros(0, 5, dtype=torch.float32),
    "f.scalar": torch.tensor(7, dtype=torch.int32),
    "g.double": torch.tensor([1.0, 2.0], dtype=torch.float64),
}
save_file(t, "ref.safetensors", metadata={"format": "pt", "note": "golden"})
