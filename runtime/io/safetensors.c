// safetensors reader and writer (see rt_safetensors.h). The reader trusts nothing in
// the file: a header that passes rt_st_open describes tensors that are all inside the
// data section, contiguous, non-overlapping and sized exactly shape x dtype, so
// rt_st_load only has to compare names, dtypes and shapes.
#include "rt_safetensors.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_atomic.h"
#include "io_err.h"
#include "io_json.h"

// Headers above this are refused (the reference implementation's limit): a corrupt
// length field must not make us allocate gigabytes.
#define ST_MAX_HEADER (100u * 1024u * 1024u)

// ---- dtypes -------------------------------------------------------------------------

static const struct {
    const char *name;
    size_t size;
} dtype_table[RT_ST_N_DTYPES] = {
    [RT_ST_F32] = {"F32", 4}, [RT_ST_BF16] = {"BF16", 2}, [RT_ST_F16] = {"F16", 2},
    [RT_ST_I32] = {"I32", 4}, [RT_ST_I64] = {"I64", 8},   [RT_ST_F64] = {"F64", 8},
    [RT_ST_I16] = {"I16", 2}, [RT_ST_I8] = {"I8", 1},     [RT_ST_U8] = {"U8", 1},
    [RT_ST_BOOL] = {"BOOL", 1},
};

const char *rt_st_dtype_name(rt_st_dtype dt) {
    return (unsigned)dt < RT_ST_N_DTYPES ? dtype_table[dt].name : "?";
}

size_t rt_st_dtype_size(rt_st_dtype dt) {
    return (unsigned)dt < RT_ST_N_DTYPES ? dtype_table[dt].size : 0;
}

int rt_st_dtype_parse(const char *name, rt_st_dtype *out) {
    for (int i = 0; i < RT_ST_N_DTYPES; i++) {
        if (strcmp(name, dtype_table[i].name) == 0) {
            *out = (rt_st_dtype)i;
            return 0;
        }
    }
    return -1;
}

// ---- shared helpers -----------------------------------------------------------------

// Product of dims, -1 on a negative dim or overflow of 2^63.
static int64_t shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

// "[3, 4]" into buf.
static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

// ---- writer -------------------------------------------------------------------------

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

// A JSON string literal, escaping what JSON requires.
static void sb_json_str(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        if (*c == '"' || *c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*c;
            sb_put(b, esc, 2);
        } else if (*c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_tensor_ptr(const void *a, const void *b) {
    return strcmp((*(const rt_st_tensor *const *)a)->name, (*(const rt_st_tensor *const *)b)->name);
}

int rt_st_write(const char *path, const rt_st_tensor *tensors, size_t n,
                const rt_st_meta *meta, size_t n_meta, char *err, size_t errlen) {
    // Validate everything before creating any file.
    for (size_t i = 0; i < n; i++) {
        const rt_st_tensor *t = &tensors[i];
        if (!t->name || !t->name[0])
            return io_errf(err, errlen, "writing '%s': tensor #%zu has an empty name", path, i);
        if (strcmp(t->name, "__metadata__") == 0)
            return io_errf(err, errlen, "writing '%s': '__metadata__' is reserved, not a tensor name",
                           path);
        if ((unsigned)t->dtype >= RT_ST_N_DTYPES)
            return io_errf(err, errlen, "writing '%s': tensor '%s' has invalid dtype %d", path,
                           t->name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > RT_ST_MAX_DIMS || (t->ndim > 0 && !t->shape))
            return io_errf(err, errlen, "writing '%s': tensor '%s' has %d dims (expected 0..%d)",
                           path, t->name, t->ndim, RT_ST_MAX_DIMS);
        int64_t numel = shape_numel(t->ndim, t->shape);
        if (numel < 0 || (uint64_t)numel > UINT64_MAX / 8)
            return io_errf(err, errlen, "writing '%s': tensor '%s' has a negative or too large shape",
                           path, t->name);
        if (numel > 0 && !t->data)
            return io_errf(err, errlen, "writing '%s': tensor '%s' has NULL data", path, t->name);
    }
    for (size_t i = 0; i < n_meta; i++)
        if (!meta[i].key || !meta[i].value)
            return io_errf(err, errlen, "writing '%s': metadata entry #%zu has a NULL key or value",
                           path, i);

    // Sort pointers (qsort has no context argument, and a global would not be
    // thread-safe when ranks save concurrently).
    const rt_st_tensor **order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return io_errf(err, errlen, "writing '%s': out of memory", path);
    for (size_t i = 0; i < n; i++) order[i] = &tensors[i];
    qsort(order, n, sizeof *order, cmp_tensor_ptr);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            int rc = io_errf(err, errlen, "writing '%s': tensor name '%s' given twice", path,
                             order[i]->name);
            free(order);
            return rc;
        }
    }

    // Header JSON: metadata first (as the reference writer does), then tensors by name.
    strbuf h = {0};
    sb_str(&h, "{");
    int first = 1;
    if (n_meta > 0) {
        sb_str(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < n_meta; i++) {
            if (i) sb_str(&h, ",");
            sb_json_str(&h, meta[i].key);
            sb_str(&h, ":");
            sb_json_str(&h, meta[i].value);
        }
        sb_str(&h, "}");
        first = 0;
    }
    uint64_t offset = 0;
    for (size_t k = 0; k < n; k++) {
        const rt_st_tensor *t = order[k];
        uint64_t nbytes = (uint64_t)shape_numel(t->ndim, t->shape) * rt_st_dtype_size(t->dtype);
        char num[64];
        if (!first) sb_str(&h, ",");
        first = 0;
        sb_json_str(&h, t->name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, rt_st_dtype_name(t->dtype));
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            sb_str(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                 (unsigned long long)(offset + nbytes));
        sb_str(&h, num);
        offset += nbytes;
    }
    sb_str(&h, "}");
    while (!h.oom && h.n % 8 != 0) sb_str(&h, " ");  // data starts 8-byte aligned
    if (h.oom) {
        free(h.p);
        free(order);
        return io_errf(err, errlen, "writing '%s': out of memory building the header", path);
    }

    io_atomic a;
    if (io_atomic_open(&a, path, err, errlen) != 0) {
        free(h.p);
        free(order);
        return -1;
    }
    unsigned char len8[8];
    io_put_u64(len8, h.n);
    int rc = io_atomic_write(&a, len8, 8, err, errlen);
    if (rc == 0) rc = io_atomic_write(&a, h.p, h.n, err, errlen);
    for (size_t k = 0; k < n && rc == 0; k++) {
        const rt_st_tensor *t = order[k];
        uint64_t nbytes = (uint64_t)shape_numel(t->ndim, t->shape) * rt_st_dtype_size(t->dtype);
        rc = io_atomic_write(&a, t->data, (size_t)nbytes, err, errlen);
    }
    free(h.p);
    free(order);
    if (rc != 0) {
        io_atomic_abort(&a);
        return -1;
    }
    return io_atomic_commit(&a, err, errlen);
}

// ---- reader -------------------------------------------------------------------------

struct rt_st_file {
    char *path;
    int fd;
    uint64_t data_start;  // 8 + header length
    uint64_t data_len;
    rt_st_info *infos;    // sorted by name
    size_t n;
    rt_st_meta *meta;
    size_t n_meta;
    io_json_doc *doc;     // owns every name / metadata string
};

static int cmp_info_name(const void *a, const void *b) {
    return strcmp(((const rt_st_info *)a)->name, ((const rt_st_info *)b)->name);
}

static int cmp_info_offset(const void *a, const void *b) {
    const rt_st_info *x = *(const rt_st_info *const *)a, *y = *(const rt_st_info *const *)b;
    if (x->data_begin != y->data_begin) return x->data_begin < y->data_begin ? -1 : 1;
    if (x->data_end != y->data_end) return x->data_end < y->data_end ? -1 : 1;
    return 0;
}

// Parses one tensor entry of the header into *info.
static int parse_entry(const char *path, const io_json *e, rt_st_info *info, char *err,
                       size_t errlen) {
    const char *name = e->key;
    if (strlen(name) != e->key_len)
        return io_errf(err, errlen, "'%s': a tensor name contains a NUL character", path);
    info->name = name;
    if (e->type != IO_JSON_OBJECT)
        return io_errf(err, errlen, "'%s': header entry '%s' is %s, expected an object with "
                       "dtype, shape and data_offsets", path, name, io_json_type_name(e->type));
    const io_json *dt = NULL, *sh = NULL, *off = NULL;
    for (const io_json *c = e->child; c; c = c->next) {
        const io_json **slot = strcmp(c->key, "dtype") == 0          ? &dt
                               : strcmp(c->key, "shape") == 0        ? &sh
                               : strcmp(c->key, "data_offsets") == 0 ? &off
                                                                     : NULL;
        if (!slot)
            return io_errf(err, errlen, "'%s': tensor '%s' has unexpected key '%s' (expected "
                           "dtype, shape, data_offsets)", path, name, c->key);
        if (*slot)
            return io_errf(err, errlen, "'%s': tensor '%s' has key '%s' twice", path, name, c->key);
        *slot = c;
    }
    if (!dt || !sh || !off)
        return io_errf(err, errlen, "'%s': tensor '%s' lacks '%s'", path, name,
                       !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (dt->type != IO_JSON_STRING)
        return io_errf(err, errlen, "'%s': tensor '%s' dtype is %s, expected a string", path,
                       name, io_json_type_name(dt->type));
    if (rt_st_dtype_parse(dt->str, &info->dtype) != 0)
        return io_errf(err, errlen, "'%s': tensor '%s' has unsupported dtype \"%s\" (expected "
                       "F32, BF16, F16, F64, I64, I32, I16, I8, U8 or BOOL)", path, name, dt->str);
    if (sh->type != IO_JSON_ARRAY)
        return io_errf(err, errlen, "'%s': tensor '%s' shape is %s, expected an array", path,
                       name, io_json_type_name(sh->type));
    if (sh->n > RT_ST_MAX_DIMS)
        return io_errf(err, errlen, "'%s': tensor '%s' has %zu dims, at most %d supported", path,
                       name, sh->n, RT_ST_MAX_DIMS);
    info->ndim = (int)sh->n;
    uint64_t numel = 1;
    int overflow = 0;
    int d = 0;
    for (const io_json *c = sh->child; c; c = c->next, d++) {
        if (c->type != IO_JSON_NUMBER || !c->is_u64 || c->u64 > (uint64_t)INT64_MAX)
            return io_errf(err, errlen, "'%s': tensor '%s' shape[%d] is %s, expected a "
                           "non-negative integer", path, name, d,
                           c->type == IO_JSON_NUMBER ? c->str : io_json_type_name(c->type));
        info->shape[d] = (int64_t)c->u64;
        if (c->u64 != 0 && numel > UINT64_MAX / c->u64) overflow = 1;
        numel *= c->u64;
    }
    if (off->type != IO_JSON_ARRAY || off->n != 2 || off->child->type != IO_JSON_NUMBER ||
        !off->child->is_u64 || off->child->next->type != IO_JSON_NUMBER ||
        !off->child->next->is_u64)
        return io_errf(err, errlen, "'%s': tensor '%s' data_offsets must be [begin, end] with "
                       "two non-negative integers", path, name);
    info->data_begin = off->child->u64;
    info->data_end = off->child->next->u64;
    if (info->data_end < info->data_begin)
        return io_errf(err, errlen, "'%s': tensor '%s' data_offsets [%llu, %llu] end before they "
                       "begin", path, name, (unsigned long long)info->data_begin,
                       (unsigned long long)info->data_end);
    size_t es = rt_st_dtype_size(info->dtype);
    char sbuf[160];
    if (overflow || numel > UINT64_MAX / es)
        return io_errf(err, errlen, "'%s': tensor '%s' shape %s is too large", path, name,
                       shape_str(info->ndim, info->shape, sbuf, sizeof sbuf));
    info->n_elements = numel;
    info->nbytes = numel * es;
    if (info->nbytes != info->data_end - info->data_begin)
        return io_errf(err, errlen, "'%s': tensor '%s' is %s %s = %llu bytes but data_offsets "
                       "[%llu, %llu] span %llu bytes", path, name, dt->str,
                       shape_str(info->ndim, info->shape, sbuf, sizeof sbuf),
                       (unsigned long long)info->nbytes, (unsigned long long)info->data_begin,
                       (unsigned long long)info->data_end,
                       (unsigned long long)(info->data_end - info->data_begin));
    return 0;
}

// Checks the tensors tile the data section exactly: sorted by offset, each starts where
// the previous ended, the first at 0 and the last at the end of the file.
static int check_layout(rt_st_file *f, char *err, size_t errlen) {
    if (f->n == 0) {
        if (f->data_len != 0)
            return io_errf(err, errlen, "'%s': no tensors but %llu data bytes after the header",
                           f->path, (unsigned long long)f->data_len);
        return 0;
    }
    const rt_st_info **by_off = malloc(f->n * sizeof *by_off);
    if (!by_off) return io_errf(err, errlen, "'%s': out of memory", f->path);
    for (size_t i = 0; i < f->n; i++) by_off[i] = &f->infos[i];
    qsort(by_off, f->n, sizeof *by_off, cmp_info_offset);
    int rc = 0;
    uint64_t expect = 0;
    const rt_st_info *prev = NULL;
    for (size_t i = 0; i < f->n && rc == 0; i++) {
        const rt_st_info *t = by_off[i];
        if (t->data_begin < expect) {
            rc = io_errf(err, errlen, "'%s': tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) "
                         "overlap in the data section", f->path, prev->name,
                         (unsigned long long)prev->data_begin, (unsigned long long)prev->data_end,
                         t->name, (unsigned long long)t->data_begin,
                         (unsigned long long)t->data_end);
        } else if (t->data_begin > expect) {
            rc = io_errf(err, errlen, "'%s': %llu unused bytes before tensor '%s' at data offset "
                         "%llu (expected tensors back to back from offset 0)", f->path,
                         (unsigned long long)(t->data_begin - expect), t->name,
                         (unsigned long long)t->data_begin);
        } else if (t->data_end > f->data_len) {
            rc = io_errf(err, errlen, "'%s' is truncated: tensor '%s' needs data bytes [%llu, %llu) "
                         "but the data section has %llu bytes (file size %llu, expected %llu)",
                         f->path, t->name, (unsigned long long)t->data_begin,
                         (unsigned long long)t->data_end, (unsigned long long)f->data_len,
                         (unsigned long long)(f->data_start + f->data_len),
                         (unsigned long long)(f->data_start + by_off[f->n - 1]->data_end));
        }
        if (t->data_end > expect) {
            expect = t->data_end;
            prev = t;
        } else if (!prev) {
            prev = t;
        }
    }
    if (rc == 0 && expect != f->data_len)
        rc = io_errf(err, errlen, "'%s': %llu unexpected bytes after the last tensor (data "
                     "section is %llu bytes, tensors end at %llu)", f->path,
                     (unsigned long long)(f->data_len - expect), (unsigned long long)f->data_len,
                     (unsigned long long)expect);
    free(by_off);
    return rc;
}

// Reads exactly n bytes at offset; distinguishes a short file from an I/O error.
static int read_at(int fd, const char *path, void *buf, size_t n, uint64_t offset, char *err,
                   size_t errlen) {
    unsigned char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, p + done, n - done, (off_t)(offset + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return IO_SYSERR(err, errlen, "cannot read %zu bytes at offset %llu of '%s'", n,
                             (unsigned long long)offset, path);
        }
        if (r == 0)
            return io_errf(err, errlen, "'%s' is truncated: needed bytes [%llu, %llu) but the "
                           "file ends at %llu", path, (unsigned long long)offset,
                           (unsigned long long)(offset + n),
                           (unsigned long long)(offset + done));
        done += (size_t)r;
    }
    return 0;
}

// Everything after allocation; on failure the caller frees f (after err is formatted,
// since messages point into f's header strings).
static int open_body(rt_st_file *f, const char *path, char *err, size_t errlen) {
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) return IO_SYSERR(err, errlen, "cannot open safetensors file '%s'", path);
    struct stat stt;
    if (fstat(f->fd, &stt) != 0) return IO_SYSERR(err, errlen, "cannot stat '%s'", path);
    uint64_t size = (uint64_t)stt.st_size;
    if (size < 8)
        return io_errf(err, errlen, "'%s' is %llu bytes: too short for a safetensors file (an "
                       "8-byte header length comes first)", path, (unsigned long long)size);
    unsigned char len8[8];
    if (read_at(f->fd, path, len8, 8, 0, err, errlen) != 0) return -1;
    uint64_t hlen = io_get_u64(len8);
    if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > size - 8)
        return io_errf(err, errlen, "'%s': header length field is %llu but the file is %llu bytes "
                       "(expected 2..%llu; not a safetensors file, or truncated)", path,
                       (unsigned long long)hlen, (unsigned long long)size,
                       (unsigned long long)((size - 8) < ST_MAX_HEADER ? size - 8 : ST_MAX_HEADER));
    f->data_start = 8 + hlen;
    f->data_len = size - f->data_start;

    // ---- header JSON
    char *hdr = malloc(hlen);
    if (!hdr)
        return io_errf(err, errlen, "out of memory reading the %llu-byte header of '%s'",
                       (unsigned long long)hlen, path);
    if (read_at(f->fd, path, hdr, hlen, 8, err, errlen) != 0) {
        free(hdr);
        return -1;
    }
    char jerr[200];
    int prc = io_json_parse(hdr, hlen, &f->doc, jerr, sizeof jerr);
    free(hdr);
    if (prc != 0)
        return io_errf(err, errlen, "'%s': header is not valid JSON: %s (header is bytes 8..%llu)",
                       path, jerr, (unsigned long long)f->data_start);
    const io_json *root = io_json_root(f->doc);
    if (root->type != IO_JSON_OBJECT)
        return io_errf(err, errlen, "'%s': header is %s, expected a JSON object", path,
                       io_json_type_name(root->type));

    // ---- entries
    f->infos = calloc(root->n ? root->n : 1, sizeof *f->infos);
    if (!f->infos) return io_errf(err, errlen, "out of memory opening '%s'", path);
    int seen_meta = 0;
    for (const io_json *e = root->child; e; e = e->next) {
        if (strcmp(e->key, "__metadata__") != 0 || strlen(e->key) != e->key_len) {
            if (parse_entry(path, e, &f->infos[f->n], err, errlen) != 0) return -1;
            f->n++;
            continue;
        }
        if (seen_meta++)
            return io_errf(err, errlen, "'%s': header has '__metadata__' twice", path);
        if (e->type != IO_JSON_OBJECT)
            return io_errf(err, errlen, "'%s': __metadata__ is %s, expected an object of "
                           "strings", path, io_json_type_name(e->type));
        f->meta = calloc(e->n ? e->n : 1, sizeof *f->meta);
        if (!f->meta) return io_errf(err, errlen, "out of memory opening '%s'", path);
        for (const io_json *m = e->child; m; m = m->next) {
            if (m->type != IO_JSON_STRING)
                return io_errf(err, errlen, "'%s': __metadata__ value for '%s' is %s, expected "
                               "a string", path, m->key, io_json_type_name(m->type));
            f->meta[f->n_meta].key = m->key;
            f->meta[f->n_meta].value = m->str;
            f->n_meta++;
        }
    }
    qsort(f->infos, f->n, sizeof *f->infos, cmp_info_name);
    for (size_t i = 1; i < f->n; i++)
        if (strcmp(f->infos[i - 1].name, f->infos[i].name) == 0)
            return io_errf(err, errlen, "'%s': tensor '%s' appears twice in the header", path,
                           f->infos[i].name);
    return check_layout(f, err, errlen);
}

int rt_st_open(const char *path, rt_st_file **out, char *err, size_t errlen) {
    *out = NULL;
    rt_st_file *f = calloc(1, sizeof *f);
    if (!f) return io_errf(err, errlen, "out of memory opening '%s'", path);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path) {
        rt_st_close(f);
        return io_errf(err, errlen, "out of memory opening '%s'", path);
    }
    if (open_body(f, path, err, errlen) != 0) {
        rt_st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void rt_st_close(rt_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    io_json_free(f->doc);
    free(f->infos);
    free(f->meta);
    free(f->path);
    free(f);
}

const char *rt_st_path(const rt_st_file *f) { return f->path; }
size_t rt_st_count(const rt_st_file *f) { return f->n; }
const rt_st_info *rt_st_at(const rt_st_file *f, size_t i) { return i < f->n ? &f->infos[i] : NULL; }
size_t rt_st_meta_count(const rt_st_file *f) { return f->n_meta; }
const rt_st_meta *rt_st_meta_at(const rt_st_file *f, size_t i) {
    return i < f->n_meta ? &f->meta[i] : NULL;
}

const char *rt_st_meta_get(const rt_st_file *f, const char *key) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

const rt_st_info *rt_st_find(const rt_st_file *f, const char *name) {
    rt_st_info key;
    key.name = name;
    return bsearch(&key, f->infos, f->n, sizeof *f->infos, cmp_info_name);
}

// ---- load ---------------------------------------------------------------------------

// Edit distance, capped: names are short, and this only runs on the error path.
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 256 || lb > 256) return (size_t)-1;
    size_t row[257];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

// The existing name closest to `name`, if close enough to be a likely typo or a
// prefix mismatch ("model." vs none): distance at most half the longer name.
static const char *closest_name(const rt_st_file *f, const char *name) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < f->n; i++) {
        size_t d = edit_distance(name, f->infos[i].name);
        if (d < best_d) {
            best_d = d;
            best = f->infos[i].name;
        }
    }
    if (!best) return NULL;
    size_t la = strlen(name), lb = strlen(best);
    size_t longer = la > lb ? la : lb;
    return best_d <= longer / 2 ? best : NULL;
}

int rt_st_load(const rt_st_file *f, const char *name, rt_st_dtype dtype, int ndim,
               const int64_t *shape, void *dst, size_t dst_bytes, char *err, size_t errlen) {
    const rt_st_info *t = rt_st_find(f, name);
    if (!t) {
        const char *near = closest_name(f, name);
        if (near)
            return io_errf(err, errlen, "tensor '%s' not found in '%s' (%zu tensors); did you mean "
                           "'%s'?", name, f->path, f->n, near);
        return io_errf(err, errlen, "tensor '%s' not found in '%s' (%zu tensors, none with a "
                       "similar name)", name, f->path, f->n);
    }
    if (t->dtype != dtype)
        return io_errf(err, errlen, "tensor '%s' in '%s' has dtype %s, expected %s", name, f->path,
                       rt_st_dtype_name(t->dtype), rt_st_dtype_name(dtype));
    if (ndim < 0 || ndim > RT_ST_MAX_DIMS || (ndim > 0 && !shape))
        return io_errf(err, errlen, "loading '%s': expected shape has %d dims%s (allowed 0..%d)",
                       name, ndim, ndim > 0 && !shape ? " but no shape array" : "",
                       RT_ST_MAX_DIMS);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char got[160], want[160];
        shape_str(t->ndim, t->shape, got, sizeof got);
        shape_str(ndim, shape, want, sizeof want);
        return io_errf(err, errlen, "tensor '%s' in '%s' has shape %s, expected %s", name, f->path,
                       got, want);
    }
    if (dst_bytes < t->nbytes)
        return io_errf(err, errlen, "tensor '%s' in '%s' is %llu bytes but the destination buffer "
                       "is %zu bytes", name, f->path, (unsigned long long)t->nbytes, dst_bytes);
    if (t->nbytes == 0) return 0;
    if (!dst) return io_errf(err, errlen, "tensor '%s': NULL destination buffer", name);
    return read_at(f->fd, f->path, dst, (size_t)t->nbytes, f->data_start + t->data_begin, err,
                   errlen);
}
