"""Fixtures of test_convert_logits: tiny GPT-2 and Llama (GQA) models written by transformers
(and Qwen3, with per-head q/k norms; config.json + model.safetensors in logits_<m>/) and transformers' logits for fixed tokens
(logits_<m>/logits.safetensors: tokens (B,T) i32, logits (B*T, V) f32 computed in float64).
The test imports them with mt-convert and runs libs/model's forward. Weights are redrawn larger
than transformers' init (std 0.2, norms 1 +- 0.1, biases 0.1) so attention is far from uniform and
a wrong q/k row order shows in the logits; V = 100 is padded to 128 by the import; the Llama has
rope_theta 5e5 and rms_norm_eps 1e-6 (not our defaults). Mixtral (4 experts, top-2; session 34,
transformers 5.24.0): python gen_logits.py mixtral writes only logits_mixtral; Qwen2 (biases on q, k
and v; session 40, transformers 5.24.0) python gen_logits.py qwen2 only logits_qwen2; Qwen2-MoE (4
experts top-2 over the softmax of all 4, a gated shared expert; session 41, transformers 5.24.0)
python gen_logits.py qwen2_moe only logits_qwen2_moe (save_pretrained's per-expert names,
mlp.experts.e.{gate,up,down}_proj, as on the hub) and logits_qwen2_moe_fused (the same tensors
stacked as transformers 5 holds them, mlp.experts.gate_up_proj and down_proj); python
gen_logits.py qwen2_moe_mixed the same with layer 0's MLP dense (mlp_only_layers [0]);
DeepSeek-V3 (MLA with a query latent, layer 0 dense, then 8 experts in 2 groups, top-2, sigmoid
scores with a random expert bias (e_score_correction_bias, a buffer), scaling 2.5, a shared
expert; transformers 5.24.0, torch 2.15.0): python gen_logits.py deepseek_v3 writes
logits_deepseek_v3 (per-expert names) and logits_deepseek_v3_fused (stacked).
Versions: torch (CPU), transformers 5.23.0, safetensors. Seeds: 1234 (weights), 7 (tokens).
Qwen's sliding windows on some layers (session 44, transformers 5.24.0, torch 2.15.0): python
gen_logits.py qwen_window writes logits_qwen2_window and logits_qwen3_window.
Rerun from this directory: /opt/gv/bin/python gen_logits.py [mixtral|qwen2|...|rope]"""
import json, os, shutil
import torch
import transformers
from safetensors.torch import save_file
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

B, T, V = 2, 16, 100


def write_fused(d, E):
    """d_fused/: d/ (save_pretrained's hub layout, per-expert names) with each layer's E experts
    stacked as transformers 5 holds them: mlp.experts.gate_up_proj (E, 2I, H), down_proj."""
    from safetensors.torch import load_file
    s = d + "_fused"
    shutil.rmtree(s, ignore_errors=True)
    shutil.copytree(d, s)
    w = load_file(f"{d}/model.safetensors")
    out = {}
    for k, v in w.items():
        if ".mlp.experts." not in k:
            out[k] = v
        elif k.endswith(".mlp.experts.0.gate_proj.weight"):
            p = k[:-len("0.gate_proj.weight")]
            out[p + "gate_up_proj"] = torch.stack([torch.cat(
                [w[f"{p}{e}.gate_proj.weight"], w[f"{p}{e}.up_proj.weight"]]) for e in range(E)])
            out[p + "down_proj"] = torch.stack([w[f"{p}{e}.down_proj.weight"] for e in range(E)])
    save_file(out, f"{s}/model.safetensors", metadata={"format": "pt"})


def record(tag, model):
    torch.manual_seed(1234)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.2)
            elif n.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:  # norm weights
                p.normal_(1.0, 0.1)
    d = f"logits_{tag}"
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    for f in os.listdir(d):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, f))
    model = model.double().eval()
    torch.manual_seed(7)
    tokens = torch.randint(0, V, (B, T))
    with torch.no_grad():
        logits = model(tokens).logits
    save_file({"tokens": tokens.int().contiguous(),
               "logits": logits.reshape(B * T, V).float().contiguous()},
              f"{d}/logits.safetensors", metadata={"format": "pt"})
    print(tag, "max |logit|", logits.abs().max().item())


import sys  # noqa: E402
if sys.argv[1:] == ["mistral"]:  # (session 43) only Mistral: Llama's layout, head_dim 16 with
    # hidden 32 and 4 heads (Mistral-Nemo's kind: heads wider than hidden / heads), no sliding
    # window (sliding_window null, as Mistral v0.2 on)
    from transformers import MistralConfig, MistralForCausalLM
    torch.manual_seed(0)
    record("mistral", MistralForCausalLM(MistralConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        sliding_window=None, tie_word_embeddings=False)))
    torch.manual_seed(0)  # logits_mistral_window: v0.1's kind, a sliding window (6 of 16 tokens)
    record("mistral_window", MistralForCausalLM(MistralConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        sliding_window=6, tie_word_embeddings=False, attn_implementation="eager")))
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] == ["phi3"]:  # (session 43) only Phi-3: Llama's with q|k|v in one qkv_proj and
    # gate|up in one gate_up_proj, RoPE on half of each head (partial_rotary_factor 0.5, as
    # Phi-4-mini's 0.75) and a sliding window of 6 tokens (Phi-3-mini-4k's kind)
    from transformers import Phi3Config, Phi3ForCausalLM
    torch.manual_seed(0)
    record("phi3", Phi3ForCausalLM(Phi3Config(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        original_max_position_embeddings=32, rms_norm_eps=1e-5, sliding_window=6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5},
        resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, tie_word_embeddings=False,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
        attn_implementation="eager")))
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] == ["phi3_longrope"]:  # (session 43) only Phi-3 with LongRoPE (Phi-3.5's,
    # Phi-4-mini's): head dim 16, RoPE on 12 channels (partial_rotary_factor 0.75, 6 pairs),
    # max_position_embeddings 128; logits_phi3_longrope: original 32 > the 16 tokens, so the short
    # factors (transformers 5's config); logits_phi3_longrope_long: original 8, so the long ones,
    # its config rewritten as the hub's Phi-3.5 (rope_scaling {"type": "longrope", ...},
    # top-level original_max_position_embeddings and rope_theta)
    from transformers import Phi3Config, Phi3ForCausalLM
    short, long = [1.0, 1.25, 1.5, 2.0, 3.0, 4.0], [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    for tag, orig in (("phi3_longrope", 32), ("phi3_longrope_long", 8)):
        torch.manual_seed(0)
        record(tag, Phi3ForCausalLM(Phi3Config(
            vocab_size=V, hidden_size=64, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            original_max_position_embeddings=orig, rms_norm_eps=1e-5, sliding_window=None,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.75, "short_factor": short,
                             "long_factor": long, "original_max_position_embeddings": orig},
            resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, tie_word_embeddings=False,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="eager")))
    with open("logits_phi3_longrope_long/config.json") as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"], cfg["partial_rotary_factor"] = rp["rope_theta"], rp["partial_rotary_factor"]
    cfg["original_max_position_embeddings"] = 8
    cfg["rope_scaling"] = {"type": "longrope", "short_factor": short, "long_factor": long}
    with open("logits_phi3_longrope_long/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] == ["qwen3_moe"]:  # (session 43) only Qwen3-MoE: Qwen3's attention (per-head
    # q and k norms), layer 0 dense (mlp_only_layers [0]), layer 1 4 experts top-2 renormalized
    # (norm_topk_prob), no shared expert; logits_qwen3_moe (the hub's per-expert names) and
    # logits_qwen3_moe_fused (stacked as transformers 5 holds them)
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(0)
    record("qwen3_moe", Qwen3MoeForCausalLM(Qwen3MoeConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, norm_topk_prob=True,
        mlp_only_layers=[0], tie_word_embeddings=False, use_sliding_window=False,
        experts_implementation="eager")))
    write_fused("logits_qwen3_moe", 4)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] == ["stablelm"]:  # (session 43) only StableLM: LayerNorms with biases, RoPE on
    # a quarter of each head (partial_rotary_factor 0.25), q/k/v biases (use_qkv_bias)
    from transformers import StableLmConfig, StableLmForCausalLM
    torch.manual_seed(0)
    record("stablelm", StableLmForCausalLM(StableLmConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        layer_norm_eps=1e-5, use_qkv_bias=True, qk_layernorm=False, use_parallel_residual=False,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25})))
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] == ["rope"]:  # (session 43) only the scaled rotary frequencies, rope_theta 100:
    # logits_llama_scaled, Llama 3's (rope_parameters llama3, factor 8, original 64, max 128,
    # transformers 5's config), and logits_deepseek_yarn, DeepSeek-V3's MLA with YaRN (factor 4,
    # original 16, mscale 0.9 / 0.8) whose config.json is rewritten as the hub's DeepSeek-V3
    # (transformers 4's top-level rope_theta and rope_scaling {"type": "yarn", ...})
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    torch.manual_seed(0)
    record("llama_scaled", LlamaForCausalLM(LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 100.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64})))
    torch.manual_seed(0)
    yarn = {"factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32,
            "beta_slow": 1, "mscale": 0.9, "mscale_all_dim": 0.8}
    record("deepseek_yarn", DeepseekV3ForCausalLM(DeepseekV3Config(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, first_k_dense_replace=2,
        max_position_embeddings=32, rms_norm_eps=1e-6,
        rope_parameters=dict(yarn, rope_type="yarn", rope_theta=100.0), rope_interleave=True,
        tie_word_embeddings=False, attention_bias=False, attn_implementation="eager")))
    with open("logits_deepseek_yarn/config.json") as f:
        cfg = json.load(f)
    del cfg["rope_parameters"]
    cfg["rope_theta"], cfg["rope_scaling"] = 100.0, dict(yarn, type="yarn")
    with open("logits_deepseek_yarn/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] == ["qwen_window"]:  # (session 44) only Qwen's sliding windows on some layers:
    # logits_qwen2_window, Qwen2 of 3 layers with max_window_layers 1 (layer 0 full, 1 and 2
    # through a window of 6 of the 16 tokens); logits_qwen3_window, Qwen3 whose layer_types
    # window layer 0 only (not a prefix of full layers: read from layer_types)
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    q2 = Qwen2Config(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False, use_sliding_window=True, sliding_window=6,
        max_window_layers=1, attn_implementation="eager")
    assert q2.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    record("qwen2_window", Qwen2ForCausalLM(q2))
    torch.manual_seed(0)
    q3 = Qwen3Config(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False, use_sliding_window=True, sliding_window=6,
        layer_types=["sliding_attention", "full_attention"], attn_implementation="eager")
    record("qwen3_window", Qwen3ForCausalLM(q3))
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] == ["qwen2"]:  # (session 40) only Qwen2: biases on q_proj, k_proj, v_proj
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    record("qwen2", Qwen2ForCausalLM(Qwen2Config(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        tie_word_embeddings=False, use_sliding_window=False)))
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] in (["qwen2_moe"], ["qwen2_moe_mixed"]):  # (session 41) only Qwen2-MoE (mixed:
    # layer 0's MLP dense, mlp_only_layers [0])
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    torch.manual_seed(0)
    record(sys.argv[1], Qwen2MoeForCausalLM(Qwen2MoeConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
        shared_expert_intermediate_size=40, norm_topk_prob=False, tie_word_embeddings=False,
        use_sliding_window=False, experts_implementation="eager",
        mlp_only_layers=[0] if sys.argv[1] == "qwen2_moe_mixed" else [])))
    write_fused(f"logits_{sys.argv[1]}", 4)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] == ["deepseek_v3"]:  # only DeepSeek-V3: MLA with a query latent,
    # layer 0 dense, layer 1 8 experts in 2 groups (top-2 from the best group; HF's group score is
    # the sum of its top 2, Megatron's of its top k / group_topk = 2), sigmoid scores, an expert
    # bias (a buffer, 0.1 randn: it moves some tokens' experts), scaling 2.5, a shared expert
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    torch.manual_seed(0)
    ds = DeepseekV3ForCausalLM(DeepseekV3Config(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, first_k_dense_replace=1,
        n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, n_shared_experts=1,
        n_group=2, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        max_position_embeddings=32, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, rope_interleave=True,
        tie_word_embeddings=False, attention_bias=False, attn_implementation="eager",
        experts_implementation="eager"))
    g = ds.model.layers[1].mlp.gate
    with torch.no_grad():  # (record redraws the parameters only)
        g.e_score_correction_bias.copy_(0.1 * torch.randn_like(g.e_score_correction_bias))
    record("deepseek_v3", ds)
    seen = []  # the experts chosen with and without the bias
    hook = g.register_forward_hook(lambda mod, args, out: seen.append(out[2].sort(-1)[0]))
    torch.manual_seed(7)
    tokens = torch.randint(0, V, (B, T))
    with torch.no_grad():
        ds(tokens)
        bias = g.e_score_correction_bias.clone()
        g.e_score_correction_bias.zero_()
        ds(tokens)
        g.e_score_correction_bias.copy_(bias)
    hook.remove()
    changed = (seen[0] != seen[1]).any(-1).sum().item()
    print("deepseek_v3 tokens whose experts the bias changes:", changed, "of", B * T)
    assert changed >= 3
    write_fused("logits_deepseek_v3", 8)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
if sys.argv[1:] == ["mixtral"]:  # (session 34) only Mixtral: 4 experts, top-2, router and experts
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.manual_seed(0)
    record("mixtral", MixtralForCausalLM(MixtralConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
        experts_implementation="eager")))
    print("transformers", transformers.__version__, "torch", torch.__version__)
    sys.exit(0)
torch.manual_seed(0)
record("gpt2", GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=2,
                                          n_head=4, activation_function="gelu_new")))
torch.manual_seed(0)
record("llama", LlamaForCausalLM(LlamaConfig(
    vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
    rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    tie_word_embeddings=False)))
torch.manual_seed(0)  # Qwen3: per-head q and k RMSNorms (added in session 28, transformers 5.24)
record("qwen3", Qwen3ForCausalLM(Qwen3Config(
    vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32,
    rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    tie_word_embeddings=False, use_sliding_window=False)))
print("transformers", transformers.__version__, "torch", torch.__version__)
