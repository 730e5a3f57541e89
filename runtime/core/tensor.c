// Tensor views: shape arithmetic with overflow checks and printable shapes for messages.
#include "rt_tensor.h"

#include <stdio.h>
#include <string.h>

// ---- shapes -----------------------------------------------------------------------------

int rt_shape_numel(int ndim, const int64_t* shape, int64_t* numel) {
    if (ndim < 0 || ndim > RT_MAX_DIMS || (ndim > 0 && !shape)) return -1;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return -1;
        if (shape[d] != 0 && n > INT64_MAX / shape[d]) return -1;
        n *= shape[d];
    }
    if (numel) *numel = n;
    return 0;
}

char* rt_shape_str(int ndim, const int64_t* shape, char* buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    size_t len = 0;
    buf[0] = '\0';
    len += (size_t)snprintf(buf + len, cap - len, "[");
    for (int d = 0; d < ndim && shape && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
    return buf;
}

// ---- tensors ----------------------------------------------------------------------------

int rt_tensor_init(rt_tensor* out, void* data, rt_dtype dtype, int ndim, const int64_t* shape) {
    if (!out) return -1;
    memset(out, 0, sizeof *out);
    if (!rt_dtype_valid(dtype) || rt_shape_numel(ndim, shape, NULL) != 0) return -1;
    out->data = data;
    out->dtype = dtype;
    out->ndim = ndim;
    for (int d = 0; d < ndim; d++) out->shape[d] = shape[d];
    return 0;
}

int64_t rt_tensor_numel(const rt_tensor* t) {
    int64_t n = 0;
    if (!t || rt_shape_numel(t->ndim, t->shape, &n) != 0) return 0;
    return n;
}

size_t rt_tensor_nbytes(const rt_tensor* t) {
    return t ? (size_t)rt_tensor_numel(t) * rt_dtype_size(t->dtype) : 0;
}
