/* Paths, durable writes (write, fsync, rename, fsync the directory), directory listing and the
 * tiling check used on both save and load. */
#include "ckpt_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

mt_status ck_path(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    MT_REQUIRE(k >= 0 && (size_t)k < len, MT_ERR_INVALID_ARG, "path too long: %s", buf);
    return MT_OK;
}

mt_status ck_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    MT_REQUIRE(fd >= 0, MT_ERR_IO, "cannot open %s for fsync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    MT_REQUIRE(rc == 0, MT_ERR_IO, "fsync %s: %s", path, strerror(e));
    return MT_OK;
}

static mt_status parent_dir(const char *path, char *buf, size_t len) {
    MT_TRY(ck_path(buf, len, "%s", path));
    char *s = strrchr(buf, '/');
    if (!s) return ck_path(buf, len, ".");
    if (s == buf)
        s[1] = 0;
    else
        *s = 0;
    return MT_OK;
}

mt_status ck_write_atomic(const char *path, const void *data, size_t len, int do_fsync) {
    char tmp[4096], dir[4096];
    MT_TRY(ck_path(tmp, sizeof tmp, "%s.tmp", path));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    MT_REQUIRE(fd >= 0, MT_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t k = write(fd, p, left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            close(fd);
            return MT_ERROR(MT_ERR_IO, "write %s: %s", tmp, strerror(e));
        }
        p += k;
        left -= (size_t)k;
    }
    if (do_fsync && fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return MT_ERROR(MT_ERR_IO, "fsync %s: %s", tmp, strerror(e));
    }
    MT_REQUIRE(close(fd) == 0, MT_ERR_IO, "close %s: %s", tmp, strerror(errno));
    MT_REQUIRE(rename(tmp, path) == 0, MT_ERR_IO, "rename %s -> %s: %s", tmp, path,
               strerror(errno));
    if (do_fsync) {
        MT_TRY(parent_dir(path, dir, sizeof dir));
        MT_TRY(ck_fsync_path(dir));
    }
    return MT_OK;
}

mt_status ck_rmtree(const char *path) {
    DIR *d = opendir(path);
    if (!d && errno == ENOENT) return MT_OK;
    MT_REQUIRE(d, MT_ERR_IO, "cannot open directory %s: %s", path, strerror(errno));
    struct dirent *e;
    char p[4096];
    mt_status st = MT_OK;
    while (st == MT_OK && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        st = ck_path(p, sizeof p, "%s/%s", path, e->d_name);
        if (st == MT_OK && unlink(p) != 0)
            st = MT_ERROR(MT_ERR_IO, "cannot remove %s: %s", p, strerror(errno));
    }
    closedir(d);
    MT_TRY(st);
    MT_REQUIRE(rmdir(path) == 0, MT_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    return MT_OK;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

mt_status ck_list_iterations(const char *dir, int64_t **iters, int *n) {
    *iters = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    MT_REQUIRE(d, MT_ERR_IO, "cannot open directory %s: %s", dir, strerror(errno));
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *s = e->d_name;
        if (strncmp(s, "iter_", 5) != 0 || strlen(s) != 12) continue; // why: skips .tmp/.old
        int64_t v = 0;
        int ok = 1;
        for (int i = 5; i < 12; i++) {
            if (s[i] < '0' || s[i] > '9') ok = 0;
            v = v * 10 + (s[i] - '0');
        }
        if (!ok) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *g = realloc(*iters, sizeof(int64_t) * (size_t)cap);
            if (!g) {
                closedir(d);
                free(*iters);
                *iters = NULL;
                return MT_ERROR(MT_ERR_OOM, "iteration list");
            }
            *iters = g;
        }
        (*iters)[(*n)++] = v;
    }
    closedir(d);
    if (*n) qsort(*iters, (size_t)*n, sizeof(int64_t), cmp_i64);
    return MT_OK;
}

mt_status ck_check_tiling(const char *where, const char *name, int ndim, const int64_t *shape,
                          const ck_box *boxes, int n) {
    int64_t total = 1, sum = 0;
    for (int d = 0; d < ndim; d++)
        total *= shape[d];
    for (int i = 0; i < n; i++) {
        int64_t vol = 1;
        for (int d = 0; d < ndim; d++) {
            MT_REQUIRE(boxes[i].off[d] >= 0 && boxes[i].shape[d] >= 0 &&
                           boxes[i].off[d] + boxes[i].shape[d] <= shape[d],
                       MT_ERR_FORMAT,
                       "%s: tensor '%s': slice %d dim %d [%lld, +%lld) lies outside shape %lld",
                       where, name, i, d, (long long)boxes[i].off[d], (long long)boxes[i].shape[d],
                       (long long)shape[d]);
            vol *= boxes[i].shape[d];
        }
        sum += vol;
        for (int j = 0; j < i && vol > 0; j++) {
            int overlap = 1;
            for (int d = 0; d < ndim && overlap; d++)
                overlap = boxes[i].off[d] < boxes[j].off[d] + boxes[j].shape[d] &&
                          boxes[j].off[d] < boxes[i].off[d] + boxes[i].shape[d];
            MT_REQUIRE(!overlap, MT_ERR_FORMAT, "%s: tensor '%s': slices %d and %d overlap", where,
                       name, j, i);
        }
    }
    // why: disjoint boxes inside the tensor whose volumes add up to it must cover it
    MT_REQUIRE(sum == total, MT_ERR_FORMAT,
               "%s: tensor '%s': slices hold %lld of %lld elements (a rank's slice is missing)",
               where, name, (long long)sum, (long long)total);
    return MT_OK;
}
