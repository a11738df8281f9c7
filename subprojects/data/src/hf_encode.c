/* Hugging Face byte-level BPE encoding from a tokenizer.json, as transformers' AutoTokenizer(text)
 * .input_ids (Megatron's HuggingFaceTokenizer.tokenize) gives it, for mt-preprocess-data: the
 * added tokens split out of the raw text first (longest match), each other span normalized (none,
 * or NFC: nfc.c) and pre-tokenized by GPT-2's regex (ByteLevel with use_regex) or Llama-3's or
 * Qwen2's (a Split on the cl100k-style pattern, digits in threes or one by one, isolated, before
 * a ByteLevel without regex), each piece's bytes merged by the merges' ranks
 * (the lowest-ranked adjacent pair first, leftmost on ties; with ignore_merges a piece in the
 * vocabulary is one token), then the post-processor's template (TemplateProcessing's special
 * tokens around the sequence). What is not that family (other normalizers, pre-tokenizers or
 * patterns, other models, byte fallback, prefix spaces, stripped added tokens) is refused by
 * name. Golden values: transformers' own (golden/hf_encode). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "data_impl.h"

typedef struct added {
    char *s;
    size_t len;
    int32_t id;
} added;

struct hf_model {
    int digits; /* the pre-tokenizer: Llama-3's pattern (3: digits in threes), Qwen2's (1: one
                   by one), or GPT-2's (0) */
    int nfc;    /* the NFC normalizer */
    int ignore_merges;
    int32_t n_vocab; /* ids 0 .. n_vocab-1 may hold token bytes */
    char **tok;      /* id -> bytes (NULL: no such id) */
    uint32_t *tok_len;
    int32_t *slot;  /* bytes -> id + 1, open addressing over tok */
    uint64_t *mkey; /* merges: (left id, right id) + 1 -> rank, new id */
    int32_t *mrank, *mnew;
    size_t mask, mmask;
    added *add;
    int n_add;
    unsigned char add_first[256]; /* an added token starts with this byte */
    int32_t *pre, *post;          /* the template's ids before and after the sequence */
    int n_pre, n_post;
};

#define QWEN2_PATTERN                                                     \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| " \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_PATTERN                                                         \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static int32_t vocab_id(const hf_model *m, const char *p, size_t n) {
    for (size_t h = tok_hash(p, n) & m->mask;; h = (h + 1) & m->mask) {
        int32_t s = m->slot[h];
        if (!s) return -1;
        if (m->tok_len[s - 1] == n && memcmp(m->tok[s - 1], p, n) == 0) return s - 1;
    }
}

static size_t merge_slot(const hf_model *m, uint64_t key) {
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & m->mmask;
    while (m->mkey[h] && m->mkey[h] != key)
        h = (h + 1) & m->mmask;
    return h;
}

/* ---- pre-tokenizers ---- */

static uint32_t lower(uint32_t c) {
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* Llama-3's pattern (digits 3) or Qwen2's (digits 1) at c[i..n): its length in code points.
 * Alternatives in order, as the regex engine tries them. */
size_t tok_cl100k_match(const uint32_t *c, const unsigned char *cls, size_t n, size_t i,
                        int digits) {
    if (c[i] == '\'' && i + 1 < n) { /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
        uint32_t a = lower(c[i + 1]), b = i + 2 < n ? lower(c[i + 2]) : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    size_t j = i;
    const int nl = c[i] == '\r' || c[i] == '\n';
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cls[j] != CH_LETTER && cls[j] != CH_NUMBER && !nl && j + 1 < n && cls[j + 1] == CH_LETTER)
        j++;
    if (cls[j] == CH_LETTER) {
        while (j < n && cls[j] == CH_LETTER)
            j++;
        return j - i;
    }
    if (cls[i] == CH_NUMBER) { /* \p{N}{1,3} (Qwen2's: \p{N}) */
        for (j = i; j < n && j - i < (size_t)digits && cls[j] == CH_NUMBER;)
            j++;
        return j - i;
    }
    j = i; /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if (c[j] == ' ' && j + 1 < n && cls[j + 1] == CH_OTHER) j++;
    if (cls[j] == CH_OTHER) {
        while (j < n && cls[j] == CH_OTHER)
            j++;
        while (j < n && (c[j] == '\r' || c[j] == '\n'))
            j++;
        return j - i;
    }
    size_t e = i; /* whitespace from here on: its run [i, e) */
    while (e < n && cls[e] == CH_SPACE)
        e++;
    for (size_t k = e; k > i; k--) /* \s*[\r\n]+: to the run's last newline */
        if (c[k - 1] == '\r' || c[k - 1] == '\n') return k - i;
    if (e == n || e - i == 1) return e - i; /* \s+(?!\S) to the end, or \s+ */
    return e - 1 - i;                       /* \s+(?!\S): the last space goes with what follows */
}

/* ---- BPE ---- */

/* A candidate merge of symbol `left` and the one after it (ids l, r) into `id`, at `rank`. */
typedef struct cand {
    int32_t rank, left, l, r, id;
} cand;

/* Heap order: the lower rank first, then the leftmost (HF's Merge ordering). */
static int cand_before(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

TOK_HEAP(cand, cand, cand_before)

/* The merge of symbols a and b (by their ids), pushed when the merges hold it. */
static void maybe_push(const hf_model *m, cand *h, size_t *nh, const int32_t *id, int32_t a,
                       int32_t b) {
    if (a < 0 || b < 0) return;
    size_t s = merge_slot(m, ((uint64_t)id[a] << 32 | (uint32_t)id[b]) + 1);
    if (m->mkey[s]) cand_push(h, nh, (cand){ m->mrank[s], a, id[a], id[b], m->mnew[s] });
}

/* A piece's bytes p[0..n) as tokens: each byte's token, then the lowest-ranked adjacent pair
 * merged until none is left (ties: the leftmost), by a heap of candidate merges checked when
 * popped (O(n log n), as tokenizers' Word::merge_all: a long run of letters stays cheap). */
static mt_status bpe(const hf_model *m, const char *p, size_t n, int32_t **ids, size_t *nid,
                     size_t *cap) {
    int32_t whole;
    if (m->ignore_merges && (whole = vocab_id(m, p, n)) >= 0)
        return tok_push_ids(ids, nid, cap, &whole, 1);
    int32_t *id = malloc(n * sizeof *id), *next = malloc(n * sizeof *next);
    int32_t *prev = malloc(n * sizeof *prev);
    cand *h = malloc((3 * n + 1) * sizeof *h); /* n-1 pairs, then at most 2 a merge */
    size_t nh = 0;
    mt_status st = MT_OK;
    if (!id || !next || !prev || !h) st = MT_ERROR(MT_ERR_OOM, "piece of %zu bytes", n);
    for (size_t i = 0; i < n && st == MT_OK; i++) {
        if ((id[i] = vocab_id(m, p + i, 1)) < 0)
            st = MT_ERROR(MT_ERR_FORMAT, "tokenizer.json: byte 0x%02x has no token",
                          (unsigned char)p[i]);
        prev[i] = (int32_t)i - 1, next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; st == MT_OK && i + 1 < n; i++)
        maybe_push(m, h, &nh, id, (int32_t)i, (int32_t)i + 1);
    while (st == MT_OK && nh > 0) {
        cand c = cand_pop(h, &nh);
        const int32_t b = next[c.left];
        /* stale: the left symbol was merged away (id -1), or either side changed */
        if (id[c.left] != c.l || b < 0 || id[b] != c.r) continue;
        id[c.left] = c.id, id[b] = -1; /* b merges into left */
        next[c.left] = next[b];
        if (next[b] >= 0) prev[next[b]] = c.left;
        maybe_push(m, h, &nh, id, prev[c.left], c.left);
        maybe_push(m, h, &nh, id, c.left, next[c.left]);
    }
    for (int32_t i = n ? 0 : -1; st == MT_OK && i >= 0; i = next[i])
        st = tok_push_ids(ids, nid, cap, &id[i], 1);
    free(id), free(next), free(prev), free(h);
    return st;
}

/* Text without added tokens: pre-tokenized, each piece by bpe. */
static mt_status encode_span(const hf_model *m, const char *s, size_t len, int32_t **ids, size_t *n,
                             size_t *cap) {
    const unsigned char *p = (const unsigned char *)s;
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    size_t m_ = 0;
    MT_REQUIRE(cp, MT_ERR_OOM, "encode of %zu bytes", len);
    for (size_t i = 0; i < len; m_++) { /* code points, invalid UTF-8 as U+FFFD */
        size_t bad, k = tok_utf8_next(p + i, len - i, &cp[m_], &bad);
        if (!k) cp[m_] = 0xfffd;
        i += k ? k : bad;
    }
    mt_status st = m->nfc ? tok_nfc(&cp, &m_) : MT_OK; /* (the normalizer) */
    unsigned char *cls = malloc(m_ + 1);
    char *bytes = malloc(4 * m_ + 1);
    size_t *off = malloc((m_ + 1) * sizeof *off), nb = 0;
    if (st == MT_OK && (!cls || !bytes || !off))
        st = MT_ERROR(MT_ERR_OOM, "encode of %zu bytes", len);
    for (size_t i = 0; st == MT_OK && i < m_; i++) { /* back to UTF-8, each code point's start */
        const uint32_t c = cp[i];
        off[i] = nb;
        if (c < 0x80) {
            bytes[nb++] = (char)c;
        } else if (c < 0x800) {
            bytes[nb++] = (char)(0xC0 | c >> 6), bytes[nb++] = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            bytes[nb++] = (char)(0xE0 | c >> 12), bytes[nb++] = (char)(0x80 | (c >> 6 & 0x3F));
            bytes[nb++] = (char)(0x80 | (c & 0x3F));
        } else {
            bytes[nb++] = (char)(0xF0 | c >> 18), bytes[nb++] = (char)(0x80 | (c >> 12 & 0x3F));
            bytes[nb++] = (char)(0x80 | (c >> 6 & 0x3F)), bytes[nb++] = (char)(0x80 | (c & 0x3F));
        }
        cls[i] = (unsigned char)tok_char_class(c);
    }
    if (st == MT_OK) off[m_] = nb;
    for (size_t i = 0; st == MT_OK && i < m_;) {
        size_t k = m->digits ? tok_cl100k_match(cp, cls, m_, i, m->digits)
                             : tok_gpt2_match(cp, cls, m_, i);
        st = bpe(m, bytes + off[i], off[i + k] - off[i], ids, n, cap);
        i += k;
    }
    free(cp), free(cls), free(bytes), free(off);
    return st;
}

mt_status hf_encode(hf_model *m, const char *text, size_t len, int32_t **ids, size_t *n,
                    size_t *cap) {
    MT_TRY(tok_push_ids(ids, n, cap, m->pre, (size_t)m->n_pre));
    size_t at = 0;
    for (size_t i = 0; i < len; i++) { /* added tokens: the longest one starting here */
        if (!m->add_first[(unsigned char)text[i]]) continue;
        int best = -1;
        for (int a = 0; a < m->n_add; a++)
            if (m->add[a].len <= len - i && memcmp(text + i, m->add[a].s, m->add[a].len) == 0 &&
                (best < 0 || m->add[a].len > m->add[best].len))
                best = a;
        if (best < 0) continue;
        MT_TRY(encode_span(m, text + at, i - at, ids, n, cap));
        MT_TRY(tok_push_ids(ids, n, cap, &m->add[best].id, 1));
        i += m->add[best].len - 1;
        at = i + 1;
    }
    MT_TRY(encode_span(m, text + at, len - at, ids, n, cap));
    return tok_push_ids(ids, n, cap, m->post, (size_t)m->n_post);
}

mt_status hf_decode(const hf_model *m, const int32_t *ids, size_t n_ids, char **text, size_t *len,
                    size_t *cap) {
    for (size_t i = 0; i < n_ids; i++) {
        MT_REQUIRE(ids[i] >= 0 && ids[i] < m->n_vocab && m->tok[ids[i]], MT_ERR_INVALID_ARG,
                   "id %d is not in the vocabulary", ids[i]);
        size_t k = m->tok_len[ids[i]];
        if (*len + k > *cap) {
            size_t c = *cap ? *cap : 256;
            while (c < *len + k)
                c *= 2;
            char *q = realloc(*text, c);
            MT_REQUIRE(q, MT_ERR_OOM, "text buffer of %zu", c);
            *text = q, *cap = c;
        }
        memcpy(*text + *len, m->tok[ids[i]], k);
        *len += k;
    }
    return MT_OK;
}

/* ---- loading ---- */

/* A vocabulary token's text in GPT-2's byte alphabet as bytes (malloc'd), or NULL. */
static char *token_bytes(const char *s, uint32_t *n) {
    size_t len = strlen(s), k = 0;
    char *out = malloc(len + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t bad, step = tok_utf8_next((const unsigned char *)s + i, len - i, &cp, &bad);
        int b = step ? tok_cp_to_byte(cp) : -1;
        if (b < 0) {
            free(out);
            return NULL;
        }
        out[k++] = (char)b;
        i += step;
    }
    *n = (uint32_t)k;
    return out;
}

static mt_status set_token(hf_model *m, int32_t id, char *bytes, uint32_t n, const char *file) {
    if (!bytes) return MT_ERROR(MT_ERR_OOM, "token");
    if (id < 0 || id >= m->n_vocab || m->tok[id]) {
        free(bytes);
        return MT_ERROR(MT_ERR_FORMAT, "%s: token id %d is out of range or given twice", file, id);
    }
    m->tok[id] = bytes, m->tok_len[id] = n;
    size_t h = tok_hash(bytes, n) & m->mask;
    while (m->slot[h])
        h = (h + 1) & m->mask;
    m->slot[h] = id + 1;
    return MT_OK;
}

static const char *type_of(json_t *j) {
    json_t *t = json_object_get(j, "type");
    return json_is_string(t) ? json_string_value(t) : "?";
}

static int is_true(json_t *j, const char *key) {
    return json_is_true(json_object_get(j, key));
}

/* The pre-tokenizer: GPT-2's ByteLevel regex, or Llama-3's Split then ByteLevel. */
static mt_status pre_tokenizer(hf_model *m, json_t *pt, const char *file) {
    const char *t = type_of(pt);
    if (strcmp(t, "ByteLevel") == 0) {
        MT_REQUIRE(!is_true(pt, "add_prefix_space") && is_true(pt, "use_regex"), MT_ERR_UNSUPPORTED,
                   "%s: a ByteLevel pre-tokenizer with add_prefix_space or without its regex",
                   file);
        return MT_OK;
    }
    json_t *seq = json_object_get(pt, "pretokenizers");
    MT_REQUIRE(strcmp(t, "Sequence") == 0 && json_array_size(seq) == 2, MT_ERR_UNSUPPORTED,
               "%s: pre-tokenizer %s (only GPT-2's ByteLevel and Llama-3's Split + ByteLevel)",
               file, t);
    json_t *split = json_array_get(seq, 0), *bl = json_array_get(seq, 1);
    json_t *re = json_object_get(json_object_get(split, "pattern"), "Regex");
    json_t *behavior = json_object_get(split, "behavior");
    const char *pat = json_is_string(re) ? json_string_value(re) : "(none)";
    const int digits = strcmp(pat, LLAMA3_PATTERN) == 0  ? 3
                       : strcmp(pat, QWEN2_PATTERN) == 0 ? 1
                                                         : 0;
    MT_REQUIRE(strcmp(type_of(split), "Split") == 0 && digits && json_is_string(behavior) &&
                   strcmp(json_string_value(behavior), "Isolated") == 0 &&
                   !is_true(split, "invert") && strcmp(type_of(bl), "ByteLevel") == 0 &&
                   !is_true(bl, "add_prefix_space") && !is_true(bl, "use_regex"),
               MT_ERR_UNSUPPORTED,
               "%s: a pre-tokenizer Sequence other than Llama-3's or Qwen2's (Split on their "
               "pattern, Isolated, then ByteLevel without regex); pattern %s",
               file, pat);
    m->digits = digits;
    return MT_OK;
}

/* The post-processor's template for one sequence (null, ByteLevel, TemplateProcessing, or a
 * Sequence of them). */
static mt_status post_processor(hf_model *m, json_t *pp, const char *file) {
    if (json_is_null(pp) || !pp) return MT_OK;
    const char *t = type_of(pp);
    if (strcmp(t, "ByteLevel") == 0) return MT_OK; /* (offsets only) */
    if (strcmp(t, "Sequence") == 0) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(pp, "processors"), i, p) {
            MT_TRY(post_processor(m, p, file));
        }
        return MT_OK;
    }
    MT_REQUIRE(strcmp(t, "TemplateProcessing") == 0, MT_ERR_UNSUPPORTED,
               "%s: post-processor %s (only TemplateProcessing and ByteLevel)", file, t);
    json_t *single = json_object_get(pp, "single"),
           *special = json_object_get(pp, "special_tokens");
    size_t i;
    json_t *item;
    int seen = 0;
    json_array_foreach(single, i, item) {
        if (json_object_get(item, "Sequence")) {
            seen = 1;
            continue;
        }
        json_t *key = json_object_get(json_object_get(item, "SpecialToken"), "id");
        json_t *sids = json_object_get(json_object_get(special, json_string_value(key)), "ids");
        MT_REQUIRE(json_is_string(key) && json_is_array(sids), MT_ERR_FORMAT,
                   "%s: TemplateProcessing item %zu has no special token ids", file, i);
        size_t j;
        json_t *v;
        json_array_foreach(sids, j, v) {
            int32_t **arr = seen ? &m->post : &m->pre;
            int *cnt = seen ? &m->n_post : &m->n_pre;
            int32_t *q = realloc(*arr, (size_t)(*cnt + 1) * sizeof *q);
            MT_REQUIRE(q, MT_ERR_OOM, "template");
            *arr = q;
            q[(*cnt)++] = (int32_t)json_integer_value(v);
        }
    }
    return MT_OK;
}

static mt_status load(hf_model *m, json_t *root, const char *file) {
    json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges"),
           *adds = json_object_get(root, "added_tokens");
    MT_REQUIRE(strcmp(type_of(model), "BPE") == 0 && json_is_object(vocab) && json_is_array(merges),
               MT_ERR_UNSUPPORTED, "%s: model %s (only byte-level BPE encodes here)", file,
               type_of(model));
    json_t *cont = json_object_get(model, "continuing_subword_prefix");
    json_t *suffix = json_object_get(model, "end_of_word_suffix");
    MT_REQUIRE(!is_true(model, "byte_fallback") &&
                   (!cont || json_is_null(cont) || !*json_string_value(cont)) &&
                   (!suffix || json_is_null(suffix) || !*json_string_value(suffix)),
               MT_ERR_UNSUPPORTED,
               "%s: BPE with byte_fallback, a continuing-subword prefix or an end-of-word suffix",
               file);
    json_t *norm = json_object_get(root, "normalizer");
    m->nfc = norm && strcmp(type_of(norm), "NFC") == 0;
    MT_REQUIRE(!norm || json_is_null(norm) || m->nfc, MT_ERR_UNSUPPORTED,
               "%s: normalizer %s (only none and NFC are supported)", file, type_of(norm));
    MT_TRY(pre_tokenizer(m, json_object_get(root, "pre_tokenizer"), file));
    MT_TRY(post_processor(m, json_object_get(root, "post_processor"), file));
    m->ignore_merges = is_true(model, "ignore_merges");
    /* ids: the vocabulary's and the added tokens' */
    const char *key;
    json_t *v;
    int64_t max_id = -1;
    json_object_foreach(vocab, key, v) {
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(adds, i, v) {
        if (json_integer_value(json_object_get(v, "id")) > max_id)
            max_id = json_integer_value(json_object_get(v, "id"));
    }
    MT_REQUIRE(max_id >= 0 && max_id < (1 << 30), MT_ERR_FORMAT, "%s: token ids up to %lld", file,
               (long long)max_id);
    m->n_vocab = (int32_t)max_id + 1;
    size_t cap = 16;
    while (cap < 2 * (size_t)m->n_vocab)
        cap *= 2;
    m->mask = cap - 1;
    m->tok = calloc((size_t)m->n_vocab, sizeof *m->tok);
    m->tok_len = calloc((size_t)m->n_vocab, sizeof *m->tok_len);
    m->slot = calloc(cap, sizeof *m->slot);
    MT_REQUIRE(m->tok && m->tok_len && m->slot, MT_ERR_OOM, "vocabulary of %d", m->n_vocab);
    json_object_foreach(vocab, key, v) {
        uint32_t n = 0;
        char *b = token_bytes(key, &n);
        MT_REQUIRE(b, MT_ERR_UNSUPPORTED,
                   "%s: token '%s' is not in the byte-level alphabet (not a byte-level BPE)", file,
                   key);
        MT_TRY(set_token(m, (int32_t)json_integer_value(v), b, n, file));
    }
    m->add = calloc(json_array_size(adds) + 1, sizeof *m->add);
    MT_REQUIRE(m->add, MT_ERR_OOM, "added tokens");
    json_array_foreach(adds, i, v) {
        const char *s = json_string_value(json_object_get(v, "content"));
        const int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        MT_REQUIRE(
            s && *s && !is_true(v, "lstrip") && !is_true(v, "rstrip") && !is_true(v, "single_word"),
            MT_ERR_UNSUPPORTED,
            "%s: added token %d (lstrip, rstrip and single_word are not supported)", file, id);
        added *a = &m->add[m->n_add++];
        a->len = strlen(s), a->id = id, a->s = strdup(s);
        MT_REQUIRE(a->s, MT_ERR_OOM, "added token");
        m->add_first[(unsigned char)s[0]] = 1;
        if (id < m->n_vocab && !m->tok[id]) {
            char *b = strdup(s);
            MT_TRY(set_token(m, id, b, (uint32_t)a->len, file));
        }
    }
    /* merges: "a b" or ["a", "b"]; the pair's tokens and their concatenation's */
    cap = 16;
    while (cap < 2 * json_array_size(merges) + 2)
        cap *= 2;
    m->mmask = cap - 1;
    m->mkey = calloc(cap, sizeof *m->mkey);
    m->mrank = malloc(cap * sizeof *m->mrank), m->mnew = malloc(cap * sizeof *m->mnew);
    MT_REQUIRE(m->mkey && m->mrank && m->mnew, MT_ERR_OOM, "merges");
    json_array_foreach(merges, i, v) {
        char *a = NULL, *b = NULL;
        if (json_is_string(v)) {
            const char *s = json_string_value(v), *sp = strchr(s, ' ');
            if (sp) a = strndup(s, (size_t)(sp - s)), b = strdup(sp + 1);
        } else if (json_array_size(v) == 2) {
            const char *x = json_string_value(json_array_get(v, 0));
            const char *y = json_string_value(json_array_get(v, 1));
            if (x && y) a = strdup(x), b = strdup(y);
        }
        uint32_t na = 0, nb = 0;
        char *ba = a ? token_bytes(a, &na) : NULL, *bb = b ? token_bytes(b, &nb) : NULL;
        free(a), free(b);
        char *ab = ba && bb ? malloc(na + nb + 1) : NULL;
        if (ab) memcpy(ab, ba, na), memcpy(ab + na, bb, nb);
        const int32_t l = ba ? vocab_id(m, ba, na) : -1, r = bb ? vocab_id(m, bb, nb) : -1;
        const int32_t id = ab ? vocab_id(m, ab, na + nb) : -1;
        free(ba), free(bb), free(ab);
        MT_REQUIRE(l >= 0 && r >= 0 && id >= 0, MT_ERR_FORMAT,
                   "%s: merge %zu's tokens or their concatenation are not in the vocabulary", file,
                   i);
        const uint64_t k = ((uint64_t)l << 32 | (uint32_t)r) + 1;
        size_t h = merge_slot(m, k);
        if (!m->mkey[h]) m->mkey[h] = k, m->mrank[h] = (int32_t)i, m->mnew[h] = id;
    }
    return MT_OK;
}

mt_status hf_model_load(const char *path, hf_model **out, int64_t *vocab_size, int64_t *eod) {
    *out = NULL;
    char dir[4096], file[4200];
    json_t *root;
    MT_TRY(hf_tokenizer_open(path, &root, file, sizeof file, dir, sizeof dir));
    mt_status st = hf_tokenizer_info_of(root, file, dir, vocab_size, eod);
    hf_model *m = NULL;
    if (st == MT_OK)
        st = (m = calloc(1, sizeof *m)) ? load(m, root, file) : MT_ERROR(MT_ERR_OOM, "tokenizer");
    json_decref(root);
    if (st != MT_OK) {
        hf_model_free(m);
        return st;
    }
    *out = m;
    return MT_OK;
}

void hf_model_free(hf_model *m) {
    if (!m) return;
    for (int32_t i = 0; m->tok && i < m->n_vocab; i++)
        free(m->tok[i]);
    for (int i = 0; i < m->n_add; i++)
        free(m->add[i].s);
    free(m->tok), free(m->tok_len), free(m->slot), free(m->mkey), free(m->mrank), free(m->mnew);
    free(m->add), free(m->pre), free(m->post);
    free(m);
}
