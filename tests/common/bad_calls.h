// Calls with one wrong argument that both backends refuse alike (rt_kernels.h's contracts;
// runtime/common/kcheck.h): tests/kernels/test_packed.c and tests/cuda/kernels_arg_checks.c
// run each in a child process and want its one-line message. The buffers are host memory:
// the calls stop at their argument checks, before any work.
#ifndef FSDPGEN_TESTS_BAD_CALLS_H
#define FSDPGEN_TESTS_BAD_CALLS_H

#include <stdint.h>

#include "rt_kernels.h"

static uint16_t bad_buf[3][64];

static void rope_ld_short(void) {
    rt_rope_packed_backward(bad_buf[0], bad_buf[1], 1, 1, 4, 8, RT_ROPE_THETA,
                            RT_PACKED_OUT | RT_PACKED_DINP, RT_BF16, RT_ASSIGN_1, 24);
}

static void linear_ld_fp32(void) {
    rt_linear_packed_backward(bad_buf[0], NULL, NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 8, 8,
                              0, RT_BF16, RT_ASSIGN_1, 16, 0);
}

static void linear_ld_odd_oc(void) {
    rt_linear_packed_backward(bad_buf[0], NULL, NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 8, 12,
                              RT_PACKED_OUT, RT_F16, RT_ASSIGN_1, 24, 0);
}

// A linear's ld_dinp where dinp cannot be a slice: not a multiple of 8, shorter than C, dinp
// in fp32 storage, added to (the scaled entry point), NULL, or C not a multiple of 8.
static void linear_dinp_ld_odd(void) {
    rt_linear_packed_backward(bad_buf[0], NULL, NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 16, 8,
                              RT_PACKED_DINP, RT_BF16, RT_ASSIGN_1, 0, 20);
}

static void linear_dinp_ld_short(void) {
    rt_linear_packed_backward(bad_buf[0], NULL, NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 16, 8,
                              RT_PACKED_DINP, RT_F16, RT_ASSIGN_1, 0, 8);
}

static void linear_dinp_ld_fp32(void) {
    rt_linear_packed_backward(bad_buf[0], NULL, NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 16, 8,
                              0, RT_BF16, RT_ASSIGN_1, 0, 16);
}

static void linear_dinp_ld_added(void) {
    rt_linear_scaled_packed_backward(bad_buf[0], NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 16,
                                     8, 2.0f, RT_PACKED_DINP, RT_BF16, RT_ACCUMULATE, 0, 16);
}

static void linear_dinp_ld_null(void) {
    rt_linear_packed_backward(NULL, bad_buf[0], NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 16, 8,
                              RT_PACKED_DINP, RT_BF16, RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT, 0, 16);
}

static void linear_dinp_ld_odd_c(void) {
    rt_linear_packed_backward(bad_buf[0], NULL, NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 12, 8,
                              RT_PACKED_DINP, RT_BF16, RT_ASSIGN_1, 0, 16);
}

static void swiglu_rows_bad(void) {
    rt_swiglu_packed_backward(bad_buf[0], bad_buf[1], bad_buf[2], bad_buf[2], bad_buf[2], 20,
                              RT_PACKED_DINP | RT_PACKED_DINP2, RT_BF16, 0, 8, 8, 8);
}

static void linear_dweight_accumulated(void) {
    rt_linear_packed_backward(NULL, bad_buf[0], NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 8, 8,
                              RT_PACKED_OUT | RT_PACKED_DWEIGHT, RT_BF16, RT_ACCUMULATE, 0, 0);
}

#endif
