/* Test helpers: N simulated ranks as threads sharing an in-process mt_ckpt_group, temporary
 * directories, and tensors whose values are their global element index (so any slice is
 * checkable without files). */
#ifndef CKPT_TEST_H
#define CKPT_TEST_H

#include <mt/ckpt.h>
#include <mt/testkit.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct tg_shared {
    int n;
    pthread_barrier_t bar;
    char *slot[64];
    int64_t val;
} tg_shared;

typedef struct tg_rank {
    tg_shared *sh;
    mt_ckpt_group g;
} tg_rank;

static inline mt_status tg_gather(void *ctx, const char *mine, char **all) {
    tg_rank *r = ctx;
    r->sh->slot[r->g.rank] = strdup(mine);
    pthread_barrier_wait(&r->sh->bar);
    if (r->g.rank == 0)
        for (int i = 0; i < r->sh->n; i++)
            all[i] = r->sh->slot[i]; /* ownership moves */
    pthread_barrier_wait(&r->sh->bar);
    return MT_OK;
}

static inline mt_status tg_bcast(void *ctx, int64_t *value) {
    tg_rank *r = ctx;
    if (r->g.rank == 0) r->sh->val = *value;
    pthread_barrier_wait(&r->sh->bar);
    *value = r->sh->val;
    pthread_barrier_wait(&r->sh->bar);
    return MT_OK;
}

/* Runs fn(rank, arg) on n threads that share one group (ranks[r].g). */
typedef void (*tg_fn)(const mt_ckpt_group *g, void *arg);
typedef struct tg_thread {
    tg_rank rank;
    tg_fn fn;
    void *arg;
} tg_thread;

static inline void *tg_main(void *p) {
    tg_thread *t = p;
    t->fn(&t->rank.g, t->arg);
    return NULL;
}

static inline void tg_run(int n, tg_fn fn, void *arg) {
    tg_shared sh = { 0 };
    sh.n = n;
    pthread_barrier_init(&sh.bar, NULL, (unsigned)n);
    tg_thread th[64];
    pthread_t tid[64];
    for (int r = 0; r < n; r++) {
        th[r].rank.sh = &sh;
        th[r].rank.g = (mt_ckpt_group){ r, n, &th[r].rank, tg_gather, tg_bcast };
        th[r].fn = fn;
        th[r].arg = arg;
        pthread_create(&tid[r], NULL, tg_main, &th[r]);
    }
    for (int r = 0; r < n; r++)
        pthread_join(tid[r], NULL);
    pthread_barrier_destroy(&sh.bar);
}

/* A fresh directory under /tmp (removed by ct_rmdir). */
static inline char *ct_tmpdir(char *buf) {
    strcpy(buf, "/tmp/mt-ckpt-test-XXXXXX");
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        exit(1);
    }
    return buf;
}

static inline void ct_rmdir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* Value of global element `i` of tensor number `tag` in iteration `it`. */
static inline float ct_val(int64_t i, int tag, int64_t it) {
    return (float)(i + 1000 * tag) + 0.5f * (float)it;
}

/* Fills the box [off, off+shape) of a 2-D (R,C) tensor (contiguous dst) with ct_val. */
static inline void ct_fill2(float *dst, int64_t C, const int64_t *off, const int64_t *shape,
                            int tag, int64_t it) {
    for (int64_t r = 0; r < shape[0]; r++)
        for (int64_t c = 0; c < shape[1]; c++)
            dst[r * shape[1] + c] = ct_val((off[0] + r) * C + off[1] + c, tag, it);
}

/* 1 if the box holds ct_val everywhere (reports the first mismatch). */
static inline int ct_check2(const char *what, const float *got, int64_t C, const int64_t *off,
                            const int64_t *shape, int tag, int64_t it) {
    for (int64_t r = 0; r < shape[0]; r++)
        for (int64_t c = 0; c < shape[1]; c++) {
            float want = ct_val((off[0] + r) * C + off[1] + c, tag, it);
            if (got[r * shape[1] + c] != want)
                return MT_EXPECT(0, "%s: [%lld,%lld] = %g, want %g", what, (long long)r,
                                 (long long)c, got[r * shape[1] + c], want);
        }
    return MT_EXPECT(1, "%s", what);
}

#endif /* CKPT_TEST_H */
