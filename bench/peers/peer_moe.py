"""PyTorch peer of bench/moe.sh: one training step of Hugging Face's MixtralForCausalLM in bf16
(weights and activations, SDPA attention, transformers' default experts implementation on the
GPU, its load-balancing loss on as ours), fused AdamW, on random tokens; FLOPs by Megatron's
formula (top-k experts a token) so the ratio to mt-pretrain is the tokens/s ratio.
Usage: peer_moe.py OUT.json name:layers:hidden:heads:groups:expert_ffn:experts:topk:vocab:micro_batch ..."""
import sys

import torch
from transformers import MixtralConfig, MixtralForCausalLM

from common import Results, free_memory, report, time_train_step

T = 1024


def flops(L, h, nh, g, f, k, V, gbs):
    d = h // nh
    q, kv = d * nh, d * g
    tok = gbs * T
    return tok * (3 * 2 * h * f * k * 3 * L + 3 * 2 * (h * (q + 2 * kv) + q * h) * L
                  + 3 * 2 * h * V) + gbs * T * T * 3 * 2 * q / 2 * 2 * L


res = Results()
for case in sys.argv[2:]:
    name, L, H, NH, G, F, E, K, V, MB = case.split(":")
    L, H, NH, G, F, E, K, V, MB = map(int, (L, H, NH, G, F, E, K, V, MB))
    cfg = MixtralConfig(vocab_size=V, hidden_size=H, intermediate_size=F, num_hidden_layers=L,
                        num_attention_heads=NH, num_key_value_heads=G, max_position_embeddings=T,
                        num_local_experts=E, num_experts_per_tok=K, tie_word_embeddings=False,
                        router_aux_loss_coef=0.01, output_router_logits=True,
                        attn_implementation="sdpa")
    with torch.device("cuda"):
        model = MixtralForCausalLM(cfg).to(torch.bfloat16)
    impl = getattr(model.config, "_experts_implementation", None)
    x = torch.randint(0, V, (MB, T), device="cuda")
    report(res, f"moe/torch/{name}_B{MB}_T1024", name, x, time_train_step(model, x),
           flops(L, H, NH, G, F, K, V, MB), f" (experts: {impl})")
    del model
    free_memory()
res.write(sys.argv[1])
