/* Device tensors over NCCL, with non-blocking communicators (NCCL_CONFIG blocking = 0): every call
 * that returns ncclInProgress and every wait is polled against the deadline with
 * ncclCommGetAsyncError, and a communicator that times out or fails is aborted (ncclCommAbort). */
#include "../comm_impl.h"

#if MT_HAVE_NCCL

#include <mt/core_cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void nap(void) {
    struct timespec ts = { 0, 50 * 1000 };
    nanosleep(&ts, NULL);
}

/* Aborts the NCCL communicator: kernels waiting on peers return, resources are freed. */
static void nccl_abort(mt_comm *c) {
    if (c->has_nccl) ncclCommAbort(c->nccl);
    c->has_nccl = 0;
    c->nccl = NULL;
    c->aborted = 1;
}

static mt_status nccl_fail(mt_comm *c, ncclResult_t r, const char *call) {
    const char *last = c->nccl ? ncclGetLastError(c->nccl) : NULL;
    mt_status st = COMM_ERROR(c, MT_ERR_NCCL, "%s: %s%s%s", call, ncclGetErrorString(r),
                              last && *last ? ": " : "", last ? last : "");
    nccl_abort(c);
    return st;
}

/* Polls a communicator in state ncclInProgress (init, split, a grouped or non-blocking call) until it
 * settles; `what` names the call for the error. */
static mt_status nccl_settle(mt_comm *c, ncclComm_t comm, ncclResult_t r, const char *what) {
    double deadline = mt_time_now() + c->timeout_s;
    while (r == ncclInProgress) {
        if (mt_time_now() > deadline) {
            if (comm) ncclCommAbort(comm);
            if (comm == c->nccl) {
                c->has_nccl = 0;
                c->nccl = NULL;
            }
            c->aborted = 1;
            return COMM_ERROR(c, MT_ERR_TIMEOUT,
                              "%s not finished after %.1f s; communicator aborted", what,
                              c->timeout_s);
        }
        nap();
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
    }
    if (r != ncclSuccess) {
        if (comm && comm != c->nccl) ncclCommAbort(comm);
        return nccl_fail(c, r, what);
    }
    return MT_OK;
}

#define NCCL_TRY(c, expr) MT_TRY(nccl_settle((c), (c)->nccl, (expr), #expr))

static mt_status nccl_init_comm(mt_comm *c, ncclUniqueId id) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = c->name;
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, c->size, id, c->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        mt_status st =
            COMM_ERROR(c, MT_ERR_NCCL, "ncclCommInitRankConfig: %s", ncclGetErrorString(r));
        if (comm) ncclCommAbort(comm);
        return st;
    }
    MT_TRY(nccl_settle(c, comm, r, "ncclCommInitRankConfig"));
    c->nccl = comm;
    c->has_nccl = 1;
    return MT_OK;
}

mt_status world_init_nccl(mt_comm *c, const mt_comm_env *env) {
    int ngpu = 0;
    MT_TRY(mt_device_count(&ngpu));
    if (env->local_rank >= ngpu)
        return COMM_ERROR(c, MT_ERR_INVALID_ARG,
                          "local rank %d (from the %s variables) but %d GPU(s) visible",
                          env->local_rank, mt_launcher_name(env->launcher), ngpu);
    c->device = mt_device_cuda(env->local_rank);
    MT_TRY(mt_device_set(c->device));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->has_mpi) {
        if (c->rank == 0) MT_TRY(nccl_settle(c, NULL, ncclGetUniqueId(&id), "ncclGetUniqueId"));
        MT_TRY(bcast_bytes_mpi(c, &id, sizeof id, 0));
    } else {
        if (c->size > 1 && !getenv("NCCL_COMM_ID")) {
            if (env->launcher != MT_LAUNCHER_TORCHRUN)
                return COMM_ERROR(c, MT_ERR_INVALID_ARG,
                                  "a world of %d without MPI needs NCCL_COMM_ID=host:port (or "
                                  "torchrun's MASTER_ADDR/MASTER_PORT)",
                                  c->size);
            /* torchrun's agent already serves its store on MASTER_PORT: bootstrap on the next one */
            char addr[300];
            snprintf(addr, sizeof addr, "%s:%d", env->master_addr, env->master_port + 1);
            setenv("NCCL_COMM_ID", addr, 0);
        }
        /* with NCCL_COMM_ID every rank's id encodes that address; rank 0 serves it */
        MT_TRY(nccl_settle(c, NULL, ncclGetUniqueId(&id), "ncclGetUniqueId"));
    }
    MT_TRY(nccl_init_comm(c, id));
    MT_CUDA_TRY(cudaMalloc(&c->scratch, sizeof(int)));
    return MT_OK;
}

mt_status split_nccl(mt_comm *parent, int color, int key, mt_comm *child) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = child->name;
    /* NCCL stores the new communicator (NULL for no color) from its init thread when the split
     * job ends, which may be after ncclCommSplit returned: the slot is on the heap, not the stack */
    ncclComm_t *slot = calloc(1, sizeof *slot);
    if (!slot) return COMM_ERROR(parent, MT_ERR_OOM, "ncclCommSplit: communicator slot");
    ncclResult_t r =
        ncclCommSplit(parent->nccl, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, slot, &cfg);
    /* on a non-blocking parent ncclSuccess can mean "enqueued": the group's ncclInProgress is not
     * passed on. Poll the parent either way; it settles once the job is done (and joins it). */
    if (r == ncclSuccess) r = ncclInProgress;
    mt_status st = nccl_settle(parent, parent->nccl, r, "ncclCommSplit");
    ncclComm_t comm = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (st != MT_OK) {
        if (comm) ncclCommAbort(comm);
        if (st != MT_ERR_TIMEOUT) free(slot); /* else the aborted job may still write it */
        return st;
    }
    free(slot);
    if (color < 0) {
        if (comm) ncclCommAbort(comm); /* not expected: NCCL makes none for NCCL_SPLIT_NOCOLOR */
        return MT_OK;
    }
    if (!comm)
        return COMM_ERROR(parent, MT_ERR_INTERNAL,
                          "ncclCommSplit settled but gave no communicator for color %d", color);
    MT_TRY(nccl_settle(parent, comm, ncclInProgress, "ncclCommSplit (new communicator)"));
    child->nccl = comm;
    child->has_nccl = 1;
    int n, rank;
    NCCL_TRY(child, ncclCommCount(comm, &n));
    NCCL_TRY(child, ncclCommUserRank(comm, &rank));
    if (child->size > 0 && (n != child->size || rank != child->rank)) /* known from MPI or n=1 */
        return COMM_ERROR(child, MT_ERR_INTERNAL,
                          "NCCL split gives rank %d of %d, expected %d of %d", rank, n, child->rank,
                          child->size);
    child->rank = rank;
    child->size = n;
    MT_CUDA_TRY(cudaMalloc(&child->scratch, sizeof(int)));
    return MT_OK;
}

void abort_nccl(mt_comm *c) {
    nccl_abort(c);
}

void destroy_nccl(mt_comm *c) {
    if (c->scratch) cudaFree(c->scratch);
    c->scratch = NULL;
    if (!c->has_nccl) return;
    /* finalize flushes outstanding work; bounded like everything else, else abort */
    ncclResult_t r = ncclCommFinalize(c->nccl);
    if ((r == ncclSuccess || r == ncclInProgress) &&
        nccl_settle(c, c->nccl, r, "ncclCommFinalize") == MT_OK) {
        ncclCommDestroy(c->nccl);
        c->has_nccl = 0;
        c->nccl = NULL;
        return;
    }
    nccl_abort(c);
}

static mt_status nccl_type(mt_comm *c, mt_dtype dt, int reduce, ncclDataType_t *out) {
    *out = ncclUint8; /* (set on every path: gcc cannot see the callers return on errors) */
    switch (dt) {
    case MT_F32:
        *out = ncclFloat32;
        return MT_OK;
    case MT_BF16:
        *out = ncclBfloat16;
        return MT_OK;
    case MT_F16:
        *out = ncclFloat16;
        return MT_OK;
    case MT_I32:
        *out = ncclInt32;
        return MT_OK;
    case MT_I64:
        *out = ncclInt64;
        return MT_OK;
    case MT_U8:
        *out = ncclUint8;
        return MT_OK;
    default:
        if (!reduce) { /* data movement: as bytes (the caller scales the count) */
            *out = ncclUint8;
            return MT_OK;
        }
        return COMM_ERROR(c, MT_ERR_UNSUPPORTED, "NCCL has no reduction for %s", mt_dtype_name(dt));
    }
}

/* Element count for ncclUint8-as-bytes movement of dtypes NCCL lacks. */
static size_t move_count(const mt_tensor *t, ncclDataType_t ty, int64_t n) {
    return ty == ncclUint8 ? (size_t)n * mt_dtype_size(t->dtype) : (size_t)n;
}

static ncclRedOp_t nccl_op(mt_redop op) {
    static const ncclRedOp_t map[] = { ncclSum, ncclAvg, ncclMax, ncclMin };
    return map[op];
}

mt_status allreduce_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op,
                         mt_stream stream) {
    ncclDataType_t ty;
    MT_TRY(nccl_type(c, src->dtype, 1, &ty));
    NCCL_TRY(c, ncclAllReduce(src->data, dst->data, (size_t)mt_tensor_numel(src), ty, nccl_op(op),
                              c->nccl, stream));
    return MT_OK;
}

mt_status allgather_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_stream stream) {
    ncclDataType_t ty;
    MT_TRY(nccl_type(c, src->dtype, 0, &ty));
    NCCL_TRY(c, ncclAllGather(src->data, dst->data, move_count(src, ty, mt_tensor_numel(src)), ty,
                              c->nccl, stream));
    return MT_OK;
}

mt_status reduce_scatter_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op,
                              mt_stream stream) {
    ncclDataType_t ty;
    MT_TRY(nccl_type(c, src->dtype, 1, &ty));
    NCCL_TRY(c, ncclReduceScatter(src->data, dst->data, (size_t)mt_tensor_numel(dst), ty,
                                  nccl_op(op), c->nccl, stream));
    return MT_OK;
}

mt_status broadcast_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, int root,
                         mt_stream stream) {
    ncclDataType_t ty;
    MT_TRY(nccl_type(c, dst->dtype, 0, &ty));
    NCCL_TRY(c, ncclBroadcast(src->data, dst->data, move_count(dst, ty, mt_tensor_numel(dst)), ty,
                              root, c->nccl, stream));
    return MT_OK;
}

/* Grouped sends and receives (NCCL's own all-to-all recipe). */
mt_status alltoallv_nccl(mt_comm *c, mt_tensor *dst, const int64_t *recv_counts,
                         const mt_tensor *src, const int64_t *send_counts, mt_stream stream) {
    size_t es = mt_dtype_size(src->dtype);
    size_t so = 0, ro = 0;
    NCCL_TRY(c, ncclGroupStart());
    for (int p = 0; p < c->size; p++) {
        size_t sb = (size_t)send_counts[p] * es, rb = (size_t)recv_counts[p] * es;
        ncclResult_t r = ncclSend((char *)src->data + so, sb, ncclUint8, p, c->nccl, stream);
        if (r == ncclSuccess || r == ncclInProgress)
            r = ncclRecv((char *)dst->data + ro, rb, ncclUint8, p, c->nccl, stream);
        if (r != ncclSuccess && r != ncclInProgress) {
            ncclGroupEnd();
            return nccl_fail(c, r, "ncclSend/ncclRecv");
        }
        so += sb;
        ro += rb;
    }
    NCCL_TRY(c, ncclGroupEnd());
    return MT_OK;
}

mt_status p2p_batch_nccl(mt_comm *c, const mt_p2p_op *ops, int n, mt_stream stream) {
    NCCL_TRY(c, ncclGroupStart());
    for (int i = 0; i < n; i++) {
        const mt_p2p_op *o = &ops[i];
        size_t bytes = mt_tensor_nbytes(o->tensor);
        ncclResult_t r =
            o->kind == MT_P2P_SEND
                ? ncclSend(o->tensor->data, bytes, ncclUint8, o->peer, c->nccl, stream)
                : ncclRecv(o->tensor->data, bytes, ncclUint8, o->peer, c->nccl, stream);
        if (r != ncclSuccess && r != ncclInProgress) {
            ncclGroupEnd();
            return nccl_fail(c, r, o->kind == MT_P2P_SEND ? "ncclSend" : "ncclRecv");
        }
    }
    NCCL_TRY(c, ncclGroupEnd());
    return MT_OK;
}

mt_status wait_nccl(mt_comm *c, mt_stream stream) {
    double deadline = mt_time_now() + c->timeout_s;
    for (;;) {
        cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess) return MT_OK;
        if (q != cudaErrorNotReady)
            return COMM_ERROR(c, MT_ERR_CUDA, "cudaStreamQuery: %s", cudaGetErrorString(q));
        ncclResult_t a = ncclSuccess;
        ncclCommGetAsyncError(c->nccl, &a);
        if (a != ncclSuccess && a != ncclInProgress) return nccl_fail(c, a, "asynchronous error");
        if (mt_time_now() > deadline) {
            nccl_abort(c);
            return COMM_ERROR(c, MT_ERR_TIMEOUT, "not finished after %.1f s; communicator aborted",
                              c->timeout_s);
        }
        nap();
    }
}

mt_status barrier_nccl(mt_comm *c) {
    NCCL_TRY(c, ncclAllReduce(c->scratch, c->scratch, 1, ncclInt32, ncclSum, c->nccl, NULL));
    return wait_nccl(c, NULL);
}

#else /* !MT_HAVE_NCCL */

#define NCCL_STUB(c) return COMM_ERROR((c), MT_ERR_UNSUPPORTED, "built without NCCL")

mt_status world_init_nccl(mt_comm *c, const mt_comm_env *env) {
    (void)env;
    NCCL_STUB(c);
}
mt_status split_nccl(mt_comm *parent, int color, int key, mt_comm *child) {
    (void)color, (void)key, (void)child;
    NCCL_STUB(parent);
}
void destroy_nccl(mt_comm *c) {
    (void)c;
}
void abort_nccl(mt_comm *c) {
    (void)c;
}
mt_status allreduce_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op,
                         mt_stream stream) {
    (void)dst, (void)src, (void)op, (void)stream;
    NCCL_STUB(c);
}
mt_status allgather_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_stream stream) {
    (void)dst, (void)src, (void)stream;
    NCCL_STUB(c);
}
mt_status reduce_scatter_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op,
                              mt_stream stream) {
    (void)dst, (void)src, (void)op, (void)stream;
    NCCL_STUB(c);
}
mt_status broadcast_nccl(mt_comm *c, mt_tensor *dst, const mt_tensor *src, int root,
                         mt_stream stream) {
    (void)dst, (void)src, (void)root, (void)stream;
    NCCL_STUB(c);
}
mt_status alltoallv_nccl(mt_comm *c, mt_tensor *dst, const int64_t *recv_counts,
                         const mt_tensor *src, const int64_t *send_counts, mt_stream stream) {
    (void)dst, (void)recv_counts, (void)src, (void)send_counts, (void)stream;
    NCCL_STUB(c);
}
mt_status p2p_batch_nccl(mt_comm *c, const mt_p2p_op *ops, int n, mt_stream stream) {
    (void)ops, (void)n, (void)stream;
    NCCL_STUB(c);
}
mt_status barrier_nccl(mt_comm *c) {
    NCCL_STUB(c);
}
mt_status wait_nccl(mt_comm *c, mt_stream stream) {
    (void)stream;
    NCCL_STUB(c);
}

#endif /* MT_HAVE_NCCL */
