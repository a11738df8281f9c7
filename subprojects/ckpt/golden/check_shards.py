"""Checks a saved mt-ckpt iteration with the reference tools (pip safetensors >= 0.4, numpy):
every shard opens with safetensors, its tensors match index.json's slices, CRC32C chunks match,
and the slices reassemble each tensor. Run once on a test output (no randomness):
  MT_CKPT_KEEP=1 build/.../test_ckpt_reshard   # prints the kept directories
  /opt/gv/bin/python check_shards.py DIR/iter_0000005"""
import json, os, sys
import numpy as np
from safetensors.numpy import load_file

def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF

d = sys.argv[1]
ix = json.load(open(os.path.join(d, "index.json")))
chunk = ix["checksum"]["chunk_bytes"]
for name, f in ix["files"].items():
    raw = open(os.path.join(d, name), "rb").read()
    assert len(raw) == f["bytes"], name
    crcs = [crc32c(raw[i:i + chunk]) for i in range(0, len(raw), chunk)]
    assert crcs == f["crc32c"], f"{name}: crc mismatch"
for tname, t in ix["tensors"].items():
    full = None
    for s in t["slices"]:
        arr = load_file(os.path.join(d, s["file"]))[s.get("key", tname)]  # a rank's further boxes: "name#k"
        assert list(arr.shape) == s["lengths"], (tname, arr.shape, s)
        if full is None:
            full = np.zeros(t["shape"], dtype=arr.dtype)
        full[tuple(slice(o, o + n) for o, n in zip(s["offset"], s["lengths"]))] = arr
    print(f"{tname}: {t['dtype']} {t['shape']} from {len(t['slices'])} slice(s) OK")
print("all shards open with safetensors; checksums and slices agree with index.json")
