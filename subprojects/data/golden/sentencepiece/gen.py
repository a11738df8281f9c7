#!/usr/bin/env python3
"""Tiny SentencePiece models and what sentencepiece says of them, for mt_data_sentencepiece_info
(Megatron's Llama2Tokenizer and GPTSentencePieceTokenizer: vocab_size = the piece count,
eod = eos_id()).

  unigram.model  a unigram model with the default special ids (unk 0, bos 1, eos 2: eos_id not
                 written, protobuf's default)
  bpe.model      a BPE model with eos moved (eos 1, bos 2, pad 3, unk 0: eos_id written)
expected.json: {file: {"vocab_size": sp.vocab_size(), "eod": sp.eos_id()}}.

    pip install sentencepiece   (tested: 0.2.x)
    python3 gen.py   (from this directory)
"""
import io
import json

import sentencepiece as spm

text = ["the quick brown fox jumps over the lazy dog",
        "megatron trains large language models in c and cuda",
        "pack my box with five dozen liquor jugs",
        "sphinx of black quartz judge my vow"] * 20

out = {}
for name, kw in [("unigram", dict(model_type="unigram", vocab_size=60)),
                 ("bpe", dict(model_type="bpe", vocab_size=70, unk_id=0, eos_id=1, bos_id=2,
                              pad_id=3))]:
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=buf,
                                   character_coverage=1.0, hard_vocab_limit=False,
                                   normalization_rule_name="identity", **kw)
    with open(f"{name}.model", "wb") as f:
        f.write(buf.getvalue())
    sp = spm.SentencePieceProcessor(model_file=f"{name}.model")
    out[f"{name}.model"] = {"vocab_size": sp.vocab_size(), "eod": sp.eos_id()}
    print(name, out[f"{name}.model"], sp.get_piece_size())
with open("expected.json", "w") as f:
    json.dump(out, f, indent=1)
