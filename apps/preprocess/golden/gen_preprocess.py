"""Expected mt-preprocess-data outputs, made the way Megatron's tools/preprocess_data.py makes them
(Encoder.encode: one document per line, sentences that tokenize to nothing dropped, --append-eod
adds eod to the last sequence) with tiktoken's gpt2 (0.14.0) as the tokenizer and megatron-core's
(0.16.1) IndexedDatasetBuilder as the writer; dtype = DType.optimal_dtype(vocab_size). Also
Llama2Tokenizer (tokenize: [bos] + sp.encode(text), eod = eos) and GPTSentencePieceTokenizer
(sp.encode(text)) with sentencepiece (0.2.1) on two models of
subprojects/data/golden/sentencepiece, and HuggingFaceTokenizer (AutoTokenizer(text).input_ids,
eod = eos_token_id; transformers 5.24) with subprojects/data/golden/hf_encode/llama3.
Rerun: /opt/gv/bin/python gen_preprocess.py (from this directory)."""
import json
import os

import numpy as np
import sentencepiece as spm
import tiktoken
import tiktoken.load
import torch
from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

HERE = os.path.dirname(os.path.abspath(__file__))
GPT2 = os.path.join(HERE, "..", "..", "..", "subprojects", "data", "tokenizer", "gpt2")
PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
enc = tiktoken.Encoding(
    name="gpt2", pat_str=PAT,
    mergeable_ranks=tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(GPT2, "vocab.bpe"),
        encoder_json_file=os.path.join(GPT2, "encoder.json")),
    special_tokens={"<|endoftext|>": 50256})

DOCS = [
    {"text": "Hello world! This is the first document.", "title": "First"},
    {"text": "", "title": "An empty text gets no EOD"},
    {"text": ["A list of", "", "sentences: each is a sequence."], "title": ""},
    {"text": "Ünïcödé, 日本語, emoji 😀 and <|endoftext|> as plain text.\n\n  code:\tx = 1",
     "title": "Second"},
    {"title": "key order differs", "text": "It's   spaced\u00a0out  "},
    {"text": "x" * 500 + " 1234567890", "title": "long"},
]
NULL_DOCS = [{"text": "1 2 3"}, {"text": "999 0"}, {"text": ["7", "8 9"]}]


def write(prefix, docs, keys, tokenize, vocab_size, eod, append_eod):
    for key in keys:
        b = IndexedDatasetBuilder(f"{prefix}_{key}_document.bin",
                                  dtype=DType.optimal_dtype(vocab_size))
        for data in docs:
            text = data[key]
            sentences = text if isinstance(text, list) else [text]
            doc_ids, lens = [], []
            for s in sentences:
                ids = tokenize(s)
                if len(ids) > 0:
                    doc_ids.extend(ids)
                    lens.append(len(ids))
            if len(doc_ids) > 0 and append_eod:
                doc_ids.append(eod)
                lens[-1] += 1
            b.add_document(torch.tensor(doc_ids, dtype=torch.int64), lens)
        b.finalize(f"{prefix}_{key}_document.idx")


with open(os.path.join(HERE, "input.jsonl"), "w") as f:
    for d in DOCS:
        f.write(json.dumps(d) + "\n")
with open(os.path.join(HERE, "input_null.jsonl"), "w") as f:
    for d in NULL_DOCS:
        f.write(json.dumps(d) + "\n")
write(os.path.join(HERE, "gpt2"), DOCS, ["text", "title"], enc.encode_ordinary, 50257, 50256,
      True)
write(os.path.join(HERE, "null"), NULL_DOCS, ["text"],
      lambda s: [int(x) for x in s.split(" ")] if s else [], 1001, 1000, False)
SP = os.path.join(HERE, "..", "..", "..", "subprojects", "data", "golden", "sentencepiece")
llama = spm.SentencePieceProcessor(model_file=os.path.join(SP, "enc_bpe_llama.model"))
write(os.path.join(HERE, "llama2"), DOCS, ["text", "title"],
      lambda s: [llama.bos_id()] + llama.encode(s), llama.vocab_size(), llama.eos_id(), True)
from transformers import AutoTokenizer  # noqa: E402  (HuggingFaceTokenizer.tokenize)
hf = AutoTokenizer.from_pretrained(os.path.join(HERE, "..", "..", "..", "subprojects", "data",
                                                "golden", "hf_encode", "llama3"))
write(os.path.join(HERE, "hf"), DOCS, ["text", "title"], lambda s: hf(s).input_ids, len(hf),
      hf.eos_token_id, True)
gptsp = spm.SentencePieceProcessor(model_file=os.path.join(SP, "enc_uni_nfkc.model"))
write(os.path.join(HERE, "gptsp"), DOCS, ["text"], gptsp.encode, gptsp.vocab_size(),
      gptsp.eos_id(), True)
