// The MPI half of rt_mpi_run, on CPU (no NCCL, no GPU), run by tests/runtime/run.sh as
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/runtime/test_mpi_boot [MODE]
// through rt_mpi_boot_run. Default mode (MPI started by the test): rt_mpi_launched sees
// mpirun, a wrong world size returns 2 on every process, and with the right one every
// process gets its rank, the size, its local rank on this node (all on one node here) and
// rank 0's 128-byte id, which rank 0 alone made; MPI is left to the caller. `--self N`:
// rt_mpi_boot_run starts and finalizes MPI itself (world N). `--abort N`: rank 1's
// function fails, which must abort the whole job (run.sh checks the exit status and the
// line). Rank 0 gathers what every process saw and prints the checks and the summary.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/comm/mpi_boot.h"
#include "check.h"
#include "rt_comm.h"

// ---- what every process reports ---------------------------------------------------------

typedef struct report {
    int rank, size, local_rank, local_size, made_id, initialized_here;
    unsigned char id[RT_MPI_ID_BYTES];
} report;

static int made_ids = 0;  // make_id calls in this process

static void pattern(unsigned char* id, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) id[i] = (unsigned char)(i * 7 + 3);
}

static int make_id(void* id, size_t bytes) {
    made_ids++;
    pattern(id, bytes);
    return 0;
}

static int called = 0;
static int my_rank = -1;  // as rt_mpi_boot_run said (MPI may be finalized when it is read)

static int never(const rt_mpi_boot* b, void* arg) {
    (void)b, (void)arg;
    called = 1;
    return 0;
}

// Gathers every process's view on rank 0 (the test itself may use MPI: it is running).
static int gather(const rt_mpi_boot* b, void* arg) {
    report mine, *all = arg;
    my_rank = b->rank;
    memset(&mine, 0, sizeof mine);
    mine.rank = b->rank;
    mine.size = b->size;
    mine.local_rank = b->local_rank;
    mine.local_size = b->local_size;
    mine.made_id = made_ids;
    mine.initialized_here = b->initialized_here;
    memcpy(mine.id, b->id, sizeof mine.id);
    return MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0,
                      MPI_COMM_WORLD) != MPI_SUCCESS;
}

// ---- modes where rt_mpi_boot_run starts MPI itself ---------------------------------------

static int fail_on_rank1(const rt_mpi_boot* b, void* arg) {
    (void)arg;
    return b->rank == 1;
}

static int self_init(int world) {
    report* all = calloc((size_t)world, sizeof *all);
    int rc = all ? rt_mpi_boot_run(world, make_id, gather, all) : 1;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (my_rank != 0) return rc != 0;  // rank 0 checks and prints
    int here = 0, ids_ok = 1;
    unsigned char want[RT_MPI_ID_BYTES];
    pattern(want, sizeof want);
    for (int p = 0; p < world; p++) {
        here += all[p].initialized_here;
        ids_ok &= all[p].rank == p && memcmp(all[p].id, want, sizeof want) == 0;
    }
    CHECK(rc == 0 && here == world && ids_ok && finalized,
          "rt_mpi_boot_run started MPI on %d of %d processes, ids intact %s, returned %d, MPI finalized %s",
          here, world, ids_ok ? "yes" : "NO", rc, finalized ? "yes" : "NO");
    free(all);
    return check_summary();
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "--self") == 0) return self_init(atoi(argv[2]));
    if (argc == 3 && strcmp(argv[1], "--abort") == 0) {
        int rc = rt_mpi_boot_run(atoi(argv[2]), make_id, fail_on_rank1, NULL);
        printf("rt_mpi_boot_run returned %d (rank 1 should have aborted the job)\n", rc);
        return 0;
    }
    // MPI is started here, so rt_mpi_boot_run neither initializes nor finalizes it and can
    // run twice.
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        printf("FAIL MPI_Init\n0 passed, 1 failed\n");
        return 1;
    }
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int launched = rt_mpi_launched();
    int bad_rc = rt_mpi_boot_run(size + 1, make_id, never, NULL);
    report* all = calloc((size_t)size, sizeof *all);
    int rc = all ? rt_mpi_boot_run(size, make_id, gather, all) : 1;
    int rcs[2] = {bad_rc, rc}, most[2], least[2];
    MPI_Reduce(rcs, most, 2, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(rcs, least, 2, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
    int launched_all = 0, called_any = 0;
    MPI_Reduce(&launched, &launched_all, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&called, &called_any, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    int status = 0;
    if (rank == 0) {
        CHECK(launched_all == 1, "rt_mpi_launched() is 1 on every process under mpirun");
        CHECK(most[0] == 2 && least[0] == 2 && !called_any,
              "world %d under -np %d: rt_mpi_boot_run returns 2 on every process (got %d..%d), "
              "the function never runs", size + 1, size, least[0], most[0]);
        CHECK(most[1] == 0 && least[1] == 0, "world %d under -np %d: rt_mpi_boot_run returns 0 on every process",
              size, size);
        int ranks_ok = 1, local_ok = 1, ids_ok = 1, made = 0, here = 0;
        unsigned char want[RT_MPI_ID_BYTES];
        pattern(want, sizeof want);
        for (int p = 0; p < size && all; p++) {
            ranks_ok &= all[p].rank == p && all[p].size == size;
            local_ok &= all[p].local_rank == p && all[p].local_size == size;  // one node
            ids_ok &= memcmp(all[p].id, want, sizeof want) == 0;
            made += all[p].made_id;
            here += all[p].initialized_here;
        }
        CHECK(ranks_ok, "%d processes: ranks 0..%d in order, every size %d", size, size - 1, size);
        CHECK(local_ok, "local ranks (MPI_COMM_TYPE_SHARED) 0..%d, local size %d (one node)", size - 1, size);
        CHECK(ids_ok && made == 1, "the %d-byte id made once on rank 0 (%d make_id calls) reached every process intact",
              RT_MPI_ID_BYTES, made);
        CHECK(here == 0, "MPI was initialized by the caller: rt_mpi_boot_run left it to the caller on every process");
        status = check_summary();
    }
    free(all);
    MPI_Finalize();
    return status;
}
