"""Tiny random GPT-2, Llama (GQA) and Mixtral models written by transformers' save_pretrained,
the fixtures of mt-convert's round-trip test. Rerun from this directory:
  /opt/gv/bin/python gen_hf_ckpt.py
Versions: torch (CPU), transformers 5.23.0, safetensors. Seed 1234 per model. Each model is saved
as sharded safetensors (max_shard_size small, so model.safetensors.index.json is written); the
Mixtral model is also written fused, as transformers 5 holds it in memory (mixtral_fused/)."""
import json, os, shutil
import torch
import transformers
from safetensors.torch import save_file
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          MixtralConfig, MixtralForCausalLM)

def save(model, name):
    shutil.rmtree(name, ignore_errors=True)
    model.save_pretrained(name, max_shard_size="20KB")
    for f in os.listdir(name):
        if f not in ("config.json", "model.safetensors.index.json") and not f.endswith(".safetensors"):
            os.remove(os.path.join(name, f))

torch.manual_seed(1234)
save(GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=4)),
     "gpt2")
torch.manual_seed(1234)
save(LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=64)), "llama")
torch.manual_seed(1234)
m = MixtralForCausalLM(MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=24,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=64))
save(m, "mixtral")
# transformers 5 saves Mixtral in the hub's per-expert layout (experts.{e}.w1/w2/w3,
# block_sparse_moe.gate) but holds it fused in memory (mlp.experts.gate_up_proj (E,2I,H) gate then
# up, mlp.experts.down_proj (E,H,I), router mlp.gate): mixtral_fused/ is that state dict as is.
shutil.rmtree("mixtral_fused", ignore_errors=True)
os.makedirs("mixtral_fused")
save_file({k: v.contiguous() for k, v in m.state_dict().items()},
          "mixtral_fused/model.safetensors", metadata={"format": "pt"})
shutil.copy("mixtral/config.json", "mixtral_fused/config.json")
print("transformers", transformers.__version__, "torch", torch.__version__)
