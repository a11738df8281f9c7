"""Peer of bench/generate.sh: Hugging Face's GPT2LMHeadModel (bf16, SDPA, random weights from
seed 0) on the GPU (MT_GEN_DEVICE=cpu: the CPU, for trying it), greedy generate() with its KV
cache (DynamicCache) of N new tokens after the same 16-token prompt. Saves each model (config.json
+ safetensors) to MODEL_DIR/hf_<name> for mt-convert, and the prompt to MODEL_DIR/prompt.txt,
then writes Google-Benchmark-style JSON (tokens_per_second: new tokens over the generate() call's
wall time, the median of 3 after a warm-up) to MODEL_DIR/peer_generate.json.
  python3 peer_generate.py MODEL_DIR name:layers:hidden:heads:new_tokens ..."""
import json
import os
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
prompt = [(i * 997 + 13) % 50257 for i in range(16)]
open(os.path.join(out, "prompt.txt"), "w").write(",".join(map(str, prompt)) + "\n")
rows = []
dev = os.environ.get("MT_GEN_DEVICE", "cuda")
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
for case in sys.argv[2:]:
    name, L, H, NH, N = case.split(":")
    L, H, NH, N = int(L), int(H), int(NH), int(N)
    cfg = GPT2Config(n_layer=L, n_embd=H, n_head=NH, n_positions=1024, vocab_size=50257,
                     activation_function="gelu_new", attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(dev):
        model = GPT2LMHeadModel(cfg).to(torch.bfloat16).eval()
    model.save_pretrained(os.path.join(out, f"hf_{name}"))
    ids = torch.tensor([prompt], device=dev)
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None,
              attention_mask=torch.ones_like(ids))
    times = []
    with torch.no_grad():
        model.generate(ids, max_new_tokens=8, min_new_tokens=8, **kw)  # warm-up
        for _ in range(3):
            sync()
            t0 = time.perf_counter()
            g = model.generate(ids, max_new_tokens=N, min_new_tokens=N, **kw)
            sync()
            times.append(time.perf_counter() - t0)
    assert g.shape[1] == 16 + N, g.shape
    dt = sorted(times)[1]
    print(f"{name}: transformers generate {N} tokens in {dt:.3f} s: {N / dt:.1f} tokens/s")
    rows.append({"name": f"generate/torch/{name}_P16_N{N}", "run_type": "iteration",
                 "real_time": dt * 1e3, "time_unit": "ms", "tokens_per_second": N / dt})
    del model
    if dev == "cuda":
        torch.cuda.empty_cache()
json.dump({"benchmarks": rows}, open(os.path.join(out, "peer_generate.json"), "w"), indent=1)
