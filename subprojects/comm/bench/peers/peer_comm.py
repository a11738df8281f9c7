"""torch.distributed peer of bench_comm.c: NCCL all-reduce, all-gather and reduce-scatter (f32,
sum), 8 B to 256 MiB, size = the full buffer as in nccl-tests; algbw and busbw with nccl-tests'
factors. Each time is the slowest rank's median (CUDA events).
Usage: torchrun --nproc-per-node N peer_comm.py OUT.json   (rank 0 writes OUT.json)"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../bench/peers"))
from common import Results, time_cuda  # noqa: E402

dist.init_process_group("nccl")
rank, n = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
res = Results()
for op in ("allreduce", "allgather", "reduce_scatter"):
    b = 8
    while b <= 256 << 20:
        per = max(1, b // 4 // (1 if op == "allreduce" else n))
        total = per if op == "allreduce" else per * n
        big, small = torch.zeros(total, device="cuda"), torch.zeros(per, device="cuda")
        out = torch.empty_like(big)
        fn = {"allreduce": lambda: dist.all_reduce(big),
              "allgather": lambda: dist.all_gather_into_tensor(out, small),
              "reduce_scatter": lambda: dist.reduce_scatter_tensor(small, big)}[op]
        ms = torch.tensor([time_cuda(fn)], device="cuda")
        dist.all_reduce(ms, op=dist.ReduceOp.MAX)
        size = total * 4
        busfac = 2 * (n - 1) / n if op == "allreduce" else (n - 1) / n
        res.add(f"{op}/torch/n{n}_{b}B", ms.item(), bytes_per_iter=size)
        res.rows[-1]["algbw"] = size / (ms.item() * 1e-3)
        res.rows[-1]["busbw"] = size * busfac / (ms.item() * 1e-3)
        b *= 2
if rank == 0:
    res.write()
dist.destroy_process_group()
