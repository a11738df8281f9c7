/* The named-region profiler: events (or wall-clock stamps) per region, totals per name. */
#include <mt/core.h>

#include <stdlib.h>
#include <string.h>

#define PROF_NAMES    128
#define PROF_NAME_LEN 48

struct mt_prof {
    int device, capacity, n, open;
    mt_event *ev;     /* 2 per region on CUDA */
    double *t;        /* 2 per region on the CPU (seconds) */
    int *region_name; /* index into names */
    char names[PROF_NAMES][PROF_NAME_LEN];
    double total_ms[PROF_NAMES];
    long count[PROF_NAMES];
    int nnames;
};

mt_status mt_prof_create(mt_prof **out, int device, int capacity) {
    MT_REQUIRE(out && capacity > 0, MT_ERR_INVALID_ARG, "NULL out or capacity %d", capacity);
    mt_prof *p = calloc(1, sizeof *p);
    MT_REQUIRE(p, MT_ERR_OOM, "profiler");
    p->device = device;
    p->capacity = capacity;
    p->region_name = calloc((size_t)capacity, sizeof *p->region_name);
    if (device)
        p->ev = calloc(2 * (size_t)capacity, sizeof *p->ev);
    else
        p->t = calloc(2 * (size_t)capacity, sizeof *p->t);
    if (!p->region_name || (device ? !p->ev : !p->t)) {
        mt_prof_destroy(p);
        return MT_ERROR(MT_ERR_OOM, "profiler of %d regions", capacity);
    }
    for (int i = 0; device && i < 2 * capacity; i++) {
        mt_status st = mt_event_create(&p->ev[i], 1);
        if (st != MT_OK) {
            mt_prof_destroy(p);
            return st;
        }
    }
    *out = p;
    return MT_OK;
}

void mt_prof_destroy(mt_prof *p) {
    if (!p) return;
    for (int i = 0; p->ev && i < 2 * p->capacity; i++)
        mt_event_destroy(p->ev[i]);
    free(p->ev);
    free(p->t);
    free(p->region_name);
    free(p);
}

static int name_index(mt_prof *p, const char *name) {
    for (int i = 0; i < p->nnames; i++)
        if (!strncmp(p->names[i], name, PROF_NAME_LEN - 1)) return i;
    if (p->nnames == PROF_NAMES) return PROF_NAMES - 1; /* the last slot takes the overflow */
    snprintf(p->names[p->nnames], PROF_NAME_LEN, "%s", name);
    return p->nnames++;
}

mt_status mt_prof_begin(mt_prof *p, const char *name, mt_stream s) {
    if (!p) return MT_OK;
    MT_REQUIRE(!p->open, MT_ERR_INVALID_ARG, "profiler region '%s' opened inside another", name);
    if (p->n == p->capacity) MT_TRY(mt_prof_collect(p));
    p->region_name[p->n] = name_index(p, name);
    p->open = 1;
    if (p->device) return mt_event_record(p->ev[2 * p->n], s);
    p->t[2 * p->n] = mt_time_now();
    return MT_OK;
}

mt_status mt_prof_end(mt_prof *p, mt_stream s) {
    if (!p) return MT_OK;
    MT_REQUIRE(p->open, MT_ERR_INVALID_ARG, "profiler region ended without a begin");
    p->open = 0;
    int i = p->n++;
    if (p->device) return mt_event_record(p->ev[2 * i + 1], s);
    p->t[2 * i + 1] = mt_time_now();
    return MT_OK;
}

mt_status mt_prof_collect(mt_prof *p) {
    if (!p) return MT_OK;
    for (int i = 0; i < p->n; i++) {
        double ms;
        if (p->device) {
            float f;
            MT_TRY(mt_event_sync(p->ev[2 * i + 1]));
            MT_TRY(mt_event_elapsed_ms(&f, p->ev[2 * i], p->ev[2 * i + 1]));
            ms = f;
        } else {
            ms = 1e3 * (p->t[2 * i + 1] - p->t[2 * i]);
        }
        p->total_ms[p->region_name[i]] += ms;
        p->count[p->region_name[i]]++;
    }
    p->n = 0;
    return MT_OK;
}

void mt_prof_print(const mt_prof *p, FILE *f, double per) {
    if (!p || p->nnames == 0) return;
    int order[PROF_NAMES];
    double sum = 0;
    for (int i = 0; i < p->nnames; i++) {
        order[i] = i;
        sum += p->total_ms[i];
    }
    for (int i = 1; i < p->nnames; i++) /* insertion sort, largest first */
        for (int j = i; j > 0 && p->total_ms[order[j]] > p->total_ms[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    if (per <= 0) per = 1;
    fprintf(f, "%-32s %10s %7s %8s\n", "region", "ms", "share", "calls");
    for (int k = 0; k < p->nnames; k++) {
        int i = order[k];
        fprintf(f, "%-32s %10.3f %6.1f%% %8.1f\n", p->names[i], p->total_ms[i] / per,
                sum > 0 ? 100.0 * p->total_ms[i] / sum : 0.0, (double)p->count[i] / per);
    }
    fprintf(f, "%-32s %10.3f\n", "total", sum / per);
}

double mt_prof_total_ms(const mt_prof *p, const char *name, long *count) {
    if (count) *count = 0;
    if (!p) return 0;
    for (int i = 0; i < p->nnames; i++)
        if (!strncmp(p->names[i], name, PROF_NAME_LEN - 1)) {
            if (count) *count = p->count[i];
            return p->total_ms[i];
        }
    return 0;
}
