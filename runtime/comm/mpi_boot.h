// Private: the MPI half of rt_mpi_run (runtime/comm/mpi.c), exposed so that
// tests/runtime/test_mpi_boot.c can check it on CPU under mpirun, without NCCL or a GPU.
#ifndef RT_COMM_MPI_BOOT_H
#define RT_COMM_MPI_BOOT_H

#include <stddef.h>

#define RT_MPI_ID_BYTES 128  // sizeof(ncclUniqueId)

typedef struct rt_mpi_boot {
    int rank, size;              // in MPI_COMM_WORLD
    int local_rank, local_size;  // among the processes of this node (MPI_COMM_TYPE_SHARED)
    int initialized_here;        // rt_mpi_* called MPI_Init, so it calls MPI_Finalize
    unsigned char id[RT_MPI_ID_BYTES];  // made by rank 0, broadcast to every process
} rt_mpi_boot;

// Makes the id on rank 0 (rt_nccl_get_unique_id in rt_mpi_run). Returns 0 on success.
typedef int (*rt_mpi_make_id)(void* id, size_t bytes);

// rt_mpi_run with the NCCL part replaced: MPI_Init (unless already initialized), the
// world-size check (returns 2 on every process), the local rank, the id made on rank 0
// and broadcast, then fn(&boot, arg) on every process. A non-zero fn result (or a failed
// MPI/id step) aborts the MPI job; else MPI_Finalize (if initialized here) and 0.
int rt_mpi_boot_run(int world, rt_mpi_make_id make_id,
                    int (*fn)(const rt_mpi_boot* boot, void* arg), void* arg);

#endif
