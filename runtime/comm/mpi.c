// MPI bootstrap of the nccl backend (librt_mpi.a, built with mpicc): rt_mpi_run runs one
// rank per process for `mpirun -np N build/<name>/<name>` (or srun --mpi=pmix), on one
// node or many. MPI only carries the bootstrap: the world-size check, the local rank that
// picks the GPU (MPI_COMM_TYPE_SHARED), and the 128-byte NCCL unique id that rank 0 makes
// and broadcasts; every collective then goes through NCCL (rt_nccl_comm_init). Any
// failure aborts the whole MPI job (MPI_Abort), so no process is left waiting for a peer
// that gave up; a wrong world size returns 2 on every process instead.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "mpi_boot.h"

// ---- failures ---------------------------------------------------------------------------

// Prints "rt_mpi_run: rank R of N: WHAT; aborting ..." and aborts the job. Returns 1 if
// MPI_Abort ever returns.
static int abort_job(const rt_mpi_boot* b, const char* what) {
    fflush(stdout);
    fprintf(stderr, "rt_mpi_run: rank %d of %d: %s; aborting the MPI job so that no process "
                    "waits for this one\n", b->rank, b->size, what);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

// MPI_CHECK(b, call): `mpi.c:LINE: MPI_Xxx(...) failed: WHY`, then abort_job.
static int mpi_failed(const rt_mpi_boot* b, int line, const char* call, int rc) {
    char why[MPI_MAX_ERROR_STRING] = "unknown error", what[MPI_MAX_ERROR_STRING + 300];
    int len = 0;
    if (MPI_Error_string(rc, why, &len) != MPI_SUCCESS) snprintf(why, sizeof why, "error %d", rc);
    snprintf(what, sizeof what, "runtime/comm/mpi.c:%d: %s failed: %s", line, call, why);
    return abort_job(b, what);
}

#define MPI_CHECK(b, call)                                                      \
    do {                                                                        \
        int mpi_rc_ = (call);                                                   \
        if (mpi_rc_ != MPI_SUCCESS) return mpi_failed((b), __LINE__, #call, mpi_rc_); \
    } while (0)

// ---- bootstrap --------------------------------------------------------------------------

// Init, world-size check, local rank, id broadcast. Returns 0, 2 (wrong world size, on
// every process, MPI finalized if initialized here) or 1 (MPI_Init failed); other
// failures abort the job.
static int boot(int world, rt_mpi_make_id make_id, rt_mpi_boot* b) {
    memset(b, 0, sizeof *b);
    int inited = 0, finalized = 0;
    MPI_CHECK(b, MPI_Initialized(&inited));
    MPI_CHECK(b, MPI_Finalized(&finalized));
    if (finalized) {
        fprintf(stderr, "rt_mpi_run: MPI was already finalized in this process (MPI cannot start twice)\n");
        return 1;
    }
    if (!inited) {
        // Only this thread calls MPI (NCCL's own threads never do).
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            fprintf(stderr, "rt_mpi_run: MPI_Init_thread failed (hint: start the program with "
                            "mpirun -np N, from the MPI it was built with)\n");
            return 1;
        }
        b->initialized_here = 1;
        // Errors come back to MPI_CHECK, which names the call before aborting.
        MPI_CHECK(b, MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    }
    MPI_CHECK(b, MPI_Comm_rank(MPI_COMM_WORLD, &b->rank));
    MPI_CHECK(b, MPI_Comm_size(MPI_COMM_WORLD, &b->size));
    // Every process must agree on the world size, and it must be the process count.
    int mine[2] = {world, -world}, most[2];
    MPI_CHECK(b, MPI_Allreduce(mine, most, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (most[0] != -most[1] || world != b->size) {
        if (b->rank == 0 && most[0] != -most[1])
            fprintf(stderr, "rt_mpi_run: the %d processes disagree on the world size (from %d to %d)\n",
                    b->size, -most[1], most[0]);
        else if (b->rank == 0)
            fprintf(stderr, "rt_mpi_run: mpirun started %d processes but the run needs world size %d "
                            "(hint: mpirun -np %d, or change the world size to %d)\n",
                    b->size, world, world, b->size);
        if (b->initialized_here) MPI_CHECK(b, MPI_Finalize());
        return 2;
    }
    MPI_Comm node;
    MPI_CHECK(b, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, b->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(b, MPI_Comm_rank(node, &b->local_rank));
    MPI_CHECK(b, MPI_Comm_size(node, &b->local_size));
    MPI_CHECK(b, MPI_Comm_free(&node));
    if (b->rank == 0 && make_id(b->id, sizeof b->id) != 0)
        return abort_job(b, "could not make the NCCL unique id (see above)");
    MPI_CHECK(b, MPI_Bcast(b->id, RT_MPI_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD));
    return 0;
}

// The end of a run: a failure aborts the job, success finalizes (if initialized here).
static int finish(const rt_mpi_boot* b, int status, const char* what) {
    if (status) return abort_job(b, what);
    if (b->initialized_here) MPI_CHECK(b, MPI_Finalize());
    return 0;
}

// ---- entry points -----------------------------------------------------------------------

static int nccl_make_id(void* id, size_t bytes) { return rt_nccl_get_unique_id(id, bytes); }

int rt_mpi_run(int world, rt_rank_fn fn, void* arg) {
    if (world < 1 || !fn) {
        fprintf(stderr, "rt_mpi_run: %s (world size %d)\n", fn ? "invalid world size" : "fn is NULL", world);
        return 2;
    }
    rt_mpi_boot b;
    int rc = boot(world, nccl_make_id, &b);
    if (rc) return rc;
    int ndev = rt_nccl_device_count();
    if (ndev < 1) return abort_job(&b, ndev == 0 ? "no GPU is visible" : "CUDA is unusable (see above)");
    // One GPU per process on a node; with a GPU per process (CUDA_VISIBLE_DEVICES set by
    // the launcher) every process takes its only one.
    int device = b.local_rank % ndev;
    rt_comm* comm = NULL;
    if (rt_nccl_comm_init(world, b.id, sizeof b.id, b.rank, device, &comm) != 0)
        return abort_job(&b, "could not create the NCCL communicator (see above)");
    rt_nccl_world_own(comm);
    fn(comm, arg);
    int st = rt_nccl_world_finish(comm);
    return finish(&b, st, "its communicator failed (see the message above)");
}

int rt_mpi_boot_run(int world, rt_mpi_make_id make_id,
                    int (*fn)(const rt_mpi_boot* boot, void* arg), void* arg) {
    if (world < 1 || !make_id || !fn) {
        fprintf(stderr, "rt_mpi_boot_run: invalid world size %d or NULL function\n", world);
        return 2;
    }
    rt_mpi_boot b;
    int rc = boot(world, make_id, &b);
    if (rc) return rc;
    return finish(&b, fn(&b, arg), "the rank function failed");
}
