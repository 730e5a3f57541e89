// librt_mpi_stub.a, for binaries built without MPI: rt_mpi_launched still reads the MPI
// launchers' variables, and rt_mpi_run says the binary has no MPI and returns 2.
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "rt_comm.h"

static const char* const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                                   "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE", "PALS_RANKID"};
#define NVARS (int)(sizeof vars / sizeof *vars)

static void never_called(rt_comm* comm, void* arg) {
    (void)comm, (void)arg;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < NVARS; i++) unsetenv(vars[i]);
    CHECK(rt_mpi_launched() == 0, "no MPI launcher variable set: rt_mpi_launched() is 0");
    int hits = 0;
    for (int i = 0; i < NVARS; i++) {
        setenv(vars[i], "2", 1);
        hits += rt_mpi_launched() == 1;
        unsetenv(vars[i]);
    }
    CHECK(hits == NVARS, "each of the %d launcher variables alone makes rt_mpi_launched() 1 (%d did)", NVARS, hits);
    setenv("PMI_SIZE", "", 1);
    CHECK(rt_mpi_launched() == 0, "an empty PMI_SIZE does not count");
    unsetenv("PMI_SIZE");
    setenv("SLURM_PROCID", "0", 1);
    CHECK(rt_mpi_launched() == 0, "SLURM_PROCID alone (a batch script) does not count");
    CHECK(rt_mpi_run(2, never_called, NULL) == 2, "the stub's rt_mpi_run returns 2 (the line on stderr says why)");
    return check_summary();
}
