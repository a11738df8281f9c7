/* mt-comm: communicators over NCCL (device tensors) and MPI (host tensors), the world from the
 * launcher's environment, Megatron's process grid, and timeouts instead of silent hangs. The header
 * is the same in every build: a backend that was not built returns MT_ERR_UNSUPPORTED. */
#ifndef MT_COMM_H
#define MT_COMM_H

#include <mt/core.h>
#include <mt/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the launcher's environment ---- */

typedef enum mt_launcher {
    MT_LAUNCHER_NONE = 0, /* no launcher: a world of one */
    MT_LAUNCHER_MPI,      /* mpirun / mpiexec: OMPI_COMM_WORLD_* or PMI_* */
    MT_LAUNCHER_TORCHRUN, /* torchrun --no-python: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT */
    MT_LAUNCHER_SLURM,    /* srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID */
} mt_launcher;

typedef struct mt_comm_env {
    mt_launcher launcher;
    int rank, world_size, local_rank;
    char master_addr[256]; /* torchrun only; "" otherwise */
    int master_port;       /* torchrun only; 0 otherwise */
} mt_comm_env;

/* Reads rank, world size and local rank from the launcher's variables (mpirun, then torchrun, then
 * srun; none: a world of one). A missing, malformed or inconsistent variable is MT_ERR_INVALID_ARG
 * naming the variables. Pure: reads getenv only. */
MT_API mt_status mt_comm_env_read(mt_comm_env *out);
/* "none", "mpirun", "torchrun", "srun". */
MT_API const char *mt_launcher_name(mt_launcher l);

/* ---- communicators ---- */

typedef struct mt_comm mt_comm; /* opaque; one per (group, rank); MPI and/or NCCL underneath */

typedef enum mt_redop {
    MT_REDOP_SUM = 0,
    MT_REDOP_AVG,
    MT_REDOP_MAX,
    MT_REDOP_MIN
} mt_redop;

typedef enum mt_comm_backends {
    MT_COMM_AUTO = 0, /* MPI when built and launched by an MPI launcher or srun; NCCL when built
                         and this process sees a GPU */
    MT_COMM_HOST,     /* MPI only: host tensors (no GPU is touched) */
    MT_COMM_DEVICE,   /* MPI when available, and NCCL required */
} mt_comm_backends;

#define MT_COMM_DEFAULT_TIMEOUT_S 600.0 /* Megatron's --distributed-timeout-minutes 10 */

typedef struct mt_comm_config {
    size_t size;               /* = sizeof(mt_comm_config), so the struct can grow */
    mt_comm_backends backends; /* which backends to bring up */
    double timeout_s;          /* every blocking wait; <= 0: MT_COMM_DEFAULT_TIMEOUT_S */
} mt_comm_config;
#define MT_COMM_CONFIG_INIT \
    { sizeof(mt_comm_config), MT_COMM_AUTO, 0.0 }

/* Creates the world communicator from the launcher's environment (mt_comm_env_read): initializes
 * MPI if it is built, launched by mpirun/srun and not yet initialized; sets the GPU from the local
 * rank; bootstraps NCCL by MPI_Bcast of the unique id, or without MPI through NCCL_COMM_ID (set to
 * MASTER_ADDR:MASTER_PORT+1 under torchrun). Blocking, bounded by the timeout. cfg NULL: defaults.
 * Also calls mt_log_set_rank(rank). Destroy the world last (it finalizes MPI if it initialized it). */
MT_API mt_status mt_comm_world_create(const mt_comm_config *cfg, mt_comm **out);
/* Splits `parent` by `color` (< 0: this rank joins no group and *out is NULL), ordered by `key`,
 * like MPI_Comm_split / ncclCommSplit. Collective over `parent`; blocking, bounded by the timeout.
 * `name` ("tp", "dp") appears in every error of the new communicator; it inherits the timeout. */
MT_API mt_status mt_comm_split(mt_comm *parent, int color, int key, const char *name,
                               mt_comm **out);
/* Frees the communicator (NCCL: finalize, or abort when it timed out or failed). NULL is a no-op. */
MT_API void mt_comm_destroy(mt_comm *comm);
/* Ends the whole job now after a failure on this rank alone, so that no peer waits in a collective
 * until its timeout: aborts NCCL, then MPI_Abort on MPI_COMM_WORLD (the launcher stops every rank),
 * or without MPI exits with `code` (torchrun's agent then stops the others). Never returns. */
MT_API void mt_comm_abort_job(mt_comm *world, int code);

MT_API int mt_comm_rank(const mt_comm *comm);
MT_API int mt_comm_size(const mt_comm *comm);
/* The GPU this rank drives (from the local rank), or the CPU when NCCL is not up. */
MT_API mt_device mt_comm_device(const mt_comm *comm);
MT_API const char *mt_comm_name(const mt_comm *comm);
/* 1 if host tensors / device tensors can be communicated (MPI or a world of one / NCCL is up). */
MT_API int mt_comm_has_host(const mt_comm *comm);
MT_API int mt_comm_has_device(const mt_comm *comm);
/* Sets the timeout of every later blocking wait on this communicator (<= 0: the default). */
MT_API void mt_comm_set_timeout(mt_comm *comm, double seconds);
/* 1 if this build has MPI / NCCL. */
MT_API int mt_comm_have_mpi(void);
MT_API int mt_comm_have_nccl(void);

/* ---- collectives ----
 * Every operation takes contiguous tensors of one dtype (all mt_dtype values; reductions of u16 are
 * MT_ERR_UNSUPPORTED on NCCL). Device tensors go through NCCL, enqueued on `stream`, returning
 * before completion: mt_comm_wait() bounds the wait. Host tensors go through MPI and block until
 * done or until the timeout (`stream` is ignored). A timeout is MT_ERR_TIMEOUT naming the group,
 * the operation, the count and this rank; the communicator is then aborted and every later call on
 * it fails. Counts are elements per rank. */

/* dst = op over ranks of src (dst == src: in place). Same shape and dtype. AVG of integers
 * truncates. */
MT_API mt_status mt_comm_allreduce(mt_comm *comm, mt_tensor *dst, const mt_tensor *src, mt_redop op,
                                   mt_stream stream);
/* dst (n*count elements) = the ranks' src (count each) in rank order. In place when src is
 * dst's own chunk (src->data == dst->data + rank*count elements). */
MT_API mt_status mt_comm_allgather(mt_comm *comm, mt_tensor *dst, const mt_tensor *src,
                                   mt_stream stream);
/* dst (count) = chunk `rank` of op over ranks of src (n*count). In place when dst is src's own
 * chunk (dst->data == src->data + rank*count elements). */
MT_API mt_status mt_comm_reduce_scatter(mt_comm *comm, mt_tensor *dst, const mt_tensor *src,
                                        mt_redop op, mt_stream stream);
/* dst = root's src on every rank. src is read on the root only; src NULL or == dst: in place. */
MT_API mt_status mt_comm_broadcast(mt_comm *comm, mt_tensor *dst, const mt_tensor *src, int root,
                                   mt_stream stream);
/* Chunk j of src (numel/n elements) goes to rank j; chunk i of dst comes from rank i. Not in place. */
MT_API mt_status mt_comm_alltoall(mt_comm *comm, mt_tensor *dst, const mt_tensor *src,
                                  mt_stream stream);
/* Like alltoall with per-peer counts (elements): rank j gets send_counts[j] elements of src (packed
 * in rank order); recv_counts[i] elements come from rank i, packed into dst in rank order. The
 * counts must agree pairwise across ranks. Not in place. */
MT_API mt_status mt_comm_alltoallv(mt_comm *comm, mt_tensor *dst, const int64_t *recv_counts,
                                   const mt_tensor *src, const int64_t *send_counts,
                                   mt_stream stream);
/* Blocks until every rank arrived (bounded by the timeout). Uses MPI, or without it a one-element
 * NCCL all-reduce waited on with mt_comm_wait. */
MT_API mt_status mt_comm_barrier(mt_comm *comm);

/* ---- point to point ---- */

/* Sends src to `peer` / receives dst from `peer` (whole tensors; sizes must match). Device:
 * enqueued; host: blocking. A send and a recv between the same two ranks in both directions must go
 * through mt_comm_p2p_batch, else they may deadlock. */
MT_API mt_status mt_comm_send(mt_comm *comm, const mt_tensor *src, int peer, mt_stream stream);
MT_API mt_status mt_comm_recv(mt_comm *comm, mt_tensor *dst, int peer, mt_stream stream);

typedef enum mt_p2p_kind {
    MT_P2P_SEND = 0,
    MT_P2P_RECV = 1
} mt_p2p_kind;
typedef struct mt_p2p_op {
    mt_p2p_kind kind;
    mt_tensor *tensor; /* read for a send, written for a recv */
    int peer;
} mt_p2p_op;

/* Posts the n sends and receives together (Megatron's batch_isend_irecv; one NCCL group), all on
 * the same device kind. Device: enqueued; host: blocking until all are done. */
MT_API mt_status mt_comm_p2p_batch(mt_comm *comm, const mt_p2p_op *ops, int n, mt_stream stream);

/* Waits for `stream` while polling NCCL for asynchronous errors; on an error or when the timeout
 * passes the communicator is aborted and the error names the last operation enqueued. Blocking.
 * A communicator without NCCL returns MT_OK. */
MT_API mt_status mt_comm_wait(mt_comm *comm, mt_stream stream);

/* ---- Megatron's process grid ---- */

/* Every group parallel_state.initialize_model_parallel builds. The expert groups come from a second
 * generator with (expert-tp, ep, expert-dp, pp) and cp = 1. */
typedef enum mt_group {
    MT_GROUP_TP = 0,
    MT_GROUP_CP,
    MT_GROUP_DP,
    MT_GROUP_DP_CP, /* data parallel with context parallel (gradient reduction) */
    MT_GROUP_PP,
    MT_GROUP_MP, /* model parallel: tp-pp */
    MT_GROUP_TP_CP,
    MT_GROUP_TP_DP,
    MT_GROUP_TP_DP_CP,
    MT_GROUP_EP,
    MT_GROUP_EXPERT_TP,
    MT_GROUP_EXPERT_TP_EP,
    MT_GROUP_EXPERT_MP, /* expert model parallel: tp-ep-pp of the expert generator */
    MT_GROUP_EXPERT_DP,
    MT_GROUP_EMBD,     /* first and last pipeline stage (word embeddings) */
    MT_GROUP_POS_EMBD, /* first pipeline stage (position embeddings) */
    MT_GROUP_COUNT
} mt_group;

#define MT_GRID_MAX_DIMS 5

typedef struct mt_grid {
    int world, tp, cp, ep, pp, dp, expert_tp, expert_dp;
    char order[32]; /* "tp-cp-ep-dp-pp" */
} mt_grid;

/* Fills `g` from the sizes (dp = world / (tp*cp*pp), expert-dp = world / (expert_tp*ep*pp)).
 * expert_tp <= 0: = tp. order NULL: Megatron's default "tp-cp-ep-dp-pp" (any permutation of the
 * five names). Indivisible sizes are MT_ERR_INVALID_ARG naming them. Pure. */
MT_API mt_status mt_grid_init(mt_grid *g, int world, int tp, int cp, int ep, int pp, int expert_tp,
                              const char *order);
/* Megatron's names: "tp", "dp-cp", "expert-tp", "embd", "pos-embd", ... ("?" when invalid). */
MT_API const char *mt_group_name(mt_group kind);
/* Number of groups of this kind, and the size of group `index` (embedding groups: 1 or 2). */
MT_API int mt_grid_group_count(const mt_grid *g, mt_group kind);
MT_API int mt_grid_group_size(const mt_grid *g, mt_group kind, int index);
/* The global ranks of group `index`, in Megatron's order, into ranks[mt_grid_group_size()]. */
MT_API mt_status mt_grid_group_ranks(const mt_grid *g, mt_group kind, int index, int *ranks);
/* Which group of this kind `rank` belongs to (*index) and its position in it (*pos); both -1 when it
 * belongs to none (middle pipeline stages and the embedding groups). */
MT_API mt_status mt_grid_locate(const mt_grid *g, mt_group kind, int rank, int *index, int *pos);

/* This rank's communicator of every kind (NULL for a kind whose group it is not in). */
typedef struct mt_comm_groups {
    mt_grid grid;
    mt_comm *comm[MT_GROUP_COUNT];
} mt_comm_groups;

/* Splits `world` into every group of `grid` (grid->world must equal the world size). Collective over
 * `world`; blocking, bounded by the timeout. On failure nothing is left allocated. */
MT_API mt_status mt_comm_groups_create(mt_comm *world, const mt_grid *grid, mt_comm_groups *out);
/* Destroys every communicator of `g` (not the world). */
MT_API void mt_comm_groups_destroy(mt_comm_groups *g);

#ifdef __cplusplus
}
#endif

#endif /* MT_COMM_H */
