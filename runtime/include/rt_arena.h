// Per-rank static arena: one fixed-capacity block whose layout (every buffer's offset) is
// decided by the generator's memory plan. The runtime only hands out views at the planned
// offsets, checks each against the capacity, and measures the peak (the highest byte any
// view reaches) so a run can compare it with the planned peak.
#ifndef RT_ARENA_H
#define RT_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "rt_tensor.h"

// ---- types ------------------------------------------------------------------------------

// Alignment of the arena base; planned offsets are checked against the element size only.
#define RT_ARENA_ALIGN 64

typedef struct rt_arena {
    uint8_t* base;
    size_t capacity;   // bytes
    size_t peak;       // highest byte offset + 1 reached by any view so far
    int external;      // base belongs to the caller (rt_arena_init_at)
    char name[48];     // for messages, e.g. "rank 3"
    char error[256];   // the last error, one line
} rt_arena;

// ---- lifetime ---------------------------------------------------------------------------

// Allocates capacity bytes (zero-filled, RT_ARENA_ALIGN aligned). capacity 0 is allowed
// (every non-empty view then fails). Returns 0, or -1 (message in arena->error) when
// arena is NULL or the allocation fails.
int rt_arena_init(rt_arena* arena, size_t capacity, const char* name);
// Views into memory the caller owns and frees (e.g. a device allocation: the arena only
// computes and checks addresses, it never touches the bytes). Returns 0, or -1 when arena
// is NULL or base is NULL with a non-zero capacity.
int rt_arena_init_at(rt_arena* arena, void* base, size_t capacity, const char* name);
void rt_arena_free(rt_arena* arena);

// ---- views ------------------------------------------------------------------------------

// The view `what` (a buffer name from the plan, for messages) of the given dtype and shape
// at byte `offset`. Checks that offset is a multiple of the element size and that
// [offset, offset + nbytes) lies inside the capacity; on success raises the peak.
// Returns 0, or -1 with a one-line message in arena->error (out is zeroed).
int rt_arena_view(rt_arena* arena, const char* what, size_t offset, rt_dtype dtype, int ndim,
                  const int64_t* shape, rt_tensor* out);
// Raw bytes [offset, offset + nbytes): same checks. Returns NULL on error.
void* rt_arena_bytes(rt_arena* arena, const char* what, size_t offset, size_t nbytes);
// As rt_arena_view, but prints the error (prefixed with file:line of the caller's macro)
// and exits with status 1: generated code uses this, since a failing view means the
// memory plan is wrong and nothing sensible can continue.
rt_tensor rt_arena_view_or_die(rt_arena* arena, const char* what, size_t offset, rt_dtype dtype,
                               int ndim, const int64_t* shape, const char* file, int line);
#define RT_ARENA_VIEW(arena, what, offset, dtype, ndim, shape) \
    rt_arena_view_or_die((arena), (what), (offset), (dtype), (ndim), (shape), __FILE__, __LINE__)

// ---- peak -------------------------------------------------------------------------------

size_t rt_arena_peak(const rt_arena* arena);
// Compares the measured peak with the generator's prediction: returns 0 when measured <=
// predicted, else -1 with a message naming both (the plan underestimated memory).
int rt_arena_check_peak(rt_arena* arena, size_t predicted);

#endif
