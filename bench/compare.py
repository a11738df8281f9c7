#!/usr/bin/env python3
"""Reads Google-Benchmark JSON files (ours: op/cuda/shape; PyTorch peers: op/torch*/shape) from a
directory and prints one markdown table: our rate, each peer's rate and the ratio, and for
byte-counted benchmarks the fraction of the device-to-device copy bandwidth (copy/cuda/1GiB) of the
same run. Optional --baseline FILE flags regressions (> 5% slower than the same device kind)."""
import argparse
import glob
import json
import os


def load(d):
    rows = {}
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        try:
            data = json.load(open(path))
        except (OSError, ValueError):
            continue
        for b in data.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
                continue
            name = b["name"]
            for suffix in ("/manual_time", "/real_time", "/process_time"):
                name = name.removesuffix(suffix)  # Google Benchmark's timing suffixes
            rows[name] = b
    return rows


def rate(b):
    if "FLOPS" in b:
        return b["FLOPS"] / 1e12, "TFLOP/s"
    if "bytes_per_second" in b:
        return b["bytes_per_second"] / 1e9, "GB/s"
    if "tokens_per_second" in b:  # (generation: bench/generate.sh)
        return b["tokens_per_second"] / 1e3, "ktokens/s"
    return None, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--device", default="")
    ap.add_argument("--json")
    ap.add_argument("--baseline")
    a = ap.parse_args()
    rows = load(a.dir)
    copy = rows.get("copy/cuda/1GiB", {}).get("bytes_per_second")
    base = json.load(open(a.baseline)) if a.baseline and os.path.exists(a.baseline) else {}
    out = []
    print(f"device: {a.device}; copy bandwidth: {copy / 1e9:.0f} GB/s" if copy else
          f"device: {a.device}; copy bandwidth: not measured")
    print("| benchmark | ours | unit | peer | peer rate | ratio | % copy bw | vs baseline |")
    print("|---|---|---|---|---|---|---|---|")
    for name, b in sorted(rows.items()):
        parts = name.split("/")
        if len(parts) < 3 or parts[1] != "cuda":
            continue
        r, unit = rate(b)
        if r is None:
            continue
        peers = [(k.split("/")[1], rate(v)[0]) for k, v in rows.items()
                 if k.split("/")[0] == parts[0] and k.split("/")[1].startswith("torch")
                 and "/".join(k.split("/")[2:]) == "/".join(parts[2:])]
        frac = f"{100 * b['bytes_per_second'] / copy:.0f}%" if copy and unit == "GB/s" else ""
        reg = ""
        if name in base and base[name]:
            reg = f"{r / base[name]:.2f}x" + (" REGRESSION" if r < 0.95 * base[name] else "")
        entry = {"name": name, "rate": r, "unit": unit, "copy_fraction": frac, "peers": {}}
        for pname, pr in (peers or [("-", None)]):
            ratio = f"{r / pr:.2f}" if pr else ""
            if pr:
                entry["peers"][pname] = pr
            print(f"| {name} | {r:.1f} | {unit} | {pname} | {pr or 0:.1f} | {ratio} | {frac} | {reg} |")
        out.append(entry)
    if a.json:
        json.dump({"device": a.device, "copy_GBps": copy and copy / 1e9, "rows": out},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
