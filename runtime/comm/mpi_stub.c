// rt_mpi_run for binaries built without MPI (librt_mpi_stub.a): says so and returns 2.
// rt_mpi_launched (mpi_env.c) still detects mpirun, so a launcher can refuse clearly
// instead of running N unconnected copies of the program.
#include <stdio.h>

#include "rt_comm.h"

// ---- stub -------------------------------------------------------------------------------

int rt_mpi_run(int world, rt_rank_fn fn, void* arg) {
    (void)world, (void)fn, (void)arg;
    fflush(stdout);
    fprintf(stderr, "fsdpgen: this binary was built without MPI (install libopenmpi-dev, then rebuild)\n");
    return 2;
}
