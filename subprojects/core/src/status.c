/* Status names and the thread-local last-error message. */
#include <mt/core.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *mt_status_str(mt_status s) {
    switch (s) {
    case MT_OK:
        return "MT_OK";
    case MT_ERR_INVALID_ARG:
        return "MT_ERR_INVALID_ARG";
    case MT_ERR_OOM:
        return "MT_ERR_OOM";
    case MT_ERR_CUDA:
        return "MT_ERR_CUDA";
    case MT_ERR_NCCL:
        return "MT_ERR_NCCL";
    case MT_ERR_MPI:
        return "MT_ERR_MPI";
    case MT_ERR_IO:
        return "MT_ERR_IO";
    case MT_ERR_FORMAT:
        return "MT_ERR_FORMAT";
    case MT_ERR_UNSUPPORTED:
        return "MT_ERR_UNSUPPORTED";
    case MT_ERR_TIMEOUT:
        return "MT_ERR_TIMEOUT";
    case MT_ERR_INTERNAL:
        return "MT_ERR_INTERNAL";
    case MT_ERR_NUMERIC:
        return "MT_ERR_NUMERIC";
    }
    return "MT_ERR_UNKNOWN";
}

const char *mt_last_error(void) {
    return last_error;
}

void mt_error_clear(void) {
    last_error[0] = '\0';
}

static const char *basename_of(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

mt_status mt_error_set(mt_status s, const char *file, int line, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(last_error, sizeof last_error, "%s:%d: %s: %s", basename_of(file), line,
             mt_status_str(s), msg);
    return s;
}

void mt_die(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "FATAL %s:%d: ", basename_of(file), line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}
