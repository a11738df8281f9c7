/* Unicode normalization form C (UAX #15) for the Hugging Face NFC normalizer: the canonical
 * decomposition (tables of gen_nfc.py, Hangul syllables algorithmic), the canonical ordering of
 * combining marks, then the canonical composition (the reference algorithm: a mark composes with
 * the last starter unless a mark of the same or a higher class, or a starter, lies between). */
#include <stdlib.h>

#include "data_impl.h"
#include "unicode_nfc.h"

enum { /* Hangul */
    S_BASE = 0xAC00,
    L_BASE = 0x1100,
    V_BASE = 0x1161,
    T_BASE = 0x11A7,
    L_COUNT = 19,
    V_COUNT = 21,
    T_COUNT = 28,
    N_COUNT = V_COUNT * T_COUNT,
    S_COUNT = L_COUNT * N_COUNT
};

/* Row of `key` in a table sorted by its first column(s), or -1. */
static long find(const uint32_t *t, size_t rows, size_t width, uint32_t k0, uint32_t k1, int two) {
    size_t lo = 0, hi = rows;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *r = t + mid * width;
        if (r[0] < k0 || (r[0] == k0 && two && r[1] < k1))
            lo = mid + 1;
        else if (r[0] > k0 || (two && r[1] > k1))
            hi = mid;
        else
            return (long)mid;
    }
    return -1;
}

static int ccc(uint32_t cp) {
    if (cp < 0x300) return 0;
    long r = find(&nfc_ccc[0][0], sizeof nfc_ccc / sizeof *nfc_ccc, 2, cp, 0, 0);
    return r < 0 ? 0 : (int)nfc_ccc[r][1];
}

typedef struct cbuf {
    uint32_t *p;
    size_t n, cap;
} cbuf;

static int put(cbuf *b, uint32_t cp) {
    if (b->n == b->cap) {
        size_t c = b->cap ? 2 * b->cap : 64;
        uint32_t *q = realloc(b->p, c * sizeof *q);
        if (!q) return 0;
        b->p = q, b->cap = c;
    }
    b->p[b->n++] = cp;
    return 1;
}

/* The full canonical decomposition of cp, appended. */
static int decompose(cbuf *b, uint32_t cp) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        const uint32_t s = cp - S_BASE, t = s % T_COUNT;
        return put(b, L_BASE + s / N_COUNT) && put(b, V_BASE + s % N_COUNT / T_COUNT) &&
               (t == 0 || put(b, T_BASE + t));
    }
    long r = cp < 0xC0
                 ? -1
                 : find(&nfc_decomp[0][0], sizeof nfc_decomp / sizeof *nfc_decomp, 3, cp, 0, 0);
    if (r < 0) return put(b, cp);
    return decompose(b, nfc_decomp[r][1]) && (!nfc_decomp[r][2] || decompose(b, nfc_decomp[r][2]));
}

/* The primary composite of a and b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
        b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    long r = find(&nfc_comp[0][0], sizeof nfc_comp / sizeof *nfc_comp, 3, a, b, 1);
    return r < 0 ? 0 : nfc_comp[r][2];
}

mt_status tok_nfc(uint32_t **cps, size_t *n) {
    size_t i = 0;
    while (i < *n && (*cps)[i] < 0x300) /* why: text below U+0300 is its own NFC (no marks) */
        i++;
    if (i == *n) return MT_OK;
    cbuf b = { 0 };
    for (size_t k = 0; k < *n; k++)
        if (!decompose(&b, (*cps)[k])) {
            free(b.p);
            return MT_ERROR(MT_ERR_OOM, "NFC of %zu code points", *n);
        }
    for (size_t k = 1; k < b.n; k++) { /* canonical order: marks stably by class */
        const uint32_t c = b.p[k];
        const int cc = ccc(c);
        size_t j = k;
        while (cc && j > 0 && ccc(b.p[j - 1]) > cc)
            b.p[j] = b.p[j - 1], j--;
        b.p[j] = c;
    }
    size_t starter = 0, out = b.n ? 1 : 0;
    int last = b.n && ccc(b.p[0]) ? 256 : 0; /* (a leading mark blocks) */
    for (size_t k = 1; k < b.n; k++) {
        const uint32_t c = b.p[k];
        const int cc = ccc(c);
        const uint32_t x = compose(b.p[starter], c);
        if (x && (last < cc || last == 0)) {
            b.p[starter] = x;
            continue;
        }
        if (cc == 0) starter = out;
        last = cc;
        b.p[out++] = c;
    }
    free(*cps);
    *cps = b.p, *n = out;
    return MT_OK;
}
