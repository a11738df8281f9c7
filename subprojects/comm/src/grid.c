/* Megatron's process grid as a pure function: parallel_state.RankGenerator and
 * generate_masked_orthogonal_rank_groups, the decoder and expert generators, embedding groups. */
#include <mt/comm.h>

#include <stdio.h>
#include <string.h>

static const char *const group_names[MT_GROUP_COUNT] = {
    "tp",    "cp",       "dp", "dp-cp",     "pp",           "tp-pp",           "tp-cp",
    "tp-dp", "tp-dp-cp", "ep", "expert-tp", "expert-tp-ep", "expert-tp-ep-pp", "expert-dp",
    "embd",  "pos-embd",
};

/* The generator token of each kind and whether it uses the expert generator. */
static const struct {
    const char *token;
    int expert;
} group_tokens[MT_GROUP_COUNT] = {
    { "tp", 0 },       { "cp", 0 },    { "dp", 0 },    { "dp-cp", 0 },
    { "pp", 0 },       { "tp-pp", 0 }, { "tp-cp", 0 }, { "tp-dp", 0 },
    { "tp-dp-cp", 0 }, { "ep", 1 },    { "tp", 1 },    { "tp-ep", 1 },
    { "tp-ep-pp", 1 }, { "dp", 1 },    { "pp", 0 },    { "pp", 0 },
};

static const char *const dim_names[MT_GRID_MAX_DIMS] = { "tp", "cp", "ep", "dp", "pp" };

const char *mt_group_name(mt_group kind) {
    return (unsigned)kind < MT_GROUP_COUNT ? group_names[kind] : "?";
}

/* A generator: the sizes in `order`, and for `token` which of them are masked (in the group). */
typedef struct gen {
    int size[MT_GRID_MAX_DIMS]; /* in order */
    int mask[MT_GRID_MAX_DIMS];
} gen;

static int dim_index(const char *name, size_t len) {
    for (int i = 0; i < MT_GRID_MAX_DIMS; i++)
        if (strlen(dim_names[i]) == len && memcmp(dim_names[i], name, len) == 0) return i;
    return -1;
}

/* Splits "a-b-c" into dimension indices; returns the count or -1 on an unknown or repeated name. */
static int parse_dims(const char *s, int *dims) {
    int n = 0;
    while (*s) {
        const char *e = strchr(s, '-');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int d = dim_index(s, len);
        if (d < 0 || n == MT_GRID_MAX_DIMS) return -1;
        for (int i = 0; i < n; i++)
            if (dims[i] == d) return -1;
        dims[n++] = d;
        s += len + (e ? 1 : 0);
    }
    return n;
}

static void gen_make(const mt_grid *g, mt_group kind, gen *out) {
    int by_dim[MT_GRID_MAX_DIMS];
    int expert = group_tokens[kind].expert;
    by_dim[0] = expert ? g->expert_tp : g->tp;
    by_dim[1] = expert ? 1 : g->cp;
    by_dim[2] = expert ? g->ep : 1;
    by_dim[3] = expert ? g->expert_dp : g->dp;
    by_dim[4] = g->pp;
    int order[MT_GRID_MAX_DIMS], tok[MT_GRID_MAX_DIMS];
    int n = parse_dims(g->order, order), nt = parse_dims(group_tokens[kind].token, tok);
    MT_ASSERT(n == MT_GRID_MAX_DIMS && nt > 0);
    for (int i = 0; i < n; i++) {
        out->size[i] = by_dim[order[i]];
        out->mask[i] = 0;
        for (int j = 0; j < nt; j++)
            if (tok[j] == order[i]) out->mask[i] = 1;
    }
}

/* generate_masked_orthogonal_rank_groups: the group's ranks decompose into masked dimensions
 * (position in the group) and unmasked ones (which group), each weighted by the global stride. */
static int gen_group_size(const gen *gn) {
    int s = 1;
    for (int i = 0; i < MT_GRID_MAX_DIMS; i++)
        if (gn->mask[i]) s *= gn->size[i];
    return s;
}

static int gen_rank(const gen *gn, int index, int pos) {
    int stride = 1, rank = 0;
    for (int i = 0; i < MT_GRID_MAX_DIMS; i++) {
        int *v = gn->mask[i] ? &pos : &index;
        rank += (*v % gn->size[i]) * stride;
        *v /= gn->size[i];
        stride *= gn->size[i];
    }
    return rank;
}

/* The inverse: the (index, pos) of a global rank. */
static void gen_locate(const gen *gn, int rank, int *index, int *pos) {
    int mi = 1, ui = 1;
    *index = 0;
    *pos = 0;
    for (int i = 0; i < MT_GRID_MAX_DIMS; i++) {
        int c = rank % gn->size[i];
        rank /= gn->size[i];
        if (gn->mask[i]) {
            *pos += c * mi;
            mi *= gn->size[i];
        } else {
            *index += c * ui;
            ui *= gn->size[i];
        }
    }
}

mt_status mt_grid_init(mt_grid *g, int world, int tp, int cp, int ep, int pp, int expert_tp,
                       const char *order) {
    MT_REQUIRE(g, MT_ERR_INVALID_ARG, "grid is NULL");
    if (expert_tp <= 0) expert_tp = tp;
    MT_REQUIRE(world > 0 && tp > 0 && cp > 0 && ep > 0 && pp > 0, MT_ERR_INVALID_ARG,
               "grid sizes must be positive: world %d tp %d cp %d ep %d pp %d", world, tp, cp, ep,
               pp);
    MT_REQUIRE(world % (tp * cp * pp) == 0, MT_ERR_INVALID_ARG,
               "world size %d is not divisible by tp*cp*pp = %d*%d*%d", world, tp, cp, pp);
    MT_REQUIRE(world % (expert_tp * ep * pp) == 0, MT_ERR_INVALID_ARG,
               "world size %d is not divisible by expert_tp*ep*pp = %d*%d*%d", world, expert_tp, ep,
               pp);
    if (!order) order = "tp-cp-ep-dp-pp";
    int dims[MT_GRID_MAX_DIMS];
    MT_REQUIRE(strlen(order) < sizeof g->order && parse_dims(order, dims) == MT_GRID_MAX_DIMS,
               MT_ERR_INVALID_ARG, "order '%s' is not a permutation of tp, cp, ep, dp, pp", order);
    memset(g, 0, sizeof *g);
    g->world = world;
    g->tp = tp;
    g->cp = cp;
    g->ep = ep;
    g->pp = pp;
    g->dp = world / (tp * cp * pp);
    g->expert_tp = expert_tp;
    g->expert_dp = world / (expert_tp * ep * pp);
    snprintf(g->order, sizeof g->order, "%s", order);
    return MT_OK;
}

static int embd_kind(mt_group kind) {
    return kind == MT_GROUP_EMBD || kind == MT_GROUP_POS_EMBD;
}

int mt_grid_group_count(const mt_grid *g, mt_group kind) {
    if (!g || (unsigned)kind >= MT_GROUP_COUNT) return 0;
    gen gn;
    gen_make(g, kind, &gn);
    return g->world / gen_group_size(&gn);
}

int mt_grid_group_size(const mt_grid *g, mt_group kind, int index) {
    if (!g || (unsigned)kind >= MT_GROUP_COUNT) return 0;
    if (index < 0 || index >= mt_grid_group_count(g, kind)) return 0;
    if (kind == MT_GROUP_POS_EMBD) return 1;
    if (kind == MT_GROUP_EMBD) return g->pp > 1 ? 2 : 1;
    gen gn;
    gen_make(g, kind, &gn);
    return gen_group_size(&gn);
}

mt_status mt_grid_group_ranks(const mt_grid *g, mt_group kind, int index, int *ranks) {
    MT_REQUIRE(g && ranks, MT_ERR_INVALID_ARG, "grid or ranks is NULL");
    MT_REQUIRE((unsigned)kind < MT_GROUP_COUNT, MT_ERR_INVALID_ARG, "bad group kind %d", kind);
    int count = mt_grid_group_count(g, kind);
    MT_REQUIRE(index >= 0 && index < count, MT_ERR_INVALID_ARG,
               "%s group %d out of range (%d groups)", group_names[kind], index, count);
    gen gn;
    gen_make(g, kind, &gn);
    if (embd_kind(kind)) { /* default_embedding_ranks: first and last stage of pp group `index` */
        ranks[0] = gen_rank(&gn, index, 0);
        if (kind == MT_GROUP_EMBD && g->pp > 1) ranks[1] = gen_rank(&gn, index, g->pp - 1);
        return MT_OK;
    }
    int n = gen_group_size(&gn);
    for (int p = 0; p < n; p++)
        ranks[p] = gen_rank(&gn, index, p);
    return MT_OK;
}

mt_status mt_grid_locate(const mt_grid *g, mt_group kind, int rank, int *index, int *pos) {
    MT_REQUIRE(g && index && pos, MT_ERR_INVALID_ARG, "grid, index or pos is NULL");
    MT_REQUIRE((unsigned)kind < MT_GROUP_COUNT, MT_ERR_INVALID_ARG, "bad group kind %d", kind);
    MT_REQUIRE(rank >= 0 && rank < g->world, MT_ERR_INVALID_ARG, "rank %d outside world of %d",
               rank, g->world);
    gen gn;
    gen_make(g, kind, &gn);
    gen_locate(&gn, rank, index, pos);
    if (embd_kind(kind)) {
        int stage = *pos;
        if (stage == 0) {
            *pos = 0;
        } else if (kind == MT_GROUP_EMBD && stage == g->pp - 1) {
            *pos = 1;
        } else {
            *index = -1;
            *pos = -1;
        }
    }
    return MT_OK;
}
