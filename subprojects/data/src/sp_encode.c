/* SentencePiece encoding as sentencepiece's SentencePieceProcessor::Encode does it, for Megatron's
 * Llama2Tokenizer and GPTSentencePieceTokenizer in mt-preprocess-data: the model's normalizer
 * (identity, or a precompiled charsmap such as nmt_nfkc; dummy prefix, extra-whitespace removal,
 * whitespace as U+2581), then BPE (merge the adjacent pair whose piece scores highest, leftmost
 * first) or unigram (Viterbi over the pieces' scores, an unknown character costing the lowest
 * score minus 10), user-defined symbols kept whole, and unknown pieces as their UTF-8 bytes
 * (byte_fallback) or as one unk id per run. Model types WORD and CHAR, and BPE models with UNUSED
 * pieces, are refused. The golden values are sentencepiece's own (golden/sentencepiece). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_impl.h"

enum { /* ModelProto.SentencePiece.Type */
    SP_NORMAL = 1,
    SP_UNKNOWN = 2,
    SP_CONTROL = 3,
    SP_USER = 4,
    SP_UNUSED = 5,
    SP_BYTE = 6
};

typedef struct sp_piece {
    const char *s; /* into the model file's bytes */
    uint32_t len;
    float score;
    int type, byte; /* byte: a BYTE piece's value */
} sp_piece;

struct sp_model {
    unsigned char *buf; /* the file */
    sp_piece *piece;
    int n, unk, bos, eos, bpe, byte_fallback, suffix; /* suffix: treat_whitespace_as_suffix */
    int dummy_prefix, remove_ws, escape_ws;
    uint32_t *trie; /* precompiled charsmap: darts-clone units (copied: aligned), then */
    size_t trie_units;
    const char *norm; /* its NUL-ended normalized strings */
    size_t norm_len;
    uint32_t *slot;  /* open addressing: piece id + 1 of NORMAL/USER/UNUSED pieces (0: empty) */
    uint32_t *rslot; /* the others (CONTROL, UNKNOWN, BYTE): looked up first, as sentencepiece */
    size_t mask;
    int *user; /* USER_DEFINED ids */
    int n_user;
    int byte_id[256];
    uint32_t max_len;
    float min_score, max_score; /* over NORMAL pieces (unigram) */
    const char *unk_surface;
    size_t unk_surface_len;
};

/* ---- the piece maps ---- */

static int map_find(const sp_model *m, const uint32_t *slot, const char *p, size_t n) {
    for (size_t h = tok_hash(p, n) & m->mask;; h = (h + 1) & m->mask) {
        uint32_t s = slot[h];
        if (!s) return -1;
        const sp_piece *q = &m->piece[s - 1];
        if (q->len == n && memcmp(q->s, p, n) == 0) return (int)(s - 1);
    }
}

static int is_normal(int type) {
    return type == SP_NORMAL || type == SP_USER || type == SP_UNUSED;
}

/* sentencepiece's PieceToId: the reserved pieces, then the others, else unk. */
static int piece_to_id(const sp_model *m, const char *p, size_t n) {
    int id = map_find(m, m->rslot, p, n);
    if (id < 0) id = map_find(m, m->slot, p, n);
    return id < 0 ? m->unk : id;
}

/* The id of a piece that may be merged or matched (NORMAL, USER_DEFINED, UNUSED), or -1. */
static int normal_id(const sp_model *m, const char *p, size_t n) {
    return map_find(m, m->slot, p, n);
}

/* ---- UTF-8 (sentencepiece's string_util) ---- */

static size_t one_char_len(const char *p) {
    static const unsigned char len[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    return len[(unsigned char)*p >> 4];
}

/* The longest user-defined symbol at p[0..n) (its length), or 0. */
static size_t user_match(const sp_model *m, const char *p, size_t n) {
    size_t best = 0;
    for (int i = 0; i < m->n_user; i++) {
        const sp_piece *u = &m->piece[m->user[i]];
        if (u->len > best && u->len <= n && memcmp(u->s, p, u->len) == 0) best = u->len;
    }
    return best;
}

/* ---- normalizer ---- */

/* darts-clone's commonPrefixSearch, keeping the longest match: its value (an offset into the
 * normalized strings) and length; 0 when none (or the units run out: a corrupt map). */
static size_t trie_longest(const sp_model *m, const unsigned char *key, size_t n, uint32_t *value) {
    const uint32_t *u = m->trie;
    size_t best = 0;
    uint32_t pos = 0, unit = u[0];
#define OFFSET(x) (((x) >> 10) << (((x) & (1u << 9)) >> 6))
    pos ^= OFFSET(unit);
    for (size_t i = 0; i < n; i++) {
        pos ^= key[i];
        if (pos >= m->trie_units) break;
        unit = u[pos];
        if ((unit & ((1u << 31) | 0xFF)) != key[i]) break; /* label */
        pos ^= OFFSET(unit);
        if (pos >= m->trie_units) break;
        if ((unit >> 8) & 1) { /* has a leaf: a rule ends here */
            *value = u[pos] & ((1u << 31) - 1);
            best = i + 1;
        }
    }
#undef OFFSET
    return best;
}

/* The normalized form of the longest rule at p[0..n), or one character: *out, *out_len; returns
 * the bytes consumed. */
static size_t norm_prefix(const sp_model *m, const char *p, size_t n, const char **out,
                          size_t *out_len) {
    size_t k = user_match(m, p, n);
    if (k) {
        *out = p, *out_len = k;
        return k;
    }
    uint32_t v = 0;
    if (m->trie && (k = trie_longest(m, (const unsigned char *)p, n, &v)) > 0 && v < m->norm_len) {
        *out = m->norm + v, *out_len = strlen(m->norm + v); /* (NUL-ended: checked at load) */
        return k;
    }
    uint32_t cp;
    size_t bad;
    k = tok_utf8_next((const unsigned char *)p, n, &cp, &bad); /* (strict, as sentencepiece's) */
    if (!k) { /* malformed: U+FFFD, one byte consumed */
        *out = "\xEF\xBF\xBD", *out_len = 3;
        return 1;
    }
    *out = p, *out_len = k;
    return k;
}

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static int put(buf *b, const char *s, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q) return 0;
        b->p = q, b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 1;
}

#define SPACE_SYMBOL "\xe2\x96\x81" /* U+2581 */

/* sentencepiece's Normalizer::Normalize into out. */
static int normalize(const sp_model *m, const char *in, size_t n, buf *out) {
    out->n = 0;
    const char *s;
    size_t sl;
    if (m->remove_ws) /* heading spaces */
        while (n > 0) {
            size_t k = norm_prefix(m, in, n, &s, &sl);
            if (!(sl == 1 && s[0] == ' ')) break;
            in += k, n -= k;
        }
    if (n == 0) return 1;
    const char *ws = m->escape_ws ? SPACE_SYMBOL : " ";
    const size_t wl = m->escape_ws ? 3 : 1;
    if (!m->suffix && m->dummy_prefix && !put(out, ws, wl)) return 0;
    int prev_space = m->remove_ws;
    while (n > 0) {
        size_t k = norm_prefix(m, in, n, &s, &sl);
        while (prev_space && sl > 0 && s[0] == ' ')
            s++, sl--;
        if (sl > 0) {
            for (size_t i = 0; i < sl; i++)
                if (!(s[i] == ' ' ? put(out, ws, wl) : put(out, s + i, 1))) return 0;
            prev_space = s[sl - 1] == ' ';
        }
        in += k, n -= k;
        if (!m->remove_ws) prev_space = 0;
    }
    if (m->remove_ws) /* trailing spaces */
        while (out->n >= wl && memcmp(out->p + out->n - wl, ws, wl) == 0)
            out->n -= wl;
    if (m->suffix && m->dummy_prefix && !put(out, ws, wl)) return 0;
    return 1;
}

/* ---- the models: (piece start, length, id) in order into segs ---- */

typedef struct seg {
    uint32_t at, len;
    int id;
} seg;

typedef struct sym { /* BPE's symbols: a doubly linked list over the normalized string */
    int prev, next, freeze;
    uint32_t at, len;
} sym;

typedef struct pair { /* a candidate merge of symbols left and right into a piece of `len` */
    float score;
    int left, right;
    uint32_t len;
} pair;

/* The heap's order (sentencepiece's SymbolPairComparator): a before b when it scores higher, or
 * as high and lies further left. */
static int pair_before(const pair *a, const pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

TOK_HEAP(pair, pair, pair_before)

static void bpe_add(const sp_model *m, const char *t, sym *sy, pair *h, size_t *nh, int l, int r) {
    if (l < 0 || r < 0 || sy[l].freeze || sy[r].freeze) return;
    uint32_t len = sy[l].len + sy[r].len;
    int id = normal_id(m, t + sy[l].at, len);
    if (id >= 0) pair_push(h, nh, (pair){ m->piece[id].score, l, r, len });
}

static mt_status bpe_encode(const sp_model *m, const char *t, size_t n, seg **out, size_t *nout) {
    sym *sy = malloc((n + 1) * sizeof *sy);
    pair *h = malloc((3 * n + 1) * sizeof *h); /* n-1 pairs, then at most two a merge */
    size_t nh = 0;
    if (!sy || !h) free(sy), free(h);
    MT_REQUIRE(sy && h, MT_ERR_OOM, "BPE symbols of %zu bytes", n);
    int ns = 0;
    for (size_t at = 0; at < n; ns++) { /* characters, user-defined symbols whole and frozen */
        size_t k = user_match(m, t + at, n - at);
        const int frozen = k > 0;
        if (!k) k = one_char_len(t + at) < n - at ? one_char_len(t + at) : n - at;
        sy[ns] = (sym){ ns - 1, at + k < n ? ns + 1 : -1, frozen, (uint32_t)at, (uint32_t)k };
        at += k;
    }
    for (int i = 1; i < ns; i++)
        bpe_add(m, t, sy, h, &nh, i - 1, i);
    while (nh) {
        pair top = pair_pop(h, &nh);
        sym *l = &sy[top.left], *r = &sy[top.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != top.len) continue; /* stale */
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0) sy[r->next].prev = top.left;
        r->len = 0;
        bpe_add(m, t, sy, h, &nh, l->prev, top.left);
        bpe_add(m, t, sy, h, &nh, top.left, l->next);
    }
    free(h);
    seg *s = malloc((size_t)(ns ? ns : 1) * sizeof *s);
    if (!s) {
        free(sy);
        return MT_ERROR(MT_ERR_OOM, "BPE encoding");
    }
    size_t k = 0;
    for (int i = ns ? 0 : -1; i >= 0; i = sy[i].next)
        s[k++] = (seg){ sy[i].at, sy[i].len, piece_to_id(m, t + sy[i].at, sy[i].len) };
    free(sy);
    *out = s, *nout = k;
    return MT_OK;
}

static mt_status unigram_encode(const sp_model *m, const char *t, size_t n, seg **out,
                                size_t *nout) {
    typedef struct best {
        int id, start; /* start -1: not reached */
        float score;
    } best;
    best *b = malloc((n + 1) * sizeof *b);
    seg *s = malloc((n ? n : 1) * sizeof *s);
    if (!b || !s) {
        free(b), free(s);
        return MT_ERROR(MT_ERR_OOM, "unigram lattice of %zu bytes", n);
    }
    for (size_t i = 0; i <= n; i++)
        b[i] = (best){ -1, -1, 0.0f };
    const float unk_score = m->min_score - 10.0f; /* kUnkPenalty */
    for (size_t at = 0; at < n;) {
        const float here = b[at].score;
        size_t mblen = one_char_len(t + at);
        if (mblen > n - at) mblen = n - at;
        int single = 0;
        for (size_t len = 1; len <= m->max_len && at + len <= n; len++) { /* shortest first */
            int id = normal_id(m, t + at, len);
            if (id < 0 || m->piece[id].type == SP_UNUSED) continue;
            best *e = &b[at + len];
            /* a user-defined symbol gets a bonus to always win (computed in double there) */
            const double cand = m->piece[id].type == SP_USER
                                    ? (double)((float)len * m->max_score) - 0.1 + here
                                    : (double)(m->piece[id].score + here);
            if (e->start < 0 || cand > e->score) *e = (best){ id, (int)at, (float)cand };
            if (len == mblen) single = 1;
        }
        if (!single) {
            best *e = &b[at + mblen];
            const float cand = unk_score + here;
            if (e->start < 0 || cand > e->score) *e = (best){ m->unk, (int)at, cand };
        }
        at += mblen;
    }
    size_t k = 0;
    for (size_t end = n; end > 0; end = (size_t)b[end].start)
        s[k++] = (seg){ (uint32_t)b[end].start, (uint32_t)(end - (size_t)b[end].start), b[end].id };
    for (size_t i = 0; i < k / 2; i++) {
        seg x = s[i];
        s[i] = s[k - 1 - i], s[k - 1 - i] = x;
    }
    free(b);
    *out = s, *nout = k;
    return MT_OK;
}

mt_status sp_encode(const sp_model *m, const char *text, size_t len, int32_t **ids, size_t *n,
                    size_t *cap) {
    buf nb = { 0 };
    MT_REQUIRE(normalize(m, text, len, &nb), MT_ERR_OOM, "SentencePiece normalization");
    seg *s = NULL;
    size_t ns = 0;
    mt_status st =
        m->bpe ? bpe_encode(m, nb.p, nb.n, &s, &ns) : unigram_encode(m, nb.p, nb.n, &s, &ns);
    int prev_unk = 0;
    for (size_t i = 0; st == MT_OK && i < ns; i++) {
        const int unk = s[i].id == m->unk;
        if (unk && m->byte_fallback) /* the unknown piece as its UTF-8 bytes */
            for (uint32_t j = 0; st == MT_OK && j < s[i].len; j++)
                st = tok_push_ids(ids, n, cap, &m->byte_id[(unsigned char)nb.p[s[i].at + j]], 1);
        else if (!(unk && prev_unk)) /* a run of unknown pieces is one unk */
            st = tok_push_ids(ids, n, cap, &s[i].id, 1);
        prev_unk = unk;
    }
    free(s);
    free(nb.p);
    return st;
}

/* DecodeIds: pieces with U+2581 as spaces (the first piece's leading one dropped with the dummy
 * prefix; a suffix one stays, as sentencepiece's), byte pieces as bytes, unk as its surface,
 * control pieces as nothing. Invalid UTF-8 from byte pieces is passed through (sentencepiece
 * writes U+FFFD). */
mt_status sp_decode(const sp_model *m, const int32_t *ids, size_t n_ids, char **text, size_t *len,
                    size_t *cap) {
    buf b = { *text, *len, *cap };
    size_t start = b.n;
    int ok = 1;
    for (size_t i = 0; ok && i < n_ids; i++) {
        MT_REQUIRE(ids[i] >= 0 && ids[i] < m->n, MT_ERR_INVALID_ARG,
                   "id %d is outside the vocabulary of %d", ids[i], m->n);
        const sp_piece *p = &m->piece[ids[i]];
        if (p->type == SP_CONTROL) continue;
        if (p->type == SP_UNKNOWN) {
            ok = put(&b, m->unk_surface, m->unk_surface_len);
        } else if (p->type == SP_BYTE) {
            char c = (char)p->byte;
            ok = put(&b, &c, 1);
        } else {
            for (uint32_t j = 0; ok && j < p->len;) {
                int sp = p->len - j >= 3 && memcmp(p->s + j, SPACE_SYMBOL, 3) == 0;
                ok = sp ? put(&b, " ", 1) : put(&b, p->s + j, 1);
                j += sp ? 3 : 1;
            }
        }
    }
    if (ok && m->dummy_prefix && !m->suffix && b.n > start && b.p[start] == ' ') {
        memmove(b.p + start, b.p + start + 1, b.n - start - 1);
        b.n--;
    }
    *text = b.p, *len = b.n, *cap = b.cap;
    MT_REQUIRE(ok, MT_ERR_OOM, "decoded text");
    return MT_OK;
}

/* ---- loading ---- */

static mt_status parse(sp_model *m, size_t len, const char *name) {
    const unsigned char *p = m->buf, *end = m->buf + len;
    sp_pb_field f;
    int cap = 0, model_type = 1; /* UNIGRAM */
    m->unk = -1, m->bos = 1, m->eos = 2, m->dummy_prefix = m->remove_ws = m->escape_ws = 1;
    m->unk_surface = " \xE2\x81\x87 ", m->unk_surface_len = 5;
    const unsigned char *charsmap = NULL;
    size_t charsmap_len = 0;
    while (p < end) {
        MT_REQUIRE(sp_pb_next(&p, end, &f), MT_ERR_FORMAT,
                   "SentencePiece model %s: not a ModelProto (truncated or corrupt)", name);
        if (f.num == 1 && f.wt == 2) { /* a piece */
            if (m->n == cap) {
                sp_piece *q = realloc(m->piece, (size_t)(cap = cap ? 2 * cap : 1024) * sizeof *q);
                MT_REQUIRE(q, MT_ERR_OOM, "pieces");
                m->piece = q;
            }
            sp_piece x = { NULL, 0, 0.0f, SP_NORMAL, -1 };
            const unsigned char *q = f.data, *qe = f.data + f.len;
            sp_pb_field g;
            while (q < qe) {
                MT_REQUIRE(sp_pb_next(&q, qe, &g), MT_ERR_FORMAT,
                           "SentencePiece model %s: piece %d is corrupt", name, m->n);
                if (g.num == 1 && g.wt == 2) x.s = (const char *)g.data, x.len = (uint32_t)g.len;
                if (g.num == 2 && g.wt == 5) memcpy(&x.score, g.data, 4); /* little-endian */
                if (g.num == 3 && g.wt == 0) x.type = (int)g.v;
            }
            MT_REQUIRE(x.len > 0 && memchr(x.s, 0, x.len) == NULL, MT_ERR_FORMAT,
                       "SentencePiece model %s: piece %d is empty or holds a NUL", name, m->n);
            m->piece[m->n++] = x;
        } else if ((f.num == 2 || f.num == 3) && f.wt == 2) { /* TrainerSpec, NormalizerSpec */
            const unsigned char *q = f.data, *qe = f.data + f.len;
            sp_pb_field g;
            while (q < qe) {
                MT_REQUIRE(sp_pb_next(&q, qe, &g), MT_ERR_FORMAT,
                           "SentencePiece model %s: its %s is corrupt", name,
                           f.num == 2 ? "TrainerSpec" : "NormalizerSpec");
                const int v = (int)(int32_t)(uint32_t)g.v;
                if (f.num == 2 && g.wt == 0) {
                    if (g.num == 3) model_type = v;
                    if (g.num == 24) m->suffix = v != 0;
                    if (g.num == 35) m->byte_fallback = v != 0;
                    if (g.num == 41) m->bos = v;
                    if (g.num == 42) m->eos = v;
                } else if (f.num == 2 && g.num == 44 && g.wt == 2) {
                    m->unk_surface = (const char *)g.data, m->unk_surface_len = g.len;
                } else if (f.num == 3 && g.wt == 0) {
                    if (g.num == 3) m->dummy_prefix = v != 0;
                    if (g.num == 4) m->remove_ws = v != 0;
                    if (g.num == 5) m->escape_ws = v != 0;
                } else if (f.num == 3 && g.num == 2 && g.wt == 2) {
                    charsmap = g.data, charsmap_len = g.len;
                }
            }
        }
    }
    MT_REQUIRE(m->n > 0, MT_ERR_FORMAT, "SentencePiece model %s: no pieces", name);
    MT_REQUIRE(model_type == 1 || model_type == 2, MT_ERR_UNSUPPORTED,
               "SentencePiece model %s: model type %d (only unigram 1 and BPE 2 encode here)", name,
               model_type);
    m->bpe = model_type == 2;
    if (charsmap_len) { /* <trie bytes (uint32 LE)><darts-clone units><NUL-ended strings> */
        uint32_t tl;
        MT_REQUIRE(charsmap_len > 4, MT_ERR_FORMAT, "SentencePiece model %s: charsmap", name);
        memcpy(&tl, charsmap, 4);
        MT_REQUIRE(
            tl >= 4 && tl % 4 == 0 && tl < charsmap_len - 4 && charsmap[charsmap_len - 1] == 0,
            MT_ERR_FORMAT, "SentencePiece model %s: its precompiled charsmap is corrupt", name);
        m->trie = malloc(tl);
        MT_REQUIRE(m->trie, MT_ERR_OOM, "charsmap of %u bytes", tl);
        memcpy(m->trie, charsmap + 4, tl); /* (little-endian units, as the host's) */
        m->trie_units = tl / 4;
        m->norm = (const char *)charsmap + 4 + tl, m->norm_len = charsmap_len - 4 - tl;
    }
    return MT_OK;
}

static mt_status index_pieces(sp_model *m, const char *name) {
    size_t cap = 16;
    while (cap < 2 * (size_t)m->n)
        cap *= 2;
    m->mask = cap - 1;
    m->slot = calloc(cap, sizeof *m->slot), m->rslot = calloc(cap, sizeof *m->rslot);
    m->user = malloc((size_t)m->n * sizeof *m->user);
    MT_REQUIRE(m->slot && m->rslot && m->user, MT_ERR_OOM, "piece maps");
    for (int b = 0; b < 256; b++)
        m->byte_id[b] = -1;
    m->min_score = 3.4e38f, m->max_score = -3.4e38f;
    for (int i = 0; i < m->n; i++) {
        const sp_piece *p = &m->piece[i];
        uint32_t *slot = is_normal(p->type) ? m->slot : m->rslot;
        MT_REQUIRE(map_find(m, slot, p->s, p->len) < 0, MT_ERR_FORMAT,
                   "SentencePiece model %s: piece %d (%.*s) is defined twice", name, i, (int)p->len,
                   p->s);
        size_t h = tok_hash(p->s, p->len) & m->mask;
        while (slot[h])
            h = (h + 1) & m->mask;
        slot[h] = (uint32_t)i + 1;
        if (p->len > m->max_len) m->max_len = p->len;
        if (p->type == SP_USER) m->user[m->n_user++] = i;
        if (p->type == SP_UNKNOWN) {
            MT_REQUIRE(m->unk < 0, MT_ERR_FORMAT, "SentencePiece model %s: two unk pieces", name);
            m->unk = i;
        }
        if (p->type == SP_NORMAL) {
            if (p->score < m->min_score) m->min_score = p->score;
            if (p->score > m->max_score) m->max_score = p->score;
        }
        MT_REQUIRE(!(m->bpe && p->type == SP_UNUSED), MT_ERR_UNSUPPORTED,
                   "SentencePiece model %s: BPE with UNUSED pieces (piece %d) is not supported",
                   name, i);
        if (p->type == SP_BYTE) {
            unsigned v;
            char tail;
            MT_REQUIRE(m->byte_fallback && p->len == 6 &&
                           sscanf(p->s, "<0x%2X%c", &v, &tail) == 2 && tail == '>' && v < 256,
                       MT_ERR_FORMAT,
                       "SentencePiece model %s: byte piece %d (%.*s) is invalid or byte_fallback "
                       "is off",
                       name, i, (int)p->len, p->s);
            m->byte_id[v] = i;
            m->piece[i].byte = (int)v;
        }
    }
    MT_REQUIRE(m->unk >= 0, MT_ERR_FORMAT, "SentencePiece model %s: no unk piece", name);
    for (int b = 0; m->byte_fallback && b < 256; b++)
        MT_REQUIRE(m->byte_id[b] >= 0, MT_ERR_FORMAT,
                   "SentencePiece model %s: byte_fallback without the piece <0x%02X>", name, b);
    return MT_OK;
}

mt_status sp_model_from_bytes(unsigned char *bytes, size_t len, const char *name, sp_model **out) {
    *out = NULL;
    sp_model *m = calloc(1, sizeof *m);
    if (!m) free(bytes);
    MT_REQUIRE(m, MT_ERR_OOM, "SentencePiece model");
    m->buf = bytes;
    mt_status st = parse(m, len, name);
    if (st == MT_OK) st = index_pieces(m, name);
    if (st == MT_OK)
        *out = m;
    else
        sp_model_free(m);
    return st;
}

mt_status sp_model_load(const char *file, sp_model **out) {
    unsigned char *buf;
    size_t len;
    *out = NULL;
    MT_TRY(sp_read_file(file, &buf, &len));
    return sp_model_from_bytes(buf, len, file, out);
}

void sp_model_free(sp_model *m) {
    if (!m) return;
    free(m->buf), free(m->piece), free(m->slot), free(m->rslot), free(m->user), free(m->trie);
    free(m);
}

int sp_model_size(const sp_model *m) {
    return m->n;
}
int sp_model_bos(const sp_model *m) {
    return m->bos;
}
int sp_model_eos(const sp_model *m) {
    return m->eos;
}
