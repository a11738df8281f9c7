/* mt-merge-datasets: Megatron's tools/merge_datasets.py. Every PREFIX.bin/PREFIX.idx pair in the
 * --input directory, in sorted name order, appended (IndexedDatasetBuilder.add_index) into
 * <output-prefix>.bin/.idx with the first one's dtype; byte-identical to megatron-core's. A file
 * without its pair, a dtype that differs or an unreadable index is an error that names the file,
 * before the output is finalized. */
#include <mt/data.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void die(const char *msg, const char *arg) {
    fprintf(stderr, "mt-merge-datasets: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    exit(2);
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    const char *input = NULL, *output = NULL;
    int multimodal = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--input") == 0 && i + 1 < argc)
            input = argv[++i];
        else if (strcmp(argv[i], "--output-prefix") == 0 && i + 1 < argc)
            output = argv[++i];
        else if (strcmp(argv[i], "--multimodal") == 0)
            multimodal = 1;
        else
            die("usage: mt-merge-datasets --input DIR --output-prefix PREFIX [--multimodal]; "
                "unknown or incomplete flag",
                argv[i]);
    }
    if (!input || !output) die("--input and --output-prefix are required", NULL);
    DIR *d = opendir(input);
    if (!d) die("cannot read the --input directory", input);
    char **prefix = NULL, path[8192];
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) { /* the prefixes of the .bin and .idx files */
        const char *dot = strrchr(e->d_name, '.');
        snprintf(path, sizeof path, "%s/%s", input, e->d_name);
        if (!dot || !is_file(path)) continue;
        const int bin = strcmp(dot, ".bin") == 0, idx = strcmp(dot, ".idx") == 0;
        if (!bin && !idx) continue;
        snprintf(path, sizeof path, "%s/%.*s%s", input, (int)(dot - e->d_name), e->d_name,
                 bin ? ".idx" : ".bin");
        if (!is_file(path)) die(bin ? "no .idx file for" : "no .bin file for", path);
        if (idx) continue; /* (each pair once: by its .bin) */
        if (n == cap && !(prefix = realloc(prefix, (cap = cap ? 2 * cap : 16) * sizeof *prefix)))
            die("out of memory", NULL);
        snprintf(path, sizeof path, "%s/%.*s", input, (int)(dot - e->d_name), e->d_name);
        if (!(prefix[n++] = strdup(path))) die("out of memory", NULL);
    }
    closedir(d);
    if (n == 0) die("no .bin/.idx pairs in", input);
    qsort(prefix, n, sizeof *prefix, by_name);
    mt_data_indexed *first;
    if (mt_data_indexed_open(prefix[0], multimodal, &first) != MT_OK) die(mt_last_error(), NULL);
    const mt_data_dtype dtype = mt_data_indexed_dtype(first);
    mt_data_indexed_close(first);
    mt_data_writer *w;
    snprintf(path, sizeof path, "%s.bin", output);
    if (mt_data_writer_create(path, dtype, &w) != MT_OK) die(mt_last_error(), NULL);
    for (size_t i = 0; i < n; i++) {
        if (mt_data_writer_add_index(w, prefix[i]) != MT_OK) die(mt_last_error(), NULL);
        fprintf(stderr, "merged %s\n", prefix[i]);
        free(prefix[i]);
    }
    snprintf(path, sizeof path, "%s.idx", output);
    if (mt_data_writer_finalize(w, path, multimodal) != MT_OK) die(mt_last_error(), NULL);
    mt_data_writer_destroy(w);
    free(prefix);
    fprintf(stderr, "Done: %zu datasets into %s.bin/.idx\n", n, output);
    return 0;
}
