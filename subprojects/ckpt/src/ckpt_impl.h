/* Private helpers shared by the writer and the reader: paths, durable file operations, index
 * naming and the check that a tensor's slices tile it. */
#ifndef MT_CKPT_IMPL_H
#define MT_CKPT_IMPL_H

#include <mt/ckpt.h>

#define CK_INDEX  "index.json"
#define CK_FORMAT "mt-ckpt"

/* A box [off, off + shape) of a tensor with `ndim` dims. */
typedef struct ck_box {
    int64_t off[MT_MAX_DIMS], shape[MT_MAX_DIMS];
} ck_box;

/* snprintf into a PATH_MAX-sized buffer; MT_ERR_INVALID_ARG when it does not fit. */
mt_status ck_path(char *buf, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* fsync a file or directory by path. */
mt_status ck_fsync_path(const char *path);
/* Writes `len` bytes to `path` through path.tmp, fsync (if asked) and rename. */
mt_status ck_write_atomic(const char *path, const void *data, size_t len, int do_fsync);
/* Removes a directory and the plain files in it (our directories hold nothing else). */
mt_status ck_rmtree(const char *path);
/* Sorted (ascending) iterations of the complete iter_NNNNNNN directories in `dir`. */
mt_status ck_list_iterations(const char *dir, int64_t **iters, int *n);
/* MT_OK if `n` boxes lie inside `shape` and tile it exactly (no gap, no overlap); otherwise
 * MT_ERR_FORMAT naming `where` and `name`. */
mt_status ck_check_tiling(const char *where, const char *name, int ndim, const int64_t *shape,
                          const ck_box *boxes, int n);

#endif /* MT_CKPT_IMPL_H */
