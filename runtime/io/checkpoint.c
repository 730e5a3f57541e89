// Checkpoints for resuming (see rt_checkpoint.h). The invariant: a directory loads only
// if its COMPLETE marker exists, the marker is written after every rank file is durable,
// and it is removed before any rank file of a new save is touched, so a crash at any
// point leaves either the previous complete checkpoint or nothing that loads. Each rank
// file also carries its step (checked against the marker) and two CRC32s (header, and
// payload) so mixed, truncated or damaged files are refused with a clear error.
#include "rt_checkpoint.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_atomic.h"
#include "io_crc32.h"
#include "io_err.h"

// ---- file format --------------------------------------------------------------------

#define CK_MAGIC "FSDPCKPT"
#define CK_FIXED 80                          // fixed header before the blob table
#define CK_ALIGN 64                          // header size and blob offsets
#define CK_MAX_HEADER (64u * 1024u * 1024u)  // refuse absurd header sizes from corruption
#define CK_MAX_NAME 4096
#define CK_MARKER "COMPLETE"

// Fixed header field offsets.
enum {
    OFF_VERSION = 8,
    OFF_HEADER_BYTES = 12,
    OFF_WORLD = 16,
    OFF_RANK = 20,
    OFF_STEP = 24,
    OFF_CURSOR = 32,
    OFF_RNG_SEED = 40,
    OFF_RNG_OFFSET = 48,
    OFF_N_BLOBS = 56,
    OFF_HEADER_CRC = 60,  // CRC32 of the header with this field zeroed
    OFF_PAYLOAD_BYTES = 64,
    OFF_PAYLOAD_CRC = 72,
};

static uint64_t align_up(uint64_t x) { return (x + CK_ALIGN - 1) / CK_ALIGN * CK_ALIGN; }

// ---- paths --------------------------------------------------------------------------

int rt_ckpt_rank_path(const char *dir, int rank, char *buf, size_t buflen) {
    int n = snprintf(buf, buflen, "%s/rank%05d.ckpt", dir, rank);
    return (n < 0 || (size_t)n >= buflen) ? -1 : 0;
}

static int marker_path(const char *dir, char *buf, size_t buflen) {
    int n = snprintf(buf, buflen, "%s/%s", dir, CK_MARKER);
    return (n < 0 || (size_t)n >= buflen) ? -1 : 0;
}

// mkdir -p.
static int make_dirs(const char *dir, char *err, size_t errlen) {
    char p[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) return io_errf(err, errlen, "bad checkpoint directory '%s'", dir);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int rc = IO_SYSERR(err, errlen, "cannot create checkpoint directory '%s'", p);
            return rc;
        }
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0) return IO_SYSERR(err, errlen, "cannot stat '%s'", dir);
    if (!S_ISDIR(st.st_mode))
        return io_errf(err, errlen, "checkpoint path '%s' exists but is not a directory", dir);
    return 0;
}

// ---- save ---------------------------------------------------------------------------

int rt_ckpt_begin(const char *dir, char *err, size_t errlen) {
    if (make_dirs(dir, err, errlen) != 0) return -1;
    char mp[4096];
    if (marker_path(dir, mp, sizeof mp) != 0)
        return io_errf(err, errlen, "checkpoint directory path too long: '%s'", dir);
    if (unlink(mp) != 0 && errno != ENOENT)
        return IO_SYSERR(err, errlen, "cannot remove old marker '%s' before saving", mp);
    // The removal must be on disk before any rank file changes.
    return io_fsync_parent_dir(mp, err, errlen);
}

static int cmp_blob_ptr(const void *a, const void *b) {
    return strcmp((*(const rt_ckpt_blob *const *)a)->name, (*(const rt_ckpt_blob *const *)b)->name);
}

int rt_ckpt_save_rank(const char *dir, int world_size, int rank, const rt_ckpt_state *st,
                      const rt_ckpt_blob *blobs, size_t n_blobs, char *err,
                      size_t errlen) {
    char path[4096];
    if (world_size <= 0 || rank < 0 || rank >= world_size)
        return io_errf(err, errlen, "checkpoint save: rank %d out of range for world size %d",
                       rank, world_size);
    if (rt_ckpt_rank_path(dir, rank, path, sizeof path) != 0)
        return io_errf(err, errlen, "checkpoint directory path too long: '%s'", dir);
    if (n_blobs > UINT32_MAX) return io_errf(err, errlen, "checkpoint save: too many blobs");
    if (!st) return io_errf(err, errlen, "checkpoint save '%s': NULL state", path);
    if (n_blobs > 0 && !blobs) return io_errf(err, errlen, "checkpoint save '%s': NULL blobs", path);

    // ---- validate and lay out before creating the file
    uint64_t header_bytes = CK_FIXED;
    for (size_t i = 0; i < n_blobs; i++) {
        const rt_ckpt_blob *b = &blobs[i];
        size_t len = b->name ? strlen(b->name) : 0;
        if (len == 0 || len > CK_MAX_NAME)
            return io_errf(err, errlen, "checkpoint save '%s': blob #%zu has an empty or too long "
                           "name", path, i);
        size_t es = rt_st_dtype_size(b->dtype);
        if (es == 0)
            return io_errf(err, errlen, "checkpoint save '%s': blob '%s' has invalid dtype %d",
                           path, b->name, (int)b->dtype);
        if (b->count > UINT64_MAX / 16 / es)
            return io_errf(err, errlen, "checkpoint save '%s': blob '%s' count %llu too large",
                           path, b->name, (unsigned long long)b->count);
        if (b->count > 0 && !b->data)
            return io_errf(err, errlen, "checkpoint save '%s': blob '%s' has NULL data", path,
                           b->name);
        header_bytes += 24 + ((len + 7) & ~(size_t)7);
    }
    header_bytes = align_up(header_bytes);
    if (header_bytes > CK_MAX_HEADER)
        return io_errf(err, errlen, "checkpoint save '%s': blob table too large (%llu bytes)",
                       path, (unsigned long long)header_bytes);
    if (n_blobs > 1) {
        const rt_ckpt_blob **sorted = malloc(n_blobs * sizeof *sorted);
        if (!sorted) return io_errf(err, errlen, "checkpoint save '%s': out of memory", path);
        for (size_t i = 0; i < n_blobs; i++) sorted[i] = &blobs[i];
        qsort(sorted, n_blobs, sizeof *sorted, cmp_blob_ptr);
        for (size_t i = 1; i < n_blobs; i++) {
            if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
                int rc = io_errf(err, errlen, "checkpoint save '%s': blob name '%s' given twice",
                                 path, sorted[i]->name);
                free(sorted);
                return rc;
            }
        }
        free(sorted);
    }

    unsigned char *hdr = calloc(1, header_bytes);
    if (!hdr) return io_errf(err, errlen, "checkpoint save '%s': out of memory", path);
    memcpy(hdr, CK_MAGIC, 8);
    io_put_u32(hdr + OFF_VERSION, RT_CKPT_VERSION);
    io_put_u32(hdr + OFF_HEADER_BYTES, (uint32_t)header_bytes);
    io_put_u32(hdr + OFF_WORLD, (uint32_t)world_size);
    io_put_u32(hdr + OFF_RANK, (uint32_t)rank);
    io_put_u64(hdr + OFF_STEP, st->step);
    io_put_u64(hdr + OFF_CURSOR, st->data_cursor);
    io_put_u64(hdr + OFF_RNG_SEED, st->rng_seed);
    io_put_u64(hdr + OFF_RNG_OFFSET, st->rng_offset);
    io_put_u32(hdr + OFF_N_BLOBS, (uint32_t)n_blobs);
    uint64_t payload = 0, pos = CK_FIXED;
    for (size_t i = 0; i < n_blobs; i++) {
        const rt_ckpt_blob *b = &blobs[i];
        size_t len = strlen(b->name);
        io_put_u32(hdr + pos, (uint32_t)len);
        io_put_u32(hdr + pos + 4, (uint32_t)b->dtype);
        io_put_u64(hdr + pos + 8, b->count);
        io_put_u64(hdr + pos + 16, payload);
        memcpy(hdr + pos + 24, b->name, len);
        pos += 24 + ((len + 7) & ~(size_t)7);
        payload = align_up(payload + b->count * rt_st_dtype_size(b->dtype));
    }
    io_put_u64(hdr + OFF_PAYLOAD_BYTES, payload);

    // ---- write: header placeholder, payload (CRC on the way), then the final header
    io_atomic a;
    if (io_atomic_open(&a, path, err, errlen) != 0) {
        free(hdr);
        return -1;
    }
    static const unsigned char zeros[CK_ALIGN];
    int rc = io_atomic_write(&a, hdr, header_bytes, err, errlen);
    uint32_t crc = 0;
    uint64_t written = 0;
    for (size_t i = 0; i < n_blobs && rc == 0; i++) {
        uint64_t nb = blobs[i].count * rt_st_dtype_size(blobs[i].dtype);
        rc = io_atomic_write(&a, blobs[i].data, nb, err, errlen);
        if (nb) crc = io_crc32(crc, blobs[i].data, nb);
        uint64_t pad = align_up(written + nb) - (written + nb);
        if (rc == 0) rc = io_atomic_write(&a, zeros, pad, err, errlen);
        crc = io_crc32(crc, zeros, pad);
        written = align_up(written + nb);
    }
    if (rc == 0) {
        io_put_u32(hdr + OFF_PAYLOAD_CRC, crc);
        io_put_u32(hdr + OFF_HEADER_CRC, io_crc32(0, hdr, header_bytes));
        rc = io_atomic_pwrite(&a, 0, hdr, CK_FIXED, err, errlen);
    }
    free(hdr);
    if (rc != 0) {
        io_atomic_abort(&a);
        return -1;
    }
    return io_atomic_commit(&a, err, errlen);
}

// ---- reading a rank file's header ---------------------------------------------------

typedef struct {
    const char *name;
    rt_st_dtype dtype;
    uint64_t count, offset, nbytes;
} ck_entry;

typedef struct {
    uint32_t world, rank, n_blobs, header_bytes, payload_crc;
    uint64_t step, data_cursor, rng_seed, rng_offset, payload_bytes;
    ck_entry *e;   // table order == offset order
    char *names;   // NUL-terminated names the entries point into
} ck_header;

static void ck_header_free(ck_header *h) {
    free(h->e);
    free(h->names);
    h->e = NULL;
    h->names = NULL;
}

static int read_full(int fd, const char *path, void *buf, size_t n, uint64_t off, char *err,
                     size_t errlen) {
    unsigned char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, p + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return IO_SYSERR(err, errlen, "cannot read checkpoint file '%s' at offset %llu", path,
                             (unsigned long long)(off + done));
        if (r == 0)
            return io_errf(err, errlen, "checkpoint file '%s' is truncated at byte %llu (needed "
                           "%llu)", path, (unsigned long long)(off + done),
                           (unsigned long long)(off + n));
        done += (size_t)r;
    }
    return 0;
}

// Reads and checks everything that does not depend on the caller: magic, version,
// header CRC, table bounds and order, and the file size.
static int read_header(int fd, const char *path, ck_header *h, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    struct stat st;
    if (fstat(fd, &st) != 0) return IO_SYSERR(err, errlen, "cannot stat '%s'", path);
    uint64_t size = (uint64_t)st.st_size;
    if (size < CK_FIXED)
        return io_errf(err, errlen, "checkpoint file '%s' is truncated: %llu bytes, shorter than "
                       "the %d-byte header", path, (unsigned long long)size, CK_FIXED);
    unsigned char fixed[CK_FIXED];
    if (read_full(fd, path, fixed, CK_FIXED, 0, err, errlen) != 0) return -1;
    if (memcmp(fixed, CK_MAGIC, 8) != 0)
        return io_errf(err, errlen, "'%s' is not an fsdpgen checkpoint file (magic bytes are not "
                       "\"%s\")", path, CK_MAGIC);
    uint32_t version = io_get_u32(fixed + OFF_VERSION);
    if (version != RT_CKPT_VERSION)
        return io_errf(err, errlen, "checkpoint file '%s' has format version %u, this runtime "
                       "reads version %d", path, version, RT_CKPT_VERSION);
    h->header_bytes = io_get_u32(fixed + OFF_HEADER_BYTES);
    if (h->header_bytes < CK_FIXED || h->header_bytes > CK_MAX_HEADER ||
        h->header_bytes % CK_ALIGN != 0)
        return io_errf(err, errlen, "checkpoint file '%s' is corrupt: header size field is %u",
                       path, h->header_bytes);
    if (h->header_bytes > size)
        return io_errf(err, errlen, "checkpoint file '%s' is truncated: %llu bytes, but its header "
                       "alone is %u bytes", path, (unsigned long long)size, h->header_bytes);
    unsigned char *hdr = malloc(h->header_bytes);
    if (!hdr) return io_errf(err, errlen, "out of memory reading '%s'", path);
    if (read_full(fd, path, hdr, h->header_bytes, 0, err, errlen) != 0) {
        free(hdr);
        return -1;
    }
    uint32_t want_crc = io_get_u32(hdr + OFF_HEADER_CRC);
    io_put_u32(hdr + OFF_HEADER_CRC, 0);
    uint32_t got_crc = io_crc32(0, hdr, h->header_bytes);
    if (got_crc != want_crc) {
        free(hdr);
        return io_errf(err, errlen, "checkpoint file '%s' is corrupt: header CRC32 is 0x%08x, "
                       "recorded 0x%08x", path, got_crc, want_crc);
    }
    h->world = io_get_u32(hdr + OFF_WORLD);
    h->rank = io_get_u32(hdr + OFF_RANK);
    h->step = io_get_u64(hdr + OFF_STEP);
    h->data_cursor = io_get_u64(hdr + OFF_CURSOR);
    h->rng_seed = io_get_u64(hdr + OFF_RNG_SEED);
    h->rng_offset = io_get_u64(hdr + OFF_RNG_OFFSET);
    h->n_blobs = io_get_u32(hdr + OFF_N_BLOBS);
    h->payload_bytes = io_get_u64(hdr + OFF_PAYLOAD_BYTES);
    h->payload_crc = io_get_u32(hdr + OFF_PAYLOAD_CRC);

    // The header CRC matched, so anything wrong below was written that way: still
    // check it, a future writer bug must not turn into out-of-bounds reads.
    int rc = 0;
    if ((uint64_t)h->n_blobs * 24 > h->header_bytes - CK_FIXED)
        rc = io_errf(err, errlen, "checkpoint file '%s' is corrupt: %u blobs cannot fit in a "
                     "%u-byte header", path, h->n_blobs, h->header_bytes);
    if (rc == 0) {
        h->e = calloc(h->n_blobs ? h->n_blobs : 1, sizeof *h->e);
        h->names = malloc(h->header_bytes);
        if (!h->e || !h->names) rc = io_errf(err, errlen, "out of memory reading '%s'", path);
    }
    uint64_t pos = CK_FIXED, names_used = 0, next_off = 0;
    for (uint32_t i = 0; i < h->n_blobs && rc == 0; i++) {
        if (pos + 24 > h->header_bytes) {
            rc = io_errf(err, errlen, "checkpoint file '%s' is corrupt: blob table overruns the "
                         "header", path);
            break;
        }
        uint32_t len = io_get_u32(hdr + pos);
        uint32_t dt = io_get_u32(hdr + pos + 4);
        ck_entry *e = &h->e[i];
        e->count = io_get_u64(hdr + pos + 8);
        e->offset = io_get_u64(hdr + pos + 16);
        if (len == 0 || len > CK_MAX_NAME || pos + 24 + len > h->header_bytes) {
            rc = io_errf(err, errlen, "checkpoint file '%s' is corrupt: blob #%u name length %u",
                         path, i, len);
            break;
        }
        memcpy(h->names + names_used, hdr + pos + 24, len);
        h->names[names_used + len] = '\0';
        e->name = h->names + names_used;
        names_used += len + 1;
        size_t es = rt_st_dtype_size((rt_st_dtype)dt);
        if (es == 0 || e->count > UINT64_MAX / 16 / es) {
            rc = io_errf(err, errlen, "checkpoint file '%s' is corrupt: blob '%s' has dtype code "
                         "%u and count %llu", path, e->name, dt, (unsigned long long)e->count);
            break;
        }
        e->dtype = (rt_st_dtype)dt;
        e->nbytes = e->count * es;
        if (e->offset < next_off || e->offset > h->payload_bytes ||
            e->nbytes > h->payload_bytes - e->offset) {
            rc = io_errf(err, errlen, "checkpoint file '%s' is corrupt: blob '%s' at payload "
                         "offset %llu (%llu bytes) overlaps another or lies outside the %llu-byte "
                         "payload", path, e->name, (unsigned long long)e->offset,
                         (unsigned long long)e->nbytes, (unsigned long long)h->payload_bytes);
            break;
        }
        next_off = e->offset + e->nbytes;
        pos += 24 + ((len + 7u) & ~7u);
    }
    free(hdr);
    if (rc == 0) {
        uint64_t want = (uint64_t)h->header_bytes + h->payload_bytes;
        if (size < want)
            rc = io_errf(err, errlen, "checkpoint file '%s' is truncated: %llu bytes, its header "
                         "says %llu", path, (unsigned long long)size, (unsigned long long)want);
        else if (size > want)
            rc = io_errf(err, errlen, "checkpoint file '%s' has %llu unexpected bytes past the "
                         "%llu its header describes", path, (unsigned long long)(size - want),
                         (unsigned long long)want);
    }
    if (rc != 0) ck_header_free(h);
    return rc;
}

// Opens and checks one rank file against the expected world size, rank and step.
static int open_rank(const char *dir, int world_size, int rank, uint64_t step, int *fd_out,
                     ck_header *h, char *err, size_t errlen) {
    char path[4096];
    if (rt_ckpt_rank_path(dir, rank, path, sizeof path) != 0)
        return io_errf(err, errlen, "checkpoint directory path too long: '%s'", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return io_errf(err, errlen, "checkpoint '%s' is missing rank file '%s' (expected one "
                           "file per rank for world size %d)", dir, path, world_size);
        return IO_SYSERR(err, errlen, "cannot open checkpoint file '%s'", path);
    }
    int rc = read_header(fd, path, h, err, errlen);
    if (rc == 0) {
        if (h->world != (uint32_t)world_size)
            rc = io_errf(err, errlen, "checkpoint file '%s' was saved with world size %u, this run "
                         "has world size %d", path, h->world, world_size);
        else if (h->rank != (uint32_t)rank)
            rc = io_errf(err, errlen, "checkpoint file '%s' holds rank %u, expected rank %d", path,
                         h->rank, rank);
        else if (h->step != step)
            rc = io_errf(err, errlen, "checkpoint file '%s' is from step %llu but the checkpoint "
                         "marker says step %llu (left over from another save?)", path,
                         (unsigned long long)h->step, (unsigned long long)step);
        if (rc != 0) ck_header_free(h);
    }
    if (rc != 0) {
        close(fd);
        return -1;
    }
    *fd_out = fd;
    return 0;
}

// ---- marker -------------------------------------------------------------------------

int rt_ckpt_finish(const char *dir, int world_size, uint64_t step, char *err,
                   size_t errlen) {
    if (world_size <= 0)
        return io_errf(err, errlen, "checkpoint finish: world size %d must be > 0", world_size);
    for (int r = 0; r < world_size; r++) {
        int fd;
        ck_header h;
        if (open_rank(dir, world_size, r, step, &fd, &h, err, errlen) != 0) return -1;
        ck_header_free(&h);
        close(fd);
    }
    char mp[4096], text[128];
    if (marker_path(dir, mp, sizeof mp) != 0)
        return io_errf(err, errlen, "checkpoint directory path too long: '%s'", dir);
    int n = snprintf(text, sizeof text, "fsdpgen checkpoint %d\nworld_size %d\nstep %llu\n",
                     RT_CKPT_VERSION, world_size, (unsigned long long)step);
    return io_atomic_write_file(mp, text, (size_t)n, err, errlen);
}

int rt_ckpt_probe(const char *dir, int *world_size, uint64_t *step, char *err,
                  size_t errlen) {
    char mp[4096];
    if (marker_path(dir, mp, sizeof mp) != 0)
        return io_errf(err, errlen, "checkpoint directory path too long: '%s'", dir);
    FILE *fp = fopen(mp, "rb");
    if (!fp) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return IO_SYSERR(err, errlen, "cannot read checkpoint marker '%s'", mp);
    }
    char text[256];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = '\0';
    int version = 0, ws = 0, used = 0;
    unsigned long long s = 0;
    if (sscanf(text, "fsdpgen checkpoint %d\nworld_size %d\nstep %llu\n%n", &version, &ws, &s,
               &used) != 3 ||
        (size_t)used != n || version != RT_CKPT_VERSION || ws <= 0)
        return io_errf(err, errlen, "checkpoint marker '%s' is malformed (expected \"fsdpgen "
                       "checkpoint %d\", \"world_size W\", \"step S\" lines)", mp,
                       RT_CKPT_VERSION);
    if (world_size) *world_size = ws;
    if (step) *step = s;
    return 1;
}

// ---- load ---------------------------------------------------------------------------

static int cmp_slot_ptr(const void *a, const void *b) {
    return strcmp((*(const rt_ckpt_slot *const *)a)->name, (*(const rt_ckpt_slot *const *)b)->name);
}

// Index of slot `name` among slots sorted by name, or -1.
static long find_slot(const rt_ckpt_slot **sorted, size_t n, const char *name) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(sorted[mid]->name, name);
        if (c == 0) return (long)mid;
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return -1;
}

int rt_ckpt_load_rank(const char *dir, int world_size, int rank, rt_ckpt_state *st,
                      const rt_ckpt_slot *slots, size_t n_slots, char *err,
                      size_t errlen) {
    int mw = 0;
    uint64_t mstep = 0;
    int pr = rt_ckpt_probe(dir, &mw, &mstep, err, errlen);
    if (pr < 0) return -1;
    if (pr == 0)
        return io_errf(err, errlen, "no complete checkpoint in '%s': '%s/%s' is missing (the "
                       "save did not finish, or this is not a checkpoint directory)", dir, dir,
                       CK_MARKER);
    if (mw != world_size)
        return io_errf(err, errlen, "checkpoint '%s' was saved with world size %d, this run has "
                       "world size %d (resharding on load is not supported)", dir, mw, world_size);
    if (rank < 0 || rank >= world_size)
        return io_errf(err, errlen, "checkpoint load: rank %d out of range for world size %d",
                       rank, world_size);
    char path[4096];
    rt_ckpt_rank_path(dir, rank, path, sizeof path);
    int fd;
    ck_header h;
    if (open_rank(dir, world_size, rank, mstep, &fd, &h, err, errlen) != 0) return -1;

    // ---- the blob table must match the slots exactly
    const rt_ckpt_slot **sorted = malloc((n_slots ? n_slots : 1) * sizeof *sorted);
    const rt_ckpt_slot **by_entry = calloc(h.n_blobs ? h.n_blobs : 1, sizeof *by_entry);
    unsigned char *used = calloc(n_slots ? n_slots : 1, 1);  // per sorted slot
    unsigned char *scratch = malloc(1 << 16);
    int rc = 0;
    if (!sorted || !by_entry || !used || !scratch)
        rc = io_errf(err, errlen, "out of memory loading '%s'", path);
    for (size_t i = 0; i < n_slots && rc == 0; i++) {
        if (!slots[i].name)
            rc = io_errf(err, errlen, "checkpoint load '%s': slot #%zu has no name", path, i);
        sorted[i] = &slots[i];
    }
    if (rc == 0) qsort(sorted, n_slots, sizeof *sorted, cmp_slot_ptr);
    for (size_t i = 1; i < n_slots && rc == 0; i++)
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0)
            rc = io_errf(err, errlen, "checkpoint load '%s': slot '%s' requested twice", path,
                         sorted[i]->name);
    for (uint32_t i = 0; i < h.n_blobs && rc == 0; i++) {
        const ck_entry *e = &h.e[i];
        long k = find_slot(sorted, n_slots, e->name);
        const rt_ckpt_slot *s = k >= 0 ? sorted[k] : NULL;
        if (!s)
            rc = io_errf(err, errlen, "checkpoint file '%s' has blob '%s' that this run does not "
                         "expect (saved from a different model or config?)", path, e->name);
        else if (used[k])
            rc = io_errf(err, errlen, "checkpoint file '%s' is corrupt: blob '%s' appears twice",
                         path, e->name);
        else if (s->dtype != e->dtype || s->count != e->count)
            rc = io_errf(err, errlen, "checkpoint file '%s': blob '%s' has %llu %s elements, "
                         "expected %llu %s", path, e->name, (unsigned long long)e->count,
                         rt_st_dtype_name(e->dtype), (unsigned long long)s->count,
                         rt_st_dtype_name(s->dtype));
        else if (s->count > 0 && !s->data)
            rc = io_errf(err, errlen, "checkpoint load '%s': slot '%s' has NULL data", path,
                         s->name);
        if (rc == 0) {
            used[k] = 1;
            by_entry[i] = s;
        }
    }
    for (size_t i = 0; i < n_slots && rc == 0; i++)
        if (!used[i])
            rc = io_errf(err, errlen, "checkpoint file '%s' has no blob '%s' (it holds %u blobs; "
                         "saved from a different model or config?)", path, sorted[i]->name,
                         h.n_blobs);

    // ---- stream the payload into the slots, checksumming every byte
    uint32_t crc = 0;
    uint64_t pos = 0;  // payload offset
    for (uint32_t i = 0; i <= h.n_blobs && rc == 0; i++) {
        uint64_t until = i < h.n_blobs ? h.e[i].offset : h.payload_bytes;
        while (pos < until && rc == 0) {  // padding between blobs
            size_t k = (size_t)(until - pos < (1 << 16) ? until - pos : (1 << 16));
            rc = read_full(fd, path, scratch, k, h.header_bytes + pos, err, errlen);
            if (rc == 0) crc = io_crc32(crc, scratch, k);
            pos += k;
        }
        if (i == h.n_blobs || rc != 0) break;
        const ck_entry *e = &h.e[i];
        if (e->nbytes > 0) {
            rc = read_full(fd, path, by_entry[i]->data, (size_t)e->nbytes, h.header_bytes + pos,
                           err, errlen);
            if (rc == 0) crc = io_crc32(crc, by_entry[i]->data, (size_t)e->nbytes);
        }
        pos += e->nbytes;
    }
    if (rc == 0 && crc != h.payload_crc)
        rc = io_errf(err, errlen, "checkpoint file '%s' is corrupt: payload CRC32 is 0x%08x, its "
                     "header recorded 0x%08x", path, crc, h.payload_crc);
    if (rc == 0 && st) {
        st->step = h.step;
        st->data_cursor = h.data_cursor;
        st->rng_seed = h.rng_seed;
        st->rng_offset = h.rng_offset;
    }
    free(sorted);
    free(by_entry);
    free(used);
    free(scratch);
    ck_header_free(&h);
    close(fd);
    return rc;
}
