// A tensor is a typed, contiguous (row-major) view: a data pointer, a dtype and a shape.
// Tensors never own memory; they are views into a rank's static arena (rt_arena.h) or
// into buffers the caller owns. Shape legend in comments: B batch, T sequence, C channels.
#ifndef RT_TENSOR_H
#define RT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "rt_dtype.h"

// ---- types ------------------------------------------------------------------------------

#define RT_MAX_DIMS 8

typedef struct rt_tensor {
    void* data;
    rt_dtype dtype;
    int ndim;                     // 0 is a scalar (numel 1)
    int64_t shape[RT_MAX_DIMS];   // entries past ndim are 0
} rt_tensor;

// ---- shapes -----------------------------------------------------------------------------

// Product of the shape. Returns 0 and sets *numel, or -1 when ndim is outside
// [0, RT_MAX_DIMS], shape is NULL with ndim > 0, a dim is negative, or the product
// overflows int64.
int rt_shape_numel(int ndim, const int64_t* shape, int64_t* numel);

// Writes "[17, 257]" into buf (always NUL-terminated, truncated to cap). Returns buf.
char* rt_shape_str(int ndim, const int64_t* shape, char* buf, size_t cap);

// ---- tensors ----------------------------------------------------------------------------

// Builds a view. Returns 0, or -1 on a bad shape/dtype (out is then zeroed).
int rt_tensor_init(rt_tensor* out, void* data, rt_dtype dtype, int ndim, const int64_t* shape);
int64_t rt_tensor_numel(const rt_tensor* t);
size_t rt_tensor_nbytes(const rt_tensor* t);

#endif
