/* Save and load throughput (bytes_per_second) of one rank's 8 tensors, next to a plain
 * sequential write+fsync and read of the same number of bytes in the same directory (CPU only;
 * loads and plain reads both come from the page cache once warm). MT_BENCH_MIB sets the size. */
#include <mt/benchkit.h>
#include <mt/ckpt.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    NT = 8
};
static size_t bytes;
static char dir[64];
static float *data, *back;
static mt_tensor tens[NT];
static mt_ckpt_item items[NT];
static char names[NT][48];
static int64_t rows, cols = 1024;
static int64_t iter;

static void bench_save(mt_bench_state *st, void *arg) {
    mt_ckpt_writer_config cfg = MT_CKPT_WRITER_CONFIG_INIT;
    cfg.dir = dir;
    cfg.keep = 1;
    cfg.async = arg != NULL;
    mt_ckpt_writer *w;
    if (mt_ckpt_writer_create(&cfg, &w) != MT_OK) return mt_bench_error(st, mt_last_error());
    while (mt_bench_keep_running(st)) {
        if (mt_ckpt_save(w, ++iter, items, NT, NULL) != MT_OK || mt_ckpt_wait(w) != MT_OK)
            return mt_bench_error(st, mt_last_error());
    }
    mt_ckpt_writer_destroy(w);
    mt_bench_set_bytes(st, (int64_t)bytes);
}

/* arg: number of column blocks to read each tensor as (1: whole tensors). */
static void bench_load(mt_bench_state *st, void *arg) {
    int blocks = (int)(intptr_t)arg;
    while (mt_bench_keep_running(st)) {
        mt_ckpt *c;
        if (mt_ckpt_open(dir, MT_CKPT_ITER_LATEST, 0, &c) != MT_OK)
            return mt_bench_error(st, mt_last_error());
        float *p = back;
        for (int i = 0; i < NT; i++)
            for (int b = 0; b < blocks; b++) {
                int64_t off[2] = { 0, b * cols / blocks };
                mt_tensor t = mt_tensor_2d(p, MT_F32, rows, cols / blocks, MT_DEVICE_CPU);
                if (mt_ckpt_read(c, names[i], &t, off) != MT_OK)
                    return mt_bench_error(st, mt_last_error());
                p += rows * (cols / blocks);
            }
        mt_ckpt_close(c);
    }
    mt_bench_set_bytes(st, (int64_t)bytes);
}

static void bench_plain_write(mt_bench_state *st, void *arg) {
    (void)arg;
    char p[96], q[96];
    snprintf(p, sizeof p, "%s/plain.bin", dir);
    snprintf(q, sizeof q, "%s/plain.new", dir);
    while (mt_bench_keep_running(st)) { // why: a new file each time, as a checkpoint is
        int fd = open(q, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int ok = fd >= 0 && write(fd, data, bytes) == (ssize_t)bytes && fsync(fd) == 0;
        if (fd >= 0) close(fd);
        if (!ok || rename(q, p) != 0) return mt_bench_error(st, "plain write failed");
    }
    mt_bench_set_bytes(st, (int64_t)bytes);
}

static void bench_plain_read(mt_bench_state *st, void *arg) {
    (void)arg;
    char p[96];
    snprintf(p, sizeof p, "%s/plain.bin", dir);
    while (mt_bench_keep_running(st)) {
        int fd = open(p, O_RDONLY);
        int ok = fd >= 0 && read(fd, back, bytes) == (ssize_t)bytes;
        if (fd >= 0) close(fd);
        if (!ok) return mt_bench_error(st, "plain read failed (run plain_write first)");
    }
    mt_bench_set_bytes(st, (int64_t)bytes);
}

int main(int argc, char **argv) {
    const char *mib = getenv("MT_BENCH_MIB");
    bytes = (size_t)(mib ? atoi(mib) : 256) << 20;
    rows = (int64_t)(bytes / NT / sizeof(float) / (size_t)cols);
    bytes = (size_t)(rows * cols * NT) * sizeof(float);
    strcpy(dir, "/tmp/mt-ckpt-bench-XXXXXX");
    data = malloc(bytes);
    back = malloc(bytes);
    if (!mkdtemp(dir) || !data || !back) return 1;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        data[i] = (float)(i % 1000003);
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "decoder.layers.%d.mlp.linear_fc1.weight", i);
        tens[i] = mt_tensor_2d(data + (size_t)i * (size_t)(rows * cols), MT_F32, rows, cols,
                               MT_DEVICE_CPU);
        items[i] = (mt_ckpt_item){ names[i], &tens[i], NULL, NULL, 0 };
    }
    char name[96];
    int m = (int)(bytes >> 20);
    snprintf(name, sizeof name, "plain_write/cpu/%dMiB", m);
    mt_bench_register(name, bench_plain_write, NULL, MT_BENCH_REAL_TIME);
    snprintf(name, sizeof name, "ckpt_save/cpu/%dMiB", m);
    mt_bench_register(name, bench_save, NULL, MT_BENCH_REAL_TIME);
    snprintf(name, sizeof name, "ckpt_save_async/cpu/%dMiB", m);
    mt_bench_register(name, bench_save, (void *)1, MT_BENCH_REAL_TIME);
    snprintf(name, sizeof name, "plain_read/cpu/%dMiB", m);
    mt_bench_register(name, bench_plain_read, NULL, MT_BENCH_REAL_TIME);
    snprintf(name, sizeof name, "ckpt_load/cpu/%dMiB", m);
    mt_bench_register(name, bench_load, (void *)1, MT_BENCH_REAL_TIME);
    snprintf(name, sizeof name, "ckpt_load_reshard4/cpu/%dMiB", m);
    mt_bench_register(name, bench_load, (void *)4, MT_BENCH_REAL_TIME);
    int rc = mt_bench_main(argc, argv);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(data);
    free(back);
    return rc;
}
