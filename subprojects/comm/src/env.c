/* Rank, world size and local rank from the launcher's environment (toolchain-notes §4.2): mpirun
 * (Open MPI, then MPICH/Hydra's PMI_*), torchrun, srun; nothing set: a world of one. */
#include <mt/comm.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mt_launcher_name(mt_launcher l) {
    switch (l) {
    case MT_LAUNCHER_NONE:
        return "none";
    case MT_LAUNCHER_MPI:
        return "mpirun";
    case MT_LAUNCHER_TORCHRUN:
        return "torchrun";
    case MT_LAUNCHER_SLURM:
        return "srun";
    }
    return "?";
}

/* Parses variable `name` as a non-negative int into *out; 0 if unset, -1 if malformed. */
static int env_int(const char *name, int *out) {
    const char *s = getenv(name);
    if (!s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno || v < 0 || v > INT_MAX) return -1;
    *out = (int)v;
    return 1;
}

typedef struct launcher_vars {
    mt_launcher launcher;
    const char *rank, *size, *local; /* local may be missing: then the rank is used */
} launcher_vars;

static const launcher_vars known[] = {
    { MT_LAUNCHER_MPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
      "OMPI_COMM_WORLD_LOCAL_RANK" },
    { MT_LAUNCHER_MPI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID" },
    { MT_LAUNCHER_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK" },
    { MT_LAUNCHER_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID" },
};

mt_status mt_comm_env_read(mt_comm_env *out) {
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    memset(out, 0, sizeof *out);
    out->world_size = 1;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        const launcher_vars *k = &known[i];
        int rank = -1, size = -1, local = -1;
        int hr = env_int(k->rank, &rank), hs = env_int(k->size, &size);
        int hl = env_int(k->local, &local);
        if (hr == 0 && hs == 0) continue;
        MT_REQUIRE(hr == 1 && hs == 1, MT_ERR_INVALID_ARG,
                   "%s: %s='%s' and %s='%s' must both be set to non-negative integers",
                   mt_launcher_name(k->launcher), k->rank, getenv(k->rank) ? getenv(k->rank) : "",
                   k->size, getenv(k->size) ? getenv(k->size) : "");
        MT_REQUIRE(hl >= 0, MT_ERR_INVALID_ARG, "%s: %s='%s' is not a non-negative integer",
                   mt_launcher_name(k->launcher), k->local, getenv(k->local));
        MT_REQUIRE(size >= 1 && rank < size, MT_ERR_INVALID_ARG, "%s: %s=%d is not below %s=%d",
                   mt_launcher_name(k->launcher), k->rank, rank, k->size, size);
        if (hl == 0) local = rank; /* one node assumed */
        MT_REQUIRE(local <= rank, MT_ERR_INVALID_ARG, "%s: %s=%d exceeds %s=%d",
                   mt_launcher_name(k->launcher), k->local, local, k->rank, rank);
        out->launcher = k->launcher;
        out->rank = rank;
        out->world_size = size;
        out->local_rank = local;
        if (k->launcher == MT_LAUNCHER_TORCHRUN) {
            const char *addr = getenv("MASTER_ADDR");
            int port = 0, hp = env_int("MASTER_PORT", &port);
            MT_REQUIRE(hp >= 0 && port < 65535, MT_ERR_INVALID_ARG,
                       "torchrun: MASTER_PORT='%s' is not a port number", getenv("MASTER_PORT"));
            MT_REQUIRE(size == 1 || (addr && *addr && hp == 1), MT_ERR_INVALID_ARG,
                       "torchrun: WORLD_SIZE=%d needs MASTER_ADDR and MASTER_PORT", size);
            MT_REQUIRE(!addr || strlen(addr) < sizeof out->master_addr, MT_ERR_INVALID_ARG,
                       "torchrun: MASTER_ADDR is too long");
            snprintf(out->master_addr, sizeof out->master_addr, "%s", addr ? addr : "");
            out->master_port = port;
        }
        return MT_OK;
    }
    return MT_OK;
}
