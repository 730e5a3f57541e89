// Communicator interface: the collectives FSDP needs (all-gather, reduce-scatter,
// all-reduce, broadcast, barrier) and communicator splitting, behind one API with three
// backends:
//   threads     ranks are threads of one process; collectives go through shared memory and
//               block on futexes (no busy-waiting), each rank doing its own slice of the
//               work (librt_core.a).
//   nccl        the same calls over NCCL, one GPU per rank: one thread per GPU in one
//               process (rt_nccl_run), or one process per GPU started by mpirun/srun
//               (rt_mpi_run, librt_mpi.a) (librt_nccl.a; needs CUDA).
//   cuda_local  N ranks as threads of one process sharing ONE GPU (rt_cuda_local_run,
//               librt_cuda_local.a), to test the multi-rank schedule on a single-GPU
//               machine: the threads backend's rendezvous on the host, data moved by
//               stream-ordered copies and kernels on the GPU.
//
// Semantics shared by the backends:
// - Every call is collective over the communicator: all its ranks make the same calls in
//   the same order with the same count, dtype and reduction.
// - `stream` is an opaque cudaStream_t for the nccl and cuda_local backends (NULL = the
//   legacy default stream; the call is enqueued and returns before the data moves). The
//   threads backend ignores it and completes the collective before returning.
// - Buffers are host memory (threads) or device memory (nccl, cuda_local);
//   rt_comm_buffer_* allocate and move data where the backend wants it, so callers can
//   stay backend-agnostic.
// - Reductions (threads and cuda_local backends): every element is accumulated in fp32 in
//   rank order 0..n-1 and rounded once to the buffer's dtype, so bf16/fp16 results are the
//   correctly rounded fp32 sums and the two backends give the same bits (NaN results are
//   NaN in both; their payload and sign may differ). NCCL itself accumulates in the buffer
//   type, so its results may differ by a rounding step. AVG is a pre-multiplied sum by 1/n
//   (as NCCL does for floating types); PREMUL_SUM multiplies each input by the fp32 factor
//   before summing (ncclRedOpCreatePreMulSum). Reductions support fp32, bf16 and fp16.
// - Errors: calls return RT_OK (0) or a negative rt_status. A failed collective poisons
//   its communicator: the rank that detects it prints one line to stderr naming the
//   operation, the communicator and the ranks at fault, every rank's pending and later
//   calls on that communicator return the same status, and rt_comm_last_error() returns
//   the line. The launchers then return non-zero.
// - A rank that never joins a collective is reported after the timeout (default 60 s,
//   env RT_COMM_TIMEOUT_MS, or rt_comm_set_timeout_ms), or at once when that rank's
//   function has already returned (threads and cuda_local). The nccl backend uses
//   non-blocking communicators: creation, split and the enqueue are bounded by the
//   timeout, and an enqueued collective that has not completed on the GPU by its deadline
//   (enqueue time + timeout) is reported by the next call on that handle that checks it
//   (every call checks without waiting; rt_comm_sync, rt_comm_barrier and the buffer
//   copies wait), after which the communicator is aborted (ncclCommAbort). NCCL cannot
//   say which ranks are missing, so its message says that some of the other ranks never
//   joined.
// - CUDA graphs. nccl: collectives may be captured into a CUDA graph (cudaStreamIsCapturing
//   is checked on every call; capture in cudaStreamCaptureModeThreadLocal when the ranks
//   are threads, as with rt_nccl_run); a captured collective is not tracked, so timeouts
//   are NOT enforced inside a replayed graph (a missing rank hangs the replay), and
//   rt_comm_sync / rt_comm_barrier on a capturing stream return RT_ERR_ARG with a message
//   (they would have to wait) and leave the communicator usable. cuda_local: NOT
//   capturable (its ranks wait on each other's CUDA events across threads); a collective
//   (barrier included) on a capturing stream fails the communicator with RT_ERR_ARG,
//   rt_comm_sync returns RT_ERR_ARG. The step backend turns graphs off in local mode.
#ifndef RT_COMM_H
#define RT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "rt_dtype.h"

// ---- status -----------------------------------------------------------------------------

typedef enum rt_status {
    RT_OK = 0,
    RT_ERR_ARG = -1,       // bad argument on some rank (NULL, negative count, bad root, ...)
    RT_ERR_MISMATCH = -2,  // ranks disagree on the operation, count, dtype or reduction
    RT_ERR_TIMEOUT = -3,   // some ranks did not join within the timeout (or had exited)
    RT_ERR_ABORTED = -4,   // a rank called rt_comm_abort
    RT_ERR_BACKEND = -5,   // the backend (NCCL/CUDA/system) failed
    RT_ERR_NOMEM = -6,
} rt_status;

// "ok", "bad argument", "mismatch", "timeout", "aborted", "backend error", "out of memory".
const char* rt_status_name(int status);

// ---- reductions -------------------------------------------------------------------------

typedef enum rt_red_kind {
    RT_RED_SUM = 0,
    RT_RED_AVG = 1,         // sum / n, computed as a pre-multiplied sum by 1/n
    RT_RED_PREMUL_SUM = 2,  // sum of (input * factor)
} rt_red_kind;

typedef struct rt_redop {
    rt_red_kind kind;
    double factor;  // used by RT_RED_PREMUL_SUM only (rounded to fp32 when applied)
} rt_redop;

static inline rt_redop rt_red_sum(void) { return (rt_redop){RT_RED_SUM, 1.0}; }
static inline rt_redop rt_red_avg(void) { return (rt_redop){RT_RED_AVG, 1.0}; }
static inline rt_redop rt_red_premul_sum(double factor) {
    return (rt_redop){RT_RED_PREMUL_SUM, factor};
}
// "sum", "avg", "premul_sum(0.25)" into buf. Returns buf.
char* rt_redop_str(rt_redop op, char* buf, size_t cap);

// ---- communicator -----------------------------------------------------------------------

typedef struct rt_comm rt_comm;

int rt_comm_rank(const rt_comm* comm);  // -1 for NULL
int rt_comm_size(const rt_comm* comm);  // -1 for NULL
const char* rt_comm_backend(const rt_comm* comm);  // "threads", "nccl" or "cuda_local"
// A readable name: "world", "world/split(color 2)", ... (for messages).
const char* rt_comm_name(const rt_comm* comm);

// Time a rank waits for its peers in one collective before failing it (nccl: from the
// collective's enqueue to its completion on the GPU); 0 or negative restores the default.
// Per rank handle; inherited by communicators split from it.
void rt_comm_set_timeout_ms(rt_comm* comm, int64_t ms);
int64_t rt_comm_timeout_ms(const rt_comm* comm);
// The default: RT_COMM_TIMEOUT_MS from the environment if set to a positive integer,
// else 60000.
int64_t rt_comm_default_timeout_ms(void);

// The one-line message of this rank's last failure ("" if none).
const char* rt_comm_last_error(const rt_comm* comm);

// Fails the communicator on purpose (e.g. this rank hit an error of its own): peers
// blocked in or entering collectives on it return RT_ERR_ABORTED instead of waiting for
// the timeout. Returns RT_ERR_ABORTED.
int rt_comm_abort(rt_comm* comm, const char* reason);

// Releases this rank's handle of a communicator made by rt_comm_split or
// rt_nccl_comm_init. NULL and the world handles rt_threads_run / rt_nccl_run pass to the
// rank function (the launcher frees those) are ignored.
void rt_comm_free(rt_comm* comm);

// ---- collectives ------------------------------------------------------------------------

// All-gather: recvbuf (sendcount * size elements) receives every rank's sendbuf in rank
// order. In-place when sendbuf == recvbuf + rank * sendcount * elemsize.
int rt_comm_all_gather(rt_comm* comm, const void* sendbuf, void* recvbuf, int64_t sendcount,
                       rt_dtype dtype, void* stream);

// Reduce-scatter: sendbuf holds size blocks of recvcount elements; rank r receives the
// reduction of every rank's block r. In-place when recvbuf == sendbuf + rank * recvcount.
int rt_comm_reduce_scatter(rt_comm* comm, const void* sendbuf, void* recvbuf, int64_t recvcount,
                           rt_dtype dtype, rt_redop op, void* stream);

// All-reduce of count elements (sendbuf == recvbuf allowed).
int rt_comm_all_reduce(rt_comm* comm, const void* sendbuf, void* recvbuf, int64_t count,
                       rt_dtype dtype, rt_redop op, void* stream);

// Broadcast count elements from root's sendbuf into every rank's recvbuf (sendbuf is
// read on root only; root may pass sendbuf == recvbuf).
int rt_comm_broadcast(rt_comm* comm, const void* sendbuf, void* recvbuf, int64_t count,
                      rt_dtype dtype, int root, void* stream);

// flags[0..n) := whether every rank's flags[i] is non-zero (1 or 0 on every rank): a
// decision each rank makes alone (which attention kernels run, timed on its own GPU) made
// the same on all. Collective over comm; stream as rt_comm_sync's; n may be 0.
int rt_comm_all_true(rt_comm* comm, int* flags, int n, void* stream);

// Returns once every rank has entered (nccl: enqueues a tiny all-reduce on stream and
// waits for it; cuda_local: also waits until every rank's work enqueued before it on the
// GPU is done).
int rt_comm_barrier(rt_comm* comm, void* stream);

// ---- sub-communicators ------------------------------------------------------------------

// Like MPI_Comm_split: ranks passing the same color form a new communicator, ordered by
// key, then by parent rank. color RT_COMM_SPLIT_NONE (-1) joins no group (*out = NULL);
// any other negative color is RT_ERR_ARG. Collective over parent.
#define RT_COMM_SPLIT_NONE (-1)
int rt_comm_split(rt_comm* parent, int color, int key, rt_comm** out);

// ---- buffers where the backend wants them -----------------------------------------------

// Host memory (threads) or device memory on this rank's GPU (nccl, cuda_local). NULL on
// failure (cuda_local: with a line naming cudaMalloc on stderr and in last_error).
void* rt_comm_buffer_alloc(rt_comm* comm, size_t bytes);
void rt_comm_buffer_free(rt_comm* comm, void* buf);
// Copies between host memory and a backend buffer (synchronous; nccl and cuda_local first
// wait for this rank's collectives on this communicator). Return 0 or an rt_status.
int rt_comm_buffer_write(rt_comm* comm, void* dst, const void* host_src, size_t bytes);
int rt_comm_buffer_read(rt_comm* comm, void* host_dst, const void* src, size_t bytes);
// Waits until everything enqueued on stream (and this rank's collectives on this
// communicator) finished (no-op for threads).
int rt_comm_sync(rt_comm* comm, void* stream);

// ---- launchers --------------------------------------------------------------------------

typedef void (*rt_rank_fn)(rt_comm* comm, void* arg);

// Runs fn on `world` threads, each with its rank's world communicator (world >= 1; at
// least 1024 ranks are supported). Returns 0 when every rank returned and no communicator
// failed, else non-zero (1). world < 1 or a NULL fn: prints an error, returns 2.
int rt_threads_run(int world, rt_rank_fn fn, void* arg);

// nccl backend (librt_nccl.a): one thread per GPU, rank r on device r, communicators made
// non-blocking (ncclCommInitRankConfig, config.blocking = 0) from one shared ncclUniqueId.
// Same return convention; each rank waits (bounded by the timeout) for what its function
// left in flight before its world communicator is destroyed.
int rt_nccl_run(int world, rt_rank_fn fn, void* arg);
// Number of visible GPUs, or a negative rt_status when CUDA is unusable.
int rt_nccl_device_count(void);
// Multi-process bootstrap (e.g. over MPI): rank 0 makes the id (128 bytes), everyone
// receives it out of band, then each process calls rt_nccl_comm_init on its own device.
// rt_nccl_comm_init returns RT_ERR_TIMEOUT (with a line on stderr) when some ranks do not
// join within rt_comm_default_timeout_ms().
int rt_nccl_get_unique_id(void* id_out, size_t id_bytes);
int rt_nccl_comm_init(int world, const void* id, size_t id_bytes, int rank, int device,
                      rt_comm** out);

// cuda_local backend (librt_cuda_local.a; link with -lcudart): `world` threads of this
// process (1 <= world <= 128), every one calling cudaSetDevice(device) before fn, all on
// that one GPU. Collectives are stream-ordered and asynchronous: the host threads meet at
// the enqueue (exchanging buffer pointers and CUDA events; timeouts, mismatches and
// rt_comm_abort as the threads backend), then each rank's stream waits for its peers'
// inputs, does its part (copies, or a reduction kernel reading every rank's input), and
// waits for every peer's part before it goes on, so an input may be reused right after the
// call. Results are bit-identical to the threads backend. Not CUDA-graph capturable (see
// above). Same return convention as rt_threads_run (2: bad world/device/fn; 1: a failure,
// including no usable GPU or device >= the visible count); each rank waits for what it
// left on the GPU before its function's end is reported. Restores the caller's device.
int rt_cuda_local_run(int world, int device, rt_rank_fn fn, void* arg);

// Multi-process / multi-node runs: `mpirun -np N build/<name>/<name>` (librt_mpi.a, built
// with mpicc; binaries built without MPI link librt_mpi_stub.a instead).
// 1 when this process was started by an MPI launcher (mpirun/mpiexec, srun --mpi=pmix or
// pmi2: OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, PMI_RANK, MPI_LOCALNRANKS,
// MV2_COMM_WORLD_SIZE or PALS_RANKID is set), else 0. In both libraries.
int rt_mpi_launched(void);
// One nccl rank per process: MPI_Init (unless the caller did), the number of processes
// must equal world (else a line naming both on rank 0 and 2 on every process), the local
// rank on this node (MPI_COMM_TYPE_SHARED) picks the GPU (local_rank % visible devices),
// rank 0 makes the NCCL unique id and MPI_Bcast's it, rt_nccl_comm_init, fn(comm, arg) on
// the calling thread, a bounded wait for what fn left in flight, the communicator freed,
// MPI_Finalize (if it called MPI_Init). Returns 0; any failure (MPI, CUDA, NCCL, or the
// communicator failed during fn) prints a line and aborts the whole MPI job (MPI_Abort),
// so no process is left waiting for one that gave up. world < 1 or NULL fn: 2.
// librt_mpi_stub.a: prints "fsdpgen: this binary was built without MPI (install
// libopenmpi-dev, then rebuild)" and returns 2.
int rt_mpi_run(int world, rt_rank_fn fn, void* arg);

#endif
