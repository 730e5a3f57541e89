// Private: the rank rendezvous shared by the backends whose ranks are threads of one
// process (threads, cuda_local). A communicator is a shared `rdv_group` with one
// descriptor slot per member; every collective is
//   post descriptor -> barrier A -> check agreement -> own part of the work -> barrier B
// and the backend only supplies the middle (rdv_enter does the first three steps). The
// barriers block on a futex (no spinning: 128 ranks share 2 cores); the futex word is
// bumped on every release, failure and rank exit, so a sleeper re-checks its conditions
// after any of them, and a deadline turns a missing rank into a one-line error naming it.
// Also here: failure (first one wins, printed once), split, free and the launcher.
#ifndef RT_COMM_RENDEZVOUS_H
#define RT_COMM_RENDEZVOUS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "comm_internal.h"

// ---- descriptors ------------------------------------------------------------------------

enum { OP_NONE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE, OP_BROADCAST, OP_BARRIER, OP_SPLIT };

// Members' event handles a backend keeps in its slot (cuda_local: cudaEvent_t).
#define RDV_SLOT_RES 3

struct rdv_group;

// One member's descriptor of its current collective. Written by its owner before barrier
// A, read by everyone between A and B (the barriers order the accesses).
typedef struct rdv_slot {
    int op;
    int64_t count;
    rt_dtype dtype;
    rt_redop red;
    int root;
    const void* send;
    void* recv;
    int color, key;
    struct rdv_group* split_group;  // the new group, published by its leader during split
    // Backend resources of this member for this communicator, set once by the backend's
    // member_init (on the member's thread, before its first collective here) and released
    // with the group (slot_release), so a peer may use them until every member is gone.
    void* res[RDV_SLOT_RES];
    _Atomic uint64_t arrived;  // last barrier epoch this member reached (for diagnostics)
    char pad[64];              // keeps neighbouring slots off each other's cache line
} rdv_slot;

// ---- backend hooks ----------------------------------------------------------------------

typedef struct rdv_handle rdv_handle;

// What a backend plugs into the shared machinery. Every hook may be NULL.
typedef struct rdv_backend {
    const rt_comm_ops* ops;
    const char* launcher;  // "rt_threads_run", for messages
    // On a new handle's own thread (world handles: in the rank thread before fn; split:
    // inside rt_comm_split): set up the member's resources (slot res). Returns 0, or
    // non-zero with a one-line reason in why.
    int (*member_init)(rdv_handle* h, void* ctx, char* why, size_t cap);
    // On the rank thread before member_init of its world handle (cuda_local:
    // cudaSetDevice). Returns 0, or non-zero with a reason: fn is not run, the world fails.
    int (*rank_begin)(int wrank, void* ctx, char* why, size_t cap);
    // On the rank thread after fn returned, with its world handle (wait for its work).
    void (*rank_end)(rdv_handle* world, void* ctx);
    // Releases what member_init left in a slot, when its group is destroyed (any thread).
    void (*slot_release)(rdv_slot* s, void* ctx);
    void* ctx;
} rdv_backend;

// ---- groups and handles -----------------------------------------------------------------

typedef struct rdv_world rdv_world;

typedef struct rdv_group {
    rdv_world* world;
    int size;
    int* wranks;  // member index -> world rank
    rdv_slot* slots;
    _Atomic int count;       // arrivals at the current barrier
    _Atomic uint64_t epoch;  // barriers completed
    _Atomic uint32_t wake;   // futex word: bumped on release, failure and rank exit
    _Atomic int status;      // 0, or the sticky failure status
    pthread_mutex_t err_lock;
    char err[RT_COMM_ERRLEN];
    _Atomic int refs;        // member handles still alive
    struct rdv_group* next;
} rdv_group;

struct rdv_handle {
    rt_comm base;  // first, so rt_comm* and rdv_handle* convert
    rdv_group* g;
    int idx;             // member index == rank in this communicator
    uint64_t epoch;      // barriers this member has entered
    const void** srcs;   // scratch: one pointer per member
    void** dsts;
    int launcher_owned;  // world handles: rt_comm_free ignores them, the launcher frees them
};

// ---- the protocol -----------------------------------------------------------------------

// Fields rdv_enter compares (op always): every member's against member 0's.
enum { CHK_COUNT = 1, CHK_DTYPE = 2, CHK_RED = 4, CHK_ROOT = 8 };

const char* rdv_op_name(int op);
// Posts this member's descriptor (all fields but res), waits for everyone and checks
// agreement. Returns 0 or the group's failure status (message in last_error).
int rdv_enter(rdv_handle* h, const rdv_slot* desc, const char* opname, int what);
// Waits until every member reached this barrier. Returns 0, or the group's failure.
int rdv_barrier(rdv_handle* h, const char* opname);
// Poisons the group with status and msg (the first failure wins and is printed once).
// Returns the group's status.
int rdv_fail(rdv_handle* h, int status, const char* msg);

// rt_comm_ops entries every rendezvous backend shares.
int rdv_ops_fail(rt_comm* c, int status, const char* msg);
int rdv_ops_split(rt_comm* c, int color, int key, rt_comm** out);
void rdv_ops_free(rt_comm* c);

// ---- launcher ---------------------------------------------------------------------------

// Runs fn on `world` threads with the backend's world handles (world >= 1, fn non-NULL:
// the caller checked). Returns 0 when every rank returned and no communicator failed,
// else 1.
int rdv_run(const rdv_backend* be, int world, rt_rank_fn fn, void* arg);

#endif
