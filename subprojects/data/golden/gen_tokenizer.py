"""Golden GPT-2 token ids from tiktoken (0.14.0) on a varied corpus, with the vocabulary shipped in
../tokenizer/gpt2 (no network). Bytes are decoded as Python's bytes.decode("utf-8", "replace")
(invalid UTF-8 -> U+FFFD) before tiktoken sees them. Writes tokenizer_corpus.bin (per case: u32
length, u8 allow_special, bytes), tokenizer_ids.npy (all ids, uint16) and tokenizer_counts.npy
(ids per case). Random cases: random.Random(7). Rerun: /opt/gv/bin/python gen_tokenizer.py"""
import os
import random
import struct

import numpy as np
import tiktoken
import tiktoken.load

HERE = os.path.dirname(os.path.abspath(__file__))
GPT2 = os.path.join(HERE, "..", "tokenizer", "gpt2")
PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

enc = tiktoken.Encoding(
    name="gpt2", pat_str=PAT,
    mergeable_ranks=tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(GPT2, "vocab.bpe"),
        encoder_json_file=os.path.join(GPT2, "encoder.json")),
    special_tokens={"<|endoftext|>": 50256})

FIXED = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog. 1234567890",
    "I'm sure you're right; they've said it's what we'll do, he'd agree. DON'T 'S 'Ll",
    "   leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\n  indented\r\n\r\nCRLF  \n",
    " " * 40 + "x" + "\n" * 17 + "\t \t y",
    "digits 3.14159 1,000,000 0x1F 12345678901234567890 ٣٤٥ Ⅻ ½ x² ９９",
    "Größe, naïve café, Ærøskøbing, İstanbul, ß",
    "Привет, мир! Ελληνικά κείμενα.",
    "日本語のテキストと中文文本，한국어 텍스트。",
    "العربية نص، עברית טקסט",
    "हिन्दी भाषा और தமிழ் மொழி, ภาษาไทย",
    "emoji 😀😃🤖 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✨",
    "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n\nif __name__ == '__main__':\n\tf(3)\n",
    "int main(void) { printf(\"%d\\n\", a[i] != b->c && !d); return 0; }",
    "non\u00a0breaking\u3000ideographic\u2009thin\u2028line sep\u0085next",
    "combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937",
    "<|endoftext|>",
    "before<|endoftext|>after <|endoftext|> <|endoftext|><|endoftext|>",
    "mixed123abc___---!!!???...",
    "a" * 3000,
    "",
    "\n",
    "'",
    "ZWJ\u200dand\ufeffBOM and \U0001f600\U0001f3fb private \ue000 cuneiform \U00012000",
]
INVALID = [
    b"invalid \xff\xfe bytes",
    b"truncated \xe2\x82 euro and \xc3\x28 and \xf0\x9f\x98",
    b"surrogate \xed\xa0\x80 overlong \xc0\xaf \xe0\x80\xaf end",
    b"\x80\x80 lone continuation, \xf5\x80 above max",
    b"\xf4\x90\x80\x80 beyond U+10FFFF",
]


def random_text(rng):
    pools = [(0x20, 0x7e), (0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff),
             (0x590, 0x6ff), (0x900, 0xdff), (0x1100, 0x11ff), (0x2000, 0x206f), (0x3000, 0x30ff),
             (0x4e00, 0x4fff), (0xac00, 0xad00), (0x1f300, 0x1f6ff), (0x10000, 0x1ffff)]
    out = []
    for _ in range(rng.randint(1, 60)):
        r = rng.random()
        if r < 0.15:
            out.append(rng.choice([" ", "  ", "\n", "\t", " \n ", "'s", "'ll", "'", "   "]))
        else:
            a, b = rng.choice(pools)
            cp = rng.randint(a, b)
            if 0xd800 <= cp <= 0xdfff:
                cp = 0x41
            out.append(chr(cp))
    return "".join(out)


def main():
    rng = random.Random(7)
    cases = [(s.encode("utf-8"), 0) for s in FIXED]
    cases += [(s.encode("utf-8"), 1) for s in FIXED if "<|endoftext|>" in s]
    cases += [(b, 0) for b in INVALID]
    cases += [(random_text(rng).encode("utf-8"), 0) for _ in range(150)]
    ids, counts = [], []
    with open(os.path.join(HERE, "tokenizer_corpus.bin"), "wb") as f:
        for raw, special in cases:
            text = raw.decode("utf-8", "replace")
            if special:
                got = enc.encode(text, allowed_special="all")
            else:
                got = enc.encode_ordinary(text)
            assert enc.decode_bytes(got) == text.encode("utf-8")
            ids += got
            counts.append(len(got))
            f.write(struct.pack("<IB", len(raw), special) + raw)
    np.save(os.path.join(HERE, "tokenizer_ids.npy"), np.array(ids, dtype=np.uint16))
    np.save(os.path.join(HERE, "tokenizer_counts.npy"), np.array(counts, dtype=np.int64))


if __name__ == "__main__":
    main()
