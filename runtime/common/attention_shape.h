// Private to the attention kernels of both backends (runtime/cpu/kernels/attention.c,
// runtime/cuda/kernels/attention.cu): the sizes behind rt_attention_*_floats, which the memory
// plan relies on and which therefore must not depend on the backend, where one
// (batch, head) pair's operands live, and the softmax scale, each defined once.
#ifndef FSDPGEN_COMMON_ATTENTION_SHAPE_H
#define FSDPGEN_COMMON_ATTENTION_SHAPE_H

#include <math.h>
#include <stddef.h>

// ----------------------------------------------------------------------------
// sizes (rt_kernels.h)

static inline size_t rt_attention_probs_floats_inl(int B, int NH, int T) {
    return (size_t)B * NH * T * T;
}

static inline size_t rt_attention_scratch_floats_inl(int T) { return (size_t)T * T; }

static inline size_t rt_attention_stats_floats_inl(int B, int NH, int T) {
    return (size_t)B * NH * T * 2;
}

// max(2*T*T, B*NH*T): the CPU kernel's two [T,T] matrices, the CUDA kernel's D.
static inline size_t rt_attention_lowmem_scratch_floats_inl(int B, int NH, int T) {
    const size_t tt = (size_t)T * T * 2, d = (size_t)B * NH * T;
    return tt > d ? tt : d;
}

// ----------------------------------------------------------------------------
// one (b, h) pair inside the [B,T,heads*HD] buffers

typedef struct {
    size_t qoff, koff;  // offsets of q/out/dq and of k/v/dk/dv
    int ldq, ldk;       // row strides: NH*HD and NKV*HD
} rt_head_view;

static inline rt_head_view rt_head_view_of(int b, int h, int T, int NH, int NKV, int HD) {
    rt_head_view v;
    v.ldq = NH * HD;
    v.ldk = NKV * HD;
    v.qoff = (size_t)b * T * v.ldq + (size_t)h * HD;
    v.koff = (size_t)b * T * v.ldk + (size_t)(h / (NH / NKV)) * HD;  // kv head of query head h
    return v;
}

// 1/sqrt(HD), rounded once from double
static inline float rt_attention_scale(int HD) { return (float)(1.0 / sqrt((double)HD)); }

#endif
