/* All-reduce, all-gather and reduce-scatter over NCCL under mpiexec (or torchrun --no-python),
 * 8 B to 256 MiB: algbw = size / time and busbw with nccl-tests' factors (all-reduce 2(n-1)/n,
 * all-gather and reduce-scatter (n-1)/n); size is the full buffer, as in nccl-tests. */
#include <mt/benchkit.h>
#include <mt/comm.h>

#include <stdio.h>
#include <stdlib.h>

#if MT_HAVE_CUDA
#include <mt/core_cuda.h>

enum {
    OP_ALLREDUCE,
    OP_ALLGATHER,
    OP_REDUCE_SCATTER
};
static const char *const op_names[] = { "allreduce", "allgather", "reduce_scatter" };

typedef struct comm_case {
    int op;
    int64_t bytes;
} comm_case;

static mt_comm *world;
static mt_stream stream;
static void *buf_in, *buf_out;

#define MAX_BYTES ((int64_t)256 << 20)

static void bench_coll(mt_bench_state *st, void *arg) {
    comm_case *c = arg;
    int n = mt_comm_size(world);
    int64_t per = c->bytes / 4 / (c->op == OP_ALLREDUCE ? 1 : n); /* f32 elements per rank */
    if (per < 1) per = 1;
    int64_t total = c->op == OP_ALLREDUCE ? per : per * n, size = total * 4;
    mt_device dev = mt_comm_device(world);
    mt_tensor big_in = mt_tensor_1d(buf_in, MT_F32, total, dev);
    mt_tensor big_out = mt_tensor_1d(buf_out, MT_F32, total, dev);
    mt_tensor small = mt_tensor_1d(buf_out, MT_F32, per, dev);
    mt_tensor small_in = mt_tensor_1d(buf_in, MT_F32, per, dev);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double busfac = c->op == OP_ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    while (mt_bench_keep_running(st)) {
        cudaEventRecord(e0, stream);
        mt_status s = c->op == OP_ALLREDUCE
                          ? mt_comm_allreduce(world, &big_out, &big_in, MT_REDOP_SUM, stream)
                      : c->op == OP_ALLGATHER
                          ? mt_comm_allgather(world, &big_out, &small_in, stream)
                          : mt_comm_reduce_scatter(world, &small, &big_in, MT_REDOP_SUM, stream);
        cudaEventRecord(e1, stream);
        if (s == MT_OK) s = mt_comm_wait(world, stream);
        if (s != MT_OK) {
            mt_bench_error(st, mt_last_error());
            break;
        }
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        /* every rank reports the slowest rank's time, so all make the same iteration decisions */
        mt_tensor t = mt_tensor_1d(&ms, MT_F32, 1, MT_DEVICE_CPU);
        if (n > 1 && mt_comm_has_host(world) &&
            mt_comm_allreduce(world, &t, &t, MT_REDOP_MAX, NULL) != MT_OK) {
            mt_bench_error(st, mt_last_error());
            break;
        }
        mt_bench_set_iteration_time(st, ms * 1e-3);
    }
    mt_bench_set_bytes(st, size);
    mt_bench_rate(st, "algbw", (double)size);
    mt_bench_rate(st, "busbw", (double)size * busfac);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    static comm_case cases[3 * 26];
    static char names[3 * 26][64];
    int ngpu = 0;
    mt_device_count(&ngpu);
    mt_comm_env env;
    if (ngpu > 0 && mt_comm_have_nccl() && mt_comm_env_read(&env) == MT_OK &&
        env.world_size <= ngpu) {
        mt_comm_config cfg = MT_COMM_CONFIG_INIT;
        cfg.backends = MT_COMM_DEVICE;
        MT_CHECK(mt_comm_world_create(&cfg, &world));
        if (mt_comm_rank(world) != 0 && !freopen("/dev/null", "w", stdout)) return 1;
        MT_CHECK(mt_stream_create(&stream));
        MT_CHECK(mt_device_malloc(&buf_in, (size_t)MAX_BYTES));
        MT_CHECK(mt_device_malloc(&buf_out, (size_t)MAX_BYTES));
        MT_CHECK(mt_memset_zero(buf_in, mt_comm_device(world), (size_t)MAX_BYTES, NULL));
        char dev[256], ranks[16];
        mt_device_name(mt_comm_device(world).index, dev, sizeof dev);
        snprintf(ranks, sizeof ranks, "%d", mt_comm_size(world));
        mt_bench_context("device", dev);
        mt_bench_context("ranks", ranks);
        int k = 0;
        for (int op = 0; op < 3; op++) {
            for (int64_t b = 8; b <= MAX_BYTES; b *= 2, k++) {
                cases[k].op = op;
                cases[k].bytes = b;
                snprintf(names[k], sizeof names[k], "%s/nccl/n%d_%lldB", op_names[op],
                         mt_comm_size(world), (long long)b);
                mt_bench_register(names[k], bench_coll, &cases[k], MT_BENCH_MANUAL_TIME);
            }
        }
    }
    int rc = mt_bench_main(argc, argv);
    if (world) {
        mt_device_free(buf_in);
        mt_device_free(buf_out);
        mt_stream_destroy(stream);
        mt_comm_destroy(world);
    }
    return rc;
#else
    return mt_bench_main(argc, argv);
#endif
}
