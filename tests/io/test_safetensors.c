// Tests for the safetensors reader/writer and the JSON parser under it: round trips of
// every dtype, deterministic and atomic output, the errors a user sees for missing /
// misnamed / misshaped tensors, and rejection of hand-made corrupt files.
#include <errno.h>
#include <stdint.h>
#include <sys/sysmacros.h>

#include "io_json.h"
#include "io_test.h"
#include "rt_safetensors.h"

static char err[512];

// A file from a literal header and data bytes, as another writer might produce it.
static void write_raw(const char *path, const char *header, const void *data, size_t n) {
    size_t h = strlen(header);
    unsigned char *buf = malloc(8 + h + n + 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    if (n) memcpy(buf + 8 + h, data, n);
    write_bytes(path, buf, 8 + h + n);
    free(buf);
}

// Opens `path` expecting failure with the given words in the message.
#define OPEN_FAILS(path, what, ...)                      \
    do {                                                 \
        rt_st_file *f_ = NULL;                           \
        int rc_ = rt_st_open(path, &f_, err, sizeof err); \
        CHECK_ERR(rc_, err, what, __VA_ARGS__);          \
        CHECK(f_ == NULL, "%s: no handle returned", what); \
        rt_st_close(f_);                                 \
    } while (0)

// ---- JSON parser --------------------------------------------------------------------

static void test_json(void) {
    io_json_doc *doc;
    const char *ok = " {\"a\": [1, -2.5e3, 18446744073709551615, 18446744073709551616], "
                     "\"s\": \"x\\n\\u00e9\\ud83d\\ude00\\\"\", \"t\": true, \"n\": null} ";
    int rc = io_json_parse(ok, strlen(ok), &doc, err, sizeof err);
    CHECK(rc == 0, "json: valid document parses (%s)", rc ? err : "ok");
    if (rc == 0) {
        const io_json *root = io_json_root(doc);
        const io_json *a = io_json_get(root, "a");
        CHECK(a && a->n == 4, "json: array has 4 items");
        CHECK(a && a->child->is_u64 && a->child->u64 == 1, "json: 1 is an exact u64");
        CHECK(a && !a->child->next->is_u64 && a->child->next->num == -2500.0,
              "json: -2.5e3 is a double -2500 (got %g)", a ? a->child->next->num : 0.0);
        const io_json *big = a ? a->child->next->next : NULL;
        CHECK(big && big->is_u64 && big->u64 == UINT64_MAX, "json: 2^64-1 is exact");
        CHECK(big && big->next && !big->next->is_u64, "json: 2^64 does not fit u64");
        const io_json *s = io_json_get(root, "s");
        const char want[] = "x\n\xc3\xa9\xf0\x9f\x98\x80\"";
        CHECK(s && s->str_len == sizeof want - 1 && memcmp(s->str, want, sizeof want - 1) == 0,
              "json: escapes and surrogate pair decode to UTF-8 (%zu bytes)", s ? s->str_len : 0);
        CHECK(io_json_get(root, "t")->type == IO_JSON_TRUE &&
                  io_json_get(root, "n")->type == IO_JSON_NULL,
              "json: true and null");
        io_json_free(doc);
    }
    struct {
        const char *text, *word;
    } bad[] = {
        {"{\"a\":1,}", "expected '\"'"},
        {"[1 2]", "',' or ']'"},
        {"{\"a\" 1}", "':'"},
        {"\"abc", "closing"},
        {"01", "leading zero"},
        {"1.", "digit after decimal point"},
        {"\"\\ud800\"", "low surrogate"},
        {"\"\\x\"", "valid escape"},
        {"\"a\tb\"", "control character"},
        {"\"\xff\"", "UTF-8"},
        {"\"\xc0\xaf\"", "UTF-8"},  // overlong '/'
        {"{} x", "end of text"},
        {"", "a JSON value"},
        {"tru", "a JSON value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rc = io_json_parse(bad[i].text, strlen(bad[i].text), &doc, err, sizeof err);
        CHECK_ERR(rc, err, "json: malformed input rejected", bad[i].word);
    }
    char deep[600];
    for (int i = 0; i < 300; i++) deep[i] = '[';
    for (int i = 0; i < 300; i++) deep[300 + i] = ']';
    rc = io_json_parse(deep, 600, &doc, err, sizeof err);
    CHECK_ERR(rc, err, "json: 300-deep nesting rejected", "nesting deeper than");
}

// ---- round trip ---------------------------------------------------------------------

static float f32a[12];
static uint16_t bf16a[6], f16a[5];
static int32_t i32a[4];
static int64_t i64a[3];
static double f64a[2] = {1.0 / 3.0, -1e300};
static uint8_t u8a[3] = {0, 7, 255};
static float scalar = 3.5f;

static const int64_t sh_f32[] = {3, 4}, sh_bf16[] = {2, 3}, sh_f16[] = {5}, sh_i32[] = {2, 2},
                     sh_i64[] = {3}, sh_f64[] = {2}, sh_u8[] = {3}, sh_empty[] = {0, 4};

#define N_TENSORS 10
static rt_st_tensor tensors[N_TENSORS];

static void make_tensors(void) {
    for (int i = 0; i < 12; i++) f32a[i] = (float)i * 0.5f - 2.75f;
    for (int i = 0; i < 6; i++) bf16a[i] = (uint16_t)(0x3F80 + i);
    for (int i = 0; i < 5; i++) f16a[i] = (uint16_t)(0x3C00 + 3 * i);
    for (int i = 0; i < 4; i++) i32a[i] = i * 1000003 - 7;
    for (int i = 0; i < 3; i++) i64a[i] = (int64_t)i * 3000000000LL - 5;
    rt_st_tensor t[N_TENSORS] = {
        {"layers.0.wq.weight", RT_ST_F32, 2, sh_f32, f32a},
        {"bf", RT_ST_BF16, 2, sh_bf16, bf16a},
        {"half", RT_ST_F16, 1, sh_f16, f16a},
        {"ints", RT_ST_I32, 2, sh_i32, i32a},
        {"longs", RT_ST_I64, 1, sh_i64, i64a},
        {"doubles", RT_ST_F64, 1, sh_f64, f64a},
        {"bytes", RT_ST_U8, 1, sh_u8, u8a},
        {"scalar", RT_ST_F32, 0, NULL, &scalar},
        {"empty", RT_ST_F32, 2, sh_empty, NULL},
        {"we\"ird\\name \xc3\xa9", RT_ST_F32, 1, sh_f16, f32a},
    };
    memcpy(tensors, t, sizeof t);
}

static void test_round_trip(void) {
    const char *path = tpath("model.safetensors");
    rt_st_meta meta[] = {{"format", "pt"}, {"step", "42"}};
    int rc = rt_st_write(path, tensors, N_TENSORS, meta, 2, err, sizeof err);
    CHECK(rc == 0, "write %d tensors of 7 dtypes (%s)", N_TENSORS, rc ? err : "ok");
    CHECK(!file_exists(tpath("model.safetensors.tmp")), "no temp file left after write");

    // Layout: header length a multiple of 8, space padded, JSON starting with '{'.
    size_t n;
    unsigned char *raw = read_bytes(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | raw[i];
    CHECK(hlen % 8 == 0, "header length %llu is a multiple of 8", (unsigned long long)hlen);
    CHECK(raw[8] == '{' && raw[8 + hlen - 1] != '\0', "header starts with '{'");
    size_t end = 8 + hlen;
    while (end > 8 && raw[end - 1] == ' ') end--;
    CHECK(raw[end - 1] == '}', "header ends with '}' then only spaces (%llu pad bytes)",
          (unsigned long long)(8 + hlen - end));
    const char *first = strstr((const char *)raw + 8, "\"__metadata__\"");
    const char *bfpos = strstr((const char *)raw + 8, "\"bf\"");
    const char *wpos = strstr((const char *)raw + 8, "\"layers.0.wq.weight\"");
    CHECK(first && bfpos && wpos && first < bfpos && bfpos < wpos,
          "header lists __metadata__ first, then tensors sorted by name");
    // f32a data should start right after the entries sorted before it.
    free(raw);

    rt_st_file *f = NULL;
    rc = rt_st_open(path, &f, err, sizeof err);
    CHECK(rc == 0, "open written file (%s)", rc ? err : "ok");
    if (rc) return;
    CHECK(rt_st_count(f) == N_TENSORS, "count %zu == %d", rt_st_count(f), N_TENSORS);
    int sorted = 1;
    for (size_t i = 1; i < rt_st_count(f); i++)
        sorted &= strcmp(rt_st_at(f, i - 1)->name, rt_st_at(f, i)->name) < 0;
    CHECK(sorted, "iteration is sorted by name (first '%s')", rt_st_at(f, 0)->name);
    CHECK(rt_st_at(f, N_TENSORS) == NULL, "iteration past the end gives NULL");
    for (int i = 0; i < N_TENSORS; i++) {
        const rt_st_tensor *t = &tensors[i];
        const rt_st_info *info = rt_st_find(f, t->name);
        size_t nb = rt_st_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) nb *= (size_t)t->shape[d];
        unsigned char buf[128];
        memset(buf, 0xEE, sizeof buf);
        rc = rt_st_load(f, t->name, t->dtype, t->ndim, t->shape, buf, sizeof buf, err, sizeof err);
        int same = rc == 0 && info && info->nbytes == nb && (nb == 0 || memcmp(buf, t->data, nb) == 0);
        CHECK(same, "round trip '%s' %s ndim %d: %zu bytes bit-exact%s%s", t->name,
              rt_st_dtype_name(t->dtype), t->ndim, nb, rc ? ": " : "", rc ? err : "");
    }
    CHECK(rt_st_meta_count(f) == 2 && strcmp(rt_st_meta_get(f, "format"), "pt") == 0 &&
              strcmp(rt_st_meta_get(f, "step"), "42") == 0 && !rt_st_meta_get(f, "nope"),
          "metadata round trip (format=pt, step=42)");

    // ---- load errors a user sees
    float dst[12];
    const int64_t wrong_shape[] = {4, 3};
    rc = rt_st_load(f, "layers.0.wq.weigth", RT_ST_F32, 2, sh_f32, dst, sizeof dst, err, sizeof err);
    CHECK_ERR(rc, err, "typo'd name suggests the close match", "'layers.0.wq.weigth' not found",
              "model.safetensors", "did you mean 'layers.0.wq.weight'");
    rc = rt_st_load(f, "model.layers.0.wq.weight", RT_ST_F32, 2, sh_f32, dst, sizeof dst, err,
                    sizeof err);
    CHECK_ERR(rc, err, "prefixed name suggests the close match", "did you mean 'layers.0.wq.weight'");
    rc = rt_st_load(f, "output.bias", RT_ST_F32, 2, sh_f32, dst, sizeof dst, err, sizeof err);
    CHECK_ERR(rc, err, "unrelated missing name", "'output.bias' not found", "none with a similar name");
    rc = rt_st_load(f, "layers.0.wq.weight", RT_ST_F32, 2, wrong_shape, dst, sizeof dst, err,
                    sizeof err);
    CHECK_ERR(rc, err, "wrong shape", "'layers.0.wq.weight'", "shape [3, 4], expected [4, 3]");
    rc = rt_st_load(f, "layers.0.wq.weight", RT_ST_F32, 1, sh_f32, dst, sizeof dst, err, sizeof err);
    CHECK_ERR(rc, err, "wrong rank", "shape [3, 4], expected [3]");
    rc = rt_st_load(f, "layers.0.wq.weight", RT_ST_BF16, 2, sh_f32, dst, sizeof dst, err, sizeof err);
    CHECK_ERR(rc, err, "wrong dtype", "dtype F32, expected BF16");
    rc = rt_st_load(f, "layers.0.wq.weight", RT_ST_F32, 2, sh_f32, dst, 40, err, sizeof err);
    CHECK_ERR(rc, err, "destination too small", "48 bytes", "40 bytes");
    rc = rt_st_load(f, "layers.0.wq.weight", RT_ST_F32, 2, NULL, dst, sizeof dst, err, sizeof err);
    CHECK_ERR(rc, err, "2 dims but no shape array", "no shape array");
    rt_st_close(f);

    // ---- determinism: the same tensors given in another order give identical bytes
    rt_st_tensor rev[N_TENSORS];
    for (int i = 0; i < N_TENSORS; i++) rev[i] = tensors[N_TENSORS - 1 - i];
    rc = rt_st_write(tpath("rev.safetensors"), rev, N_TENSORS, meta, 2, err, sizeof err);
    size_t n1, n2;
    unsigned char *a = read_bytes(path, &n1), *b = read_bytes(tpath("rev.safetensors"), &n2);
    CHECK(rc == 0 && a && b && n1 == n2 && memcmp(a, b, n1) == 0,
          "output independent of input order (%zu bytes, identical)", n1);
    free(a);
    free(b);
}

// ---- writer errors and atomicity ----------------------------------------------------

static void test_write_errors(void) {
    rt_st_tensor dup[2] = {tensors[0], tensors[0]};
    int rc = rt_st_write(tpath("dup.safetensors"), dup, 2, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "duplicate names refused", "'layers.0.wq.weight' given twice");
    CHECK(!file_exists(tpath("dup.safetensors")) && !file_exists(tpath("dup.safetensors.tmp")),
          "refused write creates no file");
    rt_st_tensor reserved = tensors[0];
    reserved.name = "__metadata__";
    rc = rt_st_write(tpath("r.safetensors"), &reserved, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "reserved name refused", "reserved");
    rt_st_tensor nodata = tensors[0];
    nodata.data = NULL;
    rc = rt_st_write(tpath("r.safetensors"), &nodata, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "NULL data refused", "NULL data");

    rc = rt_st_write(tpath("no/such/dir/x.safetensors"), tensors, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "missing directory", "cannot create", "x.safetensors.tmp",
              "No such file or directory");

    // Overwrite an existing good file while writes fail partway (file size cap): the old
    // file must survive untouched and no temp file may remain.
    static float big[4096];
    const int64_t sh_big[] = {4096};
    rt_st_tensor bt = {"big", RT_ST_F32, 1, sh_big, big};
    const char *path = tpath("keep.safetensors");
    rc = rt_st_write(path, tensors, 1, NULL, 0, err, sizeof err);
    size_t n0;
    unsigned char *before = read_bytes(path, &n0);
    limit_file_size(4096);
    rc = rt_st_write(path, &bt, 1, NULL, 0, err, sizeof err);
    unlimit_file_size();
    CHECK_ERR(rc, err, "write failing midway (file size cap 4096 < 16 KiB)", "keep.safetensors.tmp");
    size_t n1;
    unsigned char *after = read_bytes(path, &n1);
    CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0,
          "old file intact after failed overwrite (%zu bytes)", n1);
    CHECK(count_entries(test_dir(), ".tmp") == 0, "no .tmp file left in the directory");
    free(before);
    free(after);
}

// ---- what the writer refuses to write through ---------------------------------------

// A path that is a FIFO, a directory or a device node is refused (nothing is replaced or
// created); a symlink planted at PATH.tmp is removed, never followed, so its target keeps
// its bytes; a stale PATH.tmp is replaced; a directory at PATH.tmp is a one-line error.
static void test_write_safety(void) {
    char fifo[4096];
    snprintf(fifo, sizeof fifo, "%s", tpath("fifo.safetensors"));
    int rc = mkfifo(fifo, 0644);
    if (rc == 0) {  // the writer must not open it: with no reader, that open would block
        rc = rt_st_write(fifo, tensors, 1, NULL, 0, err, sizeof err);
        struct stat st;
        CHECK_ERR(rc, err, "a FIFO as the output path", "refusing to write", "FIFO",
                  "not a regular file");
        CHECK(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode) && !file_exists(tpath("fifo.safetensors.tmp")),
              "... the FIFO is still there and no temp file was made");
    } else {
        CHECK(0, "mkfifo %s: %s", fifo, strerror(errno));
    }
    mkdir(tpath("adir.safetensors"), 0755);
    rc = rt_st_write(tpath("adir.safetensors"), tensors, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "a directory as the output path", "refusing to write", "a directory");
    // A character device node made here (never a system one: a writer that regressed
    // would replace it). Making one needs CAP_MKNOD; without it the FIFO stands for it.
    struct stat st;
    char dev[4096];
    snprintf(dev, sizeof dev, "%s", tpath("null.safetensors"));
    if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        rc = rt_st_write(dev, tensors, 1, NULL, 0, err, sizeof err);
        CHECK_ERR(rc, err, "a character device as the output path", "refusing to write",
                  "character device");
        CHECK(stat(dev, &st) == 0 && S_ISCHR(st.st_mode), "... the device node is still there");
    } else {
        printf("note: mknod: %s; the device-node case is covered by the FIFO case only\n",
               strerror(errno));
    }

    // A symlink planted at PATH.tmp, to a file that must keep its bytes.
    char victim[4096];  // tpath's buffers rotate: keep a copy
    snprintf(victim, sizeof victim, "%s", tpath("victim.txt"));
    write_bytes(victim, "precious", 8);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", tpath("planted.safetensors.tmp"));
    CHECK(symlink(victim, tmp) == 0, "plant a symlink at PATH.tmp");
    rc = rt_st_write(tpath("planted.safetensors"), tensors, 1, NULL, 0, err, sizeof err);
    size_t n = 0;
    unsigned char *v = read_bytes(victim, &n);
    struct stat lt;
    CHECK(rc == 0 && v && n == 8 && memcmp(v, "precious", 8) == 0 &&
              lstat(tpath("planted.safetensors"), &lt) == 0 && S_ISREG(lt.st_mode) &&
              lstat(tmp, &lt) != 0,
          "a symlink at PATH.tmp is not followed: its target keeps its %zu bytes, PATH is a "
          "regular file, the link is gone (%s)", n, rc ? err : "ok");
    free(v);
    // A dangling symlink at PATH.tmp: nothing is created at its target.
    CHECK(symlink(tpath("created_through_link"), tmp) == 0, "plant a dangling symlink at PATH.tmp");
    rc = rt_st_write(tpath("planted.safetensors"), tensors, 1, NULL, 0, err, sizeof err);
    CHECK(rc == 0 && !file_exists(tpath("created_through_link")),
          "a dangling symlink at PATH.tmp: nothing created at its target (%s)", rc ? err : "ok");
    // A stale temp file from a crash is replaced.
    write_bytes(tmp, "stale", 5);
    rc = rt_st_write(tpath("planted.safetensors"), tensors, 1, NULL, 0, err, sizeof err);
    CHECK(rc == 0 && !file_exists(tmp), "a stale PATH.tmp is replaced (%s)", rc ? err : "ok");
    // A directory in the temp file's place.
    mkdir(tmp, 0755);
    rc = rt_st_write(tpath("planted.safetensors"), tensors, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "a directory at PATH.tmp", "a directory is in the way");
    rmdir(tmp);
    // A symlink at PATH itself is replaced by the file; its target is not written.
    write_bytes(victim, "precious", 8);
    unlink(tpath("linked.safetensors"));
    CHECK(symlink(victim, tpath("linked.safetensors")) == 0, "plant a symlink at PATH");
    rc = rt_st_write(tpath("linked.safetensors"), tensors, 1, NULL, 0, err, sizeof err);
    v = read_bytes(victim, &n);
    CHECK(rc == 0 && v && n == 8 && lstat(tpath("linked.safetensors"), &lt) == 0 &&
              S_ISREG(lt.st_mode),
          "a symlink at PATH is replaced by the file, its target keeps its bytes (%s)",
          rc ? err : "ok");
    free(v);
}

// ---- reading foreign and corrupt files ----------------------------------------------

static void test_foreign(void) {
    // As a Python writer might produce: spaces, newlines, metadata last, keys reordered,
    // \u escapes in a name, a scalar, and the data in an order different from the names.
    float d[3] = {1.0f, 2.0f, 3.0f};
    const char *hdr =
        "{\n  \"z\": {\"shape\": [2], \"data_offsets\": [0, 8], \"dtype\": \"F32\"},\n"
        "  \"caf\\u00e9\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [8, 12]},\n"
        "  \"__metadata__\": {\"format\": \"pt\"}\n}    ";
    write_raw(tpath("py.safetensors"), hdr, d, sizeof d);
    rt_st_file *f = NULL;
    int rc = rt_st_open(tpath("py.safetensors"), &f, err, sizeof err);
    CHECK(rc == 0, "open pretty-printed header with metadata last (%s)", rc ? err : "ok");
    if (rc) return;
    float z[2], c;
    const int64_t two[] = {2};
    int r1 = rt_st_load(f, "z", RT_ST_F32, 1, two, z, sizeof z, err, sizeof err);
    int r2 = rt_st_load(f, "caf\xc3\xa9", RT_ST_F32, 0, NULL, &c, sizeof c, err, sizeof err);
    CHECK(r1 == 0 && r2 == 0 && z[0] == 1.0f && z[1] == 2.0f && c == 3.0f,
          "values: z = [%g, %g], caf\\u00e9 = %g", z[0], z[1], c);
    CHECK(strcmp(rt_st_meta_get(f, "format"), "pt") == 0, "metadata read from the end");
    rt_st_close(f);

    write_raw(tpath("empty.safetensors"), "{}      ", NULL, 0);
    rc = rt_st_open(tpath("empty.safetensors"), &f, err, sizeof err);
    CHECK(rc == 0 && rt_st_count(f) == 0, "a file with no tensors opens (count 0)");
    if (rc == 0) rt_st_close(f);
}

static void test_corrupt(void) {
    unsigned char data[64] = {0};
    write_bytes(tpath("short"), "abc", 3);
    OPEN_FAILS(tpath("short"), "3-byte file", "3 bytes", "too short");
    OPEN_FAILS(tpath("nonexistent.safetensors"), "missing file", "cannot open",
               "nonexistent.safetensors", "No such file");

    unsigned char huge[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    write_bytes(tpath("hlen"), huge, sizeof huge);
    OPEN_FAILS(tpath("hlen"), "header length past the end", "header length field is 65535",
               "file is 16 bytes");

    write_raw(tpath("json"), "{\"a\": {\"dtype\": \"F32\", ", data, 0);
    OPEN_FAILS(tpath("json"), "cut-off JSON", "not valid JSON", "expected");
    write_raw(tpath("arr"), "[1, 2]  ", data, 0);
    OPEN_FAILS(tpath("arr"), "array root", "header is an array, expected a JSON object");

    struct {
        const char *hdr;
        size_t n;
        const char *what;
        const char *w1, *w2;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "unknown dtype",
         "unsupported dtype \"F8\"", "'a'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
         "shape x dtype != bytes", "F32 [2, 3] = 24 bytes", "span 20 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
         "overlapping tensors", "overlap", "'a' [0, 8)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole before a tensor",
         "4 unused bytes before tensor 'a'", ""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 10, "truncated data",
         "truncated", "needs data bytes [0, 16)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 9, "trailing bytes",
         "5 unexpected bytes after the last tensor", ""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "end before begin",
         "end before they begin", ""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate name",
         "'a' appears twice", ""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "negative dim",
         "shape[0] is -1", "non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "fractional dim",
         "shape[0] is 1.5", ""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing data_offsets", "lacks 'data_offsets'",
         ""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
         "unexpected key", "unexpected key 'x'", ""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "one offset",
         "[begin, end]", ""},
        {"{\"a\":[1]}", 4, "entry not an object", "'a' is an array", "expected an object"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "non-string metadata", "__metadata__ value for 'k'",
         "expected a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
         "\"data_offsets\":[0,4]}}", 4, "shape product overflows", "too large", ""},
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "NUL in name", "NUL character", ""},
        {"{\"\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "invalid UTF-8 name",
         "not valid JSON", "UTF-8"},
        {"{}", 4, "data without tensors", "no tensors but 4 data bytes", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[32];
        snprintf(name, sizeof name, "c%zu.safetensors", i);
        write_raw(tpath(name), cases[i].hdr, data, cases[i].n);
        OPEN_FAILS(tpath(name), cases[i].what, cases[i].w1, cases[i].w2);
    }

    // A real file cut short by a crashed copy: the last tensor's bytes are missing.
    const char *path = tpath("model.safetensors");
    size_t n;
    unsigned char *raw = read_bytes(path, &n);
    write_bytes(tpath("cut.safetensors"), raw, n - 5);
    OPEN_FAILS(tpath("cut.safetensors"), "real file missing its last 5 bytes", "truncated",
               "cut.safetensors");
    write_bytes(tpath("cut2.safetensors"), raw, 40);
    OPEN_FAILS(tpath("cut2.safetensors"), "real file cut inside the header", "header length field",
               "file is 40 bytes");
    free(raw);
}

// Random damage to a valid file (deterministic): every open must either succeed with a
// header whose tensors all load, or fail with a message; never crash or read out of
// bounds (the ASan build runs this too).
static void test_mutations(void) {
    size_t n;
    unsigned char *good = read_bytes(tpath("model.safetensors"), &n);
    if (!good) return;
    unsigned char *buf = malloc(n);
    uint32_t x = 12345;
    int opened = 0, refused = 0, load_fail = 0, silent = 0;
    const char *path = tpath("mut.safetensors");
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, good, n);
        size_t len = n;
        int edits = 1 + iter % 4;
        for (int k = 0; k < edits; k++) {
            x = x * 1664525u + 1013904223u;
            size_t pos = (x >> 8) % (iter % 2 ? n : 8 + 700);  // favour the header
            if (pos >= n) pos = n - 1;
            x = x * 1664525u + 1013904223u;
            static const char pool[] = "{}[]\":,0123456789- eE.FIBU\\";
            buf[pos] = (x >> 24) & 1 ? (unsigned char)(x >> 16) : (unsigned char)pool[(x >> 16) % (sizeof pool - 1)];
        }
        if (iter % 7 == 0) len = (x >> 4) % n;  // truncation too
        write_bytes(path, buf, len);
        rt_st_file *f = NULL;
        err[0] = 0;
        if (rt_st_open(path, &f, err, sizeof err) != 0) {
            refused++;
            silent += err[0] == 0;
            continue;
        }
        opened++;
        for (size_t i = 0; i < rt_st_count(f); i++) {
            const rt_st_info *t = rt_st_at(f, i);
            unsigned char dst[256];
            if (t->nbytes <= sizeof dst &&
                rt_st_load(f, t->name, t->dtype, t->ndim, t->shape, dst, sizeof dst, err, sizeof err) != 0)
                load_fail++;
        }
        rt_st_close(f);
    }
    CHECK(silent == 0, "3000 random mutations: %d opened, %d refused with a message, %d without "
          "one", opened, refused, silent);
    CHECK(load_fail == 0, "every tensor of every file that opened loads (%d failures)", load_fail);
    free(buf);
    free(good);
}

int main(void) {
    printf("== safetensors ==\n");
    test_json();
    make_tensors();
    test_round_trip();
    test_write_errors();
    test_write_safety();
    test_foreign();
    test_corrupt();
    test_mutations();
    return check_summary();
}
