/* The launcher environment: each launcher's variables, a world of one without any, and clear
 * errors naming the variables for malformed or inconsistent values. */
#include <mt/comm.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

static const char *all_vars[] = {
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof all_vars / sizeof *all_vars; i++)
        unsetenv(all_vars[i]);
}

static void expect_env(mt_launcher l, int rank, int size, int local) {
    mt_comm_env e;
    MT_EXPECT_STATUS(mt_comm_env_read(&e), MT_OK);
    MT_EXPECT(e.launcher == l && e.rank == rank && e.world_size == size && e.local_rank == local,
              "%s: got %s rank %d of %d local %d, want rank %d of %d local %d", mt_launcher_name(l),
              mt_launcher_name(e.launcher), e.rank, e.world_size, e.local_rank, rank, size, local);
}

static void expect_bad(const char *var_in_message) {
    mt_comm_env e;
    MT_EXPECT_STATUS(mt_comm_env_read(&e), MT_ERR_INVALID_ARG);
    MT_EXPECT(strstr(mt_last_error(), var_in_message), "error names %s: %s", var_in_message,
              mt_last_error());
}

int main(void) {
    clear_env();
    expect_env(MT_LAUNCHER_NONE, 0, 1, 0);

    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("RANK", "0", 1); /* mpirun wins over a stray torchrun variable */
    setenv("WORLD_SIZE", "2", 1);
    expect_env(MT_LAUNCHER_MPI, 3, 8, 1);
    setenv("OMPI_COMM_WORLD_RANK", "8", 1);
    expect_bad("OMPI_COMM_WORLD_SIZE");
    setenv("OMPI_COMM_WORLD_RANK", "x1", 1);
    expect_bad("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    expect_bad("OMPI_COMM_WORLD_SIZE");

    clear_env();
    setenv("PMI_RANK", "2", 1);
    setenv("PMI_SIZE", "4", 1);
    expect_env(MT_LAUNCHER_MPI, 2, 4, 2); /* no MPI_LOCALRANKID: one node */

    clear_env();
    setenv("RANK", "5", 1);
    setenv("WORLD_SIZE", "6", 1);
    setenv("LOCAL_RANK", "1", 1);
    expect_bad("MASTER_ADDR");
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    expect_env(MT_LAUNCHER_TORCHRUN, 5, 6, 1);
    mt_comm_env e;
    MT_CHECK(mt_comm_env_read(&e));
    MT_EXPECT(strcmp(e.master_addr, "10.0.0.1") == 0 && e.master_port == 29500, "master %s:%d",
              e.master_addr, e.master_port);
    setenv("LOCAL_RANK", "-1", 1);
    expect_bad("LOCAL_RANK");
    setenv("LOCAL_RANK", "6", 1);
    expect_bad("LOCAL_RANK");
    setenv("LOCAL_RANK", "0", 1);
    setenv("MASTER_PORT", "http", 1);
    expect_bad("MASTER_PORT");

    clear_env();
    setenv("SLURM_PROCID", "7", 1);
    setenv("SLURM_NTASKS", "16", 1);
    setenv("SLURM_LOCALID", "3", 1);
    expect_env(MT_LAUNCHER_SLURM, 7, 16, 3);
    setenv("SLURM_NTASKS", "0", 1);
    expect_bad("SLURM_NTASKS");

    clear_env();
    return mt_test_result();
}
