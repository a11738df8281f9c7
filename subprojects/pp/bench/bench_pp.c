/* bench_pp: what mt-pp's 1F1B costs besides the stages' work: the schedule with empty forward and
 * backward callbacks, one rank a GPU (a stage each) under mpirun, over NCCL, moving GPT-2 124M's
 * activation of a micro-batch (8 x 1024 x 768 bf16, 12 MiB) by default. Prints one JSON line (rank
 * 0): ms a step (the slowest rank's mean) for M micro-batches. Its peer, peers/peer_pp.py, runs
 * Megatron's p2p pattern (batch_isend_irecv) in PyTorch with the same schedule and sizes.
 *   mpirun -np P bench_pp [elements micro_batches]    (default 6291456 8) */
#include <mt/pp.h>

#include <stdio.h>
#include <stdlib.h>

#define WARMUP 5
#define ITERS  20
#define SLOTS  16

typedef struct bufs {
    mt_tensor in[SLOTS], out, g;
} bufs;

static mt_status nothing(void *ctx, int mb, int slot) {
    (void)ctx, (void)mb, (void)slot;
    return MT_OK;
}
static mt_tensor input(void *ctx, int slot) {
    return ((bufs *)ctx)->in[slot];
}
static mt_tensor output(void *ctx) {
    return ((bufs *)ctx)->out;
}
static mt_tensor grad(void *ctx) {
    return ((bufs *)ctx)->g;
}

int main(int argc, char **argv) {
    const int64_t n = argc > 1 ? atoll(argv[1]) : 8 * 1024 * 768;
    const int M = argc > 2 ? atoi(argv[2]) : 8;
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_DEVICE;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    const int P = mt_comm_size(w), r = mt_comm_rank(w), slots = mt_pp_num_slots(P, r);
    if (slots > SLOTS) {
        fprintf(stderr, "bench_pp: at most %d stages\n", SLOTS);
        return 2;
    }
    mt_device dev = mt_comm_device(w);
    mt_arena *ar;
    MT_CHECK(mt_arena_create(dev, (size_t)(slots + 2) * ((size_t)n * 2 + MT_ARENA_ALIGN), &ar));
    bufs b;
    for (int k = 0; k < slots; k++)
        MT_CHECK(mt_tensor_alloc(ar, MT_BF16, 1, &n, &b.in[k]));
    MT_CHECK(mt_tensor_alloc(ar, MT_BF16, 1, &n, &b.out));
    MT_CHECK(mt_tensor_alloc(ar, MT_BF16, 1, &n, &b.g));
    mt_stream s;
    MT_CHECK(mt_stream_create(&s));
    mt_pp_stage st = { w, s, &b, nothing, nothing, input, output, grad };
    double t = 0;
    for (int it = 0; it < WARMUP + ITERS; it++) {
        if (it == WARMUP) {
            MT_CHECK(mt_comm_wait(w, s));
            MT_CHECK(mt_comm_barrier(w));
            t = mt_time_now();
        }
        MT_CHECK(mt_pp_1f1b(&st, M));
    }
    MT_CHECK(mt_comm_wait(w, s));
    MT_CHECK(mt_comm_barrier(w)); /* (the last stage's receives end the step everywhere) */
    double ms = (mt_time_now() - t) * 1e3 / ITERS;
    if (r == 0)
        printf("{\"bench\": \"pp_1f1b\", \"stages\": %d, \"micro_batches\": %d, \"bytes\": %lld, "
               "\"ms\": %.4f}\n",
               P, M, (long long)n * 2, ms);
    mt_stream_destroy(s);
    mt_arena_destroy(ar);
    mt_comm_destroy(w);
    return 0;
}
