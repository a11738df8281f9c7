/* GPT-2 byte-level BPE, the algorithm of tiktoken's gpt2 encoding: a hand-written matcher for the
 * pre-tokenizer regex (Unicode L/N ranges from unicode_ranges.h), then per pre-token the repeated
 * merge of the adjacent pair whose bytes have the lowest rank (rank = token id), with a hash map of
 * token bytes and a cache of encoded pre-tokens. Also the NullTokenizer. */
#include "data_impl.h"
#include "unicode_ranges.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GPT2_EOD      50256
#define GPT2_EOD_TEXT "<|endoftext|>"
#define NO_RANK       UINT32_MAX
#define CACHE_MAX     (1u << 16) /* cached pre-tokens before the cache is cleared */

/* Open-addressing map from a byte string to a value (token id, or a cache slot). */
typedef struct bmap {
    uint32_t *slot; /* index into keys+1; 0 = empty */
    size_t mask;
    char **key;
    uint32_t *klen, *val;
    size_t n, cap;
} bmap;

typedef enum {
    TOK_GPT2,
    TOK_NULL,
    TOK_SP, /* SentencePiece (sp_encode.c) */
    TOK_HF  /* Hugging Face byte-level BPE (hf_encode.c) */
} tok_kind;

struct mt_data_tokenizer {
    tok_kind kind;
    int64_t vocab_size, eod;
    sp_model *sp;
    hf_model *hf;
    int add_bos;     /* SentencePiece: bos first (Llama2Tokenizer.tokenize) */
    bmap ranks;      /* token bytes -> id (without <|endoftext|>) */
    char **id_bytes; /* id -> bytes (decode) */
    uint32_t *id_len;
    bmap cache;         /* pre-token bytes -> offset into cache_ids */
    int32_t *cache_ids; /* [n, ids...] per cached pre-token */
    size_t cache_n, cache_cap;
};

uint64_t tok_hash(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static mt_status bmap_init(bmap *m, size_t expect) {
    size_t cap = 16;
    while (cap < 2 * expect)
        cap *= 2;
    memset(m, 0, sizeof *m);
    m->slot = calloc(cap, sizeof *m->slot);
    m->mask = cap - 1;
    m->cap = expect ? expect : 1;
    m->key = malloc(m->cap * sizeof *m->key);
    m->klen = malloc(m->cap * sizeof *m->klen);
    m->val = malloc(m->cap * sizeof *m->val);
    MT_REQUIRE(m->slot && m->key && m->klen && m->val, MT_ERR_OOM, "map of %zu", expect);
    return MT_OK;
}

static void bmap_free(bmap *m) {
    for (size_t i = 0; m->key && i < m->n; i++)
        free(m->key[i]);
    free(m->slot);
    free(m->key);
    free(m->klen);
    free(m->val);
    memset(m, 0, sizeof *m);
}

static const uint32_t *bmap_get(const bmap *m, const char *p, size_t n) {
    for (size_t h = tok_hash(p, n) & m->mask;; h = (h + 1) & m->mask) {
        uint32_t s = m->slot[h];
        if (!s) return NULL;
        if (m->klen[s - 1] == n && memcmp(m->key[s - 1], p, n) == 0) return &m->val[s - 1];
    }
}

/* Inserts (no duplicate check by design: callers look up first). Fails when full. */
static mt_status bmap_put(bmap *m, const char *p, size_t n, uint32_t v) {
    MT_REQUIRE(m->n < m->cap, MT_ERR_INTERNAL, "map full");
    char *k = malloc(n ? n : 1);
    MT_REQUIRE(k, MT_ERR_OOM, "map key");
    memcpy(k, p, n);
    size_t h = tok_hash(p, n) & m->mask;
    while (m->slot[h])
        h = (h + 1) & m->mask;
    m->key[m->n] = k;
    m->klen[m->n] = (uint32_t)n;
    m->val[m->n] = v;
    m->slot[h] = (uint32_t)++m->n;
    return MT_OK;
}

/* ---- bytes <-> GPT-2's printable code points (bytes_to_unicode) ---- */

static int byte_printable(int b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

/* Code point -> byte, or -1. The 68 other bytes map in order to U+0100.. */
int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    int n = 0;
    for (int b = 0; b < 256; b++)
        if (!byte_printable(b) && n++ == (int)(cp - 256)) return b;
    return -1;
}

/* Decodes one UTF-8 sequence at p[0..n); returns its length, or 0 when invalid, with *cp. The
 * length of a maximal invalid prefix (as Python's 'replace' error handler counts) goes in *bad. */
size_t tok_utf8_next(const unsigned char *p, size_t n, uint32_t *cp, size_t *bad) {
    unsigned char c = p[0];
    *bad = 1;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
        *cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        *cp = c & 0x0f;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        *cp = c & 0x07;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return 0;
    }
    for (size_t k = 1; k <= need; k++) {
        if (k >= n || p[k] < lo || p[k] > hi) {
            *bad = k;
            return 0;
        }
        *cp = (*cp << 6) | (p[k] & 0x3f);
        lo = 0x80;
        hi = 0xbf;
    }
    return need + 1;
}

static mt_status utf8_to_bytes(const char *s, char *out, size_t *n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s), m = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t bad, k = tok_utf8_next(p + i, len - i, &cp, &bad);
        int b = k ? tok_cp_to_byte(cp) : -1;
        MT_REQUIRE(b >= 0, MT_ERR_FORMAT,
                   "gpt2 vocabulary: token '%s' has a character outside "
                   "the byte alphabet",
                   s);
        out[m++] = (char)b;
        i += k;
    }
    *n = m;
    return MT_OK;
}

/* ---- pre-tokenizer ---- */

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

int tok_char_class(uint32_t cp) {
    if (cp < 128) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CH_LETTER;
        if (cp >= '0' && cp <= '9') return CH_NUMBER;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return CH_SPACE;
        return CH_OTHER;
    }
    /* \s is Unicode White_Space */
    if (cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
        cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000)
        return CH_SPACE;
    if (in_ranges(unicode_letter, sizeof unicode_letter / sizeof *unicode_letter, cp))
        return CH_LETTER;
    if (in_ranges(unicode_number, sizeof unicode_number / sizeof *unicode_number, cp))
        return CH_NUMBER;
    return CH_OTHER;
}

/* Text as code points with their byte spans (invalid UTF-8 -> U+FFFD, encoded as EF BF BD). */
typedef struct cpbuf {
    uint32_t *cp;
    unsigned char *cls;
    size_t n, cap;
} cpbuf;

/* Length in code points of the regex match at position i of c[0..n). */
size_t tok_gpt2_match(const uint32_t *c, const unsigned char *cls, size_t n, size_t i) {
    if (c[i] == '\'' && i + 1 < n) {
        uint32_t a = c[i + 1], b = i + 2 < n ? c[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    size_t j = i;
    int k = cls[i];
    if (c[i] == ' ' && i + 1 < n && cls[i + 1] != CH_SPACE) {
        j = i + 1; /* " ?" before a letter, number or other run */
        k = cls[j];
    }
    if (k != CH_SPACE) {
        while (j < n && cls[j] == k)
            j++;
        return j - i;
    }
    while (j < n && cls[j] == CH_SPACE)
        j++;
    if (j == n || j - i == 1) return j - i; /* \s+(?!\S) to the end, or \s+ */
    return j - 1 - i;                       /* \s+(?!\S): leave the last space to the next word */
}

/* ---- BPE ---- */

/* A candidate merge: parts [a, b) and [b, c) of a piece into one, at the rank of their bytes. */
typedef struct bpe_cand {
    uint32_t rank;
    uint32_t a, b, c;
} bpe_cand;

/* tiktoken's order: the lowest rank first, then the leftmost. */
static int cand_before(const bpe_cand *x, const bpe_cand *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->a < y->a);
}

TOK_HEAP(cand, bpe_cand, cand_before)

/* The merge of parts [a, b) and [b, c), pushed when their bytes have a rank. */
static void cand_add(const mt_data_tokenizer *t, const char *piece, bpe_cand *h, size_t *nh,
                     uint32_t a, uint32_t b, uint32_t c) {
    const uint32_t *r = bmap_get(&t->ranks, piece + a, c - a);
    if (r) cand_push(h, nh, (bpe_cand){ *r, a, b, c });
}

/* tiktoken's byte_pair_merge over piece[0..n): the adjacent pair of parts whose bytes rank
 * lowest merges first (the leftmost on ties), until none has a rank; appends ids. By a heap of
 * candidates checked when popped (end[a] is part a's end, or 0 once merged away): O(n log n), so
 * a long run of letters stays cheap (the scan of every pair per merge was n^2). */
static mt_status bpe(const mt_data_tokenizer *t, const char *piece, size_t n, int32_t *out,
                     size_t *n_out) {
    const uint32_t *whole = bmap_get(&t->ranks, piece, n);
    if (whole) {
        out[0] = (int32_t)*whole;
        *n_out = 1;
        return MT_OK;
    }
    uint32_t *end = malloc((n + 1) * sizeof *end), *start = malloc((n + 1) * sizeof *start);
    bpe_cand *h = malloc((3 * n + 1) * sizeof *h); /* n-1 pairs, then at most 2 a merge */
    size_t nh = 0;
    if (!end || !start || !h) {
        free(end), free(start), free(h);
        return MT_ERROR(MT_ERR_OOM, "bpe of %zu bytes", n);
    }
    for (uint32_t i = 0; i < n; i++)
        end[i] = i + 1, start[i + 1] = i; /* start[e]: the part that ends at e */
    for (uint32_t i = 0; i + 1 < n; i++)
        cand_add(t, piece, h, &nh, i, i + 1, i + 2);
    while (nh > 0) {
        bpe_cand x = cand_pop(h, &nh);
        if (end[x.a] != x.b || x.b >= n || end[x.b] != x.c) continue; /* stale */
        end[x.a] = x.c, end[x.b] = 0, start[x.c] = x.a;               /* [b, c) joins [a, b) */
        if (x.a > 0) cand_add(t, piece, h, &nh, start[x.a], x.a, x.c);
        if (x.c < n) cand_add(t, piece, h, &nh, x.a, x.c, end[x.c]);
    }
    mt_status st = MT_OK;
    *n_out = 0;
    for (uint32_t a = 0; a < n && st == MT_OK; a = end[a]) {
        const uint32_t *r = bmap_get(&t->ranks, piece + a, end[a] - a);
        if (!r)
            st = MT_ERROR(MT_ERR_INTERNAL, "bpe: a part has no rank");
        else
            out[(*n_out)++] = (int32_t)*r;
    }
    free(end), free(start), free(h);
    return st;
}

mt_status tok_push_ids(int32_t **ids, size_t *n, size_t *cap, const int32_t *v, size_t k) {
    if (k == 0) return MT_OK;
    if (*n + k > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n + k)
            c *= 2;
        int32_t *p = realloc(*ids, c * sizeof *p);
        MT_REQUIRE(p, MT_ERR_OOM, "ids buffer of %zu", c);
        *ids = p;
        *cap = c;
    }
    memcpy(*ids + *n, v, k * sizeof *v);
    *n += k;
    return MT_OK;
}

static mt_status encode_piece(mt_data_tokenizer *t, const char *piece, size_t n, int32_t **ids,
                              size_t *n_ids, size_t *cap) {
    const uint32_t *hit = bmap_get(&t->cache, piece, n);
    if (hit)
        return tok_push_ids(ids, n_ids, cap, t->cache_ids + *hit + 1, (size_t)t->cache_ids[*hit]);
    int32_t small[64], *tmp = n <= 64 ? small : malloc(n * sizeof *tmp);
    MT_REQUIRE(tmp, MT_ERR_OOM, "piece of %zu bytes", n);
    size_t k = 0;
    mt_status st = bpe(t, piece, n, tmp, &k);
    if (st == MT_OK) st = tok_push_ids(ids, n_ids, cap, tmp, k);
    if (st == MT_OK && n <= 256) {        /* why: long pieces (whitespace runs) rarely repeat */
        if (t->cache.n == t->cache.cap) { /* full: start over */
            bmap_free(&t->cache);
            t->cache_n = 0;
            st = bmap_init(&t->cache, CACHE_MAX);
        }
        if (st == MT_OK && t->cache_n + k + 1 > t->cache_cap) {
            size_t c = t->cache_cap ? t->cache_cap * 2 : 1 << 16;
            while (c < t->cache_n + k + 1)
                c *= 2;
            int32_t *p = realloc(t->cache_ids, c * sizeof *p);
            if (!p)
                st = MT_ERROR(MT_ERR_OOM, "cache");
            else {
                t->cache_ids = p;
                t->cache_cap = c;
            }
        }
        if (st == MT_OK) {
            t->cache_ids[t->cache_n] = (int32_t)k;
            memcpy(t->cache_ids + t->cache_n + 1, tmp, k * sizeof *tmp);
            st = bmap_put(&t->cache, piece, n, (uint32_t)t->cache_n);
            t->cache_n += k + 1;
        }
    }
    if (tmp != small) free(tmp);
    return st;
}

/* Encodes ordinary text s[0..len) (no special tokens). */
static mt_status encode_ordinary(mt_data_tokenizer *t, const char *s, size_t len, int32_t **ids,
                                 size_t *n, size_t *cap) {
    const unsigned char *p = (const unsigned char *)s;
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    unsigned char *cls = malloc(len + 1);
    char *bytes = malloc(3 * len + 1); /* U+FFFD replacement may grow one byte to three */
    size_t *off = malloc((len + 2) * sizeof *off);
    mt_status st = MT_OK;
    if (!cp || !cls || !bytes || !off) {
        st = MT_ERROR(MT_ERR_OOM, "encode of %zu bytes", len);
        goto done;
    }
    size_t m = 0, nb = 0;
    for (size_t i = 0; i < len;) {
        size_t bad, k = tok_utf8_next(p + i, len - i, &cp[m], &bad);
        off[m] = nb;
        if (k) {
            memcpy(bytes + nb, p + i, k);
            nb += k;
            i += k;
        } else {
            cp[m] = 0xfffd;
            memcpy(bytes + nb, "\xef\xbf\xbd", 3);
            nb += 3;
            i += bad;
        }
        cls[m] = (unsigned char)tok_char_class(cp[m]);
        m++;
    }
    off[m] = nb;
    for (size_t i = 0; i < m && st == MT_OK;) {
        size_t k = tok_gpt2_match(cp, cls, m, i);
        st = encode_piece(t, bytes + off[i], off[i + k] - off[i], ids, n, cap);
        i += k;
    }
done:
    free(cp);
    free(cls);
    free(bytes);
    free(off);
    return st;
}

static mt_status encode_null(const mt_data_tokenizer *t, const char *s, size_t len, int32_t **ids,
                             size_t *n, size_t *cap) {
    (void)t;
    size_t i = 0;
    for (;;) { /* [int(x) for x in text.split(' ')] */
        size_t j = i;
        while (j < len && s[j] != ' ')
            j++;
        char tok[32];
        size_t a = i, b = j;
        while (a < b && (s[a] == '\t' || s[a] == '\n' || s[a] == '\r'))
            a++;
        while (b > a && (s[b - 1] == '\t' || s[b - 1] == '\n' || s[b - 1] == '\r'))
            b--;
        MT_REQUIRE(b > a && b - a < sizeof tok, MT_ERR_INVALID_ARG,
                   "null tokenizer: '%.*s' is not an integer", (int)(j - i), s + i);
        memcpy(tok, s + a, b - a);
        tok[b - a] = 0;
        char *end;
        long long v = strtoll(tok, &end, 10);
        MT_REQUIRE(*end == 0 && v >= INT32_MIN && v <= INT32_MAX, MT_ERR_INVALID_ARG,
                   "null tokenizer: '%s' is not an int32", tok);
        int32_t x = (int32_t)v;
        MT_TRY(tok_push_ids(ids, n, cap, &x, 1));
        if (j >= len) break;
        i = j + 1;
    }
    return MT_OK;
}

mt_status mt_data_tokenizer_encode(mt_data_tokenizer *t, const char *text, size_t len,
                                   int allow_special, int32_t **ids, size_t *n, size_t *cap) {
    MT_REQUIRE(t && (text || !len) && ids && n && cap, MT_ERR_INVALID_ARG, "NULL argument");
    if (t->kind == TOK_NULL) return encode_null(t, text, len, ids, n, cap);
    if (t->kind == TOK_HF) return hf_encode(t->hf, text, len, ids, n, cap);
    if (t->kind == TOK_SP) {
        if (t->add_bos) {
            int32_t bos = sp_model_bos(t->sp);
            MT_TRY(tok_push_ids(ids, n, cap, &bos, 1));
        }
        return sp_encode(t->sp, text, len, ids, n, cap);
    }
    size_t at = 0, sl = strlen(GPT2_EOD_TEXT);
    while (allow_special) {
        const char *hit = NULL;
        for (size_t i = at; i + sl <= len; i++)
            if (text[i] == '<' && memcmp(text + i, GPT2_EOD_TEXT, sl) == 0) {
                hit = text + i;
                break;
            }
        if (!hit) break;
        MT_TRY(encode_ordinary(t, text + at, (size_t)(hit - text) - at, ids, n, cap));
        int32_t eod = GPT2_EOD;
        MT_TRY(tok_push_ids(ids, n, cap, &eod, 1));
        at = (size_t)(hit - text) + sl;
    }
    return encode_ordinary(t, text + at, len - at, ids, n, cap);
}

mt_status mt_data_tokenizer_decode(const mt_data_tokenizer *t, const int32_t *ids, size_t n_ids,
                                   char **text, size_t *len, size_t *cap) {
    MT_REQUIRE(t && (ids || !n_ids) && text && len && cap, MT_ERR_INVALID_ARG, "NULL argument");
    if (t->kind == TOK_SP) return sp_decode(t->sp, ids, n_ids, text, len, cap);
    if (t->kind == TOK_HF) return hf_decode(t->hf, ids, n_ids, text, len, cap);
    for (size_t i = 0; i < n_ids; i++) {
        MT_REQUIRE(ids[i] >= 0 && ids[i] < t->vocab_size, MT_ERR_INVALID_ARG,
                   "id %d is outside the vocabulary of %lld", ids[i], (long long)t->vocab_size);
        char num[16];
        const char *p = num;
        size_t k;
        if (t->kind == TOK_NULL) { /* ' '.join(str(x)) */
            k = (size_t)snprintf(num, sizeof num, "%s%d", i ? " " : "", ids[i]);
        } else {
            p = t->id_bytes[ids[i]];
            k = t->id_len[ids[i]];
        }
        if (*len + k > *cap) {
            size_t c = *cap ? *cap : 256;
            while (c < *len + k)
                c *= 2;
            char *q = realloc(*text, c);
            MT_REQUIRE(q, MT_ERR_OOM, "text buffer of %zu", c);
            *text = q;
            *cap = c;
        }
        memcpy(*text + *len, p, k);
        *len += k;
    }
    return MT_OK;
}

/* ---- construction ---- */

mt_status mt_data_tokenizer_null_create(int64_t vocab_size, mt_data_tokenizer **out) {
    MT_REQUIRE(out && vocab_size > 0 && vocab_size < INT32_MAX, MT_ERR_INVALID_ARG,
               "NULL out or vocab_size %lld", (long long)vocab_size);
    mt_data_tokenizer *t = calloc(1, sizeof *t);
    MT_REQUIRE(t, MT_ERR_OOM, "tokenizer");
    t->kind = TOK_NULL;
    t->vocab_size = vocab_size + 1;
    t->eod = vocab_size;
    *out = t;
    return MT_OK;
}

static mt_status load_merges(mt_data_tokenizer *t, const char *path) {
    FILE *f = fopen(path, "rb");
    MT_REQUIRE(f, MT_ERR_IO, "open %s", path);
    char line[1024], a[512], b[512];
    mt_status st = MT_OK;
    int64_t rank = 256, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r'))
            line[--l] = 0;
        if (lineno == 1 && strncmp(line, "#version", 8) == 0) continue;
        if (l == 0) continue;
        char *sp = strchr(line, ' ');
        if (!sp || strchr(sp + 1, ' ')) {
            st =
                MT_ERROR(MT_ERR_FORMAT, "%s:%lld: a merge is two symbols", path, (long long)lineno);
            break;
        }
        *sp = 0;
        size_t na = 0, nb = 0;
        if ((st = utf8_to_bytes(line, a, &na)) != MT_OK) break;
        if ((st = utf8_to_bytes(sp + 1, b, &nb)) != MT_OK) break;
        memcpy(a + na, b, nb);
        const uint32_t *r = bmap_get(&t->ranks, a, na + nb);
        if (!r || *r != rank) { /* tiktoken's loader asserts the same */
            st = MT_ERROR(MT_ERR_FORMAT, "%s:%lld: merge rank %lld != encoder.json id %lld", path,
                          (long long)lineno, (long long)rank, r ? (long long)*r : -1LL);
            break;
        }
        rank++;
    }
    fclose(f);
    MT_TRY(st);
    MT_REQUIRE(rank == GPT2_EOD, MT_ERR_FORMAT, "%s: %lld merges (want 50000)", path,
               (long long)(rank - 256));
    return MT_OK;
}

mt_status mt_data_tokenizer_gpt2_create(const char *vocab_file, const char *merge_file,
                                        mt_data_tokenizer **out) {
    MT_REQUIRE(vocab_file && merge_file && out, MT_ERR_INVALID_ARG, "NULL path or out");
    *out = NULL;
    json_error_t err;
    json_t *enc = json_load_file(vocab_file, JSON_REJECT_DUPLICATES, &err);
    MT_REQUIRE(enc, MT_ERR_FORMAT, "%s:%d: %s", vocab_file, err.line, err.text);
    mt_status st = MT_OK;
    mt_data_tokenizer *t = calloc(1, sizeof *t);
    if (!t || !json_is_object(enc)) {
        st = t ? MT_ERROR(MT_ERR_FORMAT, "%s is not a JSON object", vocab_file)
               : MT_ERROR(MT_ERR_OOM, "tokenizer");
        goto fail;
    }
    t->kind = TOK_GPT2;
    t->vocab_size = (int64_t)json_object_size(enc);
    t->eod = GPT2_EOD;
    t->id_bytes = calloc((size_t)t->vocab_size, sizeof *t->id_bytes);
    t->id_len = calloc((size_t)t->vocab_size, sizeof *t->id_len);
    if (!t->id_bytes || !t->id_len) {
        st = MT_ERROR(MT_ERR_OOM, "vocabulary");
        goto fail;
    }
    MT_TRY_GOTO(bmap_init(&t->ranks, (size_t)t->vocab_size), st, fail);
    MT_TRY_GOTO(bmap_init(&t->cache, CACHE_MAX), st, fail);
    const char *key;
    json_t *v;
    json_object_foreach(enc, key, v) {
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || id >= t->vocab_size || t->id_bytes[id]) {
            st = MT_ERROR(MT_ERR_FORMAT, "%s: id of '%s' is not a unique integer below %lld",
                          vocab_file, key, (long long)t->vocab_size);
            goto fail;
        }
        char *b = malloc(strlen(key) + 1);
        size_t n = 0;
        if (!b) {
            st = MT_ERROR(MT_ERR_OOM, "token");
            goto fail;
        }
        t->id_bytes[id] = b;
        if (strcmp(key, GPT2_EOD_TEXT) == 0) { /* a special token: decoded as text, never merged */
            memcpy(b, key, strlen(key));
            t->id_len[id] = (uint32_t)strlen(key);
            MT_REQUIRE(id == GPT2_EOD, MT_ERR_FORMAT, "%s: <|endoftext|> is %lld", vocab_file,
                       (long long)id);
            continue;
        }
        MT_TRY_GOTO(utf8_to_bytes(key, b, &n), st, fail);
        t->id_len[id] = (uint32_t)n;
        if (bmap_get(&t->ranks, b, n)) {
            st = MT_ERROR(MT_ERR_FORMAT, "%s: two ids for the bytes of '%s'", vocab_file, key);
            goto fail;
        }
        MT_TRY_GOTO(bmap_put(&t->ranks, b, n, (uint32_t)id), st, fail);
    }
    MT_TRY_GOTO(load_merges(t, merge_file), st, fail);
    json_decref(enc);
    *out = t;
    return MT_OK;
fail:
    json_decref(enc);
    mt_data_tokenizer_destroy(t);
    return st;
}

mt_status mt_data_tokenizer_sentencepiece_create(const char *model_file, int add_bos,
                                                 mt_data_tokenizer **out) {
    MT_REQUIRE(model_file && out, MT_ERR_INVALID_ARG, "NULL argument");
    *out = NULL;
    mt_data_tokenizer *t = calloc(1, sizeof *t);
    MT_REQUIRE(t, MT_ERR_OOM, "tokenizer");
    t->kind = TOK_SP;
    t->add_bos = add_bos != 0;
    mt_status st = sp_model_load(model_file, &t->sp);
    if (st == MT_OK) {
        t->vocab_size = sp_model_size(t->sp), t->eod = sp_model_eos(t->sp);
        if (t->eod < 0 || t->eod >= t->vocab_size ||
            (add_bos && (sp_model_bos(t->sp) < 0 || sp_model_bos(t->sp) >= t->vocab_size)))
            st = MT_ERROR(MT_ERR_FORMAT,
                          "SentencePiece model %s: eos_id %lld or bos_id %d is not one of its %lld "
                          "pieces",
                          model_file, (long long)t->eod, sp_model_bos(t->sp),
                          (long long)t->vocab_size);
    }
    if (st != MT_OK) {
        mt_data_tokenizer_destroy(t);
        return st;
    }
    *out = t;
    return MT_OK;
}

mt_status mt_data_tokenizer_hf_create(const char *path, mt_data_tokenizer **out) {
    MT_REQUIRE(path && out, MT_ERR_INVALID_ARG, "NULL argument");
    *out = NULL;
    mt_data_tokenizer *t = calloc(1, sizeof *t);
    MT_REQUIRE(t, MT_ERR_OOM, "tokenizer");
    t->kind = TOK_HF;
    mt_status st = hf_model_load(path, &t->hf, &t->vocab_size, &t->eod);
    if (st != MT_OK) {
        mt_data_tokenizer_destroy(t);
        return st;
    }
    *out = t;
    return MT_OK;
}

void mt_data_tokenizer_destroy(mt_data_tokenizer *t) {
    if (!t) return;
    sp_model_free(t->sp);
    hf_model_free(t->hf);
    for (int64_t i = 0; t->id_bytes && i < t->vocab_size; i++)
        free(t->id_bytes[i]);
    free(t->id_bytes);
    free(t->id_len);
    bmap_free(&t->ranks);
    bmap_free(&t->cache);
    free(t->cache_ids);
    free(t);
}

int64_t mt_data_tokenizer_vocab_size(const mt_data_tokenizer *t) {
    return t->vocab_size;
}

int64_t mt_data_tokenizer_eod(const mt_data_tokenizer *t) {
    return t->eod;
}

#ifndef MT_GPT2_INSTALL_DIR /* meson passes both; other builds (the fuzzers) need neither */
#define MT_GPT2_INSTALL_DIR "/usr/local/share/megatron-c/gpt2"
#endif
#ifndef MT_GPT2_SOURCE_DIR
#define MT_GPT2_SOURCE_DIR "subprojects/data/tokenizer/gpt2"
#endif

const char *mt_data_gpt2_file(const char *name, char *buf, size_t len) {
    struct stat sb;
    const char *env = getenv("MT_GPT2_DIR");
    const char *dir = env && *env ? env
                      : stat(MT_GPT2_INSTALL_DIR, &sb) == 0 && S_ISDIR(sb.st_mode)
                          ? MT_GPT2_INSTALL_DIR
                          : MT_GPT2_SOURCE_DIR;
    snprintf(buf, len, "%s/%s", dir, name);
    return buf;
}
