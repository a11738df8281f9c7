/* Private: the communicator and the backend entry points. comm.c validates and dispatches on the
 * tensors' device; comm_mpi.c (host) and comm_nccl.c (device) take the same arguments, and compile
 * to MT_ERR_UNSUPPORTED stubs when their library is not built. */
#ifndef MT_COMM_IMPL_H
#define MT_COMM_IMPL_H

#include <mt/comm.h>

#if MT_HAVE_MPI
#include <mpi.h>
#endif
#if MT_HAVE_NCCL
#include <nccl.h>
#endif

struct mt_comm {
    char name[64];
    int rank, size;
    double timeout_s;
    mt_device device; /* the GPU NCCL drives, else the CPU */
    int aborted;      /* a timeout or asynchronous error: every later call fails */
    int world;        /* created by mt_comm_world_create */
    int mpi_owned;    /* MPI_Init was ours: the world finalizes it */
    int has_mpi;      /* the MPI communicator is up */
    int has_nccl;     /* the NCCL communicator is up */
    /* the operation in progress or last enqueued, for errors: "allreduce", count, dtype */
    const char *op;
    int64_t op_count;
    mt_dtype op_dtype;
#if MT_HAVE_MPI
    MPI_Comm mpi;
    MPI_Request *stuck; /* requests of a timed-out operation: never freed by MPI (erroneous) */
    int nstuck;
#endif
#if MT_HAVE_NCCL
    ncclComm_t nccl;
    void *scratch; /* one device int for the NCCL-only barrier */
#endif
};

/* Records an error prefixed with "<op> on group '<name>' (rank r of n, count x dtype): ". */
mt_status comm_error(mt_comm *c, mt_status s, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
#define COMM_ERROR(c, s, ...) comm_error((c), (s), __FILE__, __LINE__, __VA_ARGS__)

/* 1 if the bytes of a tensor may be read as the same memory. */
static inline int comm_same(const mt_tensor *a, const mt_tensor *b) {
    return a->data == b->data;
}

/* ---- MPI (host tensors) ---- */
/* Brings up MPI for the world (see mt_comm_world_create); leaves has_mpi 0 when it does not apply. */
mt_status world_init_mpi(mt_comm *c, const mt_comm_env *env);
mt_status split_mpi(mt_comm *parent, int color, int key, mt_comm *child);
void destroy_mpi(mt_comm *c);
/* MPI_Abort(MPI_COMM_WORLD) when MPI is up (does not return); else returns. */
void abort_job_mpi(mt_comm *c, int code);
/* Broadcasts `bytes` of host memory from `root` (the NCCL unique id). */
mt_status bcast_bytes_mpi(mt_comm *c, void *buf, size_t bytes, int root);
mt_status allreduce_mpi(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op);
mt_status allgather_mpi(mt_comm *c, mt_tensor *dst, const mt_tensor *src);
mt_status reduce_scatter_mpi(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op);
mt_status broadcast_mpi(mt_comm *c, mt_tensor *dst, int root);
mt_status alltoallv_mpi(mt_comm *c, mt_tensor *dst, const int64_t *recv_counts,
                        const mt_tensor *src, const int64_t *send_counts);
mt_status p2p_batch_mpi(mt_comm *c, const mt_p2p_op *ops, int n);
mt_status barrier_mpi(mt_comm *c);

/* ---- NCCL (device tensors) ---- */
mt_status world_init_nccl(mt_comm *c, const mt_comm_env *env);
mt_status split_nccl(mt_comm *parent, int color, int key, mt_comm *child);
void destroy_nccl(mt_comm *c);
/* ncclCommAbort: peers blocked in a kernel with this rank get an error instead of waiting. */
void abort_nccl(mt_comm *c);
mt_status allreduce_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op,
                         mt_stream stream);
mt_status allgather_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_stream stream);
mt_status reduce_scatter_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op,
                              mt_stream stream);
mt_status broadcast_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, int root,
                         mt_stream stream);
mt_status alltoallv_nccl(mt_comm *c, mt_tensor *dst, const int64_t *recv_counts,
                         const mt_tensor *src, const int64_t *send_counts, mt_stream stream);
mt_status p2p_batch_nccl(mt_comm *c, const mt_p2p_op *ops, int n, mt_stream stream);
mt_status barrier_nccl(mt_comm *c);
mt_status wait_nccl(mt_comm *c, mt_stream stream);

#endif /* MT_COMM_IMPL_H */
