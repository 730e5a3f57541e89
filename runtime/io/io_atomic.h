// Atomic file replacement: write PATH.tmp in the same directory, flush, fsync, rename
// over PATH, fsync the directory. Readers see the old file or the complete new one,
// never a partial one; on any error the temp file is removed.
#ifndef FSDPGEN_IO_ATOMIC_H
#define FSDPGEN_IO_ATOMIC_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *fp;
    int failed;       // a write failed: commit refuses, abort cleans up
    char path[4096];
    char tmp[4096];
} io_atomic;

// Creates PATH.tmp with O_EXCL | O_NOFOLLOW (a stale one from a crash, or anything
// planted there, is unlinked first, never written through). Refuses a PATH that exists
// and is not a regular file or a symlink (a device node, FIFO, socket or directory).
int io_atomic_open(io_atomic *a, const char *path, char *err, size_t errlen);
// Appends bytes; on failure the file is marked failed (call io_atomic_abort).
int io_atomic_write(io_atomic *a, const void *buf, size_t n, char *err, size_t errlen);
// Overwrites bytes at an absolute offset (to patch a header after the payload).
int io_atomic_pwrite(io_atomic *a, long long offset, const void *buf, size_t n,
                     char *err, size_t errlen);
// fflush + fsync + close + rename + fsync(dir). On failure the temp file is removed.
int io_atomic_commit(io_atomic *a, char *err, size_t errlen);
// Closes and removes the temp file (safe to call after a failed open/commit).
void io_atomic_abort(io_atomic *a);
// The whole file at once: open, write n bytes, commit (or abort).
int io_atomic_write_file(const char *path, const void *buf, size_t n, char *err, size_t errlen);

// fsyncs the directory that holds `path` so a rename/unlink in it is durable.
int io_fsync_parent_dir(const char *path, char *err, size_t errlen);

#endif
