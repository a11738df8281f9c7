#!/usr/bin/env python3
"""Byte-level BPE tokenizers and what transformers encodes with them, for mt-preprocess-data's
HuggingFaceTokenizer (Megatron's tokenize(): AutoTokenizer(text).input_ids, the post-processor's
special tokens included).

  llama3/  Llama-3's pre-tokenizer (Split on the cl100k-style regex, isolated, then ByteLevel
           without its regex), ignore_merges, added special tokens, a TemplateProcessing
           post-processor that puts <|begin_of_text|> first (in a Sequence with ByteLevel)
  gpt2/    GPT-2 style: ByteLevel with its own regex, no prefix space, <|endoftext|> added, no
           post-processor
  qwen2/   Qwen2's: the NFC normalizer, the cl100k-style Split with digits one by one, ByteLevel
           without regex, <|endoftext|> and <|im_start|> added, no template
The llama3 vocabulary also holds "Ġsupercalifragilistic", which no merge makes: ignore_merges
must take it whole. encode.json: {"strings": [...], "<dir>": {"ids": [[...] per string],
"decoded": [...], "vocab_size": len(tok), "eod": tok.eos_token_id}, "splits": {"llama3"|"gpt2":
[[pieces] per split string]}}, the splits of the three pre-tokenizer regexes by the regex module
(the same backtracking semantics as the Oniguruma engine tokenizers uses) on "split_strings";
"nfc": unicodedata.normalize("NFC", s) of "nfc_strings" (Unicode 14.0 here).

    pip install transformers tokenizers   (tested: transformers 5.24, tokenizers 0.23)
    python3 gen.py   (from this directory)
"""
import json
import os

import unicodedata

import regex

from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors, trainers)
from transformers import AutoTokenizer

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

corpus = """In the beginning God created the heaven and the earth.
And the earth was without form, and void; and darkness was upon the face of the deep.
The quick brown fox jumps over the lazy dog 1234567890 times. It's, we're, they'll, I'd.
Megatron trains large language models in C and CUDA, from one GPU to many.
Über den Wolken muss die Freiheit wohl grenzenlos sein. Ça va très bien, merci.
東京は日本の首都です。 Русский текст. def f(x):\n    return x ** 2\n\n\tpass
Numbers: 3.14159, 2,718, 1e-9, $42.00, 100% and #hashtags @mentions!!! ...""".split("\n")
corpus = [line for line in corpus for _ in range(20)]

strings = [
    "Hello world",
    "  leading and trailing  ",
    "multiple    inner     spaces",
    "tab\tnewline\nreturn\r\n end\n\n\n",
    "It's IT'S they'll WE'RE I'd o'clock 'tis",
    "digits 1234567 and 3.14159 and 1,000,000",
    "Ünïcödé ñ ç ß Ελληνικά Русский",
    "東京は日本の首都です。北京是中国的首都。",
    "emoji 😀🚀 and symbols ∑∫√",
    "code:\n    if x:\n        return [1, 2]\n",
    "punctuation!!! ... ??? --- ;;;",
    "special <|begin_of_text|> and <|end_of_text|> and <|endoftext|> inside",
    "",
    " ",
    "x",
    "\n",
    "   \n  \n  x",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "a\u00a0b\u2003c\u3000d",
    "mixed123abc456 and 1a2b3c",
    "a supercalifragilistic b",
    "NFD: e\u0301te\u0301 A\u030a \u212b \u1100\u1161\u11a8 o\u0308\u0304 q\u0307\u0323",
]
nfc_strings = [
    "plain ascii", "e\u0301", "A\u030a\u212b\u00c5", "\u1100\u1161\u11a8 \u1100\u1161 \uac00\u11a8",
    "o\u0308\u0304 q\u0307\u0323 a\u0323\u0302\u0301", "\u0301leading mark", "\u0344 \u0f73 \u2126",
    "\u1e9b\u0323 \ufb01 \u2460 \uff21", "\u0928\u093c \u0929 \u05d0\u05b8", "u\u0308\u0301\u0300",
    "\U0001d15e \U0001d160 \U0002f800", "\u0915\u093c\u094d\u0937",
    "z\u0308\u0301 blocked, z\u0323\u0301 not",
]
split_strings = strings + [
    "it'sx don'tcha WE'REgoing I'LLx they'dX 'S 's",
    "x\n   y\n\n  z \r\n\t w\n",
    "12345678901 1,234 ٣٤٥٦ ½¼",
    "$100 #tag @user (paren) [br] {cu} <an>",
    "\u00a0\u00a0a \u2003\u2003 b\u3000\u3000\u3000",
    "a\n\n\n\nb  \n  \n  c\t\t\nd",
    "...!!!\n\n???",
]


def train(pre, special, post):
    t = Tokenizer(models.BPE(ignore_merges=post is not None))
    t.pre_tokenizer = pre
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=600, show_progress=False, special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if post is not None:
        t.post_processor = post
    return t


out = {"strings": strings, "split_strings": split_strings,
       "splits": {"llama3": [regex.findall(LLAMA3, s) for s in split_strings],
                  "qwen2": [regex.findall(QWEN2, s) for s in split_strings],
                  "gpt2": [regex.findall(GPT2, s) for s in split_strings]},
       "nfc_strings": nfc_strings,
       "nfc": [unicodedata.normalize("NFC", s) for s in nfc_strings]}
cases = {
    "llama3": (pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]),
        ["<|begin_of_text|>", "<|end_of_text|>"],
        "<|end_of_text|>"),
    "gpt2": (pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"], "<|endoftext|>"),
    "qwen2": (pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]),
        ["<|endoftext|>", "<|im_start|>"], "<|endoftext|>"),
}
for name, (pre, special, eos) in cases.items():
    post = None
    if name == "llama3":
        post = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", 0)])])
    t = train(pre, special, post)
    if name == "qwen2":
        t.normalizer = normalizers.NFC()
    if post is not None:  # the template's id: the trained one
        t.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                special_tokens=[("<|begin_of_text|>", t.token_to_id("<|begin_of_text|>"))])])
    os.makedirs(name, exist_ok=True)
    t.save(f"{name}/tokenizer.json")
    if name == "llama3":  # a token no merge makes (ignore_merges takes it whole)
        with open(f"{name}/tokenizer.json") as f:
            j = json.load(f)
        top = max(list(j["model"]["vocab"].values()) + [a["id"] for a in j["added_tokens"]])
        j["model"]["vocab"]["Ġsupercalifragilistic"] = top + 1
        with open(f"{name}/tokenizer.json", "w") as f:
            json.dump(j, f, ensure_ascii=False, indent=2)
    with open(f"{name}/tokenizer_config.json", "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos}, f, indent=1)
    tok = AutoTokenizer.from_pretrained(name)
    ids = [tok(s).input_ids for s in strings]
    out[name] = {"ids": ids, "decoded": [tok.decode(i) for i in ids], "vocab_size": len(tok),
                 "eod": tok.eos_token_id}
    print(name, len(tok), [len(i) for i in ids])
with open("encode.json", "w") as f:
    json.dump(out, f, indent=0, ensure_ascii=False)
