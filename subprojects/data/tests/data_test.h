/* Helpers shared by the data tests: int64 goldens and whole files. */
#ifndef DATA_TEST_H
#define DATA_TEST_H

#include <mt/data.h>
#include <mt/testkit.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Golden .npy `name` as int64 (exact below 2^53); shape in *a (data freed). Dies when missing. */
static inline int64_t *golden_i64(const char *name, size_t *n, mt_npy *a) {
    mt_npy tmp;
    if (!a) a = &tmp;
    MT_CHECK(mt_npy_load(mt_test_golden_path(name), a));
    int64_t *x = malloc((a->count ? a->count : 1) * sizeof *x);
    MT_ASSERT(x);
    for (size_t i = 0; i < a->count; i++)
        x[i] = (int64_t)mt_npy_get(a, i);
    if (n) *n = a->count;
    free(a->data);
    a->data = NULL;
    return x;
}

/* Whole file into a malloc'd buffer (NULL if unreadable). */
static inline unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* 1 if two files have identical bytes; prints the first difference otherwise. */
static inline int same_file(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    unsigned char *x = slurp(a, &la), *y = slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    if (!same && x && y) {
        size_t i = 0;
        while (i < la && i < lb && x[i] == y[i])
            i++;
        fprintf(stderr, "  %s (%zu B) and %s (%zu B) differ at byte %zu\n", a, la, b, lb, i);
    }
    free(x);
    free(y);
    return same;
}

#endif /* DATA_TEST_H */
