// Strict recursive-descent JSON parser (see io_json.h). Safetensors headers come from
// other programs and possibly from damaged files, so every malformed input must end
// in a clear error, never a crash: depth is bounded, strings must be valid UTF-8, and
// all allocation goes through an arena that is freed in one piece.
#include "io_json.h"

#include <stdlib.h>
#include <string.h>

#include "io_err.h"

#define JSON_MAX_DEPTH 128

// ---- arena --------------------------------------------------------------------------

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_block;

struct io_json_doc {
    arena_block *blocks;
    io_json *root;
};

static void *arena_alloc(io_json_doc *doc, size_t n) {
    n = (n + 15) & ~(size_t)15;
    arena_block *b = doc->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = doc->blocks;
        doc->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

// ---- parser state -------------------------------------------------------------------

typedef struct {
    const unsigned char *s;
    size_t len, pos;
    int depth;
    io_json_doc *doc;
    char *err;
    size_t errlen;
} parser;

static void describe(const parser *p, char *buf, size_t n) {
    if (p->pos >= p->len) {
        snprintf(buf, n, "end of text");
    } else {
        unsigned char c = p->s[p->pos];
        if (c >= 0x20 && c < 0x7F)
            snprintf(buf, n, "'%c'", c);
        else
            snprintf(buf, n, "byte 0x%02X", c);
    }
}

static int fail(parser *p, const char *expected) {
    char found[32];
    describe(p, found, sizeof found);
    return io_errf(p->err, p->errlen, "invalid JSON at byte %zu: expected %s, found %s",
                   p->pos, expected, found);
}

static int oom(parser *p) {
    return io_errf(p->err, p->errlen, "out of memory parsing JSON (%zu bytes)", p->len);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

// ---- strings ------------------------------------------------------------------------

static int hex4(parser *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        if (p->pos >= p->len) return fail(p, "4 hex digits after \\u");
        unsigned char c = p->s[p->pos];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return fail(p, "4 hex digits after \\u");
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(unsigned char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    } else if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    } else if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

// Length of a valid UTF-8 sequence starting at s[0] (0 if invalid): rejects overlong
// forms, surrogates and code points past U+10FFFF.
size_t io_json_utf8_len(const unsigned char *s, size_t avail) {
    if (avail == 0) return 0;
    unsigned char c = s[0];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (avail < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

// Parses a string at p->pos (which is '"'); returns the decoded NUL-terminated copy.
static int parse_string(parser *p, const char **out, size_t *out_len) {
    p->pos++;  // opening quote
    // Decoded output is never longer than the raw text.
    size_t start = p->pos, end = start;
    while (end < p->len && p->s[end] != '"') end += (p->s[end] == '\\') ? 2 : 1;
    unsigned char *o = arena_alloc(p->doc, (end > p->len ? p->len : end) - start + 1);
    if (!o) return oom(p);
    size_t n = 0;
    for (;;) {
        if (p->pos >= p->len) return fail(p, "closing '\"' of string");
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) return fail(p, "no raw control character in string (use an escape)");
        if (c != '\\') {
            size_t k = io_json_utf8_len(p->s + p->pos, p->len - p->pos);
            if (k == 0) return fail(p, "valid UTF-8 in string");
            memcpy(o + n, p->s + p->pos, k);
            n += k;
            p->pos += k;
            continue;
        }
        p->pos++;
        if (p->pos >= p->len) return fail(p, "escape character after '\\'");
        c = p->s[p->pos++];
        switch (c) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (hex4(p, &cp)) return -1;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "high surrogate before low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (p->pos + 1 >= p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                    return fail(p, "\\u low surrogate after high surrogate");
                p->pos += 2;
                if (hex4(p, &lo)) return -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, "low surrogate (\\uDC00-\\uDFFF)");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            n += put_utf8(o + n, cp);
            break;
        }
        default:
            p->pos--;
            return fail(p, "valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
        }
    }
    o[n] = '\0';
    *out = (const char *)o;
    *out_len = n;
    return 0;
}

// ---- numbers ------------------------------------------------------------------------

static int parse_number(parser *p, io_json *v) {
    size_t start = p->pos;
    int neg = 0, integral = 1;
    if (p->s[p->pos] == '-') {
        neg = 1;
        p->pos++;
    }
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9') return fail(p, "digit");
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            return fail(p, "no leading zero in number");
    } else {
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        integral = 0;
        p->pos++;
        if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
            return fail(p, "digit after decimal point");
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integral = 0;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
            return fail(p, "digit in exponent");
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    size_t n = p->pos - start;
    char *text = arena_alloc(p->doc, n + 1);
    if (!text) return oom(p);
    memcpy(text, p->s + start, n);
    text[n] = '\0';
    v->type = IO_JSON_NUMBER;
    v->str = text;
    v->str_len = n;
    v->num = strtod(text, NULL);
    // Offsets and shapes need exact 64-bit integers, which a double cannot hold.
    if (integral && !neg) {
        uint64_t u = 0;
        int overflow = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t d = (uint64_t)(text[i] - '0');
            if (u > (UINT64_MAX - d) / 10) overflow = 1;
            u = u * 10 + d;
        }
        v->is_u64 = !overflow;
        v->u64 = overflow ? 0 : u;
    }
    return 0;
}

// ---- values -------------------------------------------------------------------------

static int parse_value(parser *p, io_json *v);

static int parse_literal(parser *p, io_json *v, const char *word, io_json_type t) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return fail(p, "a JSON value");
    p->pos += n;
    v->type = t;
    return 0;
}

static int parse_container(parser *p, io_json *v, int is_object) {
    if (++p->depth > JSON_MAX_DEPTH)
        return io_errf(p->err, p->errlen, "invalid JSON at byte %zu: nesting deeper than %d",
                       p->pos, JSON_MAX_DEPTH);
    v->type = is_object ? IO_JSON_OBJECT : IO_JSON_ARRAY;
    char close = is_object ? '}' : ']';
    p->pos++;
    skip_ws(p);
    io_json **tail = &v->child;
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        p->depth--;
        return 0;
    }
    for (;;) {
        io_json *c = arena_alloc(p->doc, sizeof *c);
        if (!c) return oom(p);
        memset(c, 0, sizeof *c);
        if (is_object) {
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "'\"' starting an object key");
            if (parse_string(p, &c->key, &c->key_len)) return -1;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return fail(p, "':' after object key");
            p->pos++;
        }
        if (parse_value(p, c)) return -1;
        *tail = c;
        tail = &c->next;
        v->n++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            break;
        }
        return fail(p, is_object ? "',' or '}' in object" : "',' or ']' in array");
    }
    p->depth--;
    return 0;
}

static int parse_value(parser *p, io_json *v) {
    skip_ws(p);
    v->offset = p->pos;
    if (p->pos >= p->len) return fail(p, "a JSON value");
    switch (p->s[p->pos]) {
    case '{': return parse_container(p, v, 1);
    case '[': return parse_container(p, v, 0);
    case '"':
        v->type = IO_JSON_STRING;
        return parse_string(p, &v->str, &v->str_len);
    case 't': return parse_literal(p, v, "true", IO_JSON_TRUE);
    case 'f': return parse_literal(p, v, "false", IO_JSON_FALSE);
    case 'n': return parse_literal(p, v, "null", IO_JSON_NULL);
    default:
        if (p->s[p->pos] == '-' || (p->s[p->pos] >= '0' && p->s[p->pos] <= '9'))
            return parse_number(p, v);
        return fail(p, "a JSON value");
    }
}

// ---- API ----------------------------------------------------------------------------

int io_json_parse(const char *text, size_t len, io_json_doc **out, char *err, size_t errlen) {
    *out = NULL;
    io_json_doc *doc = calloc(1, sizeof *doc);
    if (!doc) return io_errf(err, errlen, "out of memory parsing JSON");
    parser p = {(const unsigned char *)text, len, 0, 0, doc, err, errlen};
    io_json *root = arena_alloc(doc, sizeof *root);
    if (!root) {
        io_json_free(doc);
        return oom(&p);
    }
    memset(root, 0, sizeof *root);
    if (parse_value(&p, root) != 0) {
        io_json_free(doc);
        return -1;
    }
    skip_ws(&p);
    if (p.pos != len) {
        fail(&p, "end of text after the JSON value");
        io_json_free(doc);
        return -1;
    }
    doc->root = root;
    *out = doc;
    return 0;
}

const io_json *io_json_root(const io_json_doc *doc) { return doc->root; }

void io_json_free(io_json_doc *doc) {
    if (!doc) return;
    arena_block *b = doc->blocks;
    while (b) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(doc);
}

const io_json *io_json_get(const io_json *obj, const char *key) {
    if (!obj || obj->type != IO_JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (const io_json *c = obj->child; c; c = c->next)
        if (c->key_len == n && memcmp(c->key, key, n) == 0) return c;
    return NULL;
}

const char *io_json_type_name(io_json_type t) {
    switch (t) {
    case IO_JSON_NULL: return "null";
    case IO_JSON_FALSE:
    case IO_JSON_TRUE: return "a boolean";
    case IO_JSON_NUMBER: return "a number";
    case IO_JSON_STRING: return "a string";
    case IO_JSON_ARRAY: return "an array";
    case IO_JSON_OBJECT: return "an object";
    }
    return "?";
}
