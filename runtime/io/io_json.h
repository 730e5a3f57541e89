// A small strict JSON parser (RFC 8259) for safetensors headers and for checking the
// trace files we write. No external dependencies; the whole tree lives in one arena
// freed at once. Errors give the byte offset and what was expected there.
#ifndef FSDPGEN_IO_JSON_H
#define FSDPGEN_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    IO_JSON_NULL,
    IO_JSON_FALSE,
    IO_JSON_TRUE,
    IO_JSON_NUMBER,
    IO_JSON_STRING,
    IO_JSON_ARRAY,
    IO_JSON_OBJECT
} io_json_type;

typedef struct io_json io_json;
struct io_json {
    io_json_type type;
    const char *key;  // object member: its key, decoded, NUL-terminated
    size_t key_len;   // (a key may contain \u0000, so use the length)
    const char *str;  // STRING: decoded value; NUMBER: the literal as written
    size_t str_len;
    double num;       // NUMBER
    int is_u64;       // NUMBER: a non-negative integer literal that fits in uint64
    uint64_t u64;
    size_t n;         // ARRAY / OBJECT: number of children
    io_json *child;   // first child; siblings follow through `next`, in text order
    io_json *next;
    size_t offset;    // byte offset of the value in the parsed text
};

typedef struct io_json_doc io_json_doc;

// Parses text[0..len) (trailing whitespace allowed, nothing else). Returns 0 and a
// document, or -1 with "at byte N: expected X, found Y" in err.
int io_json_parse(const char *text, size_t len, io_json_doc **out, char *err, size_t errlen);
const io_json *io_json_root(const io_json_doc *doc);
void io_json_free(io_json_doc *doc);

// First member of an object with this key, or NULL.
const io_json *io_json_get(const io_json *obj, const char *key);

// Length of the valid UTF-8 sequence at s[0] (0 if invalid or avail is 0): rejects
// overlong forms, surrogates and code points past U+10FFFF.
size_t io_json_utf8_len(const unsigned char *s, size_t avail);

// "an object", "a string", ... for messages.
const char *io_json_type_name(io_json_type t);

#endif
