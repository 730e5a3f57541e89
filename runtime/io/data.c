// Token data (see rt_data.h): the file is validated once at open (a regular file, its
// length and format, every token < vocab), and each batch is read with pread and checked
// again as it is read.
//
// Why pread and not mmap: the file can change under a run (truncated, rewritten). A
// mapped page past a truncation faults with SIGBUS, a process-wide signal that cannot be
// turned into an error of the rank that touched it without longjmp out of a fault; a
// short pread is an ordinary error return, and the tokens of a rewritten file are
// checked against the vocab as they are read, so either change ends the run with the
// usual one-line message instead of a crash or an out-of-range embedding index.
#include "rt_data.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_err.h"

// ---- state --------------------------------------------------------------------------

struct rt_data {
    char *path;
    int fd;
    int width;                 // bytes per token: 1, or little-endian 2 (.u16) or 4 (.u32)
    uint64_t size;             // bytes at open
    int64_t n;                 // tokens
    int64_t vocab_size;
    int64_t seq_len;
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

// Reads tokens [first, first + count) into out (count > 0), checking each < vocab.
// pread is safe from every rank thread at once (no shared file position).
static int read_tokens(const rt_data *d, int64_t first, int64_t count, int32_t *out,
                       char *err, size_t errlen) {
    const int w = d->width;
    unsigned char buf[4096];
    int64_t done = 0;
    while (done < count) {
        int64_t k = count - done < (int64_t)sizeof buf / w ? count - done : (int64_t)sizeof buf / w;
        uint64_t off = (uint64_t)(first + done) * (uint64_t)w;
        size_t got = 0;
        while (got < (size_t)(k * w)) {
            ssize_t r = pread(d->fd, buf + got, (size_t)(k * w) - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0)
                return IO_SYSERR(err, errlen, "cannot read token file '%s' at byte offset %llu",
                                 d->path, (unsigned long long)(off + got));
            if (r == 0)
                return io_errf(err, errlen, "token file '%s': nothing to read at byte offset "
                               "%llu, the file is shorter than the %llu bytes it had when opened "
                               "(truncated during the run?)", d->path,
                               (unsigned long long)(off + got), (unsigned long long)d->size);
            got += (size_t)r;
        }
        for (int64_t i = 0; i < k; i++) {
            uint32_t u = 0;
            for (int j = w - 1; j >= 0; j--) u = u << 8 | buf[w * i + j];
            if (u >= (uint64_t)d->vocab_size) {
                const long long t = (long long)u;
                int64_t at = first + done + i;
                return io_errf(err, errlen, "token file '%s': token %lld at token offset %lld (byte "
                               "offset %lld) is out of range for vocab size %lld (expected "
                               "0..%lld)", d->path, t, (long long)at, (long long)at * w,
                               (long long)d->vocab_size, (long long)d->vocab_size - 1);
            }
            out[done + i] = (int32_t)u;
        }
        done += k;
    }
    return 0;
}

// ---- open / close -------------------------------------------------------------------

int rt_data_open(const char *path, int64_t vocab_size, int64_t seq_len, rt_data **out,
                 char *err, size_t errlen) {
    *out = NULL;
    if (vocab_size <= 0)
        return io_errf(err, errlen, "token file '%s': vocab size must be > 0, got %lld", path,
                       (long long)vocab_size);
    if (seq_len <= 0)
        return io_errf(err, errlen, "token file '%s': sequence length must be > 0, got %lld",
                       path, (long long)seq_len);
    const int width = ends_with(path, ".u16") ? 2 : ends_with(path, ".u32") ? 4 : 1;
    const char *fmt = width == 2   ? "2-byte little-endian tokens, as the name ends in .u16"
                      : width == 4 ? "4-byte little-endian tokens, as the name ends in .u32"
                                   : "1-byte tokens, as the name ends in neither .u16 nor .u32";
    // O_NONBLOCK: opening a FIFO without a writer would otherwise block forever; the
    // fstat below then refuses anything but a regular file.
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return IO_SYSERR(err, errlen, "cannot open token file '%s'", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = IO_SYSERR(err, errlen, "cannot stat token file '%s'", path);
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return io_errf(err, errlen, "token file '%s' is %s, not a regular file (every step "
                       "re-reads the data: give a file of %s)", path, io_file_kind(st.st_mode),
                       fmt);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    uint64_t size = (uint64_t)st.st_size;
    if (size == 0) {
        close(fd);
        return io_errf(err, errlen, "token file '%s' is empty (expected %s)", path, fmt);
    }
    if (size % (uint64_t)width != 0) {
        close(fd);
        return io_errf(err, errlen, "token file '%s' has a length of %llu bytes, not a multiple of %d "
                       "(expected %s; truncated?)", path, (unsigned long long)size, width, fmt);
    }
    int64_t n = (int64_t)(size / (uint64_t)width);
    if (n <= seq_len) {
        close(fd);
        return io_errf(err, errlen, "token file '%s' has %lld tokens, but sequences of %lld "
                       "tokens need at least %lld (T inputs + 1 shifted target)", path,
                       (long long)n, (long long)seq_len, (long long)seq_len + 1);
    }
    rt_data *d = calloc(1, sizeof *d);
    char *p = strdup(path);
    if (!d || !p) {
        free(d);
        free(p);
        close(fd);
        return io_errf(err, errlen, "out of memory opening token file '%s'", path);
    }
    d->path = p;
    d->fd = fd;
    d->width = width;
    d->size = size;
    d->n = n;
    d->vocab_size = vocab_size;
    d->seq_len = seq_len;

    // ---- every token < vocab now, so a bad file is reported before training starts (a
    // token >= vocab would index outside the embedding table).
    // Where every value the width holds is a token, there is nothing to check. A .u16 file
    // cannot hold a vocabulary above 65536 (Llama 3's 128256): refused, as a writer that
    // narrowed its ids would have wrapped them into other, valid-looking tokens.
    if (width == 2 && vocab_size > 65536) {
        rt_data_close(d);
        return io_errf(err, errlen, "token file '%s' holds 2-byte tokens (.u16), which cannot hold "
                       "the vocabulary of %lld tokens (ids up to 65535): write the tokens as a .u32 "
                       "file (4-byte little-endian)", path, (long long)vocab_size);
    }
    const int64_t limit = width == 1 ? 256 : width == 2 ? 65536 : INT32_MAX;
    if (vocab_size < limit) {
        enum { CHUNK = 1 << 16 };
        int32_t *tok = malloc(CHUNK * sizeof *tok);
        if (!tok) {
            rt_data_close(d);
            return io_errf(err, errlen, "out of memory opening token file '%s'", path);
        }
        for (int64_t i = 0; i < n; i += CHUNK) {
            if (read_tokens(d, i, n - i < CHUNK ? n - i : CHUNK, tok, err, errlen) != 0) {
                free(tok);
                rt_data_close(d);
                return -1;
            }
        }
        free(tok);
    }
    *out = d;
    return 0;
}

void rt_data_close(rt_data *d) {
    if (!d) return;
    close(d->fd);
    free(d->path);
    free(d);
}

int64_t rt_data_n_tokens(const rt_data *d) { return d->n; }

int32_t rt_data_token(const rt_data *d, int64_t i) {
    int32_t t = -1;
    if (i < 0 || i >= d->n || read_tokens(d, i, 1, &t, NULL, 0) != 0) return -1;
    return t;
}

// ---- batches ------------------------------------------------------------------------

int64_t rt_data_offset(const rt_data_shape *shape, int64_t n_tokens, int64_t step,
                       int64_t micro, int64_t rank, int64_t row) {
    if (shape->world_size <= 0 || shape->n_micro <= 0 || shape->batch <= 0 ||
        shape->seq_len <= 0 || n_tokens <= shape->seq_len || step < 0 || micro < 0 ||
        rank < 0 || row < 0)
        return -1;  // mod by zero or a negative index: no valid offset
    // ((((s*A + a)*W + r)*B + b)*T) mod M, reducing mod M after each step: exact, since
    // (x*k + c) mod M == ((x mod M)*k + c) mod M and every partial fits in 128 bits.
    unsigned __int128 m = (unsigned __int128)(uint64_t)(n_tokens - shape->seq_len);
    unsigned __int128 x = (uint64_t)step % m;
    x = (x * (uint64_t)shape->n_micro + (uint64_t)micro) % m;
    x = (x * (uint64_t)shape->world_size + (uint64_t)rank) % m;
    x = (x * (uint64_t)shape->batch + (uint64_t)row) % m;
    x = (x * (uint64_t)shape->seq_len) % m;
    return (int64_t)x;
}

int rt_data_batch(const rt_data *d, const rt_data_shape *shape, int64_t step,
                  int64_t micro, int64_t rank, int32_t *inputs, int32_t *targets,
                  char *err, size_t errlen) {
    if (shape->world_size <= 0 || shape->n_micro <= 0 || shape->batch <= 0 ||
        shape->seq_len <= 0)
        return io_errf(err, errlen, "token batch from '%s': world_size %lld, n_micro %lld, batch "
                       "%lld, seq_len %lld must all be > 0", d->path,
                       (long long)shape->world_size, (long long)shape->n_micro,
                       (long long)shape->batch, (long long)shape->seq_len);
    if (shape->seq_len != d->seq_len)
        return io_errf(err, errlen, "token batch from '%s': seq_len %lld, but the file was opened "
                       "for seq_len %lld", d->path, (long long)shape->seq_len,
                       (long long)d->seq_len);
    if (step < 0 || micro < 0 || micro >= shape->n_micro || rank < 0 ||
        rank >= shape->world_size)
        return io_errf(err, errlen, "token batch from '%s': step %lld, microbatch %lld, rank %lld "
                       "out of range (expected step >= 0, microbatch < %lld, rank < %lld)",
                       d->path, (long long)step, (long long)micro, (long long)rank,
                       (long long)shape->n_micro, (long long)shape->world_size);
    if (!inputs || !targets)
        return io_errf(err, errlen, "token batch from '%s': NULL inputs or targets buffer", d->path);
    const int64_t T = shape->seq_len;
    for (int64_t b = 0; b < shape->batch; b++) {
        int64_t o = rt_data_offset(shape, d->n, step, micro, rank, b);
        int32_t *in = inputs + b * T, *tg = targets + b * T;
        // o + T <= N - 1, so targets o+1..o+T stay inside the file (as it was at open).
        int32_t last;
        if (read_tokens(d, o, T, in, err, errlen) != 0 ||
            read_tokens(d, o + T, 1, &last, err, errlen) != 0)
            return -1;
        memcpy(tg, in + 1, (size_t)(T - 1) * sizeof *tg);
        tg[T - 1] = last;
    }
    return 0;
}
