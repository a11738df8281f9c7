#!/usr/bin/env python3
"""SentencePiece models and what sentencepiece's encode and decode make of test strings, for
mt-preprocess-data's Llama2Tokenizer and GPTSentencePieceTokenizer (Megatron's tokenize():
sp.encode(text), with bos first for Llama2Tokenizer).

  enc_bpe_llama.model   BPE as Llama-2's: identity normalizer, no extra-whitespace removal,
                        byte fallback, split digits, a user-defined symbol
  enc_bpe_nfkc.model    BPE with the default nmt_nfkc normalizer (a precompiled charsmap), no
                        byte fallback (unknown characters become unk)
  enc_uni_nfkc.model    unigram, nmt_nfkc, no byte fallback
  enc_uni_bytes.model   unigram, identity, byte fallback, whitespace as suffix
encode.json: {"strings": [...], "raw": [hex of byte strings with invalid UTF-8], "<model>":
{"ids": [[...] per string], "decoded": [...], "raw_ids": [[...] per byte string], "pieces": n,
"bos": id, "eos": id}}.

    pip install sentencepiece   (tested: 0.2.1)
    python3 gen_encode.py   (from this directory)
"""
import io
import json

import sentencepiece as spm

corpus = """In the beginning God created the heaven and the earth.
And the earth was without form, and void; and darkness was upon the face of the deep.
The quick brown fox jumps over the lazy dog 1234567890 times.
Megatron trains large language models in C and CUDA, from one GPU to many.
Pack my box with five dozen liquor jugs; sphinx of black quartz, judge my vow!
Über den Wolken muss die Freiheit wohl grenzenlos sein. Ça va très bien, merci.
El niño comió una manzana. Ελληνικά γράμματα. Русский текст для проверки.
東京は日本の首都です。北京是中国的首都。 한국어 문장입니다.
Numbers: 3.14159, 2,718, 1e-9, $42.00, 100% and #hashtags @mentions.
Tabs\tand   multiple   spaces, and a trailing space """.split("\n")
corpus = [line for line in corpus for _ in range(30)]

strings = [
    "Hello world",
    "  leading and trailing  ",
    "multiple    inner     spaces",
    "tab\tnewline\nreturn\r end",
    "The quick brown fox jumps over the lazy dog.",
    "digits 0123456789 and 3.14159 and 1,000,000",
    "Ünïcödé ñ ç ß Ελληνικά Русский",
    "東京は日本の首都です。北京是中国的首都。",
    "emoji 😀🚀 and symbols ∑∫√ ⁇",
    "fullwidth ＡＢＣ１２３ and ligature ﬁ ㎏ ①",
    "<tool>call</tool> and <tool>",
    "",
    " ",
    "x",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "unknown ☃ snowman ♞ knight ⌘ command",
    "In the beginning God created the heaven and the earth.",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "\u00a0non-breaking\u2003em\u3000ideographic spaces",
    "combining e\u0301 vs \u00e9 and Å vs A\u030a",
]

raw = [b"a\xffb", b"\xc3(x", b"ok \xe2\x82", b"\xf0\x9f\x98 end", b"\xed\xa0\x80 surrogate",
       b"\xc0\xaf overlong"]

configs = [
    ("enc_bpe_llama", dict(model_type="bpe", vocab_size=400, normalization_rule_name="identity",
                           remove_extra_whitespaces=False, byte_fallback=True, split_digits=True,
                           user_defined_symbols=["<tool>"], character_coverage=0.9995)),
    ("enc_bpe_nfkc", dict(model_type="bpe", vocab_size=300, character_coverage=0.98)),
    ("enc_uni_nfkc", dict(model_type="unigram", vocab_size=300, character_coverage=0.98)),
    ("enc_uni_bytes", dict(model_type="unigram", vocab_size=400, normalization_rule_name="identity",
                           byte_fallback=True, treat_whitespace_as_suffix=True,
                           character_coverage=0.98)),
]

out = {"strings": strings, "raw": [r.hex() for r in raw]}
for name, kw in configs:
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_writer=buf,
                                   hard_vocab_limit=False, seed_sentencepiece_size=5000,
                                   num_threads=1, **kw)
    with open(f"{name}.model", "wb") as f:
        f.write(buf.getvalue())
    sp = spm.SentencePieceProcessor(model_file=f"{name}.model")
    ids = [sp.encode(s) for s in strings]
    out[name] = {"ids": ids, "decoded": [sp.decode(i) for i in ids],
                 "raw_ids": [sp.encode(r) for r in raw],
                 "pieces": sp.get_piece_size(), "bos": sp.bos_id(), "eos": sp.eos_id()}
    print(name, sp.get_piece_size(), [len(i) for i in ids])
with open("encode.json", "w") as f:
    json.dump(out, f, indent=0, ensure_ascii=False)
