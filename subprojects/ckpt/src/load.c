/* The reader: parses and checks index.json, then serves any box of any tensor by intersecting it
 * with the saved slices and pread-ing only the overlapping checksum chunks of those shards. */
#include "ckpt_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ck_file {
    char *name;
    uint64_t bytes;
    int nchunks;
    uint32_t *crc;
    int fd; /* -1 until first use */
    mt_safetensors *st;
} ck_file;

typedef struct ck_tensor {
    char *name;
    mt_dtype dtype;
    int ndim;
    int64_t shape[MT_MAX_DIMS];
    int nslices;
    ck_box *box;
    int *file;
    char **key; /* slice s's name in its file (NULL: the tensor's name) */
} ck_tensor;

struct mt_ckpt {
    char dir[4096]; /* DIR/iter_N */
    char rel[32];   /* "iter_N" for messages */
    int64_t iteration;
    mt_ckpt_layout layout;
    uint64_t chunk;
    char *args, *sampler;
    char **rng;
    int nranks;
    ck_tensor *t;
    int nt;
    ck_file *f;
    int nf;
    unsigned char *buf; /* one read window */
    size_t bufcap;
};

void mt_ckpt_close(mt_ckpt *c) {
    if (!c) return;
    for (int i = 0; i < c->nt; i++) {
        free(c->t[i].name);
        free(c->t[i].box);
        free(c->t[i].file);
        for (int k = 0; c->t[i].key && k < c->t[i].nslices; k++)
            free(c->t[i].key[k]);
        free(c->t[i].key);
    }
    for (int i = 0; i < c->nf; i++) {
        free(c->f[i].name);
        free(c->f[i].crc);
        if (c->f[i].fd >= 0) close(c->f[i].fd);
        mt_safetensors_close(c->f[i].st);
    }
    for (int r = 0; r < c->nranks; r++)
        free(c->rng[r]);
    free(c->rng);
    free(c->t);
    free(c->f);
    free(c->args);
    free(c->sampler);
    free(c->buf);
    free(c);
}

mt_status mt_ckpt_latest(const char *dir, int64_t *iteration) {
    char p[4096], text[64] = { 0 };
    MT_TRY(ck_path(p, sizeof p, "%s/%s", dir, MT_CKPT_LATEST));
    FILE *fp = fopen(p, "r");
    MT_REQUIRE(fp, MT_ERR_IO, "cannot open %s: %s", p, strerror(errno));
    size_t k = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    char *end;
    long long v = strtoll(text, &end, 10);
    MT_REQUIRE(k > 0 && end != text && v >= 0 && (*end == 0 || *end == '\n'), MT_ERR_FORMAT,
               "%s: '%s' is not an iteration number", p, text);
    *iteration = v;
    return MT_OK;
}

static int find_file(const mt_ckpt *c, const char *name) {
    for (int i = 0; i < c->nf; i++)
        if (strcmp(c->f[i].name, name) == 0) return i;
    return -1;
}

static int read_dims(json_t *a, int ndim, int64_t *out) {
    if (!json_is_array(a) || (int)json_array_size(a) != ndim) return 0;
    for (int d = 0; d < ndim; d++) {
        json_t *x = json_array_get(a, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0) return 0;
        out[d] = json_integer_value(x);
    }
    return 1;
}

/* Everything in index.json, checked; no shard is read. */
static mt_status parse_index(mt_ckpt *c, json_t *ix, const char *ipath) {
    const char *fmt = json_string_value(json_object_get(ix, "format"));
    MT_REQUIRE(fmt && strcmp(fmt, CK_FORMAT) == 0, MT_ERR_FORMAT,
               "%s: format is '%s', expected '%s'", ipath, fmt ? fmt : "(none)", CK_FORMAT);
    json_t *ver = json_object_get(ix, "version");
    MT_REQUIRE(json_is_integer(ver) && json_integer_value(ver) >= 1 &&
                   json_integer_value(ver) <= MT_CKPT_VERSION,
               MT_ERR_FORMAT, "%s: unknown index version %lld (this reader knows 1..%d)", ipath,
               (long long)json_integer_value(ver), MT_CKPT_VERSION);
    c->iteration = json_integer_value(json_object_get(ix, "iteration"));
    json_t *lay = json_object_get(ix, "layout");
    c->layout = (mt_ckpt_layout)MT_CKPT_LAYOUT_INIT;
    json_unpack(lay, "{s?i s?i s?i s?i s?i}", "tp", &c->layout.tp, "pp", &c->layout.pp, "dp",
                &c->layout.dp, "cp", &c->layout.cp, "ep", &c->layout.ep);
    json_t *cs = json_object_get(ix, "checksum");
    const char *alg = json_string_value(json_object_get(cs, "algorithm"));
    json_int_t chunk = json_integer_value(json_object_get(cs, "chunk_bytes"));
    MT_REQUIRE(alg && strcmp(alg, "crc32c") == 0 && chunk > 0, MT_ERR_FORMAT,
               "%s: checksum must be crc32c with chunk_bytes > 0", ipath);
    c->chunk = (uint64_t)chunk;
    c->args = json_dumps(json_object_get(ix, "args") ? json_object_get(ix, "args") : json_null(),
                         JSON_COMPACT | JSON_ENCODE_ANY);
    const char *smp = json_string_value(json_object_get(ix, "sampler"));
    c->sampler = smp ? strdup(smp) : NULL;
    json_t *rng = json_object_get(ix, "rng");
    c->nranks = (int)json_array_size(rng);
    c->rng = calloc((size_t)(c->nranks ? c->nranks : 1), sizeof *c->rng);
    MT_REQUIRE(c->rng, MT_ERR_OOM, "rng");
    for (int r = 0; r < c->nranks; r++) {
        const char *s = json_string_value(json_array_get(rng, (size_t)r));
        c->rng[r] = s ? strdup(s) : NULL;
    }
    json_t *files = json_object_get(ix, "files"), *tensors = json_object_get(ix, "tensors");
    MT_REQUIRE(json_is_object(files) && json_is_object(tensors), MT_ERR_FORMAT,
               "%s: no files or tensors object", ipath);
    c->f = calloc(json_object_size(files) + 1, sizeof *c->f);
    c->t = calloc(json_object_size(tensors) + 1, sizeof *c->t);
    MT_REQUIRE(c->f && c->t, MT_ERR_OOM, "index tables");
    const char *key;
    json_t *v;
    json_object_foreach(files, key, v) {
        ck_file *f = &c->f[c->nf++];
        f->fd = -1;
        f->name = strdup(key);
        json_t *bytes = json_object_get(v, "bytes"), *crc = json_object_get(v, "crc32c");
        MT_REQUIRE(f->name && json_is_integer(bytes) && json_integer_value(bytes) >= 0 &&
                       json_is_array(crc),
                   MT_ERR_FORMAT, "%s: file '%s' needs bytes and crc32c", ipath, key);
        MT_REQUIRE(!strchr(key, '/') && key[0] != '.', MT_ERR_FORMAT,
                   "%s: file name '%s' leaves the directory", ipath, key);
        f->bytes = (uint64_t)json_integer_value(bytes);
        f->nchunks = (int)json_array_size(crc);
        MT_REQUIRE((uint64_t)f->nchunks == (f->bytes + c->chunk - 1) / c->chunk, MT_ERR_FORMAT,
                   "%s: file '%s' has %d checksums for %llu bytes", ipath, key, f->nchunks,
                   (unsigned long long)f->bytes);
        f->crc = malloc(sizeof(uint32_t) * (size_t)(f->nchunks + 1));
        MT_REQUIRE(f->crc, MT_ERR_OOM, "crcs");
        for (int k = 0; k < f->nchunks; k++)
            f->crc[k] = (uint32_t)json_integer_value(json_array_get(crc, (size_t)k));
    }
    json_object_foreach(tensors, key, v) {
        ck_tensor *t = &c->t[c->nt++];
        t->name = strdup(key);
        MT_REQUIRE(t->name, MT_ERR_OOM, "name");
        const char *dt = json_string_value(json_object_get(v, "dtype"));
        json_t *shape = json_object_get(v, "shape"), *sl = json_object_get(v, "slices");
        MT_REQUIRE(dt && mt_dtype_parse(dt, &t->dtype) == MT_OK, MT_ERR_FORMAT,
                   "%s: tensor '%s' has dtype '%s' we cannot load", ipath, key, dt ? dt : "");
        t->ndim = (int)json_array_size(shape);
        MT_REQUIRE(t->ndim <= MT_MAX_DIMS && read_dims(shape, t->ndim, t->shape) &&
                       json_is_array(sl),
                   MT_ERR_FORMAT, "%s: tensor '%s' has a bad shape or no slices", ipath, key);
        t->nslices = (int)json_array_size(sl);
        t->box = calloc((size_t)t->nslices + 1, sizeof *t->box);
        t->file = calloc((size_t)t->nslices + 1, sizeof *t->file);
        t->key = calloc((size_t)t->nslices + 1, sizeof *t->key);
        MT_REQUIRE(t->box && t->file && t->key, MT_ERR_OOM, "slices");
        for (int k = 0; k < t->nslices; k++) {
            json_t *s = json_array_get(sl, (size_t)k);
            const char *fn = json_string_value(json_object_get(s, "file"));
            t->file[k] = fn ? find_file(c, fn) : -1;
            const char *sk = json_string_value(json_object_get(s, "key"));
            if (sk) MT_REQUIRE((t->key[k] = strdup(sk)), MT_ERR_OOM, "key");
            MT_REQUIRE(t->file[k] >= 0, MT_ERR_FORMAT,
                       "%s: tensor '%s' slice %d names file '%s' that is not listed", ipath, key, k,
                       fn ? fn : "(none)");
            MT_REQUIRE(read_dims(json_object_get(s, "offset"), t->ndim, t->box[k].off) &&
                           read_dims(json_object_get(s, "lengths"), t->ndim, t->box[k].shape),
                       MT_ERR_FORMAT, "%s: tensor '%s' slice %d has bad offset/lengths", ipath, key,
                       k);
        }
        MT_TRY(ck_check_tiling(ipath, key, t->ndim, t->shape, t->box, t->nslices));
    }
    return MT_OK;
}

static mt_status open_one(const char *dir, int64_t iteration, int flags, mt_ckpt **out) {
    mt_ckpt *c = calloc(1, sizeof *c);
    MT_REQUIRE(c, MT_ERR_OOM, "handle");
    mt_status st = ck_path(c->dir, sizeof c->dir, "%s/iter_%07lld", dir, (long long)iteration);
    snprintf(c->rel, sizeof c->rel, "iter_%07lld", (long long)iteration);
    char ipath[4200], fpath[4400];
    json_t *ix = NULL;
    if (st == MT_OK) st = ck_path(ipath, sizeof ipath, "%s/%s", c->dir, CK_INDEX);
    if (st == MT_OK) {
        json_error_t je;
        ix = json_load_file(ipath, JSON_REJECT_DUPLICATES, &je);
        struct stat sb;
        if (!ix && stat(ipath, &sb) != 0)
            st = MT_ERROR(MT_ERR_IO, "%s: missing (%s)", ipath, strerror(errno));
        else if (!ix)
            st = MT_ERROR(MT_ERR_FORMAT, "%s: line %d: %s", ipath, je.line, je.text);
    }
    if (st == MT_OK) st = parse_index(c, ix, ipath);
    json_decref(ix);
    for (int i = 0; st == MT_OK && i < c->nf; i++) {
        struct stat sb;
        st = ck_path(fpath, sizeof fpath, "%s/%s", c->dir, c->f[i].name);
        if (st == MT_OK && stat(fpath, &sb) != 0)
            st = MT_ERROR(MT_ERR_IO, "%s/%s: missing shard (%s)", c->rel, c->f[i].name,
                          strerror(errno));
        else if (st == MT_OK && (uint64_t)sb.st_size != c->f[i].bytes)
            st = MT_ERROR(MT_ERR_FORMAT, "%s/%s: shard is %lld bytes, index.json says %llu (%s)",
                          c->rel, c->f[i].name, (long long)sb.st_size,
                          (unsigned long long)c->f[i].bytes,
                          (uint64_t)sb.st_size < c->f[i].bytes ? "truncated" : "trailing bytes");
    }
    if (st == MT_OK && (flags & MT_CKPT_OPEN_VERIFY)) st = mt_ckpt_verify(c);
    if (st != MT_OK) {
        mt_ckpt_close(c);
        return st;
    }
    *out = c;
    return MT_OK;
}

mt_status mt_ckpt_open(const char *dir, int64_t iteration, int flags, mt_ckpt **out) {
    MT_REQUIRE(dir && out, MT_ERR_INVALID_ARG, "NULL dir or out");
    *out = NULL;
    int64_t it = iteration;
    mt_status st = it == MT_CKPT_ITER_LATEST ? mt_ckpt_latest(dir, &it) : MT_OK;
    if (st == MT_OK) st = open_one(dir, it, flags, out);
    if (st == MT_OK || !(flags & MT_CKPT_OPEN_FALLBACK)) return st;
    char first[1024];
    snprintf(first, sizeof first, "%s", mt_last_error());
    mt_status first_st = st;
    int64_t *its;
    int n;
    if (ck_list_iterations(dir, &its, &n) != MT_OK) return MT_ERROR(first_st, "%s", first);
    // why: `it` is the iteration that failed; when latest itself is unreadable, try them all
    int64_t below = it == MT_CKPT_ITER_LATEST ? INT64_MAX : it;
    for (int i = n - 1; i >= 0; i--) {
        if (its[i] >= below) continue;
        MT_LOG_WARN("ckpt: %s; falling back to iteration %lld", first, (long long)its[i]);
        if (open_one(dir, its[i], flags, out) == MT_OK) {
            free(its);
            return MT_OK;
        }
        snprintf(first, sizeof first, "%s", mt_last_error());
    }
    free(its);
    return MT_ERROR(first_st, "no loadable checkpoint in %s; last error: %s", dir, first);
}

int64_t mt_ckpt_iteration(const mt_ckpt *c) {
    return c->iteration;
}
mt_ckpt_layout mt_ckpt_saved_layout(const mt_ckpt *c) {
    return c->layout;
}
int mt_ckpt_saved_ranks(const mt_ckpt *c) {
    return c->nranks;
}
const char *mt_ckpt_args(const mt_ckpt *c) {
    return c->args;
}
const char *mt_ckpt_sampler(const mt_ckpt *c) {
    return c->sampler;
}
const char *mt_ckpt_rng(const mt_ckpt *c, int rank) {
    return rank >= 0 && rank < c->nranks ? c->rng[rank] : NULL;
}
int mt_ckpt_count(const mt_ckpt *c) {
    return c->nt;
}
const char *mt_ckpt_name(const mt_ckpt *c, int i) {
    return i >= 0 && i < c->nt ? c->t[i].name : NULL;
}

static const ck_tensor *find_tensor(const mt_ckpt *c, const char *name) {
    for (int i = 0; i < c->nt; i++)
        if (strcmp(c->t[i].name, name) == 0) return &c->t[i];
    return NULL;
}

mt_status mt_ckpt_info(const mt_ckpt *c, const char *name, mt_dtype *dtype, int *ndim,
                       int64_t *shape) {
    MT_REQUIRE(c && name, MT_ERR_INVALID_ARG, "NULL handle or name");
    const ck_tensor *t = find_tensor(c, name);
    MT_REQUIRE(t, MT_ERR_INVALID_ARG, "%s: no tensor '%s'", c->rel, name);
    if (dtype) *dtype = t->dtype;
    if (ndim) *ndim = t->ndim;
    if (shape) memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    return MT_OK;
}

static mt_status file_ready(mt_ckpt *c, ck_file *f) {
    if (f->fd >= 0) return MT_OK;
    char p[4400];
    MT_TRY(ck_path(p, sizeof p, "%s/%s", c->dir, f->name));
    mt_status st = mt_safetensors_open(p, &f->st);
    MT_REQUIRE(st == MT_OK, st, "%s/%s: %s", c->rel, f->name, mt_last_error());
    f->fd = open(p, O_RDONLY);
    MT_REQUIRE(f->fd >= 0, MT_ERR_IO, "cannot open %s: %s", p, strerror(errno));
    return MT_OK;
}

/* Reads the window of whole chunks that starts at chunk `k0` into c->buf and checks each one. */
static mt_status read_window(mt_ckpt *c, ck_file *f, int k0, uint64_t *lo, uint64_t *hi,
                             const char *tname) {
    uint64_t per = c->chunk >= (1u << 22) ? 1 : (1u << 22) / c->chunk; // why: >= 4 MiB per pread
    *lo = (uint64_t)k0 * c->chunk;
    *hi = *lo + per * c->chunk < f->bytes ? *lo + per * c->chunk : f->bytes;
    size_t len = (size_t)(*hi - *lo);
    if (len > c->bufcap) {
        free(c->buf);
        c->buf = malloc(len);
        c->bufcap = c->buf ? len : 0;
        MT_REQUIRE(c->buf, MT_ERR_OOM, "read buffer of %zu bytes", len);
    }
    size_t got = 0;
    while (got < len) {
        ssize_t k = pread(f->fd, c->buf + got, len - got, (off_t)(*lo + got));
        if (k < 0 && errno == EINTR) continue;
        MT_REQUIRE(k > 0, MT_ERR_IO, "%s/%s: read at %llu failed (%s) while loading '%s'", c->rel,
                   f->name, (unsigned long long)(*lo + got), k ? strerror(errno) : "end of file",
                   tname);
        got += (size_t)k;
    }
    for (uint64_t p = 0; p < len; p += c->chunk) {
        int k = (int)((*lo + p) / c->chunk);
        size_t n = len - p < c->chunk ? (size_t)(len - p) : (size_t)c->chunk;
        uint32_t crc = mt_crc32c(0, c->buf + p, n);
        MT_REQUIRE(crc == f->crc[k], MT_ERR_FORMAT,
                   "%s/%s: checksum mismatch in chunk %d (bytes %llu..%llu): crc32c %08x, "
                   "index.json says %08x (while loading '%s')",
                   c->rel, f->name, k, (unsigned long long)(*lo + p),
                   (unsigned long long)(*lo + p + n), crc, f->crc[k], tname);
    }
    return MT_OK;
}

/* Slice s's name in its shard (a rank's further boxes of one tensor: "name#k"). */
static const char *slice_key(const ck_tensor *t, int s) {
    return t->key[s] ? t->key[s] : t->name;
}

/* Opens slice s's shard and checks that its header agrees with index.json on dtype and shape. */
static mt_status check_slice(mt_ckpt *c, const ck_tensor *t, int s) {
    ck_file *f = &c->f[t->file[s]];
    MT_TRY(file_ready(c, f));
    mt_tensor st;
    mt_status rs = mt_safetensors_get(f->st, slice_key(t, s), &st);
    MT_REQUIRE(rs == MT_OK, MT_ERR_FORMAT, "%s/%s: tensor '%s': %s", c->rel, f->name, t->name,
               mt_last_error());
    int same = st.dtype == t->dtype && st.ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = st.shape[d] == t->box[s].shape[d];
    char got[128];
    MT_REQUIRE(same, MT_ERR_FORMAT,
               "%s/%s: tensor '%s' is %s in the shard, index.json says %s with other lengths",
               c->rel, f->name, t->name, mt_tensor_str(&st, got, sizeof got),
               mt_dtype_name(t->dtype));
    return MT_OK;
}

/* Copies the intersection of saved slice `s` and the requested box into dst. */
static mt_status read_part(mt_ckpt *c, const ck_tensor *t, int s, unsigned char *dst,
                           const int64_t *doff, const int64_t *dshape) {
    const ck_box *b = &t->box[s];
    int nd = t->ndim;
    int64_t lo[MT_MAX_DIMS], len[MT_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        lo[d] = b->off[d] > doff[d] ? b->off[d] : doff[d];
        int64_t hi = b->off[d] + b->shape[d] < doff[d] + dshape[d] ? b->off[d] + b->shape[d]
                                                                   : doff[d] + dshape[d];
        len[d] = hi - lo[d];
        if (len[d] <= 0) return MT_OK;
    }
    ck_file *f = &c->f[t->file[s]];
    MT_TRY(check_slice(c, t, s));
    uint64_t base, nbytes;
    MT_TRY(mt_safetensors_extent(f->st, slice_key(t, s), &base, &nbytes));
    size_t es = mt_dtype_size(t->dtype);
    /* A run is contiguous in both source and destination: the innermost dims that both hold
     * whole, plus the first partial dim k. Runs come in increasing file order. */
    int k = nd - 1;
    while (k > 0 && len[k] == b->shape[k] && len[k] == dshape[k])
        k--;
    int64_t run = 1;
    for (int d = (nd ? k : 0); d < nd; d++)
        run *= len[d];
    int64_t sstr[MT_MAX_DIMS], dstr[MT_MAX_DIMS], idx[MT_MAX_DIMS] = { 0 };
    int64_t as = 1, ad = 1;
    for (int d = nd - 1; d >= 0; d--) {
        sstr[d] = as;
        dstr[d] = ad;
        as *= b->shape[d];
        ad *= dshape[d];
    }
    uint64_t wlo = 0, whi = 0;
    for (;;) {
        int64_t si = 0, di = 0;
        for (int d = 0; d < nd; d++) {
            si += (lo[d] - b->off[d] + idx[d]) * sstr[d];
            di += (lo[d] - doff[d] + idx[d]) * dstr[d];
        }
        uint64_t rlo = base + (uint64_t)si * es, rhi = rlo + (uint64_t)run * es;
        unsigned char *out = dst + (size_t)di * es;
        for (uint64_t p = rlo; p < rhi;) {
            if (p < wlo || p >= whi)
                MT_TRY(read_window(c, f, (int)(p / c->chunk), &wlo, &whi, t->name));
            uint64_t e = rhi < whi ? rhi : whi;
            memcpy(out + (p - rlo), c->buf + (p - wlo), (size_t)(e - p));
            p = e;
        }
        int d = k - 1; /* next index over the outer dims 0..k-1 */
        while (d >= 0 && ++idx[d] == len[d])
            idx[d--] = 0;
        if (d < 0) break;
    }
    return MT_OK;
}

mt_status mt_ckpt_read(mt_ckpt *c, const char *name, mt_tensor *dst, const int64_t *offset) {
    MT_REQUIRE(c && name, MT_ERR_INVALID_ARG, "NULL handle or name");
    const ck_tensor *t = find_tensor(c, name);
    MT_REQUIRE(t, MT_ERR_INVALID_ARG, "%s: no tensor '%s'", c->rel, name);
    MT_TRY(mt_tensor_check(dst, name, t->ndim));
    MT_REQUIRE(!mt_device_is_cuda(dst->device), MT_ERR_INVALID_ARG,
               "'%s': destination must be host memory", name);
    MT_REQUIRE(dst->dtype == t->dtype, MT_ERR_INVALID_ARG,
               "'%s': destination is %s, the checkpoint holds %s", name, mt_dtype_name(dst->dtype),
               mt_dtype_name(t->dtype));
    int64_t off[MT_MAX_DIMS] = { 0 };
    for (int d = 0; d < t->ndim; d++) {
        off[d] = offset ? offset[d] : 0;
        MT_REQUIRE(off[d] >= 0 && off[d] + dst->shape[d] <= t->shape[d], MT_ERR_INVALID_ARG,
                   "'%s': dim %d box [%lld, +%lld) outside saved size %lld", name, d,
                   (long long)off[d], (long long)dst->shape[d], (long long)t->shape[d]);
    }
    if (mt_tensor_numel(dst) == 0) return MT_OK;
    for (int s = 0; s < t->nslices; s++)
        MT_TRY(read_part(c, t, s, dst->data, off, dst->shape));
    return MT_OK;
}

mt_status mt_ckpt_load(mt_ckpt *c, const mt_ckpt_item *items, int n) {
    MT_REQUIRE(c && (n == 0 || items), MT_ERR_INVALID_ARG, "NULL handle or items");
    for (int i = 0; i < n; i++) {
        const ck_tensor *t = find_tensor(c, items[i].name ? items[i].name : "");
        MT_REQUIRE(t, MT_ERR_INVALID_ARG, "%s: no tensor '%s'", c->rel,
                   items[i].name ? items[i].name : "(null)");
        if (items[i].global_shape) {
            int ok = items[i].tensor && items[i].tensor->ndim == t->ndim;
            for (int d = 0; ok && d < t->ndim; d++)
                ok = items[i].global_shape[d] == t->shape[d];
            MT_REQUIRE(ok, MT_ERR_INVALID_ARG,
                       "%s: tensor '%s': the requested global shape differs from the saved one",
                       c->rel, t->name);
        }
        MT_TRY(mt_ckpt_read(c, items[i].name, (mt_tensor *)items[i].tensor, items[i].offset));
    }
    return MT_OK;
}

mt_status mt_ckpt_verify(mt_ckpt *c) {
    MT_REQUIRE(c, MT_ERR_INVALID_ARG, "NULL handle");
    for (int i = 0; i < c->nt; i++)
        for (int s = 0; s < c->t[i].nslices; s++)
            MT_TRY(check_slice(c, &c->t[i], s));
    for (int i = 0; i < c->nf; i++) {
        ck_file *f = &c->f[i];
        MT_TRY(file_ready(c, f));
        uint64_t lo, hi = 0;
        while (hi < f->bytes)
            MT_TRY(read_window(c, f, (int)(hi / c->chunk), &lo, &hi, "(verify)"));
    }
    return MT_OK;
}
