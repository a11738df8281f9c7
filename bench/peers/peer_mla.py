"""PyTorch peer of bench/mla.sh: one training step of Hugging Face's DeepseekV3ForCausalLM with
every layer's MLP dense (first_k_dense_replace = layers; multi-latent attention, default RoPE,
bf16 weights and activations, SDPA attention), fused AdamW, on random tokens; FLOPs by Megatron's
MLA formula so the ratio to mt-pretrain is the tokens/s ratio.
Usage: peer_mla.py OUT.json name:layers:hidden:heads:q_lora:kv_lora:qk_head:qk_pos:v_head:ffn:vocab:micro_batch ..."""
import sys

import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

from common import Results, free_memory, report, time_train_step

T = 1024


def flops(L, h, nh, qr, kr, dn, dr, dv, f, V, gbs):
    """megatron/training/training.py num_floating_point_operations, MLA and dense SwiGLU MLPs."""
    q = qr * (h + nh * (dn + dr) + 1) if qr else h * nh * (dn + dr)
    attn = q + kr * (h + nh * (dn + dv) + 1) + h * dr + nh * dv * h
    core = T * (nh * (dn + dr) / 2 + nh * dv / 2)
    tok = gbs * T
    return tok * (3 * 2 * L * (attn + core) + 3 * 2 * h * f * 3 * L + 3 * 2 * h * V)


res = Results()
for case in sys.argv[2:]:
    name, *dims = case.split(":")
    L, H, NH, QR, KR, DN, DR, DV, F, V, MB = map(int, dims)
    cfg = DeepseekV3Config(vocab_size=V, hidden_size=H, intermediate_size=F, num_hidden_layers=L,
                           num_attention_heads=NH, num_key_value_heads=NH,
                           q_lora_rank=QR or None, kv_lora_rank=KR, qk_nope_head_dim=DN,
                           qk_rope_head_dim=DR, v_head_dim=DV, first_k_dense_replace=L,
                           max_position_embeddings=T, rms_norm_eps=1e-6,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                           rope_interleave=True, tie_word_embeddings=False,
                           attn_implementation="sdpa")
    with torch.device("cuda"):
        model = DeepseekV3ForCausalLM(cfg).to(torch.bfloat16)
    x = torch.randint(0, V, (MB, T), device="cuda")
    report(res, f"mla/torch/{name}_B{MB}_T1024", name, x, time_train_step(model, x),
           flops(L, H, NH, QR, KR, DN, DR, DV, F, V, MB))
    del model
    free_memory()
res.write(sys.argv[1])
