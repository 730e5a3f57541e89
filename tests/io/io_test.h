// Helpers shared by the runtime I/O tests: a private temp directory removed at exit,
// small file utilities, and CHECK_ERR, which checks that a call failed with a message
// containing the expected words (and prints the message, so the log shows what a user
// would see).
#ifndef FSDPGEN_TESTS_IO_TEST_H
#define FSDPGEN_TESTS_IO_TEST_H

#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"

// ---- temp directory -----------------------------------------------------------------

static char io_test_dir_[4096];

static inline int io_test_rm_(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static inline void io_test_cleanup_(void) {
    if (io_test_dir_[0]) nftw(io_test_dir_, io_test_rm_, 16, FTW_DEPTH | FTW_PHYS);
}

// Creates a fresh directory under $TMPDIR (or /tmp), removed when the test exits.
static inline const char *test_dir(void) {
    if (io_test_dir_[0]) return io_test_dir_;
    const char *base = getenv("TMPDIR");
    snprintf(io_test_dir_, sizeof io_test_dir_, "%s/fsdpgen_io_XXXXXX",
             base && base[0] ? base : "/tmp");
    if (!mkdtemp(io_test_dir_)) {
        perror("mkdtemp");
        exit(2);
    }
    atexit(io_test_cleanup_);
    return io_test_dir_;
}

// test_dir()/name into a static rotating buffer (4 live at once).
static inline const char *tpath(const char *name) {
    static char bufs[4][4096];
    static int k = 0;
    char *b = bufs[k++ & 3];
    if (snprintf(b, 4096, "%s/%s", test_dir(), name) >= 4096) abort();
    return b;
}

// ---- files --------------------------------------------------------------------------

static inline int write_bytes(const char *path, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    size_t w = n ? fwrite(data, 1, n, fp) : 0;
    return (fclose(fp) == 0 && w == n) ? 0 : -1;
}

// Whole file into a malloc'd buffer (NUL-terminated); NULL if unreadable.
static inline unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, fp) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(fp);
    if (b) {
        b[len] = 0;
        *n = (size_t)len;
    }
    return b;
}

static inline int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static inline long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

// Number of entries in `dir` whose name contains `part` (e.g. ".tmp").
static inline int count_entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, part)) n++;
    closedir(d);
    return n;
}

// XORs one byte of a file at `offset`.
static inline int flip_byte(const char *path, long offset) {
    FILE *fp = fopen(path, "r+b");
    if (!fp) return -1;
    fseek(fp, offset, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, offset, SEEK_SET);
    fputc(c ^ 0x5A, fp);
    return fclose(fp);
}

// ---- failure injection --------------------------------------------------------------

// Caps the size of any file this process writes, so a save fails partway with EFBIG
// (works as root, where an unwritable directory would not stop us).
static struct rlimit io_test_saved_limit_;
static inline void limit_file_size(rlim_t bytes) {
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &io_test_saved_limit_);
    struct rlimit r = io_test_saved_limit_;
    r.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &r);
}
static inline void unlimit_file_size(void) { setrlimit(RLIMIT_FSIZE, &io_test_saved_limit_); }

// ---- checks -------------------------------------------------------------------------

// The call returned -1 and its message contains every one of the given words.
#define CHECK_ERR(rc, err, what, ...)                                                   \
    do {                                                                                \
        const char *words_[] = {__VA_ARGS__};                                           \
        int ok_ = (rc) == -1;                                                           \
        const char *miss_ = NULL;                                                       \
        for (size_t i_ = 0; i_ < sizeof words_ / sizeof *words_; i_++)                  \
            if (!strstr((err), words_[i_])) {                                           \
                ok_ = 0;                                                                \
                if (!miss_) miss_ = words_[i_];                                         \
            }                                                                           \
        CHECK(ok_, "%s: rc %d, message: %s%s%s%s", what, (int)(rc), (err),             \
              miss_ ? " (MISSING: " : "", miss_ ? miss_ : "", miss_ ? ")" : "");        \
    } while (0)

#endif
