// rt_mpi_launched: whether this process was started by an MPI launcher (mpirun, mpiexec,
// srun --mpi=pmix/pmi2), from the variables the launchers set. Plain C, no MPI needed:
// linked into both librt_mpi.a and librt_mpi_stub.a, so a binary built without MPI still
// notices mpirun and can say it cannot join it.
#include <stdlib.h>

#include "rt_comm.h"

// ---- detection --------------------------------------------------------------------------

// Open MPI, PMIx (Open MPI 5, srun --mpi=pmix), PMI-1/2 (MPICH/Hydra, Intel MPI,
// srun --mpi=pmi2), MVAPICH2, Cray PALS. Plain Slurm variables (SLURM_PROCID) are not
// used: a batch script sets them too, without any MPI launcher.
static const char* const launcher_vars[] = {
    "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_SIZE", "PALS_RANKID",
};

int rt_mpi_launched(void) {
    for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++) {
        const char* v = getenv(launcher_vars[i]);
        if (v && *v) return 1;
    }
    return 0;
}
