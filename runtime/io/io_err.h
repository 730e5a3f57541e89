// Error reporting shared by the I/O library: every public function that fails fills
// the caller's buffer with one line (what was wrong, what was expected) and returns -1;
// nothing here prints or exits, the training binary decides what to do.
#ifndef FSDPGEN_IO_ERR_H
#define FSDPGEN_IO_ERR_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

// ---- formatting ---------------------------------------------------------------------

// Formats into err (NULL or errlen 0 is allowed: the message is dropped). Returns -1 so
// callers can write `return io_errf(...)`.
__attribute__((format(printf, 3, 4))) static inline int io_errf(char *err, size_t errlen,
                                                               const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// A failed system call: appends strerror(errno) and the runtime source location, so a
// report from a user points at the call that failed. Evaluate before touching errno.
#define IO_SYSERR(err, errlen, fmt, ...)                                                 \
    io_errf((err), (errlen), fmt ": %s [%s:%d]", __VA_ARGS__, strerror(errno), __FILE__, \
            __LINE__)

// What a non-regular file is, for "'X' is a FIFO (named pipe), not a regular file".
static inline const char *io_file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return S_ISREG(mode) ? "a regular file" : "not a regular file";
}

// ---- byte order ---------------------------------------------------------------------

// The formats are little-endian and the library copies tensor bytes as they are.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "fsdpgen runtime I/O assumes a little-endian host"
#endif

static inline void io_put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void io_put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t io_get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t io_get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

#endif
