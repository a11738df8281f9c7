"""Writes .npy files with NumPy itself, so the reader is checked against the real writer.
numpy >= 1.24; no randomness. Rerun: python3 gen_npy.py (from this directory)."""
import numpy as np

np.save("arange_f8_3x5.npy", (np.arange(15, dtype=np.float64) * 0.5 - 3).reshape(3, 5))
np.save("values_f2_7.npy", np.array([0, 1, -2.5, 65504, 2**-24, 1 / 3, -0.0], dtype=np.float16))
np.save("scalar_i8.npy", np.array(-7, dtype=np.int64))
