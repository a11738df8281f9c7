"""PyTorch peer of bench_gemm.c: nn.Linear forward (torch.matmul / F.linear), fc1 with bias + GELU
(tanh), and the backward layouts dX = dY @ W and dW = dY^T @ X; bf16, same shapes and names with
/torch/ in place of /cuda/. Writes Google-Benchmark-style JSON to argv[1]."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../bench/peers"))
from common import Results, time_cuda  # noqa: E402

res = Results()
M, K = 16384, 768
for N in (2304, 3072, 50304):
    g = torch.Generator(device="cuda").manual_seed(42)
    x = torch.rand(M, K, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    w = torch.rand(N, K, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    b = torch.rand(N, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    dy = torch.rand(M, N, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    flops = 2.0 * M * N * K
    shape = f"bf16_M{M}_N{N}_K{K}"
    res.add(f"gemm_fwd/torch/{shape}", time_cuda(lambda: torch.matmul(x, w.t())),
            flops_per_iter=flops)
    if N == 3072:
        res.add(f"gemm_fwd_bias_gelu/torch/{shape}",
                time_cuda(lambda: F.gelu(F.linear(x, w, b), approximate="tanh")),
                flops_per_iter=flops)
    res.add(f"gemm_dx/torch/{shape}", time_cuda(lambda: torch.matmul(dy, w)), flops_per_iter=flops)
    res.add(f"gemm_dw/torch/{shape}", time_cuda(lambda: torch.matmul(dy.t(), x)),
            flops_per_iter=flops)
    del x, w, b, dy
    torch.cuda.empty_cache()
# fc2's dX through the GELU backward: (dY @ W) * GELU'(pre), as autograd runs it (dY (M, 768),
# W (768, 3072))
g = torch.Generator(device="cuda").manual_seed(42)
dy = torch.rand(M, 768, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
w = torch.rand(768, 3072, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
pre = torch.rand(M, 3072, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
res.add(f"gemm_dx_dgelu/torch/bf16_M{M}_N768_K3072",
        time_cuda(lambda: torch.ops.aten.gelu_backward(torch.matmul(dy, w), pre,
                                                       approximate="tanh")),
        flops_per_iter=2.0 * M * 768 * 3072)
# decoding: one token's row (bench_gemm.c's M1 cases)
for N, K, gelu in ((2304, 768, False), (3072, 768, True), (50304, 768, False), (6400, 1600, False)):
    g = torch.Generator(device="cuda").manual_seed(42)
    x = torch.rand(1, K, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    w = torch.rand(N, K, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    b = torch.rand(N, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
    shape = f"bf16_M1_N{N}_K{K}"
    if gelu:
        res.add(f"gemm_fwd_bias_gelu/torch/{shape}",
                time_cuda(lambda: F.gelu(F.linear(x, w, b), approximate="tanh")),
                flops_per_iter=2.0 * N * K)
    else:
        res.add(f"gemm_fwd/torch/{shape}", time_cuda(lambda: torch.matmul(x, w.t())),
                flops_per_iter=2.0 * N * K)
res.write()
