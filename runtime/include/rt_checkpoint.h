// Checkpoints for resuming training: one file per rank holding that rank's parameter
// shards and optimizer state as named blobs, plus the step and RNG / data cursor, in a
// directory completed by a COMPLETE marker written last.
//
// Directory layout:
//   DIR/rank00000.ckpt ... DIR/rankNNNNN.ckpt   one per rank
//   DIR/COMPLETE                                "fsdpgen checkpoint 1\nworld_size W\nstep S\n"
//
// Saving (a crash at any point never leaves something that loads as valid):
//   1. one caller (rank 0)    rt_ckpt_begin(dir)      creates DIR, removes COMPLETE
//   2. barrier
//   3. every rank             rt_ckpt_save_rank(...)  temp file + fsync + rename
//   4. barrier
//   5. one caller (rank 0)    rt_ckpt_finish(dir, W, step)  checks every rank file's
//                             header, then writes COMPLETE atomically
// Loading: rt_ckpt_probe tells whether DIR holds a complete checkpoint; each rank then
// calls rt_ckpt_load_rank, which checks the marker, world size, rank, step, blob
// names / dtypes / counts and the payload CRC32.
//
// Checkpoint directories (what the training binary's --checkpoint ROOT writes): ROOT holds
// one checkpoint per saved step, ROOT/step_NNNNNNNN (the step, at least 8 digits), each a
// directory as above. A save never touches the published ones:
//   1. one caller    rt_ckpt_stage(ROOT, S)    creates the staging directory
//                    ROOT/step_S.tmp (removing a leftover of an unfinished save of S)
//   2-5.             as above, on the staging directory (rt_ckpt_stage_path)
//   6. one caller    rt_ckpt_publish(ROOT, S, K)  renames it to ROOT/step_S (the atomic
//                    switch), then removes all but the newest K complete checkpoints
//                    below S, incomplete step directories and stale staging ones
// On failure the caller removes the staging directory (rt_ckpt_unstage). rt_ckpt_find
// returns the newest complete checkpoint: ROOT itself if it has a COMPLETE marker (a
// single checkpoint, as written before step directories existed) or the ROOT/step_N with
// the highest N that has one. A kill or a full disk at any point of a save leaves every
// checkpoint published before it loadable.
//
// Rank file layout (little-endian): a 64-byte-aligned header (magic "FSDPCKPT",
// format version, world size, rank, step, data cursor, RNG seed / offset, blob count,
// header CRC32, payload byte count, payload CRC32, then the blob table: name, dtype,
// element count, payload offset), then the payload: blobs at 64-byte-aligned offsets.
//
// Functions that can fail return -1 and fill `err` (`errlen` bytes) with one line
// saying what was wrong and what was expected. Nothing here prints or exits.
#ifndef FSDPGEN_RT_CHECKPOINT_H
#define FSDPGEN_RT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "rt_safetensors.h"  // rt_st_dtype

#ifdef __cplusplus
extern "C" {
#endif

#define RT_CKPT_VERSION 1

// Training state besides the blobs.
typedef struct {
    uint64_t step;         // optimizer steps completed
    uint64_t data_cursor;  // next data step index (the `step` given to rt_data_batch)
    uint64_t rng_seed;     // dropout RNG seed
    uint64_t rng_offset;   // position in the counter-based RNG stream
} rt_ckpt_state;

// A blob to save: `count` elements of `dtype` at `data` (NULL allowed when count is 0).
typedef struct {
    const char *name;
    rt_st_dtype dtype;
    uint64_t count;
    const void *data;
} rt_ckpt_blob;

// A blob to load into: the file must hold exactly these names, with these dtypes and
// counts; `data` receives count * dtype size bytes.
typedef struct {
    const char *name;
    rt_st_dtype dtype;
    uint64_t count;
    void *data;
} rt_ckpt_slot;

// Writes `DIR/rankRRRRR.ckpt` (5 digits) into `buf`; -1 if it does not fit.
int rt_ckpt_rank_path(const char *dir, int rank, char *buf, size_t buflen);

// Step 1 of a save: creates `dir` (and missing parents) and removes its COMPLETE
// marker, durably, so a half-written save can never be mistaken for a finished one.
int rt_ckpt_begin(const char *dir, char *err, size_t errlen);

// Step 3: writes this rank's file atomically (temp file, fsync, rename; on error the
// temp file is removed). Blob names must be unique and non-empty.
int rt_ckpt_save_rank(const char *dir, int world_size, int rank, const rt_ckpt_state *st,
                      const rt_ckpt_blob *blobs, size_t n_blobs, char *err,
                      size_t errlen);

// Step 5: checks that every rank file 0..world_size-1 exists with a valid header for
// this world size, rank and step, then writes DIR/COMPLETE atomically.
int rt_ckpt_finish(const char *dir, int world_size, uint64_t step, char *err,
                   size_t errlen);

// Returns 1 and fills *world_size / *step (either may be NULL) if `dir` holds a
// COMPLETE marker, 0 if `dir` or the marker does not exist (start from scratch), -1
// if the marker is unreadable or malformed.
int rt_ckpt_probe(const char *dir, int *world_size, uint64_t *step, char *err,
                  size_t errlen);

// Loads this rank's state and blobs. Checks, in order: the COMPLETE marker and its
// world size, the rank file exists, its magic / version / header CRC, world size,
// rank, step (== the marker's), file size, that the blob table matches `slots`
// exactly (missing, unexpected, dtype, count), and the payload CRC32. `st` may be NULL.
// On error the contents of *st and the slot buffers are unspecified.
int rt_ckpt_load_rank(const char *dir, int world_size, int rank, rt_ckpt_state *st,
                      const rt_ckpt_slot *slots, size_t n_slots, char *err,
                      size_t errlen);

// ---- checkpoint directories ---------------------------------------------------------

// ROOT/step_NNNNNNNN and ROOT/step_NNNNNNNN.tmp into buf; -1 if they do not fit.
int rt_ckpt_step_path(const char *root, uint64_t step, char *buf, size_t buflen);
int rt_ckpt_stage_path(const char *root, uint64_t step, char *buf, size_t buflen);

// Creates ROOT (and parents) and an empty staging directory for step S, removing a
// leftover one of an unfinished save of S first.
int rt_ckpt_stage(const char *root, uint64_t step, char *err, size_t errlen);

// Renames the complete staging directory of step S to ROOT/step_S and fsyncs ROOT, then
// removes, below S: complete checkpoints beyond the newest `keep` (counting S; keep 0 keeps
// all), step directories without a COMPLETE marker and stale staging directories. Refuses
// to replace a complete ROOT/step_S. A failure of the removals is reported after the
// checkpoint was published (the message says so).
int rt_ckpt_publish(const char *root, uint64_t step, int keep, char *err, size_t errlen);

// Removes the staging directory of step S, if any (after a failed save; best effort).
void rt_ckpt_unstage(const char *root, uint64_t step);

// Finds the newest complete checkpoint under ROOT (see above): returns 1 and fills dir,
// *world_size and *step (each may be NULL), 0 if there is none (ROOT missing included), -1
// on a malformed marker or a step directory whose marker names another step.
int rt_ckpt_find(const char *root, char *dir, size_t dirlen, int *world_size, uint64_t *step,
                 char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
