/* An mt_ckpt_group over an mt-comm communicator (host memory, MPI): gather is two allgathers
 * (lengths, then padded strings), bcast is a broadcast from rank 0. */
#include "ckpt_impl.h"

#include <stdlib.h>
#include <string.h>

#if MT_CKPT_HAVE_COMM
#include <mt/comm.h>

static mt_status comm_gather(void *ctx, const char *mine, char **all) {
    mt_comm *c = ctx;
    int n = mt_comm_size(c), me = mt_comm_rank(c);
    int64_t len = (int64_t)strlen(mine) + 1, *lens = malloc(sizeof(int64_t) * (size_t)n);
    MT_REQUIRE(lens, MT_ERR_OOM, "lengths");
    mt_tensor l1 = mt_tensor_1d(&len, MT_I64, 1, MT_DEVICE_CPU);
    mt_tensor ln = mt_tensor_1d(lens, MT_I64, n, MT_DEVICE_CPU);
    mt_status st = mt_comm_allgather(c, &ln, &l1, NULL);
    int64_t mx = 1;
    for (int r = 0; st == MT_OK && r < n; r++)
        mx = lens[r] > mx ? lens[r] : mx;
    char *pad = st == MT_OK ? calloc((size_t)mx, 1) : NULL;
    char *buf = st == MT_OK ? malloc((size_t)(mx * n)) : NULL;
    if (st == MT_OK && (!pad || !buf))
        st = MT_ERROR(MT_ERR_OOM, "gather of %lld bytes", (long long)(mx * n));
    if (st == MT_OK) {
        memcpy(pad, mine, (size_t)len);
        mt_tensor s = mt_tensor_1d(pad, MT_U8, mx, MT_DEVICE_CPU);
        mt_tensor d = mt_tensor_1d(buf, MT_U8, mx * n, MT_DEVICE_CPU);
        st = mt_comm_allgather(c, &d, &s, NULL);
    }
    for (int r = 0; st == MT_OK && me == 0 && r < n; r++) {
        all[r] = strdup(buf + (size_t)(r * mx));
        if (!all[r]) st = MT_ERROR(MT_ERR_OOM, "report");
    }
    free(lens);
    free(pad);
    free(buf);
    return st;
}

static mt_status comm_bcast(void *ctx, int64_t *value) {
    mt_tensor t = mt_tensor_1d(value, MT_I64, 1, MT_DEVICE_CPU);
    return mt_comm_broadcast(ctx, &t, NULL, 0, NULL);
}

mt_status mt_ckpt_group_comm(mt_ckpt_group *out, struct mt_comm *comm) {
    MT_REQUIRE(out && comm && mt_comm_has_host(comm), MT_ERR_INVALID_ARG,
               "needs a communicator with host (MPI) collectives");
    *out = (mt_ckpt_group){ mt_comm_rank(comm), mt_comm_size(comm), comm, comm_gather, comm_bcast };
    return MT_OK;
}
#else
mt_status mt_ckpt_group_comm(mt_ckpt_group *out, struct mt_comm *comm) {
    (void)out;
    (void)comm;
    return MT_ERROR(MT_ERR_UNSUPPORTED, "mt-ckpt was built without mt-comm");
}
#endif
