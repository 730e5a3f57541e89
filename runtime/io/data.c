// Token data (see rt_data.h): the file is mapped read-only, validated once at open
// (length, format, every token < vocab), after which a batch fetch is pure index
// arithmetic and cannot fail on the data itself.
#include "rt_data.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_err.h"

// ---- state --------------------------------------------------------------------------

struct rt_data {
    char *path;
    int u16;                   // little-endian uint16 tokens, else one byte per token
    const unsigned char *map;  // the whole file
    size_t map_len;
    int64_t n;                 // tokens
    int64_t vocab_size;
    int64_t seq_len;
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static inline int32_t token_at(const rt_data *d, int64_t i) {
    if (d->u16) return (int32_t)(d->map[2 * i] | (uint32_t)d->map[2 * i + 1] << 8);
    return (int32_t)d->map[i];
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
    int u16 = ends_with(path, ".u16");
    const char *fmt = u16 ? "2-byte little-endian tokens, as the name ends in .u16"
                          : "1-byte tokens, as the name does not end in .u16";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IO_SYSERR(err, errlen, "cannot open token file '%s'", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = IO_SYSERR(err, errlen, "cannot stat token file '%s'", path);
        close(fd);
        return rc;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size == 0) {
        close(fd);
        return io_errf(err, errlen, "token file '%s' is empty (expected %s)", path, fmt);
    }
    if (u16 && size % 2 != 0) {
        close(fd);
        return io_errf(err, errlen, "token file '%s' has an odd length of %llu bytes (expected %s; "
                       "truncated?)", path, (unsigned long long)size, fmt);
    }
    int64_t n = (int64_t)(u16 ? size / 2 : size);
    if (n <= seq_len) {
        close(fd);
        return io_errf(err, errlen, "token file '%s' has %lld tokens, but sequences of %lld "
                       "tokens need at least %lld (T inputs + 1 shifted target)", path,
                       (long long)n, (long long)seq_len, (long long)seq_len + 1);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        int rc = IO_SYSERR(err, errlen, "cannot map token file '%s' (%llu bytes)", path,
                           (unsigned long long)size);
        close(fd);
        return rc;
    }
    close(fd);  // the mapping keeps the file
    // Training reads the file front to back in strides; tell the kernel.
    madvise(map, (size_t)size, MADV_SEQUENTIAL);

    rt_data *d = calloc(1, sizeof *d);
    char *p = strdup(path);
    if (!d || !p) {
        free(d);
        free(p);
        munmap(map, (size_t)size);
        return io_errf(err, errlen, "out of memory opening token file '%s'", path);
    }
    d->path = p;
    d->u16 = u16;
    d->map = map;
    d->map_len = (size_t)size;
    d->n = n;
    d->vocab_size = vocab_size;
    d->seq_len = seq_len;

    // ---- every token < vocab: a bad token would index outside the embedding table.
    int64_t limit = u16 ? 65536 : 256;
    if (vocab_size < limit) {
        for (int64_t i = 0; i < n; i++) {
            int32_t t = token_at(d, i);
            if (t >= vocab_size) {
                int rc = io_errf(err, errlen, "token file '%s': token %d at token offset %lld "
                                 "(byte offset %lld) is out of range for vocab size %lld "
                                 "(expected 0..%lld)", path, t, (long long)i,
                                 (long long)(u16 ? 2 * i : i), (long long)vocab_size,
                                 (long long)vocab_size - 1);
                rt_data_close(d);
                return rc;
            }
        }
    }
    *out = d;
    return 0;
}

void rt_data_close(rt_data *d) {
    if (!d) return;
    if (d->map) munmap((void *)d->map, d->map_len);
    free(d->path);
    free(d);
}

int64_t rt_data_n_tokens(const rt_data *d) { return d->n; }

int32_t rt_data_token(const rt_data *d, int64_t i) {
    return (i >= 0 && i < d->n) ? token_at(d, i) : -1;
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
        // o + T <= N - 1, so targets o+1..o+T stay inside the file.
        for (int64_t t = 0; t < T; t++) {
            in[t] = token_at(d, o + t);
            tg[t] = token_at(d, o + t + 1);
        }
    }
    return 0;
}
