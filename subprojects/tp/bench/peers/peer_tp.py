"""Peer of bench_tp: Megatron's tensor-parallel MLP in PyTorch (ColumnParallelLinear with GELU,
RowParallelLinear; the mappings' all-reduce, all-gather and reduce-scatter as autograd functions),
forward and backward in bf16 with fp32 weight gradients accumulated (main_grad), over NCCL.
  torchrun --nproc_per_node N peer_tp.py [tokens hidden ffn]   (one JSON line a case, rank 0)"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

if "RANK" not in os.environ:  # ci/device runs every peer alone: this one needs torchrun's ranks
    print("peer_tp: run it under torchrun --nproc_per_node N (see bench_tp.c)")
    sys.exit(0)
N, C, FF = (int(a) for a in (sys.argv[1:4] if len(sys.argv) > 3 else (8192, 1600, 6400)))
dist.init_process_group("nccl")
rank, n = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
dev = torch.device("cuda")


class CopyToTP(torch.autograd.Function):  # identity forward, all-reduce backward
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g)
        return g


class ReduceFromTP(torch.autograd.Function):  # all-reduce forward, identity backward
    @staticmethod
    def forward(ctx, x):
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class GatherSP(torch.autograd.Function):  # all-gather forward, reduce-scatter backward
    @staticmethod
    def forward(ctx, x):
        out = torch.empty((x.shape[0] * n,) + x.shape[1:], dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x.contiguous())
        return out

    @staticmethod
    def backward(ctx, g):
        out = torch.empty((g.shape[0] // n,) + g.shape[1:], dtype=g.dtype, device=g.device)
        dist.reduce_scatter_tensor(out, g.contiguous())
        return out


class ScatterSP(torch.autograd.Function):  # reduce-scatter forward, all-gather backward
    @staticmethod
    def forward(ctx, x):
        out = torch.empty((x.shape[0] // n,) + x.shape[1:], dtype=x.dtype, device=x.device)
        dist.reduce_scatter_tensor(out, x.contiguous())
        return out

    @staticmethod
    def backward(ctx, g):
        out = torch.empty((g.shape[0] * n,) + g.shape[1:], dtype=g.dtype, device=g.device)
        dist.all_gather_into_tensor(out, g.contiguous())
        return out


def param(*shape):
    return (torch.randn(*shape, device=dev) * 0.02).to(torch.bfloat16).requires_grad_(True)


w1, b1, w2, b2 = param(FF // n, C), param(FF // n), param(C, FF // n), param(C)
main = [torch.zeros(p.shape, dtype=torch.float32, device=dev) for p in (w1, b1, w2, b2)]
for sp in (0, 1):
    rows = N // n if sp else N
    x = torch.randn(rows, C, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(rows, C, device=dev, dtype=torch.bfloat16)

    def step():
        xin = GatherSP.apply(x) if sp else CopyToTP.apply(x)
        h = F.gelu(F.linear(xin, w1, b1), approximate="tanh")
        y = F.linear(h, w2)
        y = ScatterSP.apply(y) if sp else ReduceFromTP.apply(y)
        y = y + b2
        y.backward(dy)
        for m, p in zip(main, (w1, b1, w2, b2)):  # main_grad accumulation in fp32
            m.add_(p.grad)
            p.grad = None

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    t = time.perf_counter()
    iters = 30
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t) * 1e3 / iters
    tflops = 6.0 * 2.0 * N * C * FF / n / (ms * 1e-3) / 1e12
    if rank == 0:
        print(json.dumps({"bench": "tp_mlp_torch", "tp": n, "sp": sp, "tokens": N, "hidden": C,
                          "ffn": FF, "ms": round(ms, 4), "tflops_per_gpu": round(tflops, 1)}))
dist.destroy_process_group()
