/* The writer: every rank writes its replica-0 slices to DIR/iter_N.tmp/rank_R.safetensors and
 * reports (file, size, chunk CRCs, slices) to rank 0, which checks the slices tile each tensor,
 * writes index.json and publishes: fsync, rename to iter_N, fsync DIR, then latest. Async saves
 * snapshot to host memory and write on a pthread; publishing happens in mt_ckpt_wait. */
#include "ckpt_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ck_job_item {
    char *name;
    char *key;   /* in this rank's file: the name, "name#k" for its k-th further box here */
    mt_tensor t; /* host view (user memory in sync mode, the snapshot in async mode) */
    int64_t gshape[MT_MAX_DIMS], off[MT_MAX_DIMS];
} ck_job_item;

struct mt_ckpt_writer {
    char *dir;
    mt_ckpt_layout layout;
    mt_ckpt_group solo;
    const mt_ckpt_group *g;
    int async, do_fsync, keep;
    uint32_t chunk;
    /* the save in flight */
    int pending, thread_live;
    pthread_t thread;
    int64_t iteration;
    ck_job_item *items;
    int n;
    json_t *args; /* rank 0's */
    char *sampler, *rng;
    unsigned char *stage; /* async snapshot */
    size_t stage_cap;
    mt_status job_st;
    char job_err[1024];
    char *report; /* this rank's JSON report */
};

static mt_status solo_gather(void *ctx, const char *mine, char **all) {
    (void)ctx;
    all[0] = strdup(mine);
    MT_REQUIRE(all[0], MT_ERR_OOM, "gather");
    return MT_OK;
}

static mt_status solo_bcast(void *ctx, int64_t *value) {
    (void)ctx;
    (void)value;
    return MT_OK;
}

static char *xstrdup(const char *s) {
    return s ? strdup(s) : NULL;
}

mt_status mt_ckpt_writer_create(const mt_ckpt_writer_config *cfg, mt_ckpt_writer **out) {
    MT_REQUIRE(cfg && out && cfg->dir && cfg->size >= sizeof(mt_ckpt_writer_config),
               MT_ERR_INVALID_ARG, "NULL config/out/dir or old config size");
    *out = NULL;
    const mt_ckpt_group *g = cfg->group;
    MT_REQUIRE(!g ||
                   (g->nranks >= 1 && g->rank >= 0 && g->rank < g->nranks && g->gather && g->bcast),
               MT_ERR_INVALID_ARG, "group: bad rank/nranks or missing gather/bcast");
    if (mkdir(cfg->dir, 0755) != 0 && errno != EEXIST)
        return MT_ERROR(MT_ERR_IO, "cannot create %s: %s", cfg->dir, strerror(errno));
    mt_ckpt_writer *w = calloc(1, sizeof *w);
    MT_REQUIRE(w, MT_ERR_OOM, "writer");
    w->dir = strdup(cfg->dir);
    w->layout = cfg->layout;
    w->solo = (mt_ckpt_group){ 0, 1, NULL, solo_gather, solo_bcast };
    w->g = g ? g : &w->solo;
    w->async = cfg->async;
    w->do_fsync = cfg->fsync;
    w->keep = cfg->keep;
    w->chunk = cfg->chunk_bytes ? cfg->chunk_bytes : MT_CKPT_CHUNK_BYTES;
    if (!w->dir) {
        free(w);
        return MT_ERROR(MT_ERR_OOM, "dir");
    }
    *out = w;
    return MT_OK;
}

static void job_clear(mt_ckpt_writer *w) {
    for (int i = 0; i < w->n; i++)
        free(w->items[i].name), free(w->items[i].key);
    free(w->items);
    w->items = NULL;
    w->n = 0;
    json_decref(w->args);
    w->args = NULL;
    free(w->sampler);
    free(w->rng);
    free(w->report);
    w->sampler = w->rng = w->report = NULL;
    w->pending = 0;
}

void mt_ckpt_writer_destroy(mt_ckpt_writer *w) {
    if (!w) return;
    if (w->pending && mt_ckpt_wait(w) != MT_OK)
        MT_LOG_ERROR("ckpt: pending save failed at destroy: %s", mt_last_error());
    job_clear(w);
    free(w->stage);
    free(w->dir);
    free(w);
}

/* ---- the rank-local part: write the shard, fsync, checksum, make the report ---- */

static mt_status checksum_file(const char *path, uint32_t chunk, int do_fsync, uint64_t *bytes,
                               json_t *crcs) {
    int fd = open(path, O_RDONLY);
    MT_REQUIRE(fd >= 0, MT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    unsigned char *buf = malloc(chunk);
    mt_status st = buf ? MT_OK : MT_ERROR(MT_ERR_OOM, "checksum buffer");
    uint64_t total = 0;
    while (st == MT_OK) {
        size_t got = 0;
        while (got < chunk) { // why: a chunk may take several reads
            ssize_t k = read(fd, buf + got, chunk - got);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) st = MT_ERROR(MT_ERR_IO, "read %s: %s", path, strerror(errno));
            if (k <= 0) break;
            got += (size_t)k;
        }
        if (st != MT_OK || got == 0) break;
        json_array_append_new(crcs, json_integer(mt_crc32c(0, buf, got)));
        total += got;
        if (got < chunk) break;
    }
    if (st == MT_OK && do_fsync && fsync(fd) != 0)
        st = MT_ERROR(MT_ERR_IO, "fsync %s: %s", path, strerror(errno));
    close(fd);
    free(buf);
    *bytes = total;
    return st;
}

static json_t *shape_json(int ndim, const int64_t *v) {
    json_t *a = json_array();
    for (int d = 0; d < ndim; d++)
        json_array_append_new(a, json_integer(v[d]));
    return a;
}

static mt_status write_local(mt_ckpt_writer *w, json_t *rep) {
    char tmpdir[4096], path[4096], fname[64];
    MT_TRY(ck_path(tmpdir, sizeof tmpdir, "%s/iter_%07lld.tmp", w->dir, (long long)w->iteration));
    json_t *slices = json_array();
    json_object_set_new(rep, "slices", slices);
    for (int i = 0; i < w->n; i++) {
        const ck_job_item *it = &w->items[i];
        json_t *s = json_object();
        json_object_set_new(s, "name", json_string(it->name));
        json_object_set_new(s, "dtype", json_string(mt_dtype_st_name(it->t.dtype)));
        json_object_set_new(s, "shape", shape_json(it->t.ndim, it->gshape));
        json_object_set_new(s, "offset", shape_json(it->t.ndim, it->off));
        json_object_set_new(s, "lengths", shape_json(it->t.ndim, it->t.shape));
        if (strcmp(it->key, it->name) != 0) json_object_set_new(s, "key", json_string(it->key));
        json_array_append_new(slices, s);
    }
    if (w->n == 0) return MT_OK; /* nothing to write: every item is a replica */
    snprintf(fname, sizeof fname, "rank_%05d.safetensors", w->g->rank);
    MT_TRY(ck_path(path, sizeof path, "%s/%s", tmpdir, fname));
    mt_safetensors_item *st_items = malloc(sizeof *st_items * (size_t)w->n);
    MT_REQUIRE(st_items, MT_ERR_OOM, "items");
    for (int i = 0; i < w->n; i++)
        st_items[i] = (mt_safetensors_item){ w->items[i].key, &w->items[i].t };
    char iter[32];
    snprintf(iter, sizeof iter, "%lld", (long long)w->iteration);
    const char *meta[] = { "format", CK_FORMAT, "iteration", iter };
    mt_status st = mt_safetensors_save(path, st_items, w->n, meta, 2);
    free(st_items);
    MT_TRY(st);
    uint64_t bytes = 0;
    json_t *crcs = json_array();
    json_object_set_new(rep, "crc32c", crcs);
    MT_TRY(checksum_file(path, w->chunk, w->do_fsync, &bytes, crcs));
    json_object_set_new(rep, "file", json_string(fname));
    json_object_set_new(rep, "bytes", json_integer((json_int_t)bytes));
    return MT_OK;
}

/* Runs on the writer thread (async) or inline: never collective. */
static void *job_run(void *arg) {
    mt_ckpt_writer *w = arg;
    json_t *rep = json_object();
    json_object_set_new(rep, "rank", json_integer(w->g->rank));
    json_object_set_new(rep, "rng", w->rng ? json_string(w->rng) : json_null());
    w->job_st = write_local(w, rep);
    w->job_err[0] = 0;
    if (w->job_st != MT_OK) snprintf(w->job_err, sizeof w->job_err, "%s", mt_last_error());
    json_object_set_new(rep, "status", json_integer(w->job_st));
    json_object_set_new(rep, "error", json_string(w->job_err));
    w->report = json_dumps(rep, JSON_COMPACT);
    json_decref(rep);
    return NULL;
}

/* ---- rank 0: merge the reports into index.json and publish ---- */

static mt_status merge_reports(mt_ckpt_writer *w, char **all, json_t *index) {
    int nr = w->g->nranks;
    json_t *tensors = json_object(), *files = json_object(), *rng = json_array();
    json_object_set_new(index, "tensors", tensors);
    json_object_set_new(index, "files", files);
    json_object_set_new(index, "rng", rng);
    for (int r = 0; r < nr; r++) {
        json_error_t je;
        json_t *rep = json_loads(all[r], 0, &je);
        MT_REQUIRE(rep, MT_ERR_INTERNAL, "rank %d sent a bad report: %s", r, je.text);
        int rst = (int)json_integer_value(json_object_get(rep, "status"));
        if (rst != MT_OK) {
            mt_status st = MT_ERROR((mt_status)rst, "rank %d: %s", r,
                                    json_string_value(json_object_get(rep, "error")));
            json_decref(rep);
            return st;
        }
        json_array_append(rng, json_object_get(rep, "rng"));
        json_t *file = json_object_get(rep, "file");
        if (json_is_string(file)) {
            json_t *f = json_object();
            json_object_set(f, "bytes", json_object_get(rep, "bytes"));
            json_object_set(f, "crc32c", json_object_get(rep, "crc32c"));
            json_object_set_new(files, json_string_value(file), f);
        }
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(rep, "slices"), i, s) {
            const char *name = json_string_value(json_object_get(s, "name"));
            json_t *t = json_object_get(tensors, name);
            if (!t) {
                t = json_object();
                json_object_set(t, "dtype", json_object_get(s, "dtype"));
                json_object_set(t, "shape", json_object_get(s, "shape"));
                json_object_set_new(t, "slices", json_array());
                json_object_set_new(tensors, name, t);
            } else if (!json_equal(json_object_get(t, "dtype"), json_object_get(s, "dtype")) ||
                       !json_equal(json_object_get(t, "shape"), json_object_get(s, "shape"))) {
                char *a = json_dumps(t, JSON_COMPACT), *b = json_dumps(s, JSON_COMPACT);
                mt_status st = MT_ERROR(MT_ERR_INVALID_ARG,
                                        "tensor '%s': rank %d disagrees on dtype/shape: %s vs %s",
                                        name, r, a, b);
                free(a);
                free(b);
                json_decref(rep);
                return st;
            }
            json_t *sl = json_object();
            json_object_set(sl, "file", file);
            json_object_set(sl, "offset", json_object_get(s, "offset"));
            json_object_set(sl, "lengths", json_object_get(s, "lengths"));
            if (json_object_get(s, "key")) json_object_set(sl, "key", json_object_get(s, "key"));
            json_array_append_new(json_object_get(t, "slices"), sl);
        }
        json_decref(rep);
    }
    /* every tensor must be tiled exactly by the saved slices */
    const char *name;
    json_t *t;
    json_object_foreach(tensors, name, t) {
        json_t *shape = json_object_get(t, "shape"), *sl = json_object_get(t, "slices");
        int nd = (int)json_array_size(shape), ns = (int)json_array_size(sl);
        int64_t gs[MT_MAX_DIMS];
        for (int d = 0; d < nd; d++)
            gs[d] = json_integer_value(json_array_get(shape, (size_t)d));
        ck_box *b = calloc((size_t)ns, sizeof *b);
        MT_REQUIRE(b, MT_ERR_OOM, "boxes");
        for (int k = 0; k < ns; k++) {
            json_t *x = json_array_get(sl, (size_t)k);
            for (int d = 0; d < nd; d++) {
                b[k].off[d] =
                    json_integer_value(json_array_get(json_object_get(x, "offset"), (size_t)d));
                b[k].shape[d] =
                    json_integer_value(json_array_get(json_object_get(x, "lengths"), (size_t)d));
            }
        }
        mt_status st = ck_check_tiling("save", name, nd, gs, b, ns);
        free(b);
        if (st != MT_OK) return MT_ERROR(MT_ERR_INVALID_ARG, "%s", mt_last_error());
    }
    return MT_OK;
}

static void retain(mt_ckpt_writer *w) {
    int64_t *its;
    int n;
    if (w->keep <= 0 || ck_list_iterations(w->dir, &its, &n) != MT_OK) return;
    for (int i = 0; i + w->keep < n; i++) {
        char p[4096];
        if (its[i] == w->iteration) continue;
        if (ck_path(p, sizeof p, "%s/iter_%07lld", w->dir, (long long)its[i]) != MT_OK ||
            ck_rmtree(p) != MT_OK)
            MT_LOG_WARN("ckpt: could not remove old checkpoint: %s", mt_last_error());
    }
    free(its);
}

static mt_status publish(mt_ckpt_writer *w, char **all) {
    char tmpdir[4096], final[4096], old[4096], path[4096];
    long long it = (long long)w->iteration;
    MT_TRY(ck_path(tmpdir, sizeof tmpdir, "%s/iter_%07lld.tmp", w->dir, it));
    MT_TRY(ck_path(final, sizeof final, "%s/iter_%07lld", w->dir, it));
    MT_TRY(ck_path(old, sizeof old, "%s/iter_%07lld.old", w->dir, it));
    json_t *index = json_object();
    json_object_set_new(index, "format", json_string(CK_FORMAT));
    json_object_set_new(index, "version", json_integer(MT_CKPT_VERSION));
    json_object_set_new(index, "iteration", json_integer(w->iteration));
    json_object_set_new(index, "layout",
                        json_pack("{si si si si si si}", "world", w->g->nranks, "tp", w->layout.tp,
                                  "pp", w->layout.pp, "dp", w->layout.dp, "cp", w->layout.cp, "ep",
                                  w->layout.ep));
    json_object_set_new(
        index, "checksum",
        json_pack("{ss sI}", "algorithm", "crc32c", "chunk_bytes", (json_int_t)w->chunk));
    json_object_set(index, "args", w->args ? w->args : json_null());
    json_object_set_new(index, "sampler", w->sampler ? json_string(w->sampler) : json_null());
    mt_status st = merge_reports(w, all, index);
    char *text = st == MT_OK ? json_dumps(index, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
    json_decref(index);
    MT_TRY(st);
    MT_REQUIRE(text, MT_ERR_OOM, "index text");
    st = ck_path(path, sizeof path, "%s/%s", tmpdir, CK_INDEX);
    if (st == MT_OK) st = ck_write_atomic(path, text, strlen(text), w->do_fsync);
    free(text);
    MT_TRY(st);
    if (w->do_fsync) MT_TRY(ck_fsync_path(tmpdir));
    /* re-saving an existing iteration: move the old one aside first (rename cannot replace a
     * non-empty directory) */
    struct stat sb;
    if (stat(final, &sb) == 0) {
        MT_TRY(ck_rmtree(old));
        MT_REQUIRE(rename(final, old) == 0, MT_ERR_IO, "rename %s -> %s: %s", final, old,
                   strerror(errno));
    }
    MT_REQUIRE(rename(tmpdir, final) == 0, MT_ERR_IO, "rename %s -> %s: %s", tmpdir, final,
               strerror(errno));
    if (w->do_fsync) MT_TRY(ck_fsync_path(w->dir));
    char num[32];
    int k = snprintf(num, sizeof num, "%lld\n", it);
    MT_TRY(ck_path(path, sizeof path, "%s/%s", w->dir, MT_CKPT_LATEST));
    MT_TRY(ck_write_atomic(path, num, (size_t)k, w->do_fsync));
    MT_TRY(ck_rmtree(old));
    retain(w);
    return MT_OK;
}

/* Collective: join the writer thread, gather the reports, rank 0 publishes, share the result. */
static mt_status finish(mt_ckpt_writer *w) {
    const mt_ckpt_group *g = w->g;
    if (w->thread_live) {
        pthread_join(w->thread, NULL);
        w->thread_live = 0;
    }
    mt_status st = w->report ? MT_OK : MT_ERROR(MT_ERR_OOM, "report");
    char **all = NULL;
    if (st == MT_OK && g->rank == 0) {
        all = calloc((size_t)g->nranks, sizeof *all);
        if (!all) st = MT_ERROR(MT_ERR_OOM, "reports");
    }
    // why: every rank must enter gather and bcast even after a local failure, or peers hang
    mt_status gst = g->gather(g->ctx, w->report ? w->report : "{}", all);
    if (st == MT_OK) st = gst;
    if (st == MT_OK && g->rank == 0) st = publish(w, all);
    if (all)
        for (int r = 0; r < g->nranks; r++)
            free(all[r]);
    free(all);
    int64_t v = st;
    MT_TRY(g->bcast(g->ctx, &v));
    if (st == MT_OK && v != MT_OK)
        st = MT_ERROR((mt_status)v, "rank 0 failed to publish iteration %lld (%s)",
                      (long long)w->iteration, mt_status_str((mt_status)v));
    if (st == MT_OK && w->job_st != MT_OK) st = MT_ERROR(w->job_st, "%s", w->job_err);
    job_clear(w);
    return st;
}

mt_status mt_ckpt_wait(mt_ckpt_writer *w) {
    MT_REQUIRE(w, MT_ERR_INVALID_ARG, "NULL writer");
    if (!w->pending) return MT_OK;
    return finish(w);
}

static mt_status check_item(const mt_ckpt_item *it, int i) {
    MT_REQUIRE(it->name && it->name[0] && strcmp(it->name, "__metadata__") != 0, MT_ERR_INVALID_ARG,
               "item %d: NULL, empty or reserved name", i);
    MT_TRY(mt_tensor_check(it->tensor, it->name, -1));
    MT_REQUIRE(it->replica >= 0, MT_ERR_INVALID_ARG, "'%s': negative replica", it->name);
    const mt_tensor *t = it->tensor;
    for (int d = 0; d < t->ndim; d++) {
        int64_t o = it->offset ? it->offset[d] : 0;
        int64_t gs = it->global_shape ? it->global_shape[d] : t->shape[d];
        MT_REQUIRE(o >= 0 && o + t->shape[d] <= gs, MT_ERR_INVALID_ARG,
                   "'%s': dim %d slice [%lld, +%lld) outside global size %lld", it->name, d,
                   (long long)o, (long long)t->shape[d], (long long)gs);
    }
    return MT_OK;
}

mt_status mt_ckpt_save(mt_ckpt_writer *w, int64_t iteration, const mt_ckpt_item *items, int n,
                       const mt_ckpt_state *state) {
    MT_REQUIRE(w && (n == 0 || items) && n >= 0 && iteration >= 0 && iteration <= 9999999,
               MT_ERR_INVALID_ARG, "bad arguments (iteration %lld)", (long long)iteration);
    MT_TRY(mt_ckpt_wait(w));
    const mt_ckpt_group *g = w->g;
    mt_status st = MT_OK;
    size_t stage_bytes = 0;
    for (int i = 0; i < n && st == MT_OK; i++) {
        st = check_item(&items[i], i); /* (several boxes of a name: the tiling check at the end) */
        if (st == MT_OK && items[i].replica == 0 &&
            (w->async || mt_device_is_cuda(items[i].tensor->device)))
            stage_bytes += (mt_tensor_nbytes(items[i].tensor) + 63) / 64 * 64;
    }
    json_t *args = NULL;
    if (st == MT_OK && g->rank == 0 && state && state->args) {
        json_error_t je;
        args = json_loads(state->args, JSON_DECODE_ANY, &je);
        if (!args) st = MT_ERROR(MT_ERR_INVALID_ARG, "state.args is not JSON: %s", je.text);
    }
    /* rank 0 makes a fresh temporary directory; everyone learns whether that worked */
    char tmpdir[4096];
    if (st == MT_OK)
        st = ck_path(tmpdir, sizeof tmpdir, "%s/iter_%07lld.tmp", w->dir, (long long)iteration);
    int64_t v = st;
    if (g->rank == 0 && st == MT_OK) {
        v = ck_rmtree(tmpdir);
        if (v == MT_OK && mkdir(tmpdir, 0755) != 0)
            v = MT_ERROR(MT_ERR_IO, "cannot create %s: %s", tmpdir, strerror(errno));
    }
    mt_status bst = g->bcast(g->ctx, &v);
    if (st == MT_OK) st = bst;
    if (st == MT_OK && v != MT_OK)
        st = g->rank == 0 ? (mt_status)v
                          : MT_ERROR((mt_status)v, "rank 0 could not prepare iteration %lld",
                                     (long long)iteration);
    if (st != MT_OK) {
        json_decref(args);
        return st;
    }
    /* the job: views of every replica-0 item, snapshotted to host memory when needed */
    if (stage_bytes > w->stage_cap) {
        free(w->stage);
        w->stage = malloc(stage_bytes);
        w->stage_cap = w->stage ? stage_bytes : 0;
    }
    w->items = calloc((size_t)(n ? n : 1), sizeof *w->items);
    w->args = args;
    w->sampler = xstrdup(state ? state->sampler : NULL);
    w->rng = xstrdup(state ? state->rng : NULL);
    w->iteration = iteration;
    w->pending = 1;
    if (!w->items || (stage_bytes && !w->stage))
        st = MT_ERROR(MT_ERR_OOM, "snapshot of %zu bytes", stage_bytes);
    size_t at = 0;
    for (int i = 0; i < n && st == MT_OK; i++) {
        const mt_ckpt_item *it = &items[i];
        if (it->replica != 0) continue;
        ck_job_item *j = &w->items[w->n++];
        j->name = strdup(it->name);
        int k = 0; /* this name's boxes before this one on this rank */
        for (int q = 0; q < w->n - 1; q++)
            k += strcmp(w->items[q].name, it->name) == 0;
        char key[32];
        snprintf(key, sizeof key, "#%d", k);
        j->key = malloc(strlen(it->name) + strlen(key) + 1);
        if (j->key) sprintf(j->key, "%s%s", it->name, k ? key : "");
        if (!j->name || !j->key) st = MT_ERROR(MT_ERR_OOM, "item names");
        j->t = *it->tensor;
        for (int d = 0; d < j->t.ndim; d++) {
            j->gshape[d] = it->global_shape ? it->global_shape[d] : j->t.shape[d];
            j->off[d] = it->offset ? it->offset[d] : 0;
        }
        if (w->async || mt_device_is_cuda(it->tensor->device)) {
            j->t = mt_tensor_make(w->stage + at, it->tensor->dtype, it->tensor->ndim,
                                  it->tensor->shape, MT_DEVICE_CPU);
            at += (mt_tensor_nbytes(it->tensor) + 63) / 64 * 64;
            st = mt_tensor_copy(&j->t, it->tensor, NULL);
        }
        if (st == MT_OK && !j->name) st = MT_ERROR(MT_ERR_OOM, "name");
    }
    if (st != MT_OK) {
        w->job_st = st;
        snprintf(w->job_err, sizeof w->job_err, "%s", mt_last_error());
        json_t *rep = json_pack("{si ss}", "status", (int)st, "error", w->job_err);
        w->report = json_dumps(rep, JSON_COMPACT);
        json_decref(rep);
        return finish(w); /* still collective: peers are waiting in gather */
    }
    if (w->async) {
        if (pthread_create(&w->thread, NULL, job_run, w) == 0) {
            w->thread_live = 1;
            return MT_OK;
        }
        MT_LOG_WARN("ckpt: no writer thread (%s); saving synchronously", strerror(errno));
    }
    job_run(w);
    return finish(w);
}
