/* mt-benchkit: a C interface over Google Benchmark. Register at run time from main(), time GPU
 * work with CUDA events and report it as manual iteration time, attach rate counters. */
#ifndef MT_BENCHKIT_H
#define MT_BENCHKIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mt_bench_state mt_bench_state;
typedef void (*mt_bench_fn)(mt_bench_state *st, void *arg);

enum {
    MT_BENCH_MANUAL_TIME = 1, /* iteration time comes from mt_bench_set_iteration_time */
    MT_BENCH_REAL_TIME = 2,   /* wall clock instead of CPU time */
};

/* Registers benchmark `name` ("op/backend/shape"); `arg` is passed to fn unchanged. */
void mt_bench_register(const char *name, mt_bench_fn fn, void *arg, int flags);
/* Loop condition of the timed body: while (mt_bench_keep_running(st)) { ... }. */
int mt_bench_keep_running(mt_bench_state *st);
/* With MT_BENCH_MANUAL_TIME: the time of the current iteration (seconds). */
void mt_bench_set_iteration_time(mt_bench_state *st, double seconds);
/* Bytes read+written per iteration: reported as bytes_per_second. */
void mt_bench_set_bytes(mt_bench_state *st, int64_t bytes_per_iter);
/* A per-iteration amount reported as a rate (e.g. "FLOPS" with flops per iteration). */
void mt_bench_rate(mt_bench_state *st, const char *name, double per_iter);
/* A plain value counter (e.g. "ratio_vs_copy"). */
void mt_bench_counter(mt_bench_state *st, const char *name, double value);
/* Marks the run as failed with a message (e.g. an mt_status error) and stops it. */
void mt_bench_error(mt_bench_state *st, const char *msg);
/* Adds a key=value to the JSON context (e.g. the device name). */
void mt_bench_context(const char *key, const char *value);
/* Initialize, run what --benchmark_filter selects, shut down. Returns the process exit code. */
int mt_bench_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* MT_BENCHKIT_H */
