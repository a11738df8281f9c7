#!/usr/bin/env python3
"""Golden values of multi-token prediction (Megatron's --mtp-num-layers) from megatron-core itself.

Builds megatron.core's GPTModel with its MTP block (get_gpt_mtp_block_spec over the local layer
spec) on the CPU in float64, with random weights (the norms' weights and the biases too, so that
a mix-up of enorm, hnorm and final_layernorm shows), and records for test_hf_golden, in our
names and layouts (linear_qkv's rows q heads | k heads | v heads, not megatron.core's per-group
interleave):
  <m>_weights.safetensors  the f32 weights
  <m>_io.safetensors       tokens, targets (i32; -100: ignored), the decoder's logits (B*T x V)
                           and mean loss, mtp_losses (each depth's mean loss, as megatron.core's
                           MTPLossLoggingHelper tracks it)
  <m>_grads.safetensors    the gradient of the training loss: the decoder's mean loss plus
                           mtp_loss_scaling_factor / D times each depth's (MTPLossAutoScaler)
  <m>_pos.safetensors      (learned positions only) with position ids restarting inside the
                           sequences: position_ids, logits, loss, mtp_losses, "grad.<name>"
Models: mtp_llama (RMSNorm, SwiGLU, 4 heads in 2 query groups, RoPE, untied, no biases; 2
depths, factor 0.3), mtp_gpt2 (LayerNorm, tanh GELU, learned positions, tied, biases; 1
depth, factor 0.5) and mtp_moe (mtp_llama's with Mixtral's MoE MLPs: 4 experts of SwiGLU 32,
top-2, the load-balancing loss at 0.01; 1 depth, itself MoE as the last layer, factor 0.3).
megatron-core needs CUDA for a few calls that do not matter here: torch.cuda.current_device
is pointed at the CPU and the model-parallel RNG tracker's fork is a no-op (no dropout); without
Transformer Engine its router's GEMM reads an undefined te_general_gemm, set to None.
Versions: torch 2.15.0 (CPU), megatron-core 0.16.1 (pip, --no-deps). Rerun from this directory:
python gen_mtp.py
"""
import contextlib
import os
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
import torch  # noqa: E402

torch.cuda.current_device = lambda: torch.device("cpu")
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

torch.distributed.init_process_group("gloo", rank=0, world_size=1)
from megatron.core import parallel_state  # noqa: E402

parallel_state.initialize_model_parallel(1, 1)
import megatron.core.transformer.moe.moe_utils as moe_utils  # noqa: E402
import megatron.core.transformer.multi_token_prediction as mtp_mod  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import (  # noqa: E402
    get_gpt_layer_local_spec, get_gpt_mtp_block_spec)
from megatron.core.models.gpt.gpt_model import GPTModel  # noqa: E402
from megatron.core.tensor_parallel import random as tp_random  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

tp_random.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
moe_utils.te_general_gemm = None
TRACKED = {}


def track(loss, layer_number, num_layers, reduce_group=None, avg_group=None):
    TRACKED[layer_number] = loss.detach().clone()


mtp_mod.MTPLossLoggingHelper.save_loss_to_tracker = staticmethod(track)

B, T, V = 2, 16, 500
torch.manual_seed(1)
tokens = torch.randint(0, V, (B, T))
targets = torch.roll(tokens, -1, dims=1)
targets[0, -1] = -100  # ignored tokens
targets[1, 3] = -100
position_ids = torch.stack([torch.cat([torch.arange(6), torch.arange(6), torch.arange(4)]),
                            torch.cat([torch.arange(9), torch.arange(7)])])


def build(llama, D, factor, moe=False):
    torch.manual_seed(0)
    experts = dict(num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=32,
                   moe_aux_loss_coeff=0.01, moe_token_dispatcher_type="allgather",
                   moe_router_dtype="fp64") if moe else {}
    act = F.silu if llama else (lambda x: F.gelu(x, approximate="tanh"))
    norm = "RMSNorm" if llama else "LayerNorm"
    cfg = TransformerConfig(
        num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2 if llama else 4,
        ffn_hidden_size=128 if llama else 256, use_cpu_initialization=True, normalization=norm,
        gated_linear_unit=llama, activation_func=act, add_bias_linear=not llama,
        hidden_dropout=0.0, attention_dropout=0.0, layernorm_epsilon=1e-5,
        mtp_num_layers=D, mtp_loss_scaling_factor=factor, params_dtype=torch.float64, **experts)
    spec = get_gpt_layer_local_spec(normalization=norm, num_experts=4 if moe else None,
                                    moe_grouped_gemm=False)
    model = GPTModel(cfg, spec, vocab_size=V, max_sequence_length=32,
                     position_embedding_type="rope" if llama else "learned_absolute",
                     share_embeddings_and_output_weights=not llama,
                     mtp_block_spec=get_gpt_mtp_block_spec(cfg, spec, use_transformer_engine=False))
    model = model.double()
    with torch.no_grad():  # every parameter random, the norms around 1
        for n, p in model.named_parameters():
            if "norm" in n and n.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.02 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))
    return model, cfg


def ours(name, t, cfg):
    """Our name's tensor: linear_qkv's rows from megatron.core's per-group [q heads, k, v]."""
    if "linear_qkv" not in name:
        return t
    G, H = cfg.num_query_groups, cfg.num_attention_heads
    d, n = cfg.kv_channels, H // G
    g = t.reshape(G, (n + 2) * d, *t.shape[1:])
    q = g[:, :n * d].reshape(H * d, *t.shape[1:])
    return torch.cat([q, g[:, n * d:(n + 1) * d].reshape(G * d, *t.shape[1:]),
                      g[:, (n + 1) * d:].reshape(G * d, *t.shape[1:])])


def named(model, cfg, grads):
    out = {}
    for n, p in model.named_parameters():
        t = p.grad if grads else p.detach()
        out[n] = ours(n, t, cfg).float().contiguous()
    return out


def run(model, cfg, pos):
    """The decoder's logits and mean loss, and the training loss's backward."""
    TRACKED.clear()
    logits = []
    h = model.output_layer.register_forward_hook(lambda mod, i, o: logits.append(o[0]))
    mask = (targets != -100).double()
    labels = targets.clamp(min=0)
    causal = torch.triu(torch.ones(1, 1, T, T, dtype=torch.bool), 1)
    per_token = model(tokens, pos, causal, labels=labels, loss_mask=mask)
    h.remove()
    loss = (per_token * mask).sum() / mask.sum()
    model.zero_grad()
    loss.backward()  # (with the MTP depths' losses, through MTPLossAutoScaler)
    mtp = torch.stack([TRACKED[k] for k in range(cfg.mtp_num_layers)])
    lg = logits[-1].transpose(0, 1).reshape(B * T, V)  # (the decoder's: the output layer's last)
    return lg.detach().float().contiguous(), loss.detach().float().reshape(1), mtp.float()


def record(tag, llama, D, factor, moe=False):
    model, cfg = build(llama, D, factor, moe)
    save_file(named(model, cfg, False), f"{tag}_weights.safetensors")
    pos0 = torch.arange(T).unsqueeze(0).expand(B, T)
    logits, loss, mtp = run(model, cfg, pos0)
    save_file(named(model, cfg, True), f"{tag}_grads.safetensors")
    save_file({"tokens": tokens.int().contiguous(), "targets": targets.int().contiguous(),
               "logits": logits, "loss": loss, "mtp_losses": mtp}, f"{tag}_io.safetensors")
    print(tag, "loss", loss.item(), "mtp", mtp.tolist())
    if llama:  # (megatron.core's RoPE ignores position ids)
        return
    plogits, ploss, pmtp = run(model, cfg, position_ids)
    rec = {"grad." + k: v for k, v in named(model, cfg, True).items()}
    rec.update({"position_ids": position_ids.int().contiguous(), "logits": plogits,
                "loss": ploss, "mtp_losses": pmtp})
    save_file(rec, f"{tag}_pos.safetensors")
    print(tag, "with positions: loss", ploss.item(), "mtp", pmtp.tolist())


record("mtp_llama", True, 2, 0.3)
record("mtp_gpt2", False, 1, 0.5)
record("mtp_moe", True, 1, 0.3, moe=True)
