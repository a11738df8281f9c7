"""Reference draws for golden generators: Philox4x32-10 from randomgen (an implementation
independent of core's philox.h) and the dropout masks built on it (mt_dropout_config in mt-tensor,
mt_attn_config.dropout in mt-attention). Import it with
sys.path.insert(0, <path to subprojects/core/tools>). randomgen >= 2.0, numpy."""
import numpy as np


def words(seed, stream, nblocks):
    """The 4 * nblocks 32-bit words of blocks 0.. of `stream` under key `seed` (64 bits each):
    counter (block as 64 bits, stream as 64 bits). randomgen steps its 128-bit counter before each
    block, so it starts one below."""
    from randomgen import Philox
    gen = Philox(number=4, width=32)
    st = gen.state
    ctr = ((stream << 64) - 1) % (1 << 128)
    st["state"]["counter"] = np.array([(ctr >> (32 * i)) & 0xFFFFFFFF for i in range(4)], np.uint32)
    st["state"]["key"] = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)
    st["buffer_pos"] = 4
    gen.state = st
    return np.array(gen.random_raw(4 * nblocks), dtype=np.uint64)


def threshold(p):
    """mt_dropout_threshold: floor((1 - p) 2^32) for the float32 p."""
    return min(int((1.0 - float(np.float32(p))) * 2.0**32), 2**32 - 1)


def stream(sample, site):
    """mt_dropout_stream: site in the high 32 bits, the sample id's low 32 bits below."""
    return (site << 32) | (int(sample) & 0xFFFFFFFF)


def keep(seed, site, ids, n, p):
    """mt_dropout's mask, (len(ids), n) bool: element e of sample id s kept iff word e % 4 of
    block e // 4 is below the threshold."""
    thr = threshold(p)
    return np.array([words(seed, stream(s, site), (n + 3) // 4)[:n] < thr for s in ids])


def attn_keep(seed, site, ids, H, T, p):
    """mt_attn_config.dropout's mask, (len(ids), H, T, T) bool: weight (h, i, j) kept iff word
    2 (i % 2) + j % 2 of block (h T2 + i // 2) T2 + j // 2, T2 = ceil(T / 2), is below the
    threshold."""
    thr, T2 = threshold(p), (T + 1) // 2
    h, i, j = np.meshgrid(np.arange(H), np.arange(T), np.arange(T), indexing="ij")
    word = 4 * ((h * T2 + i // 2) * T2 + j // 2) + 2 * (i & 1) + (j & 1)
    return np.array([words(seed, stream(s, site), H * T2 * T2)[word] < thr for s in ids])
