// Private: the backend vtable behind rt_comm.h and the helpers the backends share
// (message formatting, rank-list compression, the nccl launcher hooks). Only
// runtime/comm/*.c include this.
#ifndef RT_COMM_INTERNAL_H
#define RT_COMM_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include "rt_comm.h"

#define RT_COMM_ERRLEN 512

// ---- backend vtable ---------------------------------------------------------------------

// Arguments reach the backend already validated locally (non-negative counts, valid
// dtypes/ops, non-NULL buffers where needed, root in range); the backend checks what
// needs the other ranks (agreement on op, count, dtype, reduction, root).
typedef struct rt_comm_ops {
    const char* name;
    int (*all_gather)(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                      void* stream);
    int (*reduce_scatter)(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                          rt_redop op, void* stream);
    int (*all_reduce)(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                      rt_redop op, void* stream);
    int (*broadcast)(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                     int root, void* stream);
    int (*barrier)(rt_comm* c, void* stream);
    int (*split)(rt_comm* c, int color, int key, rt_comm** out);
    // Poisons the communicator with status and the one-line msg: prints it (once per
    // communicator) and makes every rank's pending/later calls fail. Returns status.
    int (*fail)(rt_comm* c, int status, const char* msg);
    void (*free)(rt_comm* c);
    void* (*buf_alloc)(rt_comm* c, size_t bytes);
    void (*buf_free)(rt_comm* c, void* buf);
    int (*buf_write)(rt_comm* c, void* dst, const void* src, size_t bytes);
    int (*buf_read)(rt_comm* c, void* dst, const void* src, size_t bytes);
    int (*sync)(rt_comm* c, void* stream);
} rt_comm_ops;

struct rt_comm {
    const rt_comm_ops* ops;
    int rank, size;
    int64_t timeout_ms;
    uint64_t calls;  // collectives issued through this handle, for messages ("call #7")
    char name[96];
    char last_error[RT_COMM_ERRLEN];
};

// ---- shared helpers (comm.c) ------------------------------------------------------------

// The prefix every message starts with: "rt_comm all_gather on 'world' (threads, size 4,
// call #7)". Writes into buf, returns buf.
char* rt_comm_msg_prefix(const rt_comm* c, const char* opname, char* buf, size_t cap);
// "3, 5-7, 9" from a sorted list of ranks (truncated with "..." to fit cap).
char* rt_comm_rank_list(const int* ranks, int n, char* buf, size_t cap);
// Sets c->last_error from a format.
void rt_comm_set_error(rt_comm* c, const char* fmt, ...);
// The common fields of a fresh handle (timeout from the environment or the parent).
void rt_comm_init_base(rt_comm* c, const rt_comm_ops* ops, int rank, int size, const char* name,
                       int64_t timeout_ms);

// ---- nccl launcher hooks (nccl.c), for the launchers in other files (mpi.c) ---------------

// Makes a handle from rt_nccl_comm_init the launcher's world handle: rt_comm_free ignores it.
void rt_nccl_world_own(rt_comm* c);
// After the rank function: waits (bounded by the timeout) for what it left in flight and
// for the device, then destroys the communicator and frees the handle. Returns 0, or the
// failure status (a line was printed).
int rt_nccl_world_finish(rt_comm* c);

#endif
