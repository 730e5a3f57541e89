// Chrome trace writer: records what each rank's streams did (complete events, "ph":"X")
// and the FSDP events (instant events, "ph":"i") into preallocated per-rank buffers,
// then writes one JSON file that chrome://tracing and Perfetto open:
//   {"traceEvents":[...], "displayTimeUnit":"ms", "otherData":{...}}
// pid is the rank, tid the stream (named by "thread_name" metadata events).
//
// Memory is bounded: each rank gets room for `max_events` events and `string_bytes`
// bytes of distinct strings (names repeat every step, so they are interned). An event
// that does not fit is dropped and counted; the count is in the file (otherData and an
// instant event on the rank that dropped) and from rt_trace_dropped().
//
// Thread safety: recording functions may be called from any thread for any rank
// concurrently (one mutex per rank). rt_trace_write may run while others record; it
// writes what was recorded before it reached each rank.
#ifndef FSDPGEN_RT_TRACE_H
#define FSDPGEN_RT_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Stream ids used as tid; each rank gets these names by default.
enum {
    RT_TRACE_COMPUTE = 0,         // "compute"
    RT_TRACE_ALL_GATHER_COPY = 1, // "all_gather_copy_in"
    RT_TRACE_ALL_GATHER = 2,      // "all_gather"
    RT_TRACE_REDUCE_SCATTER = 3,  // "reduce_scatter"
    RT_TRACE_ALL_REDUCE = 4,      // "all_reduce"
    RT_TRACE_OPTIMIZER = 5,       // "optimizer" (the CUDA backend's optimizer stream)
    RT_TRACE_MAX_TIDS = 32        // tids must be in [0, RT_TRACE_MAX_TIDS)
};

typedef struct rt_trace rt_trace;

// Creates a trace for ranks 0..n_ranks-1. max_events (per rank) 0 means 65536;
// string_bytes (per rank) 0 means 64 KiB. Returns 0, or -1 with `err` filled.
int rt_trace_create(int n_ranks, size_t max_events, size_t string_bytes, rt_trace **out,
                    char *err, size_t errlen);
void rt_trace_destroy(rt_trace *t);

// Microseconds since rt_trace_create on a monotonic clock (the ts of host events).
double rt_trace_now_us(const rt_trace *t);

// Names stream `tid` of `rank` (overrides the default). Returns 0, or -1 if rank or
// tid is out of range or the name does not fit in the string pool.
int rt_trace_thread_name(rt_trace *t, int rank, int tid, const char *name);

// A complete event: `name` ran on stream `tid` of `rank` from ts_us for dur_us. An
// empty name (the root group's FQN) is written as "root".
// `arg_key`/`arg_value` add one string argument ({"bytes": "4096"}); both NULL for none.
// Strings are copied. Out-of-range rank/tid or a full buffer drops the event.
void rt_trace_complete(rt_trace *t, int rank, int tid, const char *name, const char *cat,
                       double ts_us, double dur_us, const char *arg_key,
                       const char *arg_value);

// An instant event, e.g. name "unshard layers.0", cat "fsdp", arg state "FORWARD".
void rt_trace_instant(rt_trace *t, int rank, int tid, const char *name, const char *cat,
                      double ts_us, const char *arg_key, const char *arg_value);

// Events recorded (kept) and dropped so far, over all ranks.
uint64_t rt_trace_recorded(rt_trace *t);
uint64_t rt_trace_dropped(rt_trace *t);

// Writes the JSON file atomically (temp file, fsync, rename). Returns 0 or -1.
int rt_trace_write(rt_trace *t, const char *path, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
