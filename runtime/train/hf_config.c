// hf_config.c — config.json of a Hugging Face directory (--save-hf, --load-hf): written
// from the generated map's fields (rt_hf_config), and a loaded one checked against them,
// naming the first field that differs, so that weights of another model are never
// trained as if they were this spec's.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_atomic.h"
#include "io_json.h"
#include "train_internal.h"

#define MAX_CONFIG_BYTES (1 << 20)

// ---- writing ----------------------------------------------------------------------------

int train_hf_write_config(const rt_model* m, const char* dir, char* err, size_t errlen) {
    const rt_hf_map* h = m->hf;
    size_t cap = 256;
    for (int i = 0; i < h->nconfig; i++)
        cap += strlen(h->config[i].key) + strlen(h->config[i].value) + 16;
    char* text = malloc(cap);
    if (!text) return snprintf(err, errlen, "out of memory"), -1;
    size_t n = (size_t)snprintf(text, cap, "{\n");
    int first = 1;
    for (int i = 0; i < h->nconfig; i++) {
        const rt_hf_config* c = &h->config[i];
        if (!c->written) continue;
        n += (size_t)snprintf(text + n, cap - n, "%s  \"%s\": %s", first ? "" : ",\n", c->key,
                              c->value);
        first = 0;
    }
    n += (size_t)snprintf(text + n, cap - n, "\n}\n");
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = io_atomic_write_file(path, text, n, err, errlen);
    free(text);
    return rc;
}

// ---- reading ----------------------------------------------------------------------------

// The whole regular file at path (not through a symlink), NUL-terminated.
static char* read_small(const char* path, size_t* len, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %.200s: %.200s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char* buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_CONFIG_BYTES) {
        snprintf(err, errlen, "%.200s is not a regular file of at most %d bytes", path,
                 MAX_CONFIG_BYTES);
    } else if ((buf = malloc((size_t)st.st_size + 1))) {
        ssize_t got = read(fd, buf, (size_t)st.st_size);
        if (got != (ssize_t)st.st_size) {
            snprintf(err, errlen, "cannot read %.200s", path);
            free(buf);
            buf = NULL;
        } else {
            buf[got] = 0;
            *len = (size_t)got;
        }
    } else {
        snprintf(err, errlen, "out of memory");
    }
    close(fd);
    return buf;
}

// The value at a dotted path ("a.b") of obj, or NULL.
static const io_json* at_path(const io_json* obj, const char* path, size_t len) {
    char part[128];
    const io_json* v = obj;
    while (v && len > 0) {
        const char* dot = memchr(path, '.', len);
        size_t n = dot ? (size_t)(dot - path) : len;
        if (n >= sizeof part || v->type != IO_JSON_OBJECT) return NULL;
        memcpy(part, path, n);
        part[n] = 0;
        v = io_json_get(v, part);
        path += n + (dot ? 1 : 0);
        len -= n + (dot ? 1 : 0);
    }
    return v;
}

// The first present of key's '|'-separated paths; *shown is that path (or the first).
static const io_json* lookup(const io_json* root, const char* key, char* shown, size_t cap) {
    const char* p = key;
    snprintf(shown, cap, "%.*s", (int)strcspn(key, "|"), key);
    while (*p) {
        size_t n = strcspn(p, "|");
        const io_json* v = at_path(root, p, n);
        if (v) {
            snprintf(shown, cap, "%.*s", (int)n, p);
            return v;
        }
        p += n + (p[n] == '|');
    }
    return NULL;
}

static int same(const io_json* a, const io_json* b) {
    if (a->type != b->type) return 0;
    if (a->type == IO_JSON_NUMBER) return a->num == b->num;
    if (a->type == IO_JSON_STRING)
        return a->str_len == b->str_len && !memcmp(a->str, b->str, a->str_len);
    return a->type != IO_JSON_ARRAY && a->type != IO_JSON_OBJECT;
}

// A JSON value as text for messages.
static void show(const io_json* v, char* out, size_t cap) {
    if (!v)
        snprintf(out, cap, "absent");
    else if (v->type == IO_JSON_NUMBER || v->type == IO_JSON_STRING)
        snprintf(out, cap, v->type == IO_JSON_STRING ? "\"%.60s\"" : "%.60s", v->str);
    else
        snprintf(out, cap, "%s",
                 v->type == IO_JSON_NULL    ? "null"
                 : v->type == IO_JSON_TRUE  ? "true"
                 : v->type == IO_JSON_FALSE ? "false"
                                            : io_json_type_name(v->type));
}

// Whether the file's value v (NULL: absent) fits field c; 1 yes, 0 no, -1 on a bad table.
static int fits(const rt_hf_config* c, const io_json* v) {
    const char* texts[3] = {c->value, v ? NULL : c->absent, c->alt};
    io_json_doc* docs[3] = {NULL, NULL, NULL};
    char e[128];
    int ok = -1;
    for (int k = 0; k < 3; k++)
        if (texts[k] && io_json_parse(texts[k], strlen(texts[k]), &docs[k], e, sizeof e) != 0)
            goto out;
    if (!v && !docs[1]) {
        ok = 0;  // required and absent
        goto out;
    }
    const io_json* have = v ? v : io_json_root(docs[1]);
    const io_json* want = io_json_root(docs[0]);
    ok = same(have, want) || (docs[2] && same(have, io_json_root(docs[2])));
    if (!ok && c->check == RT_HF_MIN && have->type == IO_JSON_NUMBER &&
        want->type == IO_JSON_NUMBER)
        ok = have->num >= want->num;
out:
    for (int k = 0; k < 3; k++)
        if (docs[k]) io_json_free(docs[k]);
    return ok;
}

int train_hf_check_config(const rt_model* m, const char* dir, char* err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len = 0;
    char* text = read_small(path, &len, err, errlen);
    if (!text) return -1;
    io_json_doc* doc = NULL;
    char e[256];
    int rc = 0;
    if (io_json_parse(text, len, &doc, e, sizeof e) != 0) {
        snprintf(err, errlen, "%.200s is not JSON: %.200s", path, e);
        rc = -1;
    } else if (io_json_root(doc)->type != IO_JSON_OBJECT) {
        snprintf(err, errlen, "%.200s is not a JSON object", path);
        rc = -1;
    }
    for (int i = 0; i < m->hf->nconfig && !rc; i++) {
        const rt_hf_config* c = &m->hf->config[i];
        if (c->check == RT_HF_NONE) continue;
        char key[128], have[80];
        const io_json* v = lookup(io_json_root(doc), c->key, key, sizeof key);
        int ok = fits(c, v);
        if (ok < 0) {
            snprintf(err, errlen, "internal error: bad generated config field '%.200s'", c->key);
            rc = -1;
        } else if (!ok) {
            show(v, have, sizeof have);
            if (!v && c->absent)
                snprintf(have, sizeof have, "absent (HF's default: %.40s)", c->absent);
            snprintf(
                err, errlen,
                "config.json field '%.200s' is %.200s, the spec's model %.200s %.200s (the first "
                "field that differs)",
                key, have, c->check == RT_HF_MIN ? "needs at least" : "has", c->value);
            rc = -1;
        }
    }
    if (doc) io_json_free(doc);
    free(text);
    return rc;
}
