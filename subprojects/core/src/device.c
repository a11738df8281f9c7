/* Devices, streams and device memory over the CUDA runtime; CPU-only builds answer 0 devices and
 * MT_ERR_UNSUPPORTED for CUDA requests. */
#include <mt/core.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if MT_HAVE_CUDA
#include <mt/core_cuda.h>
#endif

#if MT_HAVE_CUDA
int mt_have_cuda(void) {
    return 1;
}

mt_status mt_device_count(int *n) {
    MT_REQUIRE(n, MT_ERR_INVALID_ARG, "n is NULL");
    int c = 0;
    cudaError_t e = cudaGetDeviceCount(&c);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); // why: no driver (35) or no device (100) must not stick
        c = 0;
    }
    *n = c;
    return MT_OK;
}

mt_status mt_device_set(mt_device d) {
    if (!mt_device_is_cuda(d)) return MT_OK;
    MT_CUDA_TRY(cudaSetDevice(d.index));
    return MT_OK;
}

mt_status mt_device_name(int index, char *buf, size_t len) {
    struct cudaDeviceProp p;
    MT_CUDA_TRY(cudaGetDeviceProperties(&p, index));
    snprintf(buf, len, "%s", p.name);
    return MT_OK;
}

mt_status mt_stream_create(mt_stream *out) {
    cudaStream_t s;
    MT_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = s;
    return MT_OK;
}

void mt_stream_destroy(mt_stream s) {
    if (s) cudaStreamDestroy(s);
}

mt_status mt_stream_sync(mt_stream s) {
    if (s) {
        MT_CUDA_TRY(cudaStreamSynchronize(s));
        return MT_OK;
    }
    int n = 0;
    MT_TRY(mt_device_count(&n));
    if (n > 0) MT_CUDA_TRY(cudaDeviceSynchronize()); // why: a CUDA build on a GPU-less host
    return MT_OK;
}

mt_status mt_device_malloc(void **out, size_t bytes) {
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return MT_ERROR(e == cudaErrorMemoryAllocation ? MT_ERR_OOM : MT_ERR_CUDA,
                        "cudaMalloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
    }
    return MT_OK;
}

void mt_device_free(void *p) {
    if (p) cudaFree(p);
}

mt_status mt_memcpy(void *dst, mt_device dst_dev, const void *src, mt_device src_dev, size_t bytes,
                    mt_stream s) {
    if (!mt_device_is_cuda(dst_dev) && !mt_device_is_cuda(src_dev)) {
        memmove(dst, src, bytes);
        return MT_OK;
    }
    if (s)
        MT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    else
        MT_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    return MT_OK;
}

mt_status mt_memset_zero(void *dst, mt_device dev, size_t bytes, mt_stream s) {
    if (!mt_device_is_cuda(dev)) {
        memset(dst, 0, bytes);
        return MT_OK;
    }
    if (s)
        MT_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, s));
    else
        MT_CUDA_TRY(cudaMemset(dst, 0, bytes));
    return MT_OK;
}

mt_status mt_event_create(mt_event *out, int timing) {
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    cudaEvent_t e;
    MT_CUDA_TRY(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    *out = e;
    return MT_OK;
}

void mt_event_destroy(mt_event e) {
    if (e) cudaEventDestroy(e);
}

mt_status mt_event_record(mt_event e, mt_stream s) {
    MT_CUDA_TRY(cudaEventRecord(e, s));
    return MT_OK;
}

mt_status mt_stream_wait_event(mt_stream s, mt_event e) {
    MT_CUDA_TRY(cudaStreamWaitEvent(s, e, 0));
    return MT_OK;
}

mt_status mt_stream_wait_event_external(mt_stream s, mt_event e) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    MT_CUDA_TRY(cudaStreamIsCapturing(s, &cs));
    /* (the flag is invalid outside a capture) */
    MT_CUDA_TRY(cudaStreamWaitEvent(
        s, e, cs == cudaStreamCaptureStatusActive ? cudaEventWaitExternal : cudaEventWaitDefault));
    return MT_OK;
}

mt_status mt_event_sync(mt_event e) {
    MT_CUDA_TRY(cudaEventSynchronize(e));
    return MT_OK;
}

mt_status mt_event_elapsed_ms(float *ms, mt_event start, mt_event end) {
    MT_CUDA_TRY(cudaEventElapsedTime(ms, start, end));
    return MT_OK;
}

struct mt_graph {
    cudaGraphExec_t exec;
};

mt_status mt_graph_capture(mt_graph_fn fn, void *ctx, mt_graph **out) {
    MT_REQUIRE(fn && out, MT_ERR_INVALID_ARG, "NULL fn or out");
    *out = NULL;
    cudaStream_t cs;
    MT_CUDA_TRY(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    cudaError_t ce = cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal);
    if (ce != cudaSuccess) {
        cudaStreamDestroy(cs);
        return MT_ERROR(MT_ERR_CUDA, "cudaStreamBeginCapture: %s", cudaGetErrorString(ce));
    }
    mt_status st = fn(ctx, cs);
    cudaGraph_t graph = NULL;
    ce = cudaStreamEndCapture(cs, &graph); /* always: it ends the capture mode */
    cudaGraphExec_t exec = NULL;
    if (st == MT_OK && ce == cudaSuccess) ce = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(cs);
    (void)cudaGetLastError(); /* a failed capture leaves its error behind */
    if (st != MT_OK) return st;
    if (ce != cudaSuccess)
        return MT_ERROR(MT_ERR_CUDA, "CUDA graph capture: %s", cudaGetErrorString(ce));
    mt_graph *g = malloc(sizeof *g);
    if (!g) {
        cudaGraphExecDestroy(exec);
        return MT_ERROR(MT_ERR_OOM, "mt_graph");
    }
    g->exec = exec;
    *out = g;
    return MT_OK;
}

mt_status mt_graph_launch(mt_graph *g, mt_stream s) {
    MT_REQUIRE(g, MT_ERR_INVALID_ARG, "NULL graph");
    MT_CUDA_TRY(cudaGraphLaunch(g->exec, s));
    return MT_OK;
}

void mt_graph_destroy(mt_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    free(g);
}

#else /* CPU-only build */

#define NO_CUDA() MT_ERROR(MT_ERR_UNSUPPORTED, "built without CUDA")

int mt_have_cuda(void) {
    return 0;
}

mt_status mt_device_count(int *n) {
    MT_REQUIRE(n, MT_ERR_INVALID_ARG, "n is NULL");
    *n = 0;
    return MT_OK;
}

mt_status mt_device_set(mt_device d) {
    return mt_device_is_cuda(d) ? NO_CUDA() : MT_OK;
}

mt_status mt_device_name(int index, char *buf, size_t len) {
    (void)index;
    snprintf(buf, len, "cpu");
    return MT_OK;
}

mt_status mt_stream_create(mt_stream *out) {
    *out = NULL;
    return NO_CUDA();
}

void mt_stream_destroy(mt_stream s) {
    (void)s;
}

mt_status mt_stream_sync(mt_stream s) {
    (void)s;
    return MT_OK;
}

mt_status mt_device_malloc(void **out, size_t bytes) {
    (void)bytes;
    *out = NULL;
    return NO_CUDA();
}

void mt_device_free(void *p) {
    (void)p;
}

mt_status mt_memcpy(void *dst, mt_device dst_dev, const void *src, mt_device src_dev, size_t bytes,
                    mt_stream s) {
    (void)s;
    if (mt_device_is_cuda(dst_dev) || mt_device_is_cuda(src_dev)) return NO_CUDA();
    memmove(dst, src, bytes);
    return MT_OK;
}

mt_status mt_memset_zero(void *dst, mt_device dev, size_t bytes, mt_stream s) {
    (void)s;
    if (mt_device_is_cuda(dev)) return NO_CUDA();
    memset(dst, 0, bytes);
    return MT_OK;
}
mt_status mt_event_create(mt_event *out, int timing) {
    (void)timing;
    if (out) *out = NULL;
    return NO_CUDA();
}

void mt_event_destroy(mt_event e) {
    (void)e;
}

mt_status mt_event_record(mt_event e, mt_stream s) {
    (void)e;
    (void)s;
    return NO_CUDA();
}

mt_status mt_stream_wait_event(mt_stream s, mt_event e) {
    (void)e;
    (void)s;
    return NO_CUDA();
}

mt_status mt_stream_wait_event_external(mt_stream s, mt_event e) {
    return mt_stream_wait_event(s, e);
}

mt_status mt_event_sync(mt_event e) {
    (void)e;
    return NO_CUDA();
}

mt_status mt_event_elapsed_ms(float *ms, mt_event start, mt_event end) {
    (void)ms;
    (void)start;
    (void)end;
    return NO_CUDA();
}

mt_status mt_graph_capture(mt_graph_fn fn, void *ctx, mt_graph **out) {
    (void)fn, (void)ctx;
    if (out) *out = NULL;
    return NO_CUDA();
}

mt_status mt_graph_launch(mt_graph *g, mt_stream s) {
    (void)g, (void)s;
    return NO_CUDA();
}

void mt_graph_destroy(mt_graph *g) {
    (void)g;
}
#endif
