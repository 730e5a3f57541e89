// safetensors I/O: the Hugging Face weight format, read and written without external
// dependencies, so a training binary can load initial weights from PyTorch and hand
// its trained weights back.
//
// File layout (all little-endian):
//   u64 N                      header length in bytes
//   N bytes of JSON            {"__metadata__": {"k": "v", ...},
//                               "name": {"dtype": "F32", "shape": [3, 4],
//                                        "data_offsets": [begin, end]}, ...}
//                              padded with spaces to a multiple of 8
//   data                       tensors back to back; offsets relative to data start
//
// Every function that can fail returns 0 on success and -1 on failure, filling the
// caller's `err` buffer (`errlen` bytes, 256 is enough for most messages; longer ones
// are cut) with one line saying what was wrong and what was expected. Nothing here
// prints or exits.
#ifndef FSDPGEN_RT_SAFETENSORS_H
#define FSDPGEN_RT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- dtypes -------------------------------------------------------------------------

// Element types. The numeric values are stable (checkpoint files store them).
typedef enum {
    RT_ST_F32 = 0,
    RT_ST_BF16 = 1,
    RT_ST_F16 = 2,
    RT_ST_I32 = 3,
    RT_ST_I64 = 4,
    RT_ST_F64 = 5,
    RT_ST_I16 = 6,
    RT_ST_I8 = 7,
    RT_ST_U8 = 8,
    RT_ST_BOOL = 9,
    RT_ST_N_DTYPES
} rt_st_dtype;

// Header spelling ("F32", "BF16", ...), or "?" for a value outside the enum.
const char *rt_st_dtype_name(rt_st_dtype dt);
// Bytes per element, 0 for a value outside the enum.
size_t rt_st_dtype_size(rt_st_dtype dt);
// Parses a header spelling; returns 0 and sets *out, or -1 if unknown.
int rt_st_dtype_parse(const char *name, rt_st_dtype *out);

// Most dimensions a tensor may have (files with more are rejected with a clear error).
#define RT_ST_MAX_DIMS 8

// ---- writing ------------------------------------------------------------------------

// One tensor to write. `data` holds prod(shape) elements of `dtype`, row-major,
// little-endian (may be NULL when the tensor has no elements). ndim 0 is a scalar.
typedef struct {
    const char *name;
    rt_st_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
} rt_st_tensor;

// A `__metadata__` entry (string to string, as the format requires).
typedef struct {
    const char *key;
    const char *value;
} rt_st_meta;

// Writes `n` tensors (and `n_meta` metadata entries, may be 0/NULL) to `path`.
// Tensors are laid out sorted by name (byte order) so the output is deterministic.
// The file appears atomically: it is written as `path.tmp` in the same directory,
// flushed, fsynced and renamed; on any error the temp file is removed and `path` is
// left as it was.
int rt_st_write(const char *path, const rt_st_tensor *tensors, size_t n,
                const rt_st_meta *meta, size_t n_meta, char *err, size_t errlen);

// ---- reading ------------------------------------------------------------------------

typedef struct rt_st_file rt_st_file;

// What the header says about one tensor.
typedef struct {
    const char *name;
    rt_st_dtype dtype;
    int ndim;
    int64_t shape[RT_ST_MAX_DIMS];
    uint64_t n_elements;
    uint64_t nbytes;
    uint64_t data_begin;  // offsets relative to the start of the data section
    uint64_t data_end;
} rt_st_info;

// Opens `path`, reads and validates the whole header: header length against the file
// size, JSON syntax, dtype names, shapes, shape product x dtype size == byte length,
// offsets inside the data, contiguous and non-overlapping, no duplicate names, no
// trailing bytes. Tensor data is read only by rt_st_load.
int rt_st_open(const char *path, rt_st_file **out, char *err, size_t errlen);
void rt_st_close(rt_st_file *f);

// The file's path as given to rt_st_open.
const char *rt_st_path(const rt_st_file *f);

// Iteration over tensors, sorted by name: i in [0, rt_st_count(f)).
size_t rt_st_count(const rt_st_file *f);
const rt_st_info *rt_st_at(const rt_st_file *f, size_t i);

// Looks a tensor up by name; NULL if absent.
const rt_st_info *rt_st_find(const rt_st_file *f, const char *name);

// Loads tensor `name` into `dst` (`dst_bytes` bytes), checking that it exists and has
// exactly `dtype` and shape `shape[0..ndim)`. Errors name the file and tensor and give
// found vs expected (for a missing name, the closest existing name if one is close).
int rt_st_load(const rt_st_file *f, const char *name, rt_st_dtype dtype, int ndim,
               const int64_t *shape, void *dst, size_t dst_bytes, char *err,
               size_t errlen);

// `__metadata__` entries, in header order; value lookup by key (NULL if absent).
size_t rt_st_meta_count(const rt_st_file *f);
const rt_st_meta *rt_st_meta_at(const rt_st_file *f, size_t i);
const char *rt_st_meta_get(const rt_st_file *f, const char *key);

#ifdef __cplusplus
}
#endif

#endif
