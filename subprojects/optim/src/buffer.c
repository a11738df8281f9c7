/* Param/grad buffers: registration, the layout and bucket plan (Megatron's _ParamAndGradBuffer
 * order: reverse registration, buckets closed once they reach bucket_numel), and arena binding. */
#include "optim_impl.h"

#include <stdlib.h>
#include <string.h>

static int64_t round_up(int64_t x, int64_t m) {
    return (x + m - 1) / m * m;
}

static size_t round_bytes(size_t x) {
    return (x + MT_ARENA_ALIGN - 1) / MT_ARENA_ALIGN * MT_ARENA_ALIGN;
}

mt_status mt_optim_buffer_create(const mt_optim_buffer_config *cfg, mt_optim_buffer **out) {
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    mt_optim_buffer_config c = MT_OPTIM_BUFFER_CONFIG_INIT;
    if (cfg) {
        MT_REQUIRE(cfg->size >= sizeof c, MT_ERR_INVALID_ARG, "config size %zu, expected %zu",
                   cfg->size, sizeof c);
        c = *cfg;
    }
    MT_REQUIRE(c.param_dtype == MT_F32 || c.param_dtype == MT_BF16 || c.param_dtype == MT_F16,
               MT_ERR_UNSUPPORTED, "param dtype %s (f32, bf16 or f16)",
               mt_dtype_name(c.param_dtype));
    if (c.dp_size < 1) c.dp_size = 1;
    if (c.expert_dp_size < 1) c.expert_dp_size = c.dp_size;
    mt_optim_buffer *b = calloc(1, sizeof *b);
    MT_REQUIRE(b, MT_ERR_OOM, "buffer header");
    b->cfg = c;
    *out = b;
    return MT_OK;
}

void mt_optim_buffer_destroy(mt_optim_buffer *b) {
    if (!b) return;
    for (int i = 0; i < b->n_params; i++)
        free(b->params[i].name);
    free(b->params);
    free(b->bucket_off);
    free(b->bucket_expert);
    free(b);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

mt_status mt_optim_buffer_add(mt_optim_buffer *b, const char *name, int ndim, const int64_t *shape,
                              int flags, int *index) {
    MT_REQUIRE(b && name, MT_ERR_INVALID_ARG, "NULL buffer or name");
    MT_REQUIRE(!b->finalized, MT_ERR_INVALID_ARG, "%s: buffer already finalized", name);
    MT_REQUIRE(ndim >= 0 && ndim <= MT_MAX_DIMS && (ndim == 0 || shape), MT_ERR_INVALID_ARG,
               "%s: ndim %d", name, ndim);
    MT_REQUIRE(!((flags & MT_OPTIM_PARAM_DECAY) && (flags & MT_OPTIM_PARAM_NO_DECAY)),
               MT_ERR_INVALID_ARG, "%s: both DECAY and NO_DECAY", name);
    for (int i = 0; i < b->n_params; i++)
        MT_REQUIRE(strcmp(b->params[i].name, name) != 0, MT_ERR_INVALID_ARG,
                   "parameter %s registered twice", name);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        MT_REQUIRE(shape[d] > 0, MT_ERR_INVALID_ARG, "%s: dim %d is %lld", name, d,
                   (long long)shape[d]);
        numel *= shape[d];
    }
    if (b->n_params == b->cap_params) {
        int cap = b->cap_params ? 2 * b->cap_params : 64;
        optim_param *p = realloc(b->params, (size_t)cap * sizeof *p);
        MT_REQUIRE(p, MT_ERR_OOM, "%d parameters", cap);
        b->params = p;
        b->cap_params = cap;
    }
    optim_param *p = &b->params[b->n_params];
    memset(p, 0, sizeof *p);
    size_t len = strlen(name) + 1;
    p->name = malloc(len);
    MT_REQUIRE(p->name, MT_ERR_OOM, "name of %s", name);
    memcpy(p->name, name, len);
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        p->shape[d] = shape[d];
    p->numel = numel;
    if (flags & MT_OPTIM_PARAM_DECAY)
        p->decay = 1;
    else if (flags & MT_OPTIM_PARAM_NO_DECAY)
        p->decay = 0;
    else
        p->decay = !(ndim == 1 || ends_with(name, ".bias")); /* Megatron's no_wd rule */
    p->expert = (flags & MT_OPTIM_PARAM_EXPERT) != 0;
    p->in_norm = !(flags & MT_OPTIM_PARAM_SHARED) &&
                 !((flags & MT_OPTIM_PARAM_TP_REPLICATED) && b->cfg.tp_rank != 0);
    if (index) *index = b->n_params;
    b->n_params++;
    return MT_OK;
}

static size_t buffer_bytes(const mt_optim_buffer *b) {
    return round_bytes((size_t)b->numel * mt_dtype_size(b->cfg.param_dtype)) +
           round_bytes((size_t)b->numel * 4) + 2 * round_bytes(b->mask_words * 4);
}

mt_status mt_optim_buffer_finalize(mt_optim_buffer *b, size_t *bytes) {
    MT_REQUIRE(b, MT_ERR_INVALID_ARG, "buffer is NULL");
    MT_REQUIRE(!b->finalized, MT_ERR_INVALID_ARG, "buffer already finalized");
    MT_REQUIRE(b->n_params > 0, MT_ERR_INVALID_ARG, "no parameters registered");
    b->bucket_off = malloc(((size_t)b->n_params + 1) * sizeof *b->bucket_off);
    b->bucket_expert = malloc(((size_t)b->n_params + 1) * sizeof *b->bucket_expert);
    MT_REQUIRE(b->bucket_off && b->bucket_expert, MT_ERR_OOM, "bucket table");
    b->bucket_off[0] = 0;
    int nb = 0;
    int64_t off = 0, bucket_start = 0;
    for (int i = b->n_params - 1; i >= 0; i--) { /* backward order: last layers first */
        optim_param *p = &b->params[i];
        p->offset = off;
        p->padded = round_up(p->numel, MT_OPTIM_ALIGN);
        p->bucket = nb;
        off += p->padded;
        /* (a bucket is all expert parameters or none: they are reduced over other groups) */
        int full = b->cfg.bucket_numel > 0 && off - bucket_start >= b->cfg.bucket_numel;
        if (full || i == 0 || b->params[i - 1].expert != p->expert) {
            const int dp = p->expert ? b->cfg.expert_dp_size : b->cfg.dp_size;
            off = round_up(off, (int64_t)dp * 2 * MT_OPTIM_ALIGN);
            b->bucket_expert[nb] = p->expert;
            b->bucket_off[++nb] = off;
            bucket_start = off;
        }
    }
    b->n_buckets = nb;
    b->numel = off;
    b->mask_words = (size_t)((off / MT_OPTIM_ALIGN + 31) / 32);
    b->finalized = 1;
    if (bytes) *bytes = buffer_bytes(b);
    return MT_OK;
}

static void set_bits(uint32_t *mask, int64_t start, int64_t len) {
    for (int64_t g = start / MT_OPTIM_ALIGN; g < (start + len) / MT_OPTIM_ALIGN; g++)
        mask[g >> 5] |= 1u << (g & 31);
}

mt_status mt_optim_buffer_bind(mt_optim_buffer *b, mt_arena *arena) {
    MT_REQUIRE(b && arena, MT_ERR_INVALID_ARG, "NULL buffer or arena");
    MT_REQUIRE(b->finalized, MT_ERR_INVALID_ARG, "bind before finalize");
    MT_REQUIRE(!b->param_data, MT_ERR_INVALID_ARG, "buffer already bound");
    MT_REQUIRE(mt_device_eq(mt_arena_device(arena), b->cfg.device), MT_ERR_INVALID_ARG,
               "arena is not on the buffer's device");
    size_t pbytes = (size_t)b->numel * mt_dtype_size(b->cfg.param_dtype);
    size_t mbytes = b->mask_words * 4;
    void *pd, *gd, *wm, *nm;
    MT_TRY(mt_arena_alloc(arena, pbytes, &pd));
    MT_TRY(mt_arena_alloc(arena, (size_t)b->numel * 4, &gd));
    MT_TRY(mt_arena_alloc(arena, mbytes, &wm));
    MT_TRY(mt_arena_alloc(arena, mbytes, &nm));
    mt_device dev = b->cfg.device;
    MT_TRY(mt_memset_zero(pd, dev, pbytes, NULL));
    MT_TRY(mt_memset_zero(gd, dev, (size_t)b->numel * 4, NULL));
    uint32_t *host = calloc(2 * b->mask_words, 4);
    MT_REQUIRE(host, MT_ERR_OOM, "masks of %zu words", b->mask_words);
    for (int i = 0; i < b->n_params; i++) {
        const optim_param *p = &b->params[i];
        if (p->decay) set_bits(host, p->offset, p->padded);
        if (p->in_norm) set_bits(host + b->mask_words, p->offset, p->padded);
    }
    mt_status st = mt_memcpy(wm, dev, host, MT_DEVICE_CPU, mbytes, NULL);
    if (st == MT_OK) st = mt_memcpy(nm, dev, host + b->mask_words, MT_DEVICE_CPU, mbytes, NULL);
    free(host);
    MT_TRY(st);
    b->param_data = pd;
    b->grad_data = gd;
    b->wd_mask = wm;
    b->norm_mask = nm;
    return MT_OK;
}

int mt_optim_buffer_num_params(const mt_optim_buffer *b) {
    return b ? b->n_params : 0;
}

int mt_optim_buffer_num_buckets(const mt_optim_buffer *b) {
    return b ? b->n_buckets : 0;
}

int64_t mt_optim_buffer_numel(const mt_optim_buffer *b) {
    return b ? b->numel : 0;
}

mt_status mt_optim_buffer_find(const mt_optim_buffer *b, const char *name, int *index) {
    MT_REQUIRE(b && name && index, MT_ERR_INVALID_ARG, "NULL argument");
    for (int i = 0; i < b->n_params; i++) {
        if (strcmp(b->params[i].name, name) == 0) {
            *index = i;
            return MT_OK;
        }
    }
    return MT_ERROR(MT_ERR_INVALID_ARG, "no parameter named %s", name);
}

static mt_status check_index(const mt_optim_buffer *b, int i, int need_bound) {
    MT_REQUIRE(b, MT_ERR_INVALID_ARG, "buffer is NULL");
    MT_REQUIRE(b->finalized, MT_ERR_INVALID_ARG, "buffer not finalized");
    MT_REQUIRE(!need_bound || b->param_data, MT_ERR_INVALID_ARG, "buffer not bound");
    MT_REQUIRE(i >= 0 && i < b->n_params, MT_ERR_INVALID_ARG, "parameter %d of %d", i, b->n_params);
    return MT_OK;
}

mt_status mt_optim_buffer_info(const mt_optim_buffer *b, int i, mt_optim_param_info *out) {
    MT_TRY(check_index(b, i, 0));
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    const optim_param *p = &b->params[i];
    memset(out, 0, sizeof *out);
    out->name = p->name;
    out->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++)
        out->shape[d] = p->shape[d];
    out->numel = p->numel;
    out->offset = p->offset;
    out->bucket = p->bucket;
    out->decay = p->decay;
    out->in_norm = p->in_norm;
    out->expert = p->expert;
    return MT_OK;
}

mt_status mt_optim_buffer_param(const mt_optim_buffer *b, int i, mt_tensor *out) {
    MT_TRY(check_index(b, i, 1));
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    const optim_param *p = &b->params[i];
    char *base = (char *)b->param_data + p->offset * mt_dtype_size(b->cfg.param_dtype);
    *out = mt_tensor_make(base, b->cfg.param_dtype, p->ndim, p->shape, b->cfg.device);
    return MT_OK;
}

mt_status mt_optim_buffer_grad(const mt_optim_buffer *b, int i, mt_tensor *out) {
    MT_TRY(check_index(b, i, 1));
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    const optim_param *p = &b->params[i];
    *out = mt_tensor_make(b->grad_data + p->offset, MT_F32, p->ndim, p->shape, b->cfg.device);
    return MT_OK;
}

mt_status mt_optim_buffer_bucket(const mt_optim_buffer *b, int k, mt_optim_bucket *out) {
    MT_REQUIRE(b && out, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(b->finalized, MT_ERR_INVALID_ARG, "buffer not finalized");
    MT_REQUIRE(k >= 0 && k < b->n_buckets, MT_ERR_INVALID_ARG, "bucket %d of %d", k, b->n_buckets);
    memset(out, 0, sizeof *out);
    out->offset = b->bucket_off[k];
    out->numel = b->bucket_off[k + 1] - b->bucket_off[k];
    out->expert = b->bucket_expert[k];
    if (b->param_data) {
        char *pb = (char *)b->param_data + out->offset * mt_dtype_size(b->cfg.param_dtype);
        out->params = mt_tensor_1d(pb, b->cfg.param_dtype, out->numel, b->cfg.device);
        out->grads = mt_tensor_1d(b->grad_data + out->offset, MT_F32, out->numel, b->cfg.device);
    }
    return MT_OK;
}

mt_status mt_optim_buffer_params(const mt_optim_buffer *b, mt_tensor *out) {
    MT_REQUIRE(b && out, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(b->param_data, MT_ERR_INVALID_ARG, "buffer not bound");
    *out = mt_tensor_1d(b->param_data, b->cfg.param_dtype, b->numel, b->cfg.device);
    return MT_OK;
}

mt_status mt_optim_buffer_grads(const mt_optim_buffer *b, mt_tensor *out) {
    MT_REQUIRE(b && out, MT_ERR_INVALID_ARG, "NULL argument");
    MT_REQUIRE(b->param_data, MT_ERR_INVALID_ARG, "buffer not bound");
    *out = mt_tensor_1d(b->grad_data, MT_F32, b->numel, b->cfg.device);
    return MT_OK;
}

mt_status mt_optim_buffer_zero_grad(mt_optim_buffer *b, mt_stream stream) {
    MT_REQUIRE(b, MT_ERR_INVALID_ARG, "buffer is NULL");
    MT_REQUIRE(b->param_data, MT_ERR_INVALID_ARG, "buffer not bound");
    return mt_memset_zero(b->grad_data, b->cfg.device, (size_t)b->numel * 4, stream);
}
