// Atomic file replacement (see io_atomic.h): the only way this library creates files,
// so a crash or a full disk never leaves a half-written safetensors, checkpoint or
// trace file under its final name.
#include "io_atomic.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_err.h"

// ---- helpers ------------------------------------------------------------------------

int io_fsync_parent_dir(const char *path, char *err, size_t errlen) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return io_errf(err, errlen, "path too long: '%s'", path);
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return IO_SYSERR(err, errlen, "cannot open directory '%s' to sync it", dir);
    // Some filesystems refuse fsync on directories (EINVAL); the rename is still atomic.
    if (fsync(fd) != 0 && errno != EINVAL) {
        int rc = IO_SYSERR(err, errlen, "cannot fsync directory '%s'", dir);
        close(fd);
        return rc;
    }
    close(fd);
    return 0;
}

// ---- API ----------------------------------------------------------------------------

// Creates the temp file without ever writing through something already at its name:
// O_EXCL | O_NOFOLLOW refuse an existing name (a planted symlink would otherwise get its
// target truncated). A leftover from a crash, or a planted link or file, is unlinked,
// which removes the name only, and the create is tried once more.
static int create_tmp(io_atomic *a, char *err, size_t errlen) {
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY;
    int fd = open(a->tmp, flags, 0644);
    if (fd < 0 && errno == EEXIST) {
        struct stat st;
        if (lstat(a->tmp, &st) == 0 && S_ISDIR(st.st_mode))
            return io_errf(err, errlen, "cannot create '%s' (temp file for '%s'): a directory is "
                           "in the way; remove it", a->tmp, a->path);
        if (unlink(a->tmp) != 0 && errno != ENOENT)
            return IO_SYSERR(err, errlen, "cannot remove the stale temp file '%s'", a->tmp);
        fd = open(a->tmp, flags, 0644);
    }
    if (fd < 0)
        return IO_SYSERR(err, errlen,
                         "cannot create '%s' (temp file for '%s'; is the directory there and "
                         "writable?)",
                         a->tmp, a->path);
    return fd;
}

int io_atomic_open(io_atomic *a, const char *path, char *err, size_t errlen) {
    a->fp = NULL;
    a->failed = 0;
    a->tmp[0] = '\0';
    size_t n = strlen(path);
    if (n == 0) return io_errf(err, errlen, "empty output path");
    if (n + 5 > sizeof a->tmp) return io_errf(err, errlen, "output path too long: '%s'", path);
    // Only a regular file (or a symlink, which the rename replaces without touching its
    // target) is ever replaced: renaming over a device node, FIFO or socket would destroy
    // it, and over a directory would fail only after all the writing.
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return io_errf(err, errlen, "refusing to write '%s': it is %s, not a regular file (only "
                       "regular files are replaced; give another path)", path,
                       io_file_kind(st.st_mode));
    memcpy(a->path, path, n + 1);
    memcpy(a->tmp, path, n);
    memcpy(a->tmp + n, ".tmp", 5);
    int fd = create_tmp(a, err, errlen);
    if (fd < 0) {
        a->tmp[0] = '\0';  // nothing of ours to remove
        return -1;
    }
    a->fp = fdopen(fd, "wb");
    if (!a->fp) {
        int rc = IO_SYSERR(err, errlen, "cannot open stream on '%s'", a->tmp);
        close(fd);
        unlink(a->tmp);
        a->tmp[0] = '\0';
        return rc;
    }
    // A large buffer: trace and header writers emit many small pieces.
    setvbuf(a->fp, NULL, _IOFBF, 1 << 20);
    return 0;
}

int io_atomic_write(io_atomic *a, const void *buf, size_t n, char *err, size_t errlen) {
    if (a->failed || !a->fp) return io_errf(err, errlen, "write to '%s' after an error", a->tmp);
    if (n == 0) return 0;
    if (fwrite(buf, 1, n, a->fp) != n) {
        a->failed = 1;
        return IO_SYSERR(err, errlen, "cannot write %zu bytes to '%s' (disk full?)", n,
                         a->tmp);
    }
    return 0;
}

int io_atomic_pwrite(io_atomic *a, long long offset, const void *buf, size_t n,
                     char *err, size_t errlen) {
    if (a->failed || !a->fp) return io_errf(err, errlen, "write to '%s' after an error", a->tmp);
    long long end = 0;
    if (fflush(a->fp) != 0) {  // the buffered bytes reach the file only now
        a->failed = 1;
        return IO_SYSERR(err, errlen, "cannot write to '%s' (disk full?)", a->tmp);
    }
    if ((end = (long long)ftello(a->fp)) < 0 || fseeko(a->fp, (off_t)offset, SEEK_SET) != 0) {
        a->failed = 1;
        return IO_SYSERR(err, errlen, "cannot seek in '%s'", a->tmp);
    }
    if (fwrite(buf, 1, n, a->fp) != n || fflush(a->fp) != 0 ||
        fseeko(a->fp, (off_t)end, SEEK_SET) != 0) {
        a->failed = 1;
        return IO_SYSERR(err, errlen, "cannot rewrite %zu bytes at offset %lld of '%s'", n,
                         offset, a->tmp);
    }
    return 0;
}

int io_atomic_commit(io_atomic *a, char *err, size_t errlen) {
    int rc = 0;
    if (a->failed || !a->fp) {
        rc = io_errf(err, errlen, "not committing '%s': an earlier write failed", a->path);
    } else if (fflush(a->fp) != 0) {
        rc = IO_SYSERR(err, errlen, "cannot flush '%s' (disk full?)", a->tmp);
    } else if (fsync(fileno(a->fp)) != 0) {
        rc = IO_SYSERR(err, errlen, "cannot fsync '%s'", a->tmp);
    }
    if (a->fp) {
        if (fclose(a->fp) != 0 && rc == 0) rc = IO_SYSERR(err, errlen, "cannot close '%s'", a->tmp);
        a->fp = NULL;
    }
    if (rc == 0 && rename(a->tmp, a->path) != 0)
        rc = IO_SYSERR(err, errlen, "cannot rename '%s' to '%s'", a->tmp, a->path);
    if (rc != 0) {
        io_atomic_abort(a);
        return rc;
    }
    a->tmp[0] = '\0';  // renamed: nothing left to remove
    return io_fsync_parent_dir(a->path, err, errlen);
}

void io_atomic_abort(io_atomic *a) {
    if (a->fp) {
        fclose(a->fp);
        a->fp = NULL;
    }
    if (a->tmp[0]) {
        unlink(a->tmp);
        a->tmp[0] = '\0';
    }
    a->failed = 1;
}

int io_atomic_write_file(const char *path, const void *buf, size_t n, char *err, size_t errlen) {
    io_atomic a;
    if (io_atomic_open(&a, path, err, errlen) != 0) return -1;
    if (io_atomic_write(&a, buf, n, err, errlen) != 0) {
        io_atomic_abort(&a);
        return -1;
    }
    return io_atomic_commit(&a, err, errlen);
}
