#!/usr/bin/env bash
# functional: --log-params-norm prints Megatron's " params norm: X |" field, and X at the last
# iteration is the L2 norm of the weights in the checkpoint saved there (read back with Python).
source "$(dirname "$0")/pretrain_common.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
"$MT_PRETRAIN" "${tiny_args[@]}" "$@" --log-params-norm --save "$d/ck" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
got=$(grep "iteration       12/" "$d/log" | sed -n 's/.*| params norm: \([0-9.]*\) |.*/\1/p')
[ -n "$got" ] || { echo "FAIL: no params norm field"; cat "$d/log"; exit 1; }
want=$(python3 - "$d/ck/iter_0000012" <<'PY'
import glob, json, math, struct, sys
ss = 0.0
for path in glob.glob(sys.argv[1] + "/*.safetensors"):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        base = 8 + n
        for name, t in head.items():
            if name == "__metadata__" or name.startswith("optimizer."):
                continue
            b, e = t["data_offsets"]
            f.seek(base + b)
            raw = f.read(e - b)
            if t["dtype"] == "F32":
                vals = struct.unpack("<%df" % (len(raw) // 4), raw)
            elif t["dtype"] == "BF16":
                vals = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
            else:
                sys.exit("unexpected dtype " + t["dtype"])
            ss += sum(v * v for v in vals)
print("%.3f" % math.sqrt(ss))
PY
)
[ "$got" = "$want" ] || { echo "FAIL: params norm $got, checkpoint weights $want"; exit 1; }
echo "ok: params norm $got equals the checkpoint's $want"
