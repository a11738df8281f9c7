/* Host tensors over MPI. Every operation is nonblocking (MPI_I*) and waited on by polling
 * MPI_Testall against the communicator's deadline, so a missing peer is MT_ERR_TIMEOUT, not a hang.
 * bf16/f16 reductions use user-defined ops (MPI has no such types). */
#include "../comm_impl.h"

#if MT_HAVE_MPI

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static mt_status mpi_fail(mt_comm *c, int rc, const char *call) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    return COMM_ERROR(c, MT_ERR_MPI, "%s: %s", call, msg);
}

#define MPI_TRY(c, expr)                                                        \
    do {                                                                        \
        int mt_mpi_rc_ = (expr);                                                \
        if (mt_mpi_rc_ != MPI_SUCCESS) return mpi_fail((c), mt_mpi_rc_, #expr); \
    } while (0)

/* Polls until the requests finish or the deadline passes. Backs off from spinning to short sleeps
 * because oversubscribed ranks (8 on 2 cores) must leave the cores to the peers they wait for. */
static mt_status mpi_wait(mt_comm *c, MPI_Request *reqs, int n) {
    double deadline = mt_time_now() + c->timeout_s;
    long polls = 0;
    for (;;) {
        int done = 0;
        MPI_TRY(c, MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
        if (done) return MT_OK;
        if (mt_time_now() > deadline) break;
        if (++polls > 64) {
            long us = polls < 1000 ? 20 : 200;
            struct timespec ts = { 0, us * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    /* MPI forbids freeing or cancelling a pending collective: keep the requests, abort the comm. */
    c->stuck = malloc((size_t)n * sizeof *reqs);
    if (c->stuck) {
        memcpy(c->stuck, reqs, (size_t)n * sizeof *reqs);
        c->nstuck = n;
    }
    c->aborted = 1;
    return COMM_ERROR(c, MT_ERR_TIMEOUT, "not finished after %.1f s; communicator aborted",
                      c->timeout_s);
}

mt_status world_init_mpi(mt_comm *c, const mt_comm_env *env) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (env->launcher != MT_LAUNCHER_MPI && env->launcher != MT_LAUNCHER_SLURM) return MT_OK;
        int provided;
        MPI_TRY(c, MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided));
        c->mpi_owned = 1;
    }
    int rank, size;
    MPI_TRY(c, MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi));
    MPI_TRY(c, MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN));
    MPI_TRY(c, MPI_Comm_rank(c->mpi, &rank));
    MPI_TRY(c, MPI_Comm_size(c->mpi, &size));
    c->has_mpi = 1;
    if (env->launcher != MT_LAUNCHER_NONE && (rank != env->rank || size != env->world_size))
        return COMM_ERROR(c, MT_ERR_INVALID_ARG,
                          "MPI says rank %d of %d but the %s variables say rank %d of %d", rank,
                          size, mt_launcher_name(env->launcher), env->rank, env->world_size);
    c->rank = rank;
    c->size = size;
    return MT_OK;
}

mt_status split_mpi(mt_comm *parent, int color, int key, mt_comm *child) {
    /* MPI_Comm_split blocks: first meet in a bounded allgather, so no rank enters it alone. */
    int mine[2] = { color, key };
    int *all = malloc(2 * (size_t)parent->size * sizeof *all);
    MT_REQUIRE(all, MT_ERR_OOM, "split: %d ranks", parent->size);
    MPI_Request req;
    int rc = MPI_Iallgather(mine, 2, MPI_INT, all, 2, MPI_INT, parent->mpi, &req);
    mt_status st =
        rc == MPI_SUCCESS ? mpi_wait(parent, &req, 1) : mpi_fail(parent, rc, "MPI_Iallgather");
    if (st != MT_OK) {
        if (!parent->aborted) free(all); /* else MPI may still write it */
        return st;
    }
    free(all);
    MPI_TRY(parent,
            MPI_Comm_split(parent->mpi, color < 0 ? MPI_UNDEFINED : color, key, &child->mpi));
    if (color < 0) return MT_OK;
    child->has_mpi = 1;
    MPI_TRY(parent, MPI_Comm_rank(child->mpi, &child->rank));
    MPI_TRY(parent, MPI_Comm_size(child->mpi, &child->size));
    return MT_OK;
}

void destroy_mpi(mt_comm *c) {
    if (c->stuck) { /* a late peer may still complete it: give it a moment */
        double deadline = mt_time_now() + 1.0;
        int done = 0;
        while (!done && mt_time_now() < deadline) {
            if (MPI_Testall(c->nstuck, c->stuck, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
            if (!done) nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
        }
        free(c->stuck);
        c->stuck = NULL;
        if (!done)
            c->has_mpi = 0; /* leaked: freeing a comm with a pending collective is erroneous */
    }
    if (c->has_mpi) MPI_Comm_free(&c->mpi);
    c->has_mpi = 0;
    if (c->mpi_owned) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
        c->mpi_owned = 0;
    }
}

void abort_job_mpi(mt_comm *c, int code) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (c->has_mpi && init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
}

mt_status bcast_bytes_mpi(mt_comm *c, void *buf, size_t bytes, int root) {
    MPI_Request req;
    MPI_TRY(c, MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, c->mpi, &req));
    return mpi_wait(c, &req, 1);
}

/* ---- datatypes and reductions ---- */

#define DEF_HALF_OPS(T, to_f32, from_f32)                                    \
    static void T##_sum(void *in, void *inout, int *len, MPI_Datatype *dt) { \
        (void)dt;                                                            \
        const uint16_t *a = in;                                              \
        uint16_t *b = inout;                                                 \
        for (int i = 0; i < *len; i++)                                       \
            b[i] = from_f32(to_f32(a[i]) + to_f32(b[i]));                    \
    }                                                                        \
    static void T##_max(void *in, void *inout, int *len, MPI_Datatype *dt) { \
        (void)dt;                                                            \
        const uint16_t *a = in;                                              \
        uint16_t *b = inout;                                                 \
        for (int i = 0; i < *len; i++)                                       \
            if (to_f32(a[i]) > to_f32(b[i])) b[i] = a[i];                    \
    }                                                                        \
    static void T##_min(void *in, void *inout, int *len, MPI_Datatype *dt) { \
        (void)dt;                                                            \
        const uint16_t *a = in;                                              \
        uint16_t *b = inout;                                                 \
        for (int i = 0; i < *len; i++)                                       \
            if (to_f32(a[i]) < to_f32(b[i])) b[i] = a[i];                    \
    }

DEF_HALF_OPS(bf16, mt_bf16_to_f32, mt_f32_to_bf16)
DEF_HALF_OPS(f16, mt_f16_to_f32, mt_f32_to_f16)

/* User ops, created once per process on first use: [bf16, f16] x [sum, max, min]. */
static MPI_Op half_ops[2][3];
static int half_ops_ready;

static mt_status mpi_type_op(mt_comm *c, mt_dtype dt, mt_redop op, MPI_Datatype *type,
                             MPI_Op *mop) {
    mt_redop base = op == MT_REDOP_AVG ? MT_REDOP_SUM : op; /* AVG: sum, then divide here */
    int k = base == MT_REDOP_SUM ? 0 : base == MT_REDOP_MAX ? 1 : 2;
    switch (dt) {
    case MT_F32:
        *type = MPI_FLOAT;
        break;
    case MT_I32:
        *type = MPI_INT32_T;
        break;
    case MT_I64:
        *type = MPI_INT64_T;
        break;
    case MT_U16:
        *type = MPI_UINT16_T;
        break;
    case MT_U8:
        *type = MPI_UINT8_T;
        break;
    case MT_BF16:
    case MT_F16:
        if (!half_ops_ready) {
            MPI_User_function *fns[2][3] = { { bf16_sum, bf16_max, bf16_min },
                                             { f16_sum, f16_max, f16_min } };
            for (int t = 0; t < 2; t++)
                for (int j = 0; j < 3; j++)
                    MPI_TRY(c, MPI_Op_create(fns[t][j], 1, &half_ops[t][j]));
            half_ops_ready = 1;
        }
        *type = MPI_UINT16_T;
        *mop = half_ops[dt == MT_BF16 ? 0 : 1][k];
        return MT_OK;
    default:
        return COMM_ERROR(c, MT_ERR_UNSUPPORTED, "dtype not supported by MPI reductions");
    }
    *mop = k == 0 ? MPI_SUM : k == 1 ? MPI_MAX : MPI_MIN;
    return MT_OK;
}

/* AVG after SUM: divide n elements by the group size (integers truncate, like NCCL). */
static void divide_by(void *x, mt_dtype dt, int64_t n, int by) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case MT_F32:
            ((float *)x)[i] /= (float)by;
            break;
        case MT_BF16:
            ((uint16_t *)x)[i] = mt_f32_to_bf16(mt_bf16_to_f32(((uint16_t *)x)[i]) / (float)by);
            break;
        case MT_F16:
            ((uint16_t *)x)[i] = mt_f32_to_f16(mt_f16_to_f32(((uint16_t *)x)[i]) / (float)by);
            break;
        case MT_I32:
            ((int32_t *)x)[i] /= by;
            break;
        case MT_I64:
            ((int64_t *)x)[i] /= by;
            break;
        case MT_U16:
            ((uint16_t *)x)[i] /= by;
            break;
        case MT_U8:
            ((uint8_t *)x)[i] /= by;
            break;
        default:
            break;
        }
    }
}

static mt_status check_int_count(mt_comm *c, int64_t n, const char *what) {
    if (n > INT_MAX)
        return COMM_ERROR(c, MT_ERR_UNSUPPORTED, "%s %lld exceeds MPI's int counts", what,
                          (long long)n);
    return MT_OK;
}

mt_status allreduce_mpi(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op) {
    int64_t n = mt_tensor_numel(src);
    MT_TRY(check_int_count(c, n, "count"));
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op mop = MPI_OP_NULL;
    MT_TRY(mpi_type_op(c, src->dtype, op, &type, &mop));
    MPI_Request req;
    MPI_TRY(c, MPI_Iallreduce(comm_same(dst, src) ? MPI_IN_PLACE : src->data, dst->data, (int)n,
                              type, mop, c->mpi, &req));
    MT_TRY(mpi_wait(c, &req, 1));
    if (op == MT_REDOP_AVG) divide_by(dst->data, dst->dtype, n, c->size);
    return MT_OK;
}

mt_status allgather_mpi(mt_comm *c, mt_tensor *dst, const mt_tensor *src) {
    size_t bytes = mt_tensor_nbytes(src);
    MT_TRY(check_int_count(c, (int64_t)bytes, "bytes"));
    /* in place: src is this rank's chunk of dst, which is what MPI_IN_PLACE means */
    int in_place = (char *)src->data == (char *)dst->data + (size_t)c->rank * bytes;
    MPI_Request req;
    MPI_TRY(c, MPI_Iallgather(in_place ? MPI_IN_PLACE : src->data, (int)bytes, MPI_BYTE, dst->data,
                              (int)bytes, MPI_BYTE, c->mpi, &req));
    return mpi_wait(c, &req, 1);
}

mt_status reduce_scatter_mpi(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op) {
    int64_t n = mt_tensor_numel(dst);
    size_t bytes = mt_tensor_nbytes(dst);
    MT_TRY(check_int_count(c, n, "count"));
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op mop = MPI_OP_NULL;
    MT_TRY(mpi_type_op(c, src->dtype, op, &type, &mop));
    /* in place (dst inside src): MPI's in-place form puts the result at the start of the buffer,
     * not at this rank's chunk, so reduce into a temporary instead */
    int in_place = (char *)dst->data >= (char *)src->data &&
                   (char *)dst->data < (char *)src->data + mt_tensor_nbytes(src);
    void *out = in_place ? malloc(bytes ? bytes : 1) : dst->data;
    MT_REQUIRE(out, MT_ERR_OOM, "reduce_scatter: %zu bytes", bytes);
    MPI_Request req;
    int rc = MPI_Ireduce_scatter_block(src->data, out, (int)n, type, mop, c->mpi, &req);
    mt_status st =
        rc == MPI_SUCCESS ? mpi_wait(c, &req, 1) : mpi_fail(c, rc, "MPI_Ireduce_scatter_block");
    if (st == MT_OK && in_place) memcpy(dst->data, out, bytes);
    if (in_place && !c->aborted) free(out);
    MT_TRY(st);
    if (op == MT_REDOP_AVG) divide_by(dst->data, dst->dtype, n, c->size);
    return MT_OK;
}

mt_status broadcast_mpi(mt_comm *c, mt_tensor *dst, int root) {
    size_t bytes = mt_tensor_nbytes(dst);
    MT_TRY(check_int_count(c, (int64_t)bytes, "bytes"));
    MPI_Request req;
    MPI_TRY(c, MPI_Ibcast(dst->data, (int)bytes, MPI_BYTE, root, c->mpi, &req));
    return mpi_wait(c, &req, 1);
}

mt_status alltoallv_mpi(mt_comm *c, mt_tensor *dst, const int64_t *recv_counts,
                        const mt_tensor *src, const int64_t *send_counts) {
    int n = c->size;
    size_t es = mt_dtype_size(src->dtype);
    int *buf = malloc(4 * (size_t)n * sizeof *buf);
    MT_REQUIRE(buf, MT_ERR_OOM, "alltoallv: %d ranks", n);
    int *sc = buf, *sd = buf + n, *rc = buf + 2 * n, *rd = buf + 3 * n;
    int64_t so = 0, ro = 0;
    mt_status st = MT_OK;
    for (int i = 0; i < n; i++) {
        int64_t sb = send_counts[i] * (int64_t)es, rb = recv_counts[i] * (int64_t)es;
        if (so + sb > INT_MAX || ro + rb > INT_MAX) {
            st = COMM_ERROR(c, MT_ERR_UNSUPPORTED, "byte offsets exceed MPI's int counts");
            goto done;
        }
        sc[i] = (int)sb;
        sd[i] = (int)so;
        rc[i] = (int)rb;
        rd[i] = (int)ro;
        so += sb;
        ro += rb;
    }
    MPI_Request req;
    int rc_ =
        MPI_Ialltoallv(src->data, sc, sd, MPI_BYTE, dst->data, rc, rd, MPI_BYTE, c->mpi, &req);
    st = rc_ == MPI_SUCCESS ? mpi_wait(c, &req, 1) : mpi_fail(c, rc_, "MPI_Ialltoallv");
done:
    if (!c->aborted) free(buf); /* MPI may still read the counts of a stuck request */
    return st;
}

mt_status p2p_batch_mpi(mt_comm *c, const mt_p2p_op *ops, int n) {
    MPI_Request stack[16], *reqs = n <= 16 ? stack : malloc((size_t)n * sizeof *reqs);
    MT_REQUIRE(reqs, MT_ERR_OOM, "p2p: %d ops", n);
    mt_status st = MT_OK;
    int posted = 0;
    for (; posted < n; posted++) {
        const mt_p2p_op *o = &ops[posted];
        size_t bytes = mt_tensor_nbytes(o->tensor);
        if (bytes > INT_MAX) {
            st = COMM_ERROR(c, MT_ERR_UNSUPPORTED, "%zu bytes exceed MPI's int counts", bytes);
            break;
        }
        int rc = o->kind == MT_P2P_SEND ? MPI_Isend(o->tensor->data, (int)bytes, MPI_BYTE, o->peer,
                                                    0, c->mpi, &reqs[posted])
                                        : MPI_Irecv(o->tensor->data, (int)bytes, MPI_BYTE, o->peer,
                                                    0, c->mpi, &reqs[posted]);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(c, rc, o->kind == MT_P2P_SEND ? "MPI_Isend" : "MPI_Irecv");
            break;
        }
    }
    if (posted) {
        mt_status w = mpi_wait(c, reqs, posted);
        if (st == MT_OK) st = w;
    }
    if (reqs != stack) free(reqs);
    return st;
}

mt_status barrier_mpi(mt_comm *c) {
    MPI_Request req;
    MPI_TRY(c, MPI_Ibarrier(c->mpi, &req));
    return mpi_wait(c, &req, 1);
}

#else /* !MT_HAVE_MPI */

mt_status world_init_mpi(mt_comm *c, const mt_comm_env *env) {
    (void)c;
    (void)env;
    return MT_OK; /* without MPI, the world is NCCL's or one rank's */
}

mt_status split_mpi(mt_comm *parent, int color, int key, mt_comm *child) {
    (void)color;
    (void)key;
    (void)child;
    return COMM_ERROR(parent, MT_ERR_UNSUPPORTED, "built without MPI");
}

void destroy_mpi(mt_comm *c) {
    (void)c;
}
void abort_job_mpi(mt_comm *c, int code) {
    (void)c, (void)code;
}

#define MPI_STUB(c) return COMM_ERROR((c), MT_ERR_UNSUPPORTED, "built without MPI")

mt_status bcast_bytes_mpi(mt_comm *c, void *buf, size_t bytes, int root) {
    (void)buf, (void)bytes, (void)root;
    MPI_STUB(c);
}
mt_status allreduce_mpi(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op) {
    (void)dst, (void)src, (void)op;
    MPI_STUB(c);
}
mt_status allgather_mpi(mt_comm *c, mt_tensor *dst, const mt_tensor *src) {
    (void)dst, (void)src;
    MPI_STUB(c);
}
mt_status reduce_scatter_mpi(mt_comm *c, mt_tensor *dst, const mt_tensor *src, mt_redop op) {
    (void)dst, (void)src, (void)op;
    MPI_STUB(c);
}
mt_status broadcast_mpi(mt_comm *c, mt_tensor *dst, int root) {
    (void)dst, (void)root;
    MPI_STUB(c);
}
mt_status alltoallv_mpi(mt_comm *c, mt_tensor *dst, const int64_t *recv_counts,
                        const mt_tensor *src, const int64_t *send_counts) {
    (void)dst, (void)recv_counts, (void)src, (void)send_counts;
    MPI_STUB(c);
}
mt_status p2p_batch_mpi(mt_comm *c, const mt_p2p_op *ops, int n) {
    (void)ops, (void)n;
    MPI_STUB(c);
}
mt_status barrier_mpi(mt_comm *c) {
    MPI_STUB(c);
}

#endif /* MT_HAVE_MPI */
