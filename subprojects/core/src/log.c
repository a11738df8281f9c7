/* Line-oriented logging to stderr with an optional rank prefix. */
#define _POSIX_C_SOURCE 200809L
#include <mt/core.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static int log_level = -1; /* -1: not read from the environment yet */
static int log_rank = -1;

static const char *level_names[] = { "ERROR", "WARN", "INFO", "DEBUG" };

static int level_from_env(void) {
    const char *e = getenv("MT_LOG_LEVEL");
    if (!e) return MT_LOG_INFO;
    for (int i = 0; i < 4; i++)
        if (strcasecmp(e, level_names[i]) == 0) return i;
    return MT_LOG_INFO;
}

void mt_log_set_level(mt_log_level level) {
    log_level = (int)level;
}

void mt_log_set_rank(int rank) {
    log_rank = rank;
}

void mt_log_write(mt_log_level level, const char *file, int line, const char *fmt, ...) {
    if (log_level < 0) log_level = level_from_env();
    if ((int)level > log_level) return;
    char msg[2048];
    int n = 0;
    if (log_rank >= 0) n = snprintf(msg, sizeof msg, "[rank %d] ", log_rank);
    const char *base = strrchr(file, '/');
    n += snprintf(msg + n, sizeof msg - (size_t)n, "%s %s:%d: ", level_names[level],
                  base ? base + 1 : file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", msg); // why: one fprintf per line keeps ranks' lines whole
}

double mt_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
