#!/usr/bin/env python3
"""Tiny Hugging Face tokenizers and what transformers says of them, for mt_data_hf_tokenizer_info
(Megatron's HuggingFaceTokenizer: vocab_size = len(AutoTokenizer), eod = eos_token_id).

  bpe/      byte-level BPE (GPT-2 style), eos "<|endoftext|>" an added token past the vocabulary,
            named in tokenizer_config.json as a string; a pad token added too
  unigram/  Unigram (SentencePiece/Llama style), "<s>" and "</s>" inside the vocabulary, eos named
            in special_tokens_map.json as {"content": ...} (no tokenizer_config.json eos)
  wordpiece/ WordPiece with "[SEP]" as eos, an added token that is also in the vocabulary
expected.json: {dir: {"vocab_size": len(tok), "eod": tok.eos_token_id}}.

    pip install transformers tokenizers   (tested: transformers 5.24, tokenizers 0.23)
    python3 gen.py   (from this directory)
"""
import json
import os

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

text = ["the quick brown fox jumps over the lazy dog " * 3,
        "megatron trains large language models in c and cuda",
        "pack my box with five dozen liquor jugs"]


def save(tok, d, config, special_map=None):
    os.makedirs(d, exist_ok=True)
    tok.save(f"{d}/tokenizer.json")
    with open(f"{d}/tokenizer_config.json", "w") as f:
        json.dump(config, f, indent=1)
    if special_map is not None:
        with open(f"{d}/special_tokens_map.json", "w") as f:
            json.dump(special_map, f, indent=1)


t = Tokenizer(models.BPE())
t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
t.add_special_tokens(["<|endoftext|>", "<pad>"])
save(t, "bpe", {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                "pad_token": "<pad>"})

u = Tokenizer(models.Unigram())
u.pre_tokenizer = pre_tokenizers.Metaspace()
u.train_from_iterator(text, trainers.UnigramTrainer(vocab_size=120, show_progress=False,
                                                    special_tokens=["<unk>", "<s>", "</s>"],
                                                    unk_token="<unk>"))
save(u, "unigram", {"tokenizer_class": "PreTrainedTokenizerFast"},
     {"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": {"content": "</s>"}})

w = Tokenizer(models.WordPiece(unk_token="[UNK]"))
w.pre_tokenizer = pre_tokenizers.Whitespace()
w.train_from_iterator(text, trainers.WordPieceTrainer(vocab_size=90, show_progress=False,
                                                      special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
w.add_special_tokens(["[SEP]", "[MASK]"])
save(w, "wordpiece", {"tokenizer_class": "PreTrainedTokenizerFast",
                      "eos_token": {"__type": "AddedToken", "content": "[SEP]", "lstrip": False,
                                    "normalized": False, "rstrip": False, "single_word": False,
                                    "special": True}})

out = {}
for d in ["bpe", "unigram", "wordpiece"]:
    tok = AutoTokenizer.from_pretrained(d)
    out[d] = {"vocab_size": len(tok), "eod": tok.eos_token_id}
    print(d, out[d], type(tok).__name__)
with open("expected.json", "w") as f:
    json.dump(out, f, indent=1)
