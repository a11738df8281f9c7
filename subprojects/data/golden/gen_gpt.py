"""Golden values for the indexed dataset and GPTDataset sample order, from megatron-core itself.

Writes small .bin/.idx inputs with megatron-core's IndexedDatasetBuilder, builds GPTDataset /
BlendedDataset / MockGPTDataset splits with BlendedMegatronDatasetBuilder, and records the token ids
of the first samples of every split (gpt_<case>_<split>.npy, int64 [n, seq+1], plus the dataset
ids of blends and the three index arrays of plain datasets). Also RandomState/default_rng draws.
Versions: megatron-core 0.16.1, numpy 2.4.6, torch 2.15 (CPU). Seeds: stated per case below.
Rerun: /opt/gv/bin/python gen_gpt.py (from this directory)."""
import json
import os
import shutil
import tempfile

import numpy as np
import torch
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
from megatron.core.datasets.blended_dataset import BlendedDataset
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

torch.distributed.get_rank = lambda *a, **k: 0  # BlendedDataset asks even without a process group
HERE = os.path.dirname(os.path.abspath(__file__))
N_KEEP = 12  # samples recorded per split


class Tok:  # the tokenizer fields GPTDataset reads
    vocab_size = 50257
    eod = 50256
    unique_identifiers = {"class": "GoldenTokenizer"}


def make_inputs():
    rs = np.random.RandomState(20240601)
    specs = {"a": (40, 1, 60), "b": (25, 5, 90), "c": (30, 1, 40)}
    for name, (docs, lo, hi) in specs.items():
        b = IndexedDatasetBuilder(os.path.join(HERE, f"ds_{name}.bin"), dtype=np.uint16)
        for _ in range(docs):
            n = int(rs.randint(lo, hi))
            b.add_item(torch.from_numpy(rs.randint(0, 50257, size=n).astype(np.int64)))
            b.end_document()
        b.finalize(os.path.join(HERE, f"ds_{name}.idx"))
    # several sequences per document, an empty document, int32 tokens, multimodal modes
    b = IndexedDatasetBuilder(os.path.join(HERE, "ds_multi.bin"), dtype=np.int32, multimodal=True)
    b.add_document(torch.tensor([1, 2, 3, 70000, 5]), [2, 3], modes=[1, 2])
    b.add_document(torch.tensor([], dtype=torch.int64), [], modes=[])
    b.add_item(torch.tensor([7, 8, 9]), mode=3)
    b.add_item(torch.tensor([-4]), mode=0)
    b.end_document()
    b.finalize(os.path.join(HERE, "ds_multi.idx"))
    # add_index: a merge of a and c
    b = IndexedDatasetBuilder(os.path.join(HERE, "ds_merged.bin"), dtype=np.uint16)
    b.add_index(os.path.join(HERE, "ds_a"))
    b.add_index(os.path.join(HERE, "ds_c"))
    b.finalize(os.path.join(HERE, "ds_merged.idx"))
    # short documents that end in eod, for the loss mask and position ids
    rs = np.random.RandomState(77)
    b = IndexedDatasetBuilder(os.path.join(HERE, "ds_e.bin"), dtype=np.uint16)
    for _ in range(30):
        n = int(rs.randint(1, 12))
        b.add_item(torch.from_numpy(np.append(rs.randint(0, 50256, size=n), Tok.eod)))
        b.end_document()
    b.finalize(os.path.join(HERE, "ds_e.idx"))


CASES = {  # name: (prefixes, weights, split, seq, seed, sizes [train, valid, test], extra opts)
    "single": (["ds_merged"], None, "900,80,20", 16, 1234, [50, 10, 5], {}),
    "epochs": (["ds_a"], None, "80,15,5", 32, 7, [200, 40, 30], {}),
    "final": (["ds_b"], None, "1,0,0", 8, 99, [1130, 0, 0], {}),
    "nodrop": (["ds_c"], None, "50,50,0", 10, 3, [20, 7, 0],
               {"drop_last_partial_validation_sequence": False}),
    "blend3": (["ds_a", "ds_b", "ds_c"], [0.5, 0.3, 0.2], "90,5,5", 16, 1234, [60, 12, 6], {}),
    "blend3nw": (["ds_a", "ds_b", "ds_c"], None, "90,5,5", 12, 5, [None, 20, None], {}),
    "blend1": (["ds_c"], [1.0], "70,20,10", 16, 11, [40, 8, 4], {}),
    "mock": (None, None, None, 64, 1234, [24, 8, 8], {}),
    "masks": (["ds_e"], None, "60,40,0", 16, 21, [10, 9, 0],
              {"drop_last_partial_validation_sequence": False, "eod_mask_loss": True,
               "reset_position_ids": True, "reset_attention_mask": True}),
}


def run_case(name, prefixes, weights, split, seq, seed, sizes, extra, cache):
    blend = None
    if prefixes is not None:
        blend = ([os.path.join(HERE, p) for p in prefixes], weights)
    extra = {"reset_position_ids": False, **extra}
    cfg = GPTDatasetConfig(random_seed=seed, sequence_length=seq, blend=blend, split=split,
                           path_to_cache=cache, tokenizer=Tok(),
                           **{"eod_mask_loss": False, "reset_attention_mask": False, **extra})
    cls = MockGPTDataset if prefixes is None else GPTDataset
    dss = BlendedMegatronDatasetBuilder(cls, sizes, lambda: True, cfg).build()
    meta = {}
    for split_name, ds in zip(["train", "valid", "test"], dss):
        if ds is None:
            meta[split_name] = None
            continue
        n = len(ds)
        keep = list(range(min(n, N_KEEP))) + ([n - 1] if n > N_KEEP else [])
        rows, ids = [], []
        for i in keep:
            if isinstance(ds, BlendedDataset):
                d = int(ds.dataset_index[i])
                text, _ = ds.datasets[d]._query_document_sample_shuffle_indices(
                    int(ds.dataset_sample_index[i]))
                ids.append(d)
            else:
                text, _ = ds._query_document_sample_shuffle_indices(i)
                ids.append(0)
            rows.append(text.astype(np.int64))
        base = f"gpt_{name}_{split_name}"
        np.save(os.path.join(HERE, base + ".npy"), np.stack(rows))
        np.save(os.path.join(HERE, base + "_ids.npy"), np.array(ids + keep, dtype=np.int64))
        if isinstance(ds, GPTDataset) and name in ("single", "epochs", "final"):
            np.save(os.path.join(HERE, base + "_doc.npy"), np.asarray(ds.document_index))
            np.save(os.path.join(HERE, base + "_sample.npy"), np.asarray(ds.sample_index))
            np.save(os.path.join(HERE, base + "_shuffle.npy"), np.asarray(ds.shuffle_index))
        if name == "masks":  # __getitem__: tokens, labels, loss_mask, position_ids
            items = [ds[i] for i in keep]
            np.save(os.path.join(HERE, base + "_items.npy"), np.stack([np.stack(
                [it["tokens"].numpy(), it["labels"].numpy(), it["loss_mask"].numpy(),
                 it["position_ids"].numpy()]) for it in items]).astype(np.int64))
            # and attention_mask (1, seq, seq), True where masked (reset_attention_mask)
            np.save(os.path.join(HERE, base + "_attn.npy"), np.stack(
                [it["attention_mask"].numpy()[0] for it in items]).astype(np.int64))
        meta[split_name] = n
    return meta


def main():
    make_inputs()
    cache = tempfile.mkdtemp()
    lens = {}
    for name, (prefixes, weights, split, seq, seed, sizes, extra) in CASES.items():
        lens[name] = run_case(name, prefixes, weights, split, seq, seed, sizes, extra, cache)
    shutil.rmtree(cache)
    with open(os.path.join(HERE, "gpt_cases.json"), "w") as f:
        json.dump(lens, f, indent=1, sort_keys=True)
    # RNG draws: RandomState(int), RandomState(array), shuffles, default_rng(0) mock lengths
    rs = np.random.RandomState(1234)
    a = np.arange(1000, dtype=np.int64)
    rs.shuffle(a)
    rs2 = np.random.RandomState([1, 2, 3, 2**32 - 1])
    b = np.arange(70000, dtype=np.int32)
    rs2.shuffle(b)
    lengths = np.random.default_rng(seed=0).integers(low=1, high=4096, size=100000, dtype=np.int32)
    # split strings -> split matrix (None as [-1, -1])
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix, parse_and_normalize_split)
    rows = []
    for s in ["949,50,1", "969, 30, 1", "1,1,1", "98,2", "0.7,0.2,0.1", "1,0,0", "3,3,1"]:
        m = convert_split_vector_to_split_matrix(parse_and_normalize_split(s))
        rows.append([v for b in m for v in (b if b is not None else (-1.0, -1.0))])
    np.save(os.path.join(HERE, "split_matrix.npy"), np.array(rows, dtype=np.float64))
    np.save(os.path.join(HERE, "rng_shuffle_1234.npy"), a)
    np.save(os.path.join(HERE, "rng_shuffle_array.npy"), b[:256].astype(np.int64))
    np.save(os.path.join(HERE, "rng_mock_lengths.npy"),
            np.concatenate([lengths[:256], [lengths.astype(np.int64).sum()]]).astype(np.int64))


if __name__ == "__main__":
    main()
