"""Golden values for libs/model from Hugging Face transformers (independent reference).
Builds tiny random GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
MixtralForCausalLM, Qwen2MoeForCausalLM and DeepseekV3ForCausalLM models, runs them in float64 on
the CPU and records, in our parameter names and layouts (nn.Linear (out, in); GPT-2's Conv1D
transposed; Llama q|k|v and gate|up concatenated, HF's half-split RoPE kept; DeepSeek-V3's MLA
projections as HF's, deepseek_names):
  <m>_weights.safetensors  the f32 weights the test loads (DeepSeek-V3's router expert_bias, a
                           buffer, only here)
  <m>_grads.safetensors    d(mean loss)/d(weight), f32
  <m>_io.safetensors       tokens, targets (i32), logits (f32, B*T x V), loss (f32)
  <m>_pos.safetensors      with position ids that restart inside the sequences (Megatron's
                           --reset-position-ids): position_ids (i32), logits, loss and, as
                           "grad.<name>", every gradient
  <m>_drop.safetensors     (gpt2: hidden and attention dropout 0.1; llama: attention dropout 0.1,
                           HF's Llama has no hidden dropout) in training mode with the masks of
                           mt_dropout's rule (DROP_SEED, sample ids DROP_IDS) from randomgen's
                           Philox, put in place of torch's dropout: loss and "grad.<name>"
  <m>_adamw.safetensors    losses of 10 AdamW steps (lr 1e-3, betas .9/.95, eps 1e-8, wd 0.1 on
                           2-D weights only, as Megatron), one fixed batch per step
Versions: torch 2.15, transformers 5.23 (pip). Seeds: torch.manual_seed(0) for weights, 1 for data.
Rerun: python gen_hf.py (from this directory; a venv with pip's torch, transformers,
safetensors, randomgen); python gen_hf.py drop writes only the dropout records; python gen_hf.py
mixtral only Mixtral's, python gen_hf.py qwen2 only Qwen2's, python gen_hf.py qwen2_moe only
Qwen2-MoE's (session 41, the same versions; session 40: torch 2.15, transformers 5.24.0;
transformers 5.x, torch 2.x, megatron-core 0.16.1 for mixtral_moe.safetensors: Megatron's router
losses, record_moe_losses), python gen_hf.py deepseek only DeepSeek-V3's (deepseek_mla and
deepseek_v3: torch 2.15.0, transformers 5.24.0), python gen_hf.py rope only the scaled
rotary frequencies' (llama_scaled, deepseek_yarn: the same versions), python gen_hf.py stablelm
only StableLM's (partial rotary embeddings; the same versions), python gen_hf.py qwen3_moe only
Qwen3-MoE's, python gen_hf.py mistral_window only Mistral's with a sliding window (the same
versions), python gen_hf.py qwen2_window only Qwen2's with a sliding window on its second layer
(the same versions). The position-id records
were added with torch 2.x and transformers 5.x of 2026-11 (pip), whose weights, io, grads and
AdamW losses reproduce the earlier files."""
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "../../../subprojects/core/tools"))
import philox_ref  # noqa: E402 (randomgen's Philox)
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

B, T, V, VP = 2, 16, 500, 512
torch.manual_seed(1)
tokens = torch.randint(0, V, (B, T))
targets = torch.roll(tokens, -1, dims=1)
targets[0, -1] = -100          # an ignored token
targets[1, 3] = -100
steps_tokens = torch.randint(0, V, (10, B, T))
# positions restarting after "document ends" at 5 and 11 (row 0) and 8 (row 1)
position_ids = torch.stack([torch.cat([torch.arange(6), torch.arange(6), torch.arange(4)]),
                            torch.cat([torch.arange(9), torch.arange(7)])])


def gpt2_names(model):
    sd = {k.removeprefix("transformer."): v for k, v in model.state_dict().items()}
    out = {"embedding.word_embeddings.weight": sd["wte.weight"],
           "embedding.position_embeddings.weight": sd["wpe.weight"],
           "decoder.final_layernorm.weight": sd["ln_f.weight"],
           "decoder.final_layernorm.bias": sd["ln_f.bias"]}
    for i in range(model.config.n_layer):
        p, q = f"h.{i}.", f"decoder.layers.{i}."
        out[q + "input_layernorm.weight"] = sd[p + "ln_1.weight"]
        out[q + "input_layernorm.bias"] = sd[p + "ln_1.bias"]
        out[q + "self_attention.linear_qkv.weight"] = sd[p + "attn.c_attn.weight"].t()
        out[q + "self_attention.linear_qkv.bias"] = sd[p + "attn.c_attn.bias"]
        out[q + "self_attention.linear_proj.weight"] = sd[p + "attn.c_proj.weight"].t()
        out[q + "self_attention.linear_proj.bias"] = sd[p + "attn.c_proj.bias"]
        out[q + "pre_mlp_layernorm.weight"] = sd[p + "ln_2.weight"]
        out[q + "pre_mlp_layernorm.bias"] = sd[p + "ln_2.bias"]
        out[q + "mlp.linear_fc1.weight"] = sd[p + "mlp.c_fc.weight"].t()
        out[q + "mlp.linear_fc1.bias"] = sd[p + "mlp.c_fc.bias"]
        out[q + "mlp.linear_fc2.weight"] = sd[p + "mlp.c_proj.weight"].t()
        out[q + "mlp.linear_fc2.bias"] = sd[p + "mlp.c_proj.bias"]
    return out


def llama_family(model):
    """A Llama-family model's state dict without "model." and our names of its embedding, final
    norm and output layer."""
    sd = {k.removeprefix("model."): v for k, v in model.state_dict().items()}
    out = {"embedding.word_embeddings.weight": sd["embed_tokens.weight"],
           "decoder.final_layernorm.weight": sd["norm.weight"],
           "output_layer.weight": sd["lm_head.weight"]}
    if "norm.bias" in sd:  # (StableLM's LayerNorms)
        out["decoder.final_layernorm.bias"] = sd["norm.bias"]
    return sd, out


def llama_names(model):
    sd, out = llama_family(model)
    for i in range(model.config.num_hidden_layers):
        p, q = f"layers.{i}.", f"decoder.layers.{i}."
        out[q + "input_layernorm.weight"] = sd[p + "input_layernorm.weight"]
        if p + "input_layernorm.bias" in sd:  # (StableLM's LayerNorms)
            out[q + "input_layernorm.bias"] = sd[p + "input_layernorm.bias"]
            out[q + "pre_mlp_layernorm.bias"] = sd[p + "post_attention_layernorm.bias"]
        out[q + "self_attention.linear_qkv.weight"] = torch.cat(
            [sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
        if p + "self_attn.q_proj.bias" in sd:  # (Qwen2's: Megatron's --add-qkv-bias)
            out[q + "self_attention.linear_qkv.bias"] = torch.cat(
                [sd[p + f"self_attn.{x}_proj.bias"] for x in "qkv"])
        out[q + "self_attention.linear_proj.weight"] = sd[p + "self_attn.o_proj.weight"]
        out[q + "pre_mlp_layernorm.weight"] = sd[p + "post_attention_layernorm.weight"]
        if p + "mlp.gate_proj.weight" in sd:  # (Mixtral's experts: mixtral_names)
            out[q + "mlp.linear_fc1.weight"] = torch.cat(
                [sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]])
            out[q + "mlp.linear_fc2.weight"] = sd[p + "mlp.down_proj.weight"]
        for x in "qk":  # Qwen3's per-head norms (Megatron's --qk-layernorm)
            if p + f"self_attn.{x}_norm.weight" in sd:
                out[q + f"self_attention.{x}_layernorm.weight"] = sd[p + f"self_attn.{x}_norm.weight"]
    return out


def mixtral_names(model):
    """Llama's names, and each layer's router (HF's mlp.gate) and experts (transformers 5's fused
    gate_up_proj (E, 2I, H): [gate; up] = our linear_fc1; down_proj (E, H, I): linear_fc2);
    Qwen2-MoE's shared expert (gate_proj, up_proj -> linear_fc1; down_proj -> linear_fc2) and its
    gate (shared_expert_gate (1, H) -> gate_weight) too."""
    out = llama_names(model)
    sd = {k.removeprefix("model."): v for k, v in model.state_dict().items()}
    E = getattr(model.config, "num_local_experts", None) or model.config.num_experts
    for i in range(model.config.num_hidden_layers):
        p, q = f"layers.{i}.mlp.", f"decoder.layers.{i}.mlp."
        if p + "gate.weight" not in sd:  # (a dense layer: llama_names's linear_fc1, linear_fc2)
            continue
        out[q + "router.weight"] = sd[p + "gate.weight"]
        if p + "shared_expert.gate_proj.weight" in sd:
            s, r = p + "shared_expert.", q + "shared_experts."
            out[r + "linear_fc1.weight"] = torch.cat([sd[s + "gate_proj.weight"],
                                                      sd[s + "up_proj.weight"]])
            out[r + "linear_fc2.weight"] = sd[s + "down_proj.weight"]
            out[r + "gate_weight"] = sd[p + "shared_expert_gate.weight"]
        for e in range(E):
            r = f"{q}experts.local_experts.{e}."
            out[r + "linear_fc1.weight"] = sd[p + "experts.gate_up_proj"][e]
            out[r + "linear_fc2.weight"] = sd[p + "experts.down_proj"][e]
    return out


def deepseek_names(model):
    """DeepSeek-V3's multi-latent attention in Megatron's MLA names: q_proj (no q_lora_rank) ->
    linear_q_proj, else q_a_proj -> linear_q_down_proj, q_a_layernorm and q_b_proj ->
    linear_q_up_proj (layer_norm_weight, weight); kv_a_proj_with_mqa -> linear_kv_down_proj,
    kv_a_layernorm and kv_b_proj -> linear_kv_up_proj; o_proj -> linear_proj; the layouts as HF's
    (q_b_proj's rows per head [nope; rope], kv_b_proj's [k_nope; v], kv_a_proj_with_mqa's
    [latent; rope], the rope dimensions interleaved pairs). The first first_k_dense_replace MLPs
    dense (gate|up -> linear_fc1), the others routed experts as mixtral_names's, the shared experts
    (gate_proj, up_proj -> linear_fc1; down_proj -> linear_fc2, no gate) and the router's
    e_score_correction_bias (a buffer: only in the weights) as router.expert_bias."""
    sd, out = llama_family(model)
    for i in range(model.config.num_hidden_layers):
        p, q = f"layers.{i}.", f"decoder.layers.{i}."
        a, s = p + "self_attn.", q + "self_attention."
        out[q + "input_layernorm.weight"] = sd[p + "input_layernorm.weight"]
        if a + "q_proj.weight" in sd:
            out[s + "linear_q_proj.weight"] = sd[a + "q_proj.weight"]
        else:
            out[s + "linear_q_down_proj.weight"] = sd[a + "q_a_proj.weight"]
            out[s + "linear_q_up_proj.layer_norm_weight"] = sd[a + "q_a_layernorm.weight"]
            out[s + "linear_q_up_proj.weight"] = sd[a + "q_b_proj.weight"]
        out[s + "linear_kv_down_proj.weight"] = sd[a + "kv_a_proj_with_mqa.weight"]
        out[s + "linear_kv_up_proj.layer_norm_weight"] = sd[a + "kv_a_layernorm.weight"]
        out[s + "linear_kv_up_proj.weight"] = sd[a + "kv_b_proj.weight"]
        out[s + "linear_proj.weight"] = sd[a + "o_proj.weight"]
        out[q + "pre_mlp_layernorm.weight"] = sd[p + "post_attention_layernorm.weight"]
        p, q = p + "mlp.", q + "mlp."
        if p + "gate_proj.weight" in sd:  # (a dense layer)
            out[q + "linear_fc1.weight"] = torch.cat([sd[p + "gate_proj.weight"],
                                                      sd[p + "up_proj.weight"]])
            out[q + "linear_fc2.weight"] = sd[p + "down_proj.weight"]
            continue
        out[q + "router.weight"] = sd[p + "gate.weight"]
        if p + "gate.e_score_correction_bias" in sd:  # (not in grads_named's state dict)
            out[q + "router.expert_bias"] = sd[p + "gate.e_score_correction_bias"]
        s, r = p + "shared_experts.", q + "shared_experts."
        out[r + "linear_fc1.weight"] = torch.cat([sd[s + "gate_proj.weight"],
                                                  sd[s + "up_proj.weight"]])
        out[r + "linear_fc2.weight"] = sd[s + "down_proj.weight"]
        for e in range(model.config.n_routed_experts):
            r = f"{q}experts.local_experts.{e}."
            out[r + "linear_fc1.weight"] = sd[p + "experts.gate_up_proj"][e]
            out[r + "linear_fc2.weight"] = sd[p + "experts.down_proj"][e]
    return out


def boost_rope(model):
    """The rotary channels' weights (each query head's last 8 rows, the shared key's 8) times
    8, so that the restarting positions move the loss by more than the CPU's tolerance."""
    with torch.no_grad():
        for layer in model.model.layers:
            a = layer.self_attn
            q = a.q_proj if a.q_proj is not None else a.q_b_proj
            q.weight.view(4, 24, -1)[:, 16:] *= 8
            a.kv_a_proj_with_mqa.weight[16:] *= 8


def loss_of(model, toks, tgts, pos=None):
    logits = model(toks, position_ids=pos).logits
    return logits, torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgts.reshape(-1),
                                                     ignore_index=-100)


def grads_named(model, names, tag):
    """d(loss)/d(weight) in our names: the same renaming over a state dict of .grad tensors."""
    grads = {n: p.grad for n, p in model.named_parameters()}
    buffers = {n for n, _ in model.named_buffers()}  # (DeepSeek's expert bias: no gradient)
    gmodel = {k: grads.get(k, torch.zeros_like(v)) for k, v in model.state_dict().items()
              if k not in buffers}

    class Wrap:  # names() reads .state_dict() and .config
        config = model.config

        @staticmethod
        def state_dict():
            return gmodel
    if tag == "gpt2":  # tied: the embedding's grad already includes the output layer's
        gmodel["transformer.wte.weight"] = model.transformer.wte.weight.grad
    return {k: v.float().contiguous() for k, v in names(Wrap).items()}


def record(tag, model, names):
    model = model.double().eval()
    with torch.no_grad():
        weights = {k: v.float().contiguous() for k, v in names(model).items()}
    save_file(weights, f"{tag}_weights.safetensors")
    logits, loss = loss_of(model, tokens, targets)
    loss.backward()
    save_file(grads_named(model, names, tag), f"{tag}_grads.safetensors")
    save_file({"tokens": tokens.int().contiguous(), "targets": targets.int().contiguous(),
               "logits": logits.detach().reshape(B * T, V).float().contiguous(),
               "loss": loss.detach().float().reshape(1)}, f"{tag}_io.safetensors")
    model.zero_grad()
    plogits, ploss = loss_of(model, tokens, targets, position_ids)
    ploss.backward()
    pos = {"grad." + k: v for k, v in grads_named(model, names, tag).items()}
    pos.update({"position_ids": position_ids.int().contiguous(),
                "logits": plogits.detach().reshape(B * T, V).float().contiguous(),
                "loss": ploss.detach().float().reshape(1)})
    save_file(pos, f"{tag}_pos.safetensors")
    # 10 AdamW steps, weight decay only on 2-D weights (Megatron's rule)
    model.zero_grad()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for s in range(10):
        opt.zero_grad()
        toks = steps_tokens[s]
        tg = torch.roll(toks, -1, dims=1)
        _, loss = loss_of(model, toks, tg)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    save_file({"losses": torch.tensor(losses, dtype=torch.float64).float(),
               "step_tokens": steps_tokens.int().contiguous()}, f"{tag}_adamw.safetensors")
    print(tag, "loss", loss_of(model, tokens, targets)[1].item(), "adamw", losses[0], losses[-1])


DROP_SEED, DROP_IDS, DROP_P = 1234, (3, 8), 0.1


def drop_mask(shape, site, p):
    """The keep mask of (B, ...) for sample ids DROP_IDS at `site`, as float64: mt_dropout's, or
    for the attention weights (B,H,T,T) mt_attn_config.dropout's (core's tools/philox_ref.py)."""
    if len(shape) == 4:
        m = philox_ref.attn_keep(DROP_SEED, site, DROP_IDS, shape[1], shape[2], p)
    else:
        m = philox_ref.keep(DROP_SEED, site, DROP_IDS, int(np.prod(shape[1:])), p)
    return torch.from_numpy(m.reshape(shape)).double()


def record_drop(tag, model, names):
    """Training-mode loss and gradients with torch's dropout replaced by our masks: the sites of
    the calls in order (the embeddings 0; layer l: attention weights 1+3l, linear_proj 2+3l,
    linear_fc2 3+3l; the attention weights are the 4-D calls)."""
    model = model.double().train()
    counts = {"attn": 0, "hidden": 0}
    hidden_sites = []  # HF's Llama has no hidden dropout
    if tag == "gpt2":
        hidden_sites = [0] + [2 + 3 * l + k for l in range(model.config.num_hidden_layers)
                              for k in (0, 1)]
    real = torch.nn.functional.dropout

    def ours(x, p=0.5, training=True, inplace=False):
        if not training or p == 0:
            return x
        if x.dim() == 4:
            site = 1 + 3 * counts["attn"]
            counts["attn"] += 1
        else:
            site = hidden_sites[counts["hidden"]]
            counts["hidden"] += 1
        return x * drop_mask(tuple(x.shape), site, p) / (1.0 - float(np.float32(p)))
    torch.nn.functional.dropout = ours
    try:
        _, loss = loss_of(model, tokens, targets)
    finally:
        torch.nn.functional.dropout = real
    assert counts["attn"] == model.config.num_hidden_layers
    assert counts["hidden"] == len(hidden_sites), counts
    loss.backward()
    out = {"grad." + k: v for k, v in grads_named(model, names, tag).items()}
    out["loss"] = loss.detach().float().reshape(1)
    out["sample_ids"] = torch.tensor(DROP_IDS, dtype=torch.int64)
    save_file(out, f"{tag}_drop.safetensors")
    print(tag, "dropout loss", loss.item())


MOE_AUX, MOE_Z = 0.01, 0.001


def record_moe_losses(tag, model, names):
    """Megatron's router losses on the Mixtral model: the gradients of the mean cross-entropy
    plus, for every layer, moe_aux_loss_coeff times megatron-core's switch_load_balancing_loss_func
    and moe_z_loss_coeff times its z_loss_func of that layer's router logits (one micro-batch:
    their backward scale is 1), and the losses without coefficients averaged over the layers.
    HF's own load_balancing_loss_func (all layers' tokens pooled) is not Megatron's."""
    from megatron.core.transformer.moe.moe_utils import (compute_routing_scores_for_aux_loss,
                                                         switch_load_balancing_loss_func,
                                                         z_loss_func)
    model = model.double()
    model.zero_grad()
    out = model(tokens, output_router_logits=True)
    ce = torch.nn.functional.cross_entropy(out.logits.reshape(-1, V), targets.reshape(-1),
                                           ignore_index=-100)
    k, E = model.config.num_experts_per_tok, model.config.num_local_experts
    total, aux_sum, z_sum = ce, 0.0, 0.0
    for lg in out.router_logits:
        rmap, scores = compute_routing_scores_for_aux_loss(lg, k, "softmax")
        aux = switch_load_balancing_loss_func(scores, rmap.sum(0), lg.shape[0], k, E, MOE_AUX)
        z = z_loss_func(lg, MOE_Z)
        total = total + aux + z
        aux_sum += aux.item() / MOE_AUX
        z_sum += z.item() / MOE_Z
    total.backward()
    nl = len(out.router_logits)
    rec = {"grad." + k_: v for k_, v in grads_named(model, names, tag).items()}
    rec["loss"] = ce.detach().float().reshape(1)
    rec["moe_losses"] = torch.tensor([aux_sum / nl, z_sum / nl], dtype=torch.float32)
    rec["coeffs"] = torch.tensor([MOE_AUX, MOE_Z], dtype=torch.float32)
    save_file(rec, f"{tag}_moe.safetensors")
    print(tag, "router losses", aux_sum / nl, z_sum / nl)


def same_weights(tag, model, names):
    saved = load_file(f"{tag}_weights.safetensors")
    with torch.no_grad():
        for k, v in names(model).items():
            assert torch.equal(v.float(), saved[k]), k


if len(sys.argv) > 1 and sys.argv[1] == "drop":
    torch.manual_seed(0)
    g = GPT2Config(vocab_size=V, n_positions=32, n_embd=64, n_layer=2, n_head=4, resid_pdrop=DROP_P,
                   embd_pdrop=DROP_P, attn_pdrop=DROP_P, activation_function="gelu_new",
                   layer_norm_epsilon=1e-5, attn_implementation="eager")
    gm = GPT2LMHeadModel(g)
    same_weights("gpt2", gm, gpt2_names)
    record_drop("gpt2", gm, gpt2_names)
    torch.manual_seed(0)
    lc = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                     rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                     attention_bias=False, mlp_bias=False, attention_dropout=DROP_P,
                     attn_implementation="eager")
    lm = LlamaForCausalLM(lc)
    same_weights("llama", lm, llama_names)
    record_drop("llama", lm, llama_names)
    sys.exit(0)

def qwen2_tiny(**kw):
    """The tiny Qwen2 (seed 0): Llama's choices plus biases on q_proj, k_proj and v_proj, drawn
    (zeros at init) so that they matter; kw: its config's sliding-window and attention fields."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    q2 = Qwen2Config(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                     rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, **kw)
    qwen2 = Qwen2ForCausalLM(q2)
    with torch.no_grad():
        for layer in qwen2.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.copy_(0.3 * torch.randn_like(proj.bias))
    return qwen2


if len(sys.argv) > 1 and sys.argv[1] == "qwen2":
    # Qwen2 (python gen_hf.py qwen2 writes only these records)
    record("qwen2", qwen2_tiny(use_sliding_window=False), llama_names)
    sys.exit(0)

if len(sys.argv) > 1 and sys.argv[1] in ("qwen2_moe", "qwen2_moe_mixed"):
    # Qwen2-MoE: Qwen2's attention (q, k, v biases); each MLP 4 experts of SwiGLU 32, top-2 with
    # the softmax over all 4 (norm_topk_prob false: Megatron's --moe-router-pre-softmax), and a
    # shared expert of SwiGLU 48 times sigmoid(x . g) (Megatron's
    # --moe-shared-expert-intermediate-size 48 --moe-shared-expert-gate). python gen_hf.py
    # qwen2_moe writes only these records; the biases, router and gate drawn so that they matter.
    # qwen2_moe_mixed: decoder_sparse_step 2, so layer 0's MLP is dense (SwiGLU 128) and layer
    # 1's sparse (Megatron's --moe-layer-freq "[0]+[1]")
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    torch.manual_seed(0)
    qm = Qwen2MoeConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                        use_sliding_window=False, num_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, shared_expert_intermediate_size=48,
                        norm_topk_prob=False, mlp_only_layers=[],
                        decoder_sparse_step=2 if sys.argv[1] == "qwen2_moe_mixed" else 1,
                        output_router_logits=False, qkv_bias=True,
                        experts_implementation="eager")
    qmoe = Qwen2MoeForCausalLM(qm)
    with torch.no_grad():
        for layer in qmoe.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.copy_(0.3 * torch.randn_like(proj.bias))
            if hasattr(layer.mlp, "gate"):  # (a sparse layer)
                layer.mlp.gate.weight.copy_(0.1 * torch.randn_like(layer.mlp.gate.weight))
                layer.mlp.shared_expert_gate.weight.copy_(
                    0.5 * torch.randn_like(layer.mlp.shared_expert_gate.weight))
    record(sys.argv[1], qmoe, mixtral_names)
    sys.exit(0)

if len(sys.argv) > 1 and sys.argv[1] == "deepseek":
    # DeepSeek-V3 (python gen_hf.py deepseek writes only these records): multi-latent attention of
    # 4 heads (kv_lora_rank 16, qk_nope_head_dim 16, qk_rope_head_dim 8, v_head_dim 12; softmax
    # scale 1/sqrt(24)), HF's rope_interleave (Megatron's MLA de-interleaves the rope dimensions
    # the same way), plain RoPE (theta 1e4, no YaRN). rms_norm_eps 1e-6 (DeepSeek-V3's), which is
    # also what HF's q_a_layernorm and kv_a_layernorm take (RMSNorm's default eps; Megatron's
    # take --norm-epsilon, as every norm). deepseek_mla: no q_lora_rank (q_proj),
    # both MLPs dense (SwiGLU 128). deepseek_v3: q_lora_rank 24; layer 0 dense (SwiGLU 128), layer
    # 1 MoE: 8 experts of SwiGLU 32 and a shared expert of SwiGLU 32, sigmoid scores computed in
    # f32 (HF casts the router's input and weight), the top-2 chosen on the scores plus
    # e_score_correction_bias (Megatron's --moe-router-enable-expert-bias) within the best of 2
    # groups of 4 (its score the sum of its top-2; Megatron's --moe-router-num-groups 2
    # --moe-router-group-topk 1: topk / group_topk = 2 too), weighted by the
    # scores without the bias normalized over the chosen (+1e-20) times 2.5
    # (--moe-router-topk-scaling-factor 2.5). No aux loss in HF's DeepSeek-V3, and nothing updates
    # the bias (AdamW takes the parameters only). The router, bias and the latent norms (ones at
    # init) drawn so that they matter; the bias changes the experts of some tokens (printed).
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    def deepseek_config(q_lora_rank, first_k_dense_replace):
        return DeepseekV3Config(
            vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=q_lora_rank,
            kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
            first_k_dense_replace=first_k_dense_replace, n_routed_experts=8,
            num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1, n_group=2,
            topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
            max_position_embeddings=32, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rope_interleave=True,
            tie_word_embeddings=False, attention_bias=False, hidden_act="silu", num_mtp_layers=0,
            attn_implementation="eager", experts_implementation="eager")

    def init_summary(tag, model):
        """The parameters the model's own init left constant (RMSNorm's ones) and the smallest
        standard deviation of the others (HF's normal(0, 0.02) of the rest, experts included)."""
        const = sorted({".".join(x for x in n.split(".") if not x.isdigit())
                        for n, p in model.named_parameters() if p.std() == 0})
        print(tag, "constant:", const, "smallest other std",
              min(p.std().item() for p in model.parameters() if p.std() > 0))

    torch.manual_seed(0)
    mla = DeepseekV3ForCausalLM(deepseek_config(None, 2))
    boost_rope(mla)
    init_summary("deepseek_mla", mla)
    record("deepseek_mla", mla, deepseek_names)
    torch.manual_seed(0)
    dv3 = DeepseekV3ForCausalLM(deepseek_config(24, 1))
    with torch.no_grad():
        for layer in dv3.model.layers:
            for norm in (layer.self_attn.q_a_layernorm, layer.self_attn.kv_a_layernorm):
                norm.weight.copy_(1 + 0.3 * torch.randn_like(norm.weight))
            if hasattr(layer.mlp, "gate"):  # (the MoE layer)
                g = layer.mlp.gate
                g.weight.copy_(0.1 * torch.randn_like(g.weight))
                b = g.e_score_correction_bias  # (0.05 * randn changed 1 token's experts of 32)
                b.copy_(0.1 * torch.randn_like(b))
    boost_rope(dv3)
    init_summary("deepseek_v3", dv3)
    dv3 = dv3.double()
    for pos in (None, position_ids):  # the experts chosen with and without the bias
        g, seen = dv3.model.layers[1].mlp.gate, []
        hook = g.register_forward_hook(lambda mod, args, out: seen.append(out[2].sort(-1)[0]))
        with torch.no_grad():
            dv3(tokens, position_ids=pos)
            bias = g.e_score_correction_bias.clone()
            g.e_score_correction_bias.zero_()
            dv3(tokens, position_ids=pos)
            g.e_score_correction_bias.copy_(bias)
        hook.remove()
        changed = (seen[0] != seen[1]).any(-1).sum().item()
        print("deepseek_v3 tokens whose experts the bias changes:", changed, "of", B * T)
        assert changed >= 3
    record("deepseek_v3", dv3, deepseek_names)
    sys.exit(0)

if len(sys.argv) > 1 and sys.argv[1] == "mistral_window":
    # Mistral with a sliding window of 6 (python gen_hf.py mistral_window writes only these
    # records): Llama's shape, each token attends itself and the 5 before (Megatron's
    # --window-size 5,0), over the 16 tokens (eager attention: transformers' sliding-window mask)
    from transformers import MistralConfig, MistralForCausalLM
    torch.manual_seed(0)
    mc = MistralConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                       rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                       sliding_window=6, tie_word_embeddings=False, attn_implementation="eager")
    record("mistral_window", MistralForCausalLM(mc), llama_names)
    sys.exit(0)

if len(sys.argv) > 1 and sys.argv[1] == "qwen2_window":
    # Qwen2 with a sliding window of 6 above max_window_layers 1 (python gen_hf.py qwen2_window
    # writes only these records): layer 0 attends the whole context, layer 1 itself and the 5
    # tokens before (Megatron's --window-size 5,0 with --window-attn-skip-freq [0,1]); Qwen2's q,
    # k and v biases drawn as qwen2's
    qwen2 = qwen2_tiny(use_sliding_window=True, sliding_window=6, max_window_layers=1,
                       attn_implementation="eager")
    layers = qwen2.config.layer_types
    assert layers == ["full_attention", "sliding_attention"], layers
    record("qwen2_window", qwen2, llama_names)
    sys.exit(0)

if len(sys.argv) > 1 and sys.argv[1] == "qwen3_moe":
    # Qwen3-MoE (python gen_hf.py qwen3_moe writes only these records): Qwen3's attention
    # (per-head q and k RMSNorms, no biases); layer 0's MLP dense (mlp_only_layers [0]: SwiGLU
    # 128), layer 1's 4 experts of SwiGLU 32, top-2 with the softmax renormalized over the 2
    # (norm_topk_prob: Megatron's softmax over the top-k, its default), no shared expert
    # (Megatron's --moe-layer-freq "[0]+[1]"); the norms and router drawn so that they matter
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(0)
    q3 = Qwen3MoeConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        max_position_embeddings=32, rms_norm_eps=1e-5,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                        tie_word_embeddings=False, attention_bias=False, use_sliding_window=False,
                        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0],
                        output_router_logits=False, experts_implementation="eager")
    q3m = Qwen3MoeForCausalLM(q3)
    with torch.no_grad():
        for layer in q3m.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                norm.weight.copy_(1 + 0.3 * torch.randn_like(norm.weight))
            if hasattr(layer.mlp, "gate"):  # (the sparse layer)
                layer.mlp.gate.weight.copy_(0.1 * torch.randn_like(layer.mlp.gate.weight))
    record("qwen3_moe", q3m, mixtral_names)
    sys.exit(0)

if len(sys.argv) > 1 and sys.argv[1] == "stablelm":
    # StableLM (python gen_hf.py stablelm writes only these records): Llama's shape with
    # LayerNorms (weights and biases, drawn so that they matter) and RoPE on the first quarter of
    # each head's channels (partial_rotary_factor 0.25: Megatron's --rotary-percent 0.25), no
    # biases on the linears
    from transformers import StableLmConfig, StableLmForCausalLM
    torch.manual_seed(0)
    sc = StableLmConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                        layer_norm_eps=1e-5, use_qkv_bias=False, qk_layernorm=False,
                        use_parallel_residual=False, hidden_dropout=0.0, attention_dropout=0.0,
                        tie_word_embeddings=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                         "partial_rotary_factor": 0.25})
    slm = StableLmForCausalLM(sc)
    with torch.no_grad():
        for n, p in slm.named_parameters():
            if "norm" in n:
                p.copy_((1.0 if n.endswith("weight") else 0.0) + 0.3 * torch.randn_like(p))
    print("stablelm rotary channels", slm.model.layers[0].self_attn.rotary_ndims, "of 16")
    record("stablelm", slm, llama_names)
    sys.exit(0)

if len(sys.argv) > 1 and sys.argv[1] == "rope":
    # Scaled rotary frequencies (python gen_hf.py rope writes only these records). rope_theta 100
    # so that the scaled pairs turn visibly within 16 positions. llama_scaled: the llama model
    # (max_position_embeddings 128) with Llama 3's rope_type llama3 (factor 8, low/high_freq_factor
    # 1/4, original 64: pairs 0-1 kept, 2-4 blended, 5-7 divided). deepseek_yarn: deepseek_mla
    # (boost_rope too) with YaRN (factor 4, original 16, beta_fast/slow 32/1, mscale 0.9,
    # mscale_all_dim 0.8: cos and sin times m(4, .9) / m(4, .8), the softmax scale times
    # m(4, .8)^2, m(s, k) = 0.1 k ln s + 1).
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    torch.manual_seed(0)
    lc = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                     rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False,
                     mlp_bias=False,
                     rope_parameters={"rope_type": "llama3", "rope_theta": 100.0, "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 64})
    record("llama_scaled", LlamaForCausalLM(lc), llama_names)
    torch.manual_seed(0)
    dc = DeepseekV3Config(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, first_k_dense_replace=2,
        max_position_embeddings=32, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0,
                         "original_max_position_embeddings": 16, "beta_fast": 32,
                         "beta_slow": 1, "mscale": 0.9, "mscale_all_dim": 0.8},
        rope_interleave=True, tie_word_embeddings=False, attention_bias=False,
        hidden_act="silu", num_mtp_layers=0, attn_implementation="eager")
    yarn = DeepseekV3ForCausalLM(dc)
    boost_rope(yarn)
    print("deepseek_yarn softmax scale", yarn.model.layers[0].self_attn.scaling,
          "cos/sin factor", yarn.model.rotary_emb.attention_scaling)
    record("deepseek_yarn", yarn, deepseek_names)
    sys.exit(0)

if len(sys.argv) > 1 and sys.argv[1] == "mixtral":
    # Mixtral: Llama's attention; each MLP 4 experts of SwiGLU 32, top-2 (python gen_hf.py
    # mixtral writes only these records: weights, grads, io, pos, adamw, moe)
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.manual_seed(0)
    xc = MixtralConfig(vocab_size=V, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                       rms_norm_eps=1e-5, rope_theta=10000.0, num_local_experts=4,
                       num_experts_per_tok=2, tie_word_embeddings=False, router_jitter_noise=0.0,
                       output_router_logits=False, experts_implementation="eager")
    record("mixtral", MixtralForCausalLM(xc), mixtral_names)
    torch.manual_seed(0)
    mx = MixtralForCausalLM(xc)
    same_weights("mixtral", mx, mixtral_names)
    record_moe_losses("mixtral", mx, mixtral_names)
    sys.exit(0)

torch.manual_seed(0)
g = GPT2Config(vocab_size=V, n_positions=32, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0,
               embd_pdrop=0, attn_pdrop=0, activation_function="gelu_new", layer_norm_epsilon=1e-5)
record("gpt2", GPT2LMHeadModel(g), gpt2_names)

torch.manual_seed(0)
lc = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                 attention_bias=False, mlp_bias=False)
record("llama", LlamaForCausalLM(lc), llama_names)

# Qwen3: Llama's choices plus RMSNorm on each query and key head before RoPE; the norms' weights
# (ones at init) drawn around 1 so that their use and gradients are visible
torch.manual_seed(0)
qc = Qwen3Config(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 max_position_embeddings=32, rms_norm_eps=1e-5, rope_theta=10000.0,
                 tie_word_embeddings=False, attention_bias=False, use_sliding_window=False)
qwen3 = Qwen3ForCausalLM(qc)
with torch.no_grad():
    for layer in qwen3.model.layers:
        for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
            norm.weight.copy_(1 + 0.3 * torch.randn_like(norm.weight))
record("qwen3", qwen3, llama_names)
