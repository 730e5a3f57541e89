// Static per-rank arena: views at planned offsets, bounds checks with clear messages, and
// the measured peak.
#include "rt_arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- messages ---------------------------------------------------------------------------

static void set_error(rt_arena* a, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->error, sizeof a->error, fmt, ap);
    va_end(ap);
}

// ---- lifetime ---------------------------------------------------------------------------

int rt_arena_init(rt_arena* arena, size_t capacity, const char* name) {
    if (!arena) return -1;
    memset(arena, 0, sizeof *arena);
    snprintf(arena->name, sizeof arena->name, "%s", name ? name : "arena");
    // aligned_alloc wants a size that is a multiple of the alignment.
    size_t rounded = (capacity + RT_ARENA_ALIGN - 1) / RT_ARENA_ALIGN * RT_ARENA_ALIGN;
    if (rounded < capacity) {
        set_error(arena, "rt_arena '%s': capacity %zu bytes is too large", arena->name, capacity);
        return -1;
    }
    if (rounded == 0) rounded = RT_ARENA_ALIGN;
    arena->base = aligned_alloc(RT_ARENA_ALIGN, rounded);
    if (!arena->base) {
        set_error(arena, "rt_arena '%s': cannot allocate %zu bytes (out of host memory?)",
                  arena->name, capacity);
        return -1;
    }
    memset(arena->base, 0, rounded);
    arena->capacity = capacity;
    return 0;
}

int rt_arena_init_at(rt_arena* arena, void* base, size_t capacity, const char* name) {
    if (!arena) return -1;
    memset(arena, 0, sizeof *arena);
    snprintf(arena->name, sizeof arena->name, "%s", name ? name : "arena");
    if (!base && capacity) {
        set_error(arena, "rt_arena '%s': no memory given for %zu bytes", arena->name, capacity);
        return -1;
    }
    arena->base = base;
    arena->capacity = capacity;
    arena->external = 1;
    return 0;
}

void rt_arena_free(rt_arena* arena) {
    if (!arena) return;
    if (!arena->external) free(arena->base);
    arena->base = NULL;
    arena->capacity = 0;
}

// ---- views ------------------------------------------------------------------------------

static int check_range(rt_arena* a, const char* what, size_t offset, size_t nbytes, size_t align) {
    if (!a->base) {
        set_error(a, "rt_arena '%s': view '%s' requested from an arena that is not initialised",
                  a->name, what);
        return -1;
    }
    if (align > 1 && offset % align != 0) {
        set_error(a,
                  "rt_arena '%s': view '%s' at offset %zu is not aligned to its element size %zu "
                  "(the memory plan's offsets are wrong: regenerate the code)",
                  a->name, what, offset, align);
        return -1;
    }
    if (offset > a->capacity || nbytes > a->capacity - offset) {
        set_error(a,
                  "rt_arena '%s': view '%s' [offset %zu, %zu bytes] ends at byte %zu, past the "
                  "capacity %zu (the memory plan does not fit this arena: regenerate the code "
                  "or enlarge the arena)",
                  a->name, what, offset, nbytes, offset + nbytes, a->capacity);
        return -1;
    }
    if (offset + nbytes > a->peak) a->peak = offset + nbytes;
    return 0;
}

int rt_arena_view(rt_arena* arena, const char* what, size_t offset, rt_dtype dtype, int ndim,
                  const int64_t* shape, rt_tensor* out) {
    if (out) memset(out, 0, sizeof *out);
    if (!arena || !out) return -1;
    if (!what) what = "?";
    int64_t numel = 0;
    if (!rt_dtype_valid(dtype) || rt_shape_numel(ndim, shape, &numel) != 0) {
        set_error(arena, "rt_arena '%s': view '%s' has an invalid dtype or shape (ndim %d)",
                  arena->name, what, ndim);
        return -1;
    }
    size_t es = rt_dtype_size(dtype);
    if ((uint64_t)numel > SIZE_MAX / es) {
        set_error(arena, "rt_arena '%s': view '%s' is too large", arena->name, what);
        return -1;
    }
    if (check_range(arena, what, offset, (size_t)numel * es, es) != 0) return -1;
    return rt_tensor_init(out, arena->base + offset, dtype, ndim, shape);
}

void* rt_arena_bytes(rt_arena* arena, const char* what, size_t offset, size_t nbytes) {
    if (!arena) return NULL;
    if (check_range(arena, what ? what : "?", offset, nbytes, 1) != 0) return NULL;
    return arena->base + offset;
}

rt_tensor rt_arena_view_or_die(rt_arena* arena, const char* what, size_t offset, rt_dtype dtype,
                               int ndim, const int64_t* shape, const char* file, int line) {
    rt_tensor t;
    if (rt_arena_view(arena, what, offset, dtype, ndim, shape, &t) != 0) {
        fprintf(stderr, "%s:%d: error: %s\n", file, line,
                arena ? arena->error : "rt_arena: NULL arena");
        exit(1);
    }
    return t;
}

// ---- peak -------------------------------------------------------------------------------

size_t rt_arena_peak(const rt_arena* arena) { return arena ? arena->peak : 0; }

int rt_arena_check_peak(rt_arena* arena, size_t predicted) {
    if (!arena) return -1;
    if (arena->peak <= predicted) return 0;
    set_error(arena,
              "rt_arena '%s': measured peak %zu bytes exceeds the planned peak %zu bytes by %zu "
              "(the generator's memory plan underestimates this step)",
              arena->name, arena->peak, predicted, arena->peak - predicted);
    return -1;
}
