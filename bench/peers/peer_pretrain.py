"""PyTorch peer of bench/pretrain.sh: one training step of Hugging Face's GPT2LMHeadModel in bf16
(weights and activations, SDPA attention), fused AdamW, on random tokens; FLOPs by Megatron's
formula so the ratio to mt-pretrain is the tokens/s ratio.
Usage: peer_pretrain.py OUT.json name:layers:hidden:heads:micro_batch ..."""
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from common import Results, free_memory, report, time_train_step

T, V, VP = 1024, 50257, 50304


def flops(L, h, gbs):
    tok = gbs * T
    return tok * (3 * 2 * h * 4 * h * 2 * L + 3 * 2 * (h * 3 * h + h * h) * L + 3 * 2 * h * VP) \
        + gbs * T * T * 3 * 2 * h / 2 * 2 * L


res = Results()
for case in sys.argv[2:]:
    name, L, H, NH, MB = case.split(":")
    L, H, NH, MB = int(L), int(H), int(NH), int(MB)
    cfg = GPT2Config(vocab_size=VP, n_positions=T, n_embd=H, n_layer=L, n_head=NH, resid_pdrop=0,
                     embd_pdrop=0, attn_pdrop=0, attn_implementation="sdpa")
    with torch.device("cuda"):  # initialise on the GPU: the 1.5B model takes minutes on the CPU
        model = GPT2LMHeadModel(cfg).to(torch.bfloat16)
    x = torch.randint(0, V, (MB, T), device="cuda")
    report(res, f"pretrain/torch/{name}_B{MB}_T1024", name, x, time_train_step(model, x),
           flops(L, H, MB))
    del model
    free_memory()
res.write(sys.argv[1])
