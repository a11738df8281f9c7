/* mt-core: status codes and errors, devices and streams, logging, arenas and the TRY macros that
 * every megatron-c library shares. Plain C11; no CUDA header is needed to include it. */
#ifndef MT_CORE_H
#define MT_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MT_API __attribute__((visibility("default")))
#else
#define MT_API
#endif

#if defined(__CUDACC__)
#define MT_HOSTDEV __host__ __device__
#else
#define MT_HOSTDEV
#endif

/* ---- status and errors ---- */

typedef enum mt_status {
    MT_OK = 0,
    MT_ERR_INVALID_ARG, /* caller error: shape, dtype, NULL, device mismatch */
    MT_ERR_OOM,         /* host or device allocation */
    MT_ERR_CUDA,        /* CUDA runtime or cuBLAS; details in mt_last_error() */
    MT_ERR_NCCL,
    MT_ERR_MPI,
    MT_ERR_IO,          /* open, read, write, fsync, rename */
    MT_ERR_FORMAT,      /* a file that is not what it claims: bad magic, offsets, shapes */
    MT_ERR_UNSUPPORTED, /* not built with CUDA/NCCL/MPI, or dtype not implemented */
    MT_ERR_TIMEOUT,     /* a collective or peer that did not finish in time */
    MT_ERR_INTERNAL,
    MT_ERR_NUMERIC, /* Inf/NaN where a finite value must be (a diverged run, a kernel bug) */
} mt_status;

/* Name of a status ("MT_ERR_FORMAT"). Never NULL. */
MT_API const char *mt_status_str(mt_status s);

/* The last error recorded on this thread, "file:line: what: detail"; "" when none. */
MT_API const char *mt_last_error(void);

/* Records an error for this thread and returns `s` (so `return mt_error(...)` reads naturally). */
MT_API mt_status mt_error_set(mt_status s, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Clears this thread's recorded error. */
MT_API void mt_error_clear(void);

/* Aborts the process with a message; for MT_ASSERT and MT_CHECK only. */
MT_API void mt_die(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((noreturn, format(printf, 3, 4)))
#endif
    ;

#define MT_ERROR(s, ...) mt_error_set((s), __FILE__, __LINE__, __VA_ARGS__)

/* Return an error with a message if `cond` is false (caller input checks inside libraries). */
#define MT_REQUIRE(cond, s, ...)                                                \
    do {                                                                        \
        if (!(cond)) return mt_error_set((s), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

/* Propagate a failing mt_status. */
#define MT_TRY(expr)                              \
    do {                                          \
        mt_status mt_try_s_ = (expr);             \
        if (mt_try_s_ != MT_OK) return mt_try_s_; \
    } while (0)

/* Store a failing status in `st` and jump to `label` (one cleanup path). */
#define MT_TRY_GOTO(expr, st, label)   \
    do {                               \
        (st) = (expr);                 \
        if ((st) != MT_OK) goto label; \
    } while (0)

/* Abort on a broken internal invariant; never for caller input. */
#define MT_ASSERT(cond)                                                         \
    do {                                                                        \
        if (!(cond)) mt_die(__FILE__, __LINE__, "assertion failed: %s", #cond); \
    } while (0)

/* Programs and tests only: abort with the recorded error when `expr` is not MT_OK. */
#define MT_CHECK(expr)                                                                       \
    do {                                                                                     \
        mt_status mt_chk_s_ = (expr);                                                        \
        if (mt_chk_s_ != MT_OK)                                                              \
            mt_die(__FILE__, __LINE__, "%s failed: %s: %s", #expr, mt_status_str(mt_chk_s_), \
                   mt_last_error());                                                         \
    } while (0)

/* MT_CUDA_TRY lives in <mt/core_cuda.h>, for files that include the CUDA runtime. */

/* ---- devices and streams ---- */

/* The same type as cudaStream_t, so callers pass theirs without a cast. NULL: default stream. */
struct CUstream_st;
typedef struct CUstream_st *mt_stream;
/* The default (legacy) stream named explicitly (cudaStreamLegacy): calls that block when given
 * NULL enqueue on it instead, e.g. mt_memcpy from pageable host memory, which then returns once
 * the bytes are staged, without waiting for the work queued before it. */
#define MT_STREAM_DEFAULT ((mt_stream)0x1)

typedef enum mt_device_kind {
    MT_DEVICE_KIND_CPU = 0,
    MT_DEVICE_KIND_CUDA = 1
} mt_device_kind;

/* Where memory lives. {0} is the CPU. */
typedef struct mt_device {
    mt_device_kind kind;
    int index; /* CUDA ordinal; 0 for the CPU */
} mt_device;

static inline mt_device mt_device_cpu(void) {
    mt_device d = { MT_DEVICE_KIND_CPU, 0 };
    return d;
}
static inline mt_device mt_device_cuda(int index) {
    mt_device d = { MT_DEVICE_KIND_CUDA, index };
    return d;
}
static inline int mt_device_is_cuda(mt_device d) {
    return d.kind == MT_DEVICE_KIND_CUDA;
}
static inline int mt_device_eq(mt_device a, mt_device b) {
    return a.kind == b.kind && (a.kind == MT_DEVICE_KIND_CPU || a.index == b.index);
}
#define MT_DEVICE_CPU mt_device_cpu()

/* 1 if this build has CUDA kernels, else 0. */
MT_API int mt_have_cuda(void);

/* Number of usable CUDA devices in *n: 0 (and MT_OK) in a CPU-only build or on a machine without a
 * GPU or driver. Never crashes. */
MT_API mt_status mt_device_count(int *n);

/* Makes `d` current for this thread (cudaSetDevice); a no-op for the CPU. */
MT_API mt_status mt_device_set(mt_device d);

/* Name of CUDA device `index` ("NVIDIA H100 80GB HBM3") into buf; "cpu" without one. */
MT_API mt_status mt_device_name(int index, char *buf, size_t len);

/* Creates/destroys a non-blocking stream on the current device. */
MT_API mt_status mt_stream_create(mt_stream *out);
MT_API void mt_stream_destroy(mt_stream s);

/* Blocks until all work on `s` (NULL: the whole device) is done. */
MT_API mt_status mt_stream_sync(mt_stream s);

/* Events (cudaEvent_t): ordering between streams and GPU-side timing. mt_event_create's `timing`
 * 0 makes a cheap ordering-only event. CPU-only builds answer MT_ERR_UNSUPPORTED. */
struct CUevent_st;
typedef struct CUevent_st *mt_event;
MT_API mt_status mt_event_create(mt_event *out, int timing);
MT_API void mt_event_destroy(mt_event e);
MT_API mt_status mt_event_record(mt_event e, mt_stream s);
/* Work enqueued on `s` after this call waits for the work recorded in `e`. */
MT_API mt_status mt_stream_wait_event(mt_stream s, mt_event e);
/* mt_stream_wait_event for an event recorded outside a CUDA graph capture that `s` may be in: the
 * graph keeps it as a wait for the event's latest record at each replay (cudaEventWaitExternal). */
MT_API mt_status mt_stream_wait_event_external(mt_stream s, mt_event e);
MT_API mt_status mt_event_sync(mt_event e);
/* Milliseconds between two recorded, completed timing events. */
MT_API mt_status mt_event_elapsed_ms(float *ms, mt_event start, mt_event end);

/* CUDA graphs: mt_graph_capture records what fn(ctx, stream) enqueues on a capture stream (nothing
 * runs then) and instantiates it; mt_graph_launch replays it on `s`. fn must enqueue only: no
 * synchronisation, allocation or host reads of device results, and the same pointers every replay.
 * A capture that fails (fn's error or a forbidden call inside) returns that error and leaves no
 * work behind. CPU-only builds answer MT_ERR_UNSUPPORTED. */
typedef struct mt_graph mt_graph;
typedef mt_status (*mt_graph_fn)(void *ctx, mt_stream s);
MT_API mt_status mt_graph_capture(mt_graph_fn fn, void *ctx, mt_graph **out);
MT_API mt_status mt_graph_launch(mt_graph *g, mt_stream s);
MT_API void mt_graph_destroy(mt_graph *g);

/* A named-region profiler: mt_prof_begin/end pairs (nestable no; one open region at a time) on a
 * stream are timed with events on CUDA and with the wall clock on the CPU (where work is
 * synchronous); mt_prof_collect waits and adds each region's time to its name's total, and
 * mt_prof_print writes the totals, largest first. Every call is a no-op on a NULL profiler, so
 * callers write `mt_prof_begin(p, ...)` unconditionally. */
typedef struct mt_prof mt_prof;
/* `device`: time with CUDA events (1) or the wall clock (0); `capacity`: regions per collect. */
MT_API mt_status mt_prof_create(mt_prof **out, int device, int capacity);
MT_API void mt_prof_destroy(mt_prof *p);
MT_API mt_status mt_prof_begin(mt_prof *p, const char *name, mt_stream s);
MT_API mt_status mt_prof_end(mt_prof *p, mt_stream s);
MT_API mt_status mt_prof_collect(mt_prof *p);
/* Totals divided by `per` (e.g. the number of steps), in ms, with each name's share. */
MT_API void mt_prof_print(const mt_prof *p, FILE *f, double per);
/* The collected total of `name` in ms and its number of regions (0 and 0 if never seen). */
MT_API double mt_prof_total_ms(const mt_prof *p, const char *name, long *count);

/* Device memory: allocation and copies (blocking unless a stream is given). */
MT_API mt_status mt_device_malloc(void **out, size_t bytes);
MT_API void mt_device_free(void *p);
/* Copies `bytes` between any two of host/device memory; enqueued on `s` when `s` != NULL. */
MT_API mt_status mt_memcpy(void *dst, mt_device dst_dev, const void *src, mt_device src_dev,
                           size_t bytes, mt_stream s);
MT_API mt_status mt_memset_zero(void *dst, mt_device dev, size_t bytes, mt_stream s);

/* ---- logging ---- */

typedef enum mt_log_level {
    MT_LOG_ERROR = 0,
    MT_LOG_WARN = 1,
    MT_LOG_INFO = 2,
    MT_LOG_DEBUG = 3
} mt_log_level;

/* Messages above `level` are dropped (default INFO; env MT_LOG_LEVEL=error|warn|info|debug). */
MT_API void mt_log_set_level(mt_log_level level);
/* Prefix every line with "[rank R] " (R < 0: no prefix). */
MT_API void mt_log_set_rank(int rank);
/* Writes one line to stderr: "[rank R] LEVEL file:line: msg". Thread-safe. */
MT_API void mt_log_write(mt_log_level level, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#define MT_LOG_ERROR(...) mt_log_write(MT_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define MT_LOG_WARN(...)  mt_log_write(MT_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define MT_LOG_INFO(...)  mt_log_write(MT_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define MT_LOG_DEBUG(...) mt_log_write(MT_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

/* ---- arenas ---- */

/* One allocation per (device, lifetime); tensors are carved out of it as views. Allocation from an
 * arena is a bump of an offset (aligned to 256 bytes); nothing is freed until reset or destroy. */
typedef struct mt_arena mt_arena;

/* Reserves `capacity` bytes on `device` (host memory for the CPU, cudaMalloc for CUDA). */
MT_API mt_status mt_arena_create(mt_device device, size_t capacity, mt_arena **out);
MT_API void mt_arena_destroy(mt_arena *a); /* NULL is a no-op */
/* Carves `bytes` from the arena into *out; MT_ERR_OOM (naming sizes) when it does not fit. */
MT_API mt_status mt_arena_alloc(mt_arena *a, size_t bytes, void **out);
/* Forgets every allocation (the memory is kept). */
MT_API void mt_arena_reset(mt_arena *a);
MT_API size_t mt_arena_used(const mt_arena *a);
MT_API size_t mt_arena_capacity(const mt_arena *a);
MT_API mt_device mt_arena_device(const mt_arena *a);

#define MT_ARENA_ALIGN 256

/* ---- environment switches ---- */

/* An integer setting from the environment: atoi of its value when set and not empty, else
 * `unset`. mt_env_int reads it on every call (for switches a test changes between calls);
 * mt_env_int_once reads it once into *cache, which starts at MT_ENV_UNREAD (hot paths). */
#define MT_ENV_UNREAD (-2147483647 - 1)
MT_API int mt_env_int(const char *name, int unset);
MT_API int mt_env_int_once(const char *name, int unset, int *cache);

/* ---- time ---- */

/* Monotonic wall time in seconds. */
MT_API double mt_time_now(void);

#ifdef __cplusplus
}
#endif

#include <mt/philox.h>

#endif /* MT_CORE_H */
