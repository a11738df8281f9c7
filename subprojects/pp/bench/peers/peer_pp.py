"""Peer of bench_pp: Megatron's 1F1B point-to-point pattern in PyTorch (p2p_communication's
batch_isend_irecv, each send posted with the receive that follows it, waited on at once) with empty
stages, bf16 tensors over NCCL, the same schedule and sizes.
  torchrun --nproc_per_node P peer_pp.py [elements micro_batches]   (one JSON line, rank 0)"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

if "RANK" not in os.environ:  # ci/device runs every peer alone: this one needs torchrun's ranks
    print("peer_pp: run it under torchrun --nproc_per_node P (see bench_pp.c)")
    sys.exit(0)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 8 * 1024 * 768
M = int(sys.argv[2]) if len(sys.argv) > 2 else 8
dist.init_process_group("nccl")
r, P = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", r)))
slots = P - r
ins = [torch.zeros(n, dtype=torch.bfloat16, device="cuda") for _ in range(slots)]
out = torch.zeros(n, dtype=torch.bfloat16, device="cuda")
g = torch.zeros(n, dtype=torch.bfloat16, device="cuda")
prev, nxt = (r - 1 if r > 0 else None), (r + 1 if r < P - 1 else None)


def p2p(send, to, recv, frm):
    ops = []
    if send is not None:
        ops.append(dist.P2POp(dist.isend, send, to))
    if recv is not None:
        ops.append(dist.P2POp(dist.irecv, recv, frm))
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()


def step():
    warm = min(P - r - 1, M)
    f = 0
    first, last = prev is None, nxt is None
    for _ in range(warm):
        p2p(None, None, None if first else ins[f % slots], prev)
        p2p(None if last else out, nxt, None, None)
        f += 1
    if M > warm:
        p2p(None, None, None if first else ins[f % slots], prev)
    for i in range(M - warm):
        p2p(None if last else out, nxt, None if last else g, nxt)
        more = i + 1 < M - warm
        p2p(None if first else g, prev, ins[(f + 1) % slots] if more and not first else None, prev)
        f += 1
    for _ in range(warm):
        p2p(None, None, None if last else g, nxt)
        p2p(None if first else g, prev, None, None)


for _ in range(5):
    step()
torch.cuda.synchronize()
dist.barrier()
t = time.perf_counter()
for _ in range(20):
    step()
torch.cuda.synchronize()
dist.barrier()
ms = (time.perf_counter() - t) * 1e3 / 20
if r == 0:
    print(json.dumps({"bench": "pp_1f1b_torch", "stages": P, "micro_batches": M, "bytes": n * 2,
                      "ms": round(ms, 4)}))
dist.destroy_process_group()
