// The C shim over Google Benchmark; uses only API common to 1.7.1 (Debian) and 1.8.3 (GPU hosts).
#include <benchmark/benchmark.h>

#include <mt/benchkit.h>

static benchmark::State &S(mt_bench_state *st) {
    return *reinterpret_cast<benchmark::State *>(st);
}

extern "C" void mt_bench_register(const char *name, mt_bench_fn fn, void *arg, int flags) {
    auto *b = benchmark::RegisterBenchmark(
        name, [fn, arg](benchmark::State &s) { fn(reinterpret_cast<mt_bench_state *>(&s), arg); });
    if (flags & MT_BENCH_MANUAL_TIME) b->UseManualTime();
    if (flags & MT_BENCH_REAL_TIME) b->UseRealTime();
    b->Unit(benchmark::kMicrosecond);
}

extern "C" int mt_bench_keep_running(mt_bench_state *st) {
    return S(st).KeepRunning() ? 1 : 0;
}

extern "C" void mt_bench_set_iteration_time(mt_bench_state *st, double seconds) {
    S(st).SetIterationTime(seconds);
}

extern "C" void mt_bench_set_bytes(mt_bench_state *st, int64_t bytes_per_iter) {
    S(st).SetBytesProcessed(bytes_per_iter * static_cast<int64_t>(S(st).iterations()));
}

extern "C" void mt_bench_rate(mt_bench_state *st, const char *name, double per_iter) {
    S(st).counters[name] =
        benchmark::Counter(per_iter, benchmark::Counter::kIsIterationInvariantRate);
}

extern "C" void mt_bench_counter(mt_bench_state *st, const char *name, double value) {
    S(st).counters[name] = benchmark::Counter(value);
}

extern "C" void mt_bench_error(mt_bench_state *st, const char *msg) {
    S(st).SkipWithError(msg);
}

extern "C" void mt_bench_context(const char *key, const char *value) {
    benchmark::AddCustomContext(key, value);
}

extern "C" int mt_bench_main(int argc, char **argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
