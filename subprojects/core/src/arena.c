/* Bump arenas: one allocation per (device, lifetime), carved into aligned views. */
#include <mt/core.h>

#include <stdlib.h>

struct mt_arena {
    mt_device device;
    char *base;
    size_t capacity, used;
};

mt_status mt_arena_create(mt_device device, size_t capacity, mt_arena **out) {
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    mt_arena *a = calloc(1, sizeof *a);
    MT_REQUIRE(a, MT_ERR_OOM, "arena header");
    a->device = device;
    a->capacity = capacity;
    size_t bytes = capacity ? capacity : 1;
    if (mt_device_is_cuda(device)) {
        mt_status st = mt_device_set(device);
        if (st == MT_OK) st = mt_device_malloc((void **)&a->base, bytes);
        if (st != MT_OK) {
            free(a);
            return st;
        }
    } else {
        bytes = (bytes + MT_ARENA_ALIGN - 1) / MT_ARENA_ALIGN * MT_ARENA_ALIGN;
        a->base = aligned_alloc(MT_ARENA_ALIGN, bytes);
        if (!a->base) {
            free(a);
            return MT_ERROR(MT_ERR_OOM, "host arena of %zu bytes", capacity);
        }
    }
    *out = a;
    return MT_OK;
}

void mt_arena_destroy(mt_arena *a) {
    if (!a) return;
    if (mt_device_is_cuda(a->device))
        mt_device_free(a->base);
    else
        free(a->base);
    free(a);
}

mt_status mt_arena_alloc(mt_arena *a, size_t bytes, void **out) {
    MT_REQUIRE(a && out, MT_ERR_INVALID_ARG, "NULL arena or out");
    size_t start = (a->used + MT_ARENA_ALIGN - 1) / MT_ARENA_ALIGN * MT_ARENA_ALIGN;
    MT_REQUIRE(start <= a->capacity && bytes <= a->capacity - start, MT_ERR_OOM,
               "arena full: asked %zu bytes, %zu of %zu used", bytes, a->used, a->capacity);
    *out = a->base + start;
    a->used = start + bytes;
    return MT_OK;
}

void mt_arena_reset(mt_arena *a) {
    if (a) a->used = 0;
}

size_t mt_arena_used(const mt_arena *a) {
    return a->used;
}

size_t mt_arena_capacity(const mt_arena *a) {
    return a->capacity;
}

mt_device mt_arena_device(const mt_arena *a) {
    return a->device;
}
