/* mt-ckpt: sharded checkpoints. DIR/iter_0000100/ holds one safetensors shard per writing rank
 * and index.json (global shapes, every shard's slices, layout, state blobs, CRC32C per chunk);
 * DIR/latest_checkpointed_iteration.txt names the newest complete one. Loads reshard to any
 * layout by reading only the byte ranges that overlap the requested slices. */
#ifndef MT_CKPT_H
#define MT_CKPT_H

#include <mt/core.h>
#include <mt/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MT_CKPT_VERSION     1          /* index.json "version" this library writes */
#define MT_CKPT_CHUNK_BYTES (4u << 20) /* one CRC32C per 4 MiB of every shard file */
#define MT_CKPT_LATEST      "latest_checkpointed_iteration.txt"

/* The parallel layout a checkpoint was saved with (recorded, never required on load). */
typedef struct mt_ckpt_layout {
    int tp, pp, dp, cp, ep;
} mt_ckpt_layout;
#define MT_CKPT_LAYOUT_INIT \
    { 1, 1, 1, 1, 1 }

/* How the ranks of one save meet. NULL group: a single process. `gather` gives rank 0 every
 * rank's string in all[r] (malloc'd; the caller frees them), other ranks get nothing; `bcast`
 * sends rank 0's *value to every rank and doubles as a barrier. mt-comm provides one over MPI;
 * tests use threads. */
typedef struct mt_ckpt_group {
    int rank, nranks;
    void *ctx;
    mt_status (*gather)(void *ctx, const char *mine, char **all);
    mt_status (*bcast)(void *ctx, int64_t *value);
} mt_ckpt_group;

struct mt_comm;
/* Fills `out` with a group over `comm` (host collectives through MPI); `comm` must outlive the
 * writers that use it. MT_ERR_UNSUPPORTED when built without mt-comm. */
MT_API mt_status mt_ckpt_group_comm(mt_ckpt_group *out, struct mt_comm *comm);

/* One local piece of a logical tensor: `tensor` (contiguous, host or device) holds the box
 * [offset, offset + tensor->shape) of a tensor whose global shape is `global_shape` (NULL: the
 * tensor is whole). Only replica 0 is written, so data-parallel copies are saved once. */
typedef struct mt_ckpt_item {
    const char *name;
    const mt_tensor *tensor;
    const int64_t *global_shape; /* tensor->ndim entries, or NULL */
    const int64_t *offset;       /* tensor->ndim entries, or NULL for zeros */
    int replica;
} mt_ckpt_item;

/* Opaque state saved beside the tensors. `args` must be JSON text (stored as JSON); `sampler`
 * and `rng` are strings; `rng` is kept per rank (RNG states differ by rank). Any may be NULL. */
typedef struct mt_ckpt_state {
    const char *args;
    const char *sampler;
    const char *rng;
} mt_ckpt_state;

typedef struct mt_ckpt_writer mt_ckpt_writer;

typedef struct mt_ckpt_writer_config {
    size_t size;                /* = sizeof(mt_ckpt_writer_config) */
    const char *dir;            /* the save directory (created if missing) */
    mt_ckpt_layout layout;      /* recorded in index.json */
    const mt_ckpt_group *group; /* NULL: one process; the group must outlive the writer */
    int async;                  /* 1: mt_ckpt_save snapshots to host and returns; a thread writes */
    int fsync;                  /* 1 (default): fsync files and directories before renaming */
    int keep;                   /* > 0: after a save, delete all but the newest `keep` iterations */
    uint32_t chunk_bytes;       /* checksum granularity; 0: MT_CKPT_CHUNK_BYTES */
} mt_ckpt_writer_config;
#define MT_CKPT_WRITER_CONFIG_INIT \
    { sizeof(mt_ckpt_writer_config), NULL, MT_CKPT_LAYOUT_INIT, NULL, 0, 1, 0, 0 }

/* Creates a writer (no I/O besides creating `dir`). */
MT_API mt_status mt_ckpt_writer_create(const mt_ckpt_writer_config *cfg, mt_ckpt_writer **out);
/* Waits for a pending async save, then frees the writer. NULL is a no-op. */
MT_API void mt_ckpt_writer_destroy(mt_ckpt_writer *w);

/* Collective: saves `items` as iteration `iteration`. Each rank writes only its own replica-0
 * slices into DIR/iter_N.tmp/rank_RRRRR.safetensors; rank 0 checks that the slices tile every
 * tensor, writes index.json, fsyncs, renames to DIR/iter_N and only then updates latest. A crash
 * at any point leaves the previous checkpoint intact. Sync mode: returns when all is durable.
 * Async mode: waits for the previous save, copies every item to host memory (items may be
 * reused on return), starts the write on a background thread and returns; errors surface from
 * the next mt_ckpt_save or mt_ckpt_wait. */
MT_API mt_status mt_ckpt_save(mt_ckpt_writer *w, int64_t iteration, const mt_ckpt_item *items,
                              int n, const mt_ckpt_state *state);
/* Collective: blocks until the pending async save (if any) is complete and published; returns
 * its status. */
MT_API mt_status mt_ckpt_wait(mt_ckpt_writer *w);

/* ---- loading ---- */

typedef struct mt_ckpt mt_ckpt;

enum {
    MT_CKPT_OPEN_VERIFY = 1,   /* check every chunk checksum of every shard at open */
    MT_CKPT_OPEN_FALLBACK = 2, /* if the iteration fails to open, try earlier ones in DIR */
};
#define MT_CKPT_ITER_LATEST (-1)

/* Opens DIR's iteration `iteration` (MT_CKPT_ITER_LATEST: the one latest names): parses and
 * checks index.json (version, shapes, dtypes, slices tile each tensor) and that every shard
 * exists with its recorded size. Errors name the file and tensor. */
MT_API mt_status mt_ckpt_open(const char *dir, int64_t iteration, int flags, mt_ckpt **out);
MT_API void mt_ckpt_close(mt_ckpt *c); /* NULL is a no-op */

MT_API int64_t mt_ckpt_iteration(const mt_ckpt *c);
MT_API mt_ckpt_layout mt_ckpt_saved_layout(const mt_ckpt *c);
/* Number of ranks that saved it (the length of the per-rank rng list). */
MT_API int mt_ckpt_saved_ranks(const mt_ckpt *c);
/* Saved state, owned by the handle: args as compact JSON text ("null" if none), sampler and
 * rng of saved rank `rank` (NULL if none). */
MT_API const char *mt_ckpt_args(const mt_ckpt *c);
MT_API const char *mt_ckpt_sampler(const mt_ckpt *c);
MT_API const char *mt_ckpt_rng(const mt_ckpt *c, int rank);

/* Logical tensors: count, i-th name (sorted), and the global dtype/shape of one
 * (MT_ERR_INVALID_ARG if absent). `shape` has room for MT_MAX_DIMS. */
MT_API int mt_ckpt_count(const mt_ckpt *c);
MT_API const char *mt_ckpt_name(const mt_ckpt *c, int i);
MT_API mt_status mt_ckpt_info(const mt_ckpt *c, const char *name, mt_dtype *dtype, int *ndim,
                              int64_t *shape);

/* Reads the box [offset, offset + dst->shape) of tensor `name` (offset NULL: zeros) into `dst`
 * (contiguous host memory, the saved dtype), from whichever shards overlap it, reading only the
 * overlapping 4 MiB chunks and verifying each chunk's CRC32C. Blocking. */
MT_API mt_status mt_ckpt_read(mt_ckpt *c, const char *name, mt_tensor *dst, const int64_t *offset);
/* mt_ckpt_read for every item (items[i].tensor is the destination; global_shape, if given,
 * must match the saved one). */
MT_API mt_status mt_ckpt_load(mt_ckpt *c, const mt_ckpt_item *items, int n);
/* Reads every shard whole and checks all chunk checksums. */
MT_API mt_status mt_ckpt_verify(mt_ckpt *c);

/* Iteration named by DIR/latest_checkpointed_iteration.txt (MT_ERR_IO if absent). */
MT_API mt_status mt_ckpt_latest(const char *dir, int64_t *iteration);

/* CRC32C (Castagnoli) of `n` bytes continuing from `crc` (start with 0). */
MT_API uint32_t mt_crc32c(uint32_t crc, const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* MT_CKPT_H */
