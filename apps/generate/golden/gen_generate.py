"""Golden of test_generate.sh: transformers' greedy generation (generate(do_sample=False)) from the
tiny GPT-2, Llama, Qwen2 (session 40), Qwen3, Mixtral (session 34), Qwen2-MoE (session 41) and
DeepSeek-V3 (its expert bias nonzero) that mt-convert's tests import (apps/convert/golden/logits_<m>: V 100),
in float64, for a fixed prompt: expected.json {model: {"prompt": ids, "greedy": the prompt and 10
new ids, "min_gap": the smallest gap between the two largest logits along the way, "logprobs": the
log-probability of each token of "greedy" after the first given the ones before it (Megatron's
text generation server's logprobs; log_softmax of the whole sequence's logits), "top2": at each
position of "greedy" but the last, the two most likely next tokens as [id, log-probability]
(mt-serve's /completions top_logprobs)}}. A gap far
above float32's rounding makes the argmax the same in our fp32 forward.
Versions: torch (CPU), transformers 5.24.0. Rerun from this directory: python3 gen_generate.py
[MODEL ...]"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM

out = {}
prompt = [17, 3, 88, 41, 5]
models = sys.argv[1:] or ("gpt2", "llama", "qwen2", "qwen3", "mixtral")
if sys.argv[1:]:  # (python3 gen_generate.py qwen2: only that model's entry, the others kept)
    out = json.load(open("expected.json"))
for m in models:
    moe = m in ("mixtral", "qwen2_moe", "qwen2_moe_mixed", "deepseek_v3")
    kw = {"experts_implementation": "eager"} if moe else {}  # (grouped_mm: no float64)
    model = AutoModelForCausalLM.from_pretrained(f"../../convert/golden/logits_{m}",
                                                 **kw).double().eval()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=10, do_sample=False, eos_token_id=None,
                             pad_token_id=0, attention_mask=torch.ones_like(ids))
        seq, gap = list(prompt), float("inf")  # the same by hand: argmax of each next logits
        for _ in range(10):
            top2 = model(torch.tensor([seq])).logits[0, -1].topk(2).values
            gap = min(gap, (top2[0] - top2[1]).item())
            seq.append(model(torch.tensor([seq])).logits[0, -1].argmax().item())
        lp = torch.log_softmax(model(torch.tensor([seq])).logits[0, :-1], dim=-1)
        logprobs = lp.gather(1, torch.tensor(seq[1:])[:, None])[:, 0].tolist()
        top = lp.topk(2, dim=-1)
        top2 = [[[i, v] for i, v in zip(ids_, vals)]
                for ids_, vals in zip(top.indices.tolist(), top.values.tolist())]
    assert gen[0].tolist() == seq, (m, gen[0].tolist(), seq)
    out[m] = {"prompt": prompt, "greedy": seq, "min_gap": gap, "logprobs": logprobs,
              "top2": top2}
    print(m, seq, "min gap", gap)
json.dump(out, open("expected.json", "w"), indent=1)
