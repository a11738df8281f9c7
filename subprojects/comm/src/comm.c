/* mt_comm front-end: world and split, validation, dispatch on the tensors' device (CUDA: NCCL,
 * CPU: MPI), a world of one without MPI, and the grid's sub-communicators. */
#include "comm_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mt_comm_have_mpi(void) {
    return MT_HAVE_MPI;
}

int mt_comm_have_nccl(void) {
    return MT_HAVE_NCCL;
}

static const char *redop_name(mt_redop op) {
    static const char *const names[] = { "sum", "avg", "max", "min" };
    return (unsigned)op < 4 ? names[op] : "?";
}

mt_status comm_error(mt_comm *c, mt_status s, const char *file, int line, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->op)
        return mt_error_set(s, file, line, "%s on group '%s' (rank %d of %d, %lld x %s): %s", c->op,
                            c->name, c->rank, c->size, (long long)c->op_count,
                            mt_dtype_name(c->op_dtype), msg);
    return mt_error_set(s, file, line, "group '%s' (rank %d of %d): %s", c->name, c->rank, c->size,
                        msg);
}

static mt_comm *comm_new(const char *name) {
    mt_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "?");
    c->timeout_s = MT_COMM_DEFAULT_TIMEOUT_S;
    c->device = MT_DEVICE_CPU;
    return c;
}

mt_status mt_comm_world_create(const mt_comm_config *cfg, mt_comm **out) {
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    mt_comm_config def = MT_COMM_CONFIG_INIT;
    if (!cfg) cfg = &def;
    MT_REQUIRE(cfg->size == sizeof(mt_comm_config), MT_ERR_INVALID_ARG,
               "mt_comm_config.size is %zu, want %zu (use MT_COMM_CONFIG_INIT)", cfg->size,
               sizeof(mt_comm_config));
    mt_comm_env env;
    MT_TRY(mt_comm_env_read(&env));
    mt_log_set_rank(env.world_size > 1 ? env.rank : -1);
    mt_comm *c = comm_new("world");
    MT_REQUIRE(c, MT_ERR_OOM, "mt_comm");
    c->world = 1;
    c->rank = env.rank;
    c->size = env.world_size;
    if (cfg->timeout_s > 0) c->timeout_s = cfg->timeout_s;
    mt_status st = MT_OK;
    MT_TRY_GOTO(world_init_mpi(c, &env), st, fail);
    if (cfg->backends != MT_COMM_HOST) {
        int ngpu = 0;
        if (mt_device_count(&ngpu) != MT_OK) ngpu = 0;
        if (cfg->backends == MT_COMM_DEVICE || (MT_HAVE_NCCL && ngpu > 0)) {
            if (!MT_HAVE_NCCL) {
                st = COMM_ERROR(c, MT_ERR_UNSUPPORTED,
                                "device backend requested; built without NCCL");
                goto fail;
            }
            MT_TRY_GOTO(world_init_nccl(c, &env), st, fail);
        }
    }
    if (c->size > 1 && !c->has_mpi && !c->has_nccl) {
        st = COMM_ERROR(c, MT_ERR_UNSUPPORTED,
                        "world of %d from %s but no backend is up (MPI %s, NCCL %s, GPUs needed "
                        "for NCCL)",
                        c->size, mt_launcher_name(env.launcher),
                        MT_HAVE_MPI ? "built" : "not built", MT_HAVE_NCCL ? "built" : "not built");
        goto fail;
    }
    MT_LOG_DEBUG("comm world: rank %d of %d (%s), MPI %d, NCCL %d", c->rank, c->size,
                 mt_launcher_name(env.launcher), c->has_mpi, c->has_nccl);
    *out = c;
    return MT_OK;
fail:
    mt_comm_destroy(c);
    return st;
}

mt_status mt_comm_split(mt_comm *parent, int color, int key, const char *name, mt_comm **out) {
    MT_REQUIRE(parent && out, MT_ERR_INVALID_ARG, "parent or out is NULL");
    *out = NULL;
    MT_REQUIRE(!parent->aborted, MT_ERR_INVALID_ARG, "group '%s' was aborted", parent->name);
    mt_comm *c = comm_new(name);
    MT_REQUIRE(c, MT_ERR_OOM, "mt_comm");
    c->timeout_s = parent->timeout_s;
    c->device = parent->device;
    parent->op = "split";
    parent->op_count = 1;
    parent->op_dtype = MT_I32;
    mt_status st = MT_OK;
    if (parent->has_mpi) {
        MT_TRY_GOTO(split_mpi(parent, color, key, c), st, fail);
    } else if (parent->size == 1) { /* a world of one without MPI, with NCCL or without */
        c->rank = 0;
        c->size = 1;
    } /* else a world without MPI: NCCL gives the rank and size */
    if (parent->has_nccl) MT_TRY_GOTO(split_nccl(parent, color, key, c), st, fail);
    parent->op = NULL;
    if (color < 0) {
        mt_comm_destroy(c);
        return MT_OK;
    }
    *out = c;
    return MT_OK;
fail:
    parent->op = NULL;
    mt_comm_destroy(c);
    return st;
}

void mt_comm_abort_job(mt_comm *world, int code) {
    fflush(stdout);
    fflush(stderr);
    if (world) {
        abort_nccl(world);
        abort_job_mpi(world, code);
    }
    _exit(code);
}

void mt_comm_destroy(mt_comm *comm) {
    if (!comm) return;
    destroy_nccl(comm);
    destroy_mpi(comm);
    free(comm);
}

int mt_comm_rank(const mt_comm *comm) {
    return comm ? comm->rank : -1;
}

int mt_comm_size(const mt_comm *comm) {
    return comm ? comm->size : 0;
}

mt_device mt_comm_device(const mt_comm *comm) {
    return comm ? comm->device : MT_DEVICE_CPU;
}

const char *mt_comm_name(const mt_comm *comm) {
    return comm ? comm->name : "?";
}

int mt_comm_has_host(const mt_comm *comm) {
    return comm && (comm->has_mpi || comm->size == 1);
}

int mt_comm_has_device(const mt_comm *comm) {
    return comm && comm->has_nccl;
}

void mt_comm_set_timeout(mt_comm *comm, double seconds) {
    if (comm) comm->timeout_s = seconds > 0 ? seconds : MT_COMM_DEFAULT_TIMEOUT_S;
}

/* ---- validation and dispatch ---- */

/* Starts operation `op` on `c`: records it for errors and checks the communicator and tensors.
 * *cuda: 1 if the tensors live on a GPU (then NCCL), else 0 (MPI or a world of one). */
static mt_status op_begin(mt_comm *c, const char *op, const mt_tensor *a, const mt_tensor *b,
                          int *cuda) {
    MT_REQUIRE(c, MT_ERR_INVALID_ARG, "%s: comm is NULL", op);
    c->op = op;
    c->op_count = a ? mt_tensor_numel(a) : 0;
    c->op_dtype = a ? a->dtype : MT_I32;
    if (c->aborted) return COMM_ERROR(c, MT_ERR_INVALID_ARG, "the communicator was aborted");
    if (a) MT_TRY(mt_tensor_check(a, op, -1));
    if (b) MT_TRY(mt_tensor_check(b, op, -1));
    if (a && b && a->dtype != b->dtype)
        return COMM_ERROR(c, MT_ERR_INVALID_ARG, "dtypes differ: %s and %s",
                          mt_dtype_name(a->dtype), mt_dtype_name(b->dtype));
    if (a && b && !mt_device_eq(a->device, b->device))
        return COMM_ERROR(c, MT_ERR_INVALID_ARG, "tensors on different devices");
    *cuda = a && mt_device_is_cuda(a->device);
    if (*cuda && !c->has_nccl)
        return COMM_ERROR(c, MT_ERR_UNSUPPORTED, "device tensor but NCCL is not %s",
                          MT_HAVE_NCCL ? "up on this communicator" : "built");
    if (*cuda && !mt_device_eq(a->device, c->device))
        return COMM_ERROR(c, MT_ERR_INVALID_ARG, "tensor on cuda:%d, communicator on cuda:%d",
                          a->device.index, c->device.index);
    if (!*cuda && !c->has_mpi && c->size > 1)
        return COMM_ERROR(c, MT_ERR_UNSUPPORTED, "host tensor but MPI is not %s",
                          MT_HAVE_MPI ? "up on this communicator" : "built");
    return MT_OK;
}

/* A world of one without MPI: every collective is a copy. */
static void local_copy(mt_tensor *dst, const mt_tensor *src) {
    if (!comm_same(dst, src) && mt_tensor_nbytes(src))
        memmove(dst->data, src->data, mt_tensor_nbytes(src));
}

static mt_status check_op(mt_comm *c, mt_redop op) {
    if ((unsigned)op > MT_REDOP_MIN) return COMM_ERROR(c, MT_ERR_INVALID_ARG, "bad redop %d", op);
    return MT_OK;
}

mt_status mt_comm_allreduce(mt_comm *comm, mt_tensor *dst, const mt_tensor *src, mt_redop op,
                            mt_stream stream) {
    int cuda = 0;
    MT_TRY(op_begin(comm, "allreduce", src, dst, &cuda));
    MT_TRY(check_op(comm, op));
    if (!mt_tensor_same_shape(dst, src) && mt_tensor_numel(dst) != mt_tensor_numel(src))
        return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "dst has %lld elements, src %lld",
                          (long long)mt_tensor_numel(dst), (long long)mt_tensor_numel(src));
    MT_LOG_DEBUG("allreduce %s on '%s'", redop_name(op), comm->name);
    if (cuda) return allreduce_nccl(comm, dst, src, op, stream);
    if (!comm->has_mpi) {
        local_copy(dst, src);
        return MT_OK;
    }
    return allreduce_mpi(comm, dst, src, op);
}

mt_status mt_comm_allgather(mt_comm *comm, mt_tensor *dst, const mt_tensor *src, mt_stream stream) {
    int cuda = 0;
    MT_TRY(op_begin(comm, "allgather", src, dst, &cuda));
    if (mt_tensor_numel(dst) != mt_tensor_numel(src) * comm->size)
        return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "dst has %lld elements, want %d x %lld",
                          (long long)mt_tensor_numel(dst), comm->size,
                          (long long)mt_tensor_numel(src));
    if (cuda) return allgather_nccl(comm, dst, src, stream);
    if (!comm->has_mpi) {
        local_copy(dst, src);
        return MT_OK;
    }
    return allgather_mpi(comm, dst, src);
}

mt_status mt_comm_reduce_scatter(mt_comm *comm, mt_tensor *dst, const mt_tensor *src, mt_redop op,
                                 mt_stream stream) {
    int cuda = 0;
    MT_TRY(op_begin(comm, "reduce_scatter", src, dst, &cuda));
    MT_TRY(check_op(comm, op));
    if (mt_tensor_numel(src) != mt_tensor_numel(dst) * comm->size)
        return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "src has %lld elements, want %d x %lld",
                          (long long)mt_tensor_numel(src), comm->size,
                          (long long)mt_tensor_numel(dst));
    if (cuda) return reduce_scatter_nccl(comm, dst, src, op, stream);
    if (!comm->has_mpi) {
        local_copy(dst, src);
        return MT_OK;
    }
    return reduce_scatter_mpi(comm, dst, src, op);
}

mt_status mt_comm_broadcast(mt_comm *comm, mt_tensor *dst, const mt_tensor *src, int root,
                            mt_stream stream) {
    int cuda = 0;
    if (!src) src = dst;
    MT_TRY(op_begin(comm, "broadcast", dst, src, &cuda));
    if (root < 0 || root >= comm->size)
        return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "root %d outside group of %d", root,
                          comm->size);
    if (mt_tensor_numel(dst) != mt_tensor_numel(src))
        return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "dst has %lld elements, src %lld",
                          (long long)mt_tensor_numel(dst), (long long)mt_tensor_numel(src));
    if (cuda) return broadcast_nccl(comm, dst, src, root, stream);
    if (comm->rank == root) local_copy(dst, src);
    if (!comm->has_mpi) return MT_OK;
    return broadcast_mpi(comm, dst, root);
}

static mt_status alltoallv_checked(mt_comm *comm, const char *op, mt_tensor *dst,
                                   const int64_t *recv_counts, const mt_tensor *src,
                                   const int64_t *send_counts, mt_stream stream) {
    int cuda = 0;
    MT_TRY(op_begin(comm, op, src, dst, &cuda));
    if (comm_same(dst, src) && mt_tensor_numel(src) > 0)
        return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "dst and src alias (not in place)");
    int64_t ns = 0, nr = 0;
    for (int i = 0; i < comm->size; i++) {
        if (send_counts[i] < 0 || recv_counts[i] < 0)
            return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "negative count for rank %d", i);
        ns += send_counts[i];
        nr += recv_counts[i];
    }
    if (ns != mt_tensor_numel(src) || nr != mt_tensor_numel(dst))
        return COMM_ERROR(comm, MT_ERR_INVALID_ARG,
                          "counts sum to %lld sent / %lld received; tensors have %lld / %lld",
                          (long long)ns, (long long)nr, (long long)mt_tensor_numel(src),
                          (long long)mt_tensor_numel(dst));
    if (cuda) return alltoallv_nccl(comm, dst, recv_counts, src, send_counts, stream);
    if (!comm->has_mpi) {
        local_copy(dst, src);
        return MT_OK;
    }
    return alltoallv_mpi(comm, dst, recv_counts, src, send_counts);
}

mt_status mt_comm_alltoall(mt_comm *comm, mt_tensor *dst, const mt_tensor *src, mt_stream stream) {
    MT_REQUIRE(comm && dst && src, MT_ERR_INVALID_ARG, "alltoall: comm, dst or src is NULL");
    int64_t n = mt_tensor_numel(src);
    if (n % comm->size || mt_tensor_numel(dst) != n) {
        comm->op = "alltoall";
        comm->op_count = n;
        comm->op_dtype = src->dtype;
        return COMM_ERROR(comm, MT_ERR_INVALID_ARG,
                          "numel must be equal and divisible by the group size (dst %lld)",
                          (long long)mt_tensor_numel(dst));
    }
    int64_t stack[64], *counts = comm->size <= 64 ? stack : malloc(comm->size * sizeof *counts);
    MT_REQUIRE(counts, MT_ERR_OOM, "alltoall counts");
    for (int i = 0; i < comm->size; i++)
        counts[i] = n / comm->size;
    mt_status st = alltoallv_checked(comm, "alltoall", dst, counts, src, counts, stream);
    if (counts != stack) free(counts);
    return st;
}

mt_status mt_comm_alltoallv(mt_comm *comm, mt_tensor *dst, const int64_t *recv_counts,
                            const mt_tensor *src, const int64_t *send_counts, mt_stream stream) {
    MT_REQUIRE(comm && recv_counts && send_counts, MT_ERR_INVALID_ARG,
               "alltoallv: comm or counts is NULL");
    return alltoallv_checked(comm, "alltoallv", dst, recv_counts, src, send_counts, stream);
}

mt_status mt_comm_barrier(mt_comm *comm) {
    int cuda = 0;
    MT_TRY(op_begin(comm, "barrier", NULL, NULL, &cuda));
    if (comm->has_mpi) return barrier_mpi(comm);
    if (comm->has_nccl) return barrier_nccl(comm);
    return MT_OK;
}

mt_status mt_comm_send(mt_comm *comm, const mt_tensor *src, int peer, mt_stream stream) {
    mt_p2p_op op = { MT_P2P_SEND, (mt_tensor *)src, peer };
    return mt_comm_p2p_batch(comm, &op, 1, stream);
}

mt_status mt_comm_recv(mt_comm *comm, mt_tensor *dst, int peer, mt_stream stream) {
    mt_p2p_op op = { MT_P2P_RECV, dst, peer };
    return mt_comm_p2p_batch(comm, &op, 1, stream);
}

/* Without MPI in a world of one: the k-th send to self feeds the k-th receive. */
static mt_status p2p_batch_local(mt_comm *c, const mt_p2p_op *ops, int n) {
    int s = 0;
    for (int r = 0; r < n; r++) {
        if (ops[r].kind != MT_P2P_RECV) continue;
        while (s < n && ops[s].kind != MT_P2P_SEND)
            s++;
        if (s == n) return COMM_ERROR(c, MT_ERR_INVALID_ARG, "receive without a matching send");
        if (mt_tensor_nbytes(ops[s].tensor) != mt_tensor_nbytes(ops[r].tensor))
            return COMM_ERROR(c, MT_ERR_INVALID_ARG, "send and receive sizes differ");
        local_copy(ops[r].tensor, ops[s].tensor);
        s++;
    }
    return MT_OK;
}

mt_status mt_comm_p2p_batch(mt_comm *comm, const mt_p2p_op *ops, int n, mt_stream stream) {
    MT_REQUIRE(comm && (ops || n == 0) && n >= 0, MT_ERR_INVALID_ARG, "p2p: bad arguments");
    if (n == 0) return MT_OK;
    int cuda = 0, first_cuda = 0;
    for (int i = 0; i < n; i++) {
        MT_TRY(op_begin(comm, ops[i].kind == MT_P2P_SEND ? "send" : "recv", ops[i].tensor, NULL,
                        &cuda));
        if (i == 0) first_cuda = cuda;
        if (cuda != first_cuda)
            return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "p2p batch mixes host and device tensors");
        if (ops[i].peer < 0 || ops[i].peer >= comm->size)
            return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "peer %d outside group of %d", ops[i].peer,
                              comm->size);
    }
    if (n > 1) {
        comm->op = "p2p_batch";
        comm->op_count = n;
    }
    if (cuda) return p2p_batch_nccl(comm, ops, n, stream);
    if (!comm->has_mpi) return p2p_batch_local(comm, ops, n);
    return p2p_batch_mpi(comm, ops, n);
}

mt_status mt_comm_wait(mt_comm *comm, mt_stream stream) {
    MT_REQUIRE(comm, MT_ERR_INVALID_ARG, "comm is NULL");
    if (comm->aborted) return COMM_ERROR(comm, MT_ERR_INVALID_ARG, "the communicator was aborted");
    if (!comm->has_nccl) return MT_OK;
    return wait_nccl(comm, stream);
}

/* ---- the grid's communicators ---- */

mt_status mt_comm_groups_create(mt_comm *world, const mt_grid *grid, mt_comm_groups *out) {
    MT_REQUIRE(world && grid && out, MT_ERR_INVALID_ARG, "world, grid or out is NULL");
    MT_REQUIRE(grid->world == world->size, MT_ERR_INVALID_ARG,
               "grid is for a world of %d, communicator '%s' has %d ranks", grid->world,
               world->name, world->size);
    memset(out, 0, sizeof *out);
    out->grid = *grid;
    for (int k = 0; k < MT_GROUP_COUNT; k++) {
        int index, pos;
        MT_TRY(mt_grid_locate(grid, (mt_group)k, world->rank, &index, &pos));
        mt_status st = mt_comm_split(world, index, pos, mt_group_name((mt_group)k), &out->comm[k]);
        if (st != MT_OK) {
            mt_comm_groups_destroy(out);
            return st;
        }
    }
    return MT_OK;
}

void mt_comm_groups_destroy(mt_comm_groups *g) {
    if (!g) return;
    for (int k = 0; k < MT_GROUP_COUNT; k++) {
        mt_comm_destroy(g->comm[k]);
        g->comm[k] = NULL;
    }
}
