// test_cuda_kernels: the argument checks that stop a call, each run in a child process (--kcheck).
#include "kernel_tests.h"

#include "bad_calls.h"

#include <signal.h>
#include <sys/wait.h>

// This program's path (argv[0]), run again by aborts_with.
const char* self_path;

// Runs this program again with --kcheck NAME (main), its stderr captured into out: 1 when it
// aborted (SIGABRT) with one line that contains `want`. The shell execs it, so that the
// status is the program's and the shell adds no line of its own.
static int aborts_with(const char* name, const char* want, char* out, size_t cap) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "exec '%s' --kcheck %s 2>&1", self_path, name);
    fflush(stdout);
    FILE* f = popen(cmd, "r");
    const size_t len = f ? fread(out, 1, cap - 1, f) : 0;
    out[len] = 0;
    const int st = f ? pclose(f) : -1;
    const char* nl = strchr(out, '\n');
    const int one_line = nl && nl[1] == 0;
    if (one_line) out[len - 1] = 0;  // printed inline by the check
    return st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(out, want) &&
           one_line;
}

static void swiglu_ld_short(void) {
    rt_swiglu_packed_backward(bad_buf[0], bad_buf[1], bad_buf[2], bad_buf[2], bad_buf[2], 32,
                              RT_PACKED_DINP | RT_PACKED_DINP2, RT_BF16, 0, 16, 16, 8);
}

static void attention_ld_odd(void) {
    rt_attention_lowmem_packed_backward(bad_buf[0], bad_buf[1], bad_buf[2], NULL, bad_buf[0],
                                        bad_buf[0], bad_buf[0], bad_buf[0], bad_buf[0], NULL, 1, 1,
                                        4, 2, 16, 1, RT_F16, RT_PACKED_DINP | RT_PACKED_DINP2,
                                        RT_F16, RT_ACCUMULATE, 0, 36, 0);
}

// Attention dropout with p outside [0, 1): the CUDA forward and packed backward, and the CPU
// kernels (cpu_*), stop before touching a buffer.
static void attention_dropout_p1(void) {
    float* f = (float*)bad_buf[0];
    rt_attention_lowmem_dropout_forward(f, f, NULL, f, f, f, 1, 1, 2, 1, 16, 1, RT_F32, RT_F32,
                                        1.0f, 1, 0);
}

static void attention_dropout_negative(void) {
    rt_attention_lowmem_packed_dropout_backward(bad_buf[0], bad_buf[1], bad_buf[2], NULL,
                                                bad_buf[0], bad_buf[0], bad_buf[0], bad_buf[0],
                                                bad_buf[0], NULL, 1, 1, 2, 1, 16, 1, RT_BF16,
                                                RT_PACKED_OUT, RT_BF16, RT_ACCUMULATE, 0, 0, 0,
                                                -0.5f, 1, 0);
}

static void cpu_attention_dropout_p1(void) {
    float* f = (float*)bad_buf[0];
    cpu_rt_attention_lowmem_dropout_forward(f, f, NULL, f, f, f, 1, 1, 2, 1, 16, 1, RT_F32,
                                            RT_F32, 1.0f, 1, 0);
}

static void cpu_attention_dropout_negative(void) {
    float* f = (float*)bad_buf[0];
    cpu_rt_attention_lowmem_dropout_backward(f, NULL, NULL, NULL, f, f, f, f, f, f, 1, 1, 2, 1,
                                             16, 1, RT_F32, RT_F32, RT_ACCUMULATE, -0.5f, 1, 0);
}

static void linear_dweight_odd(void) {
    rt_linear_packed_backward(NULL, bad_buf[0], NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 12, 8,
                              RT_PACKED_DWEIGHT, RT_F16, RT_ASSIGN_DWEIGHT, 0, 0);
}

static void norm_dweight_accumulated(void) {
    rt_layernorm_packed_backward(NULL, bad_buf[0], bad_buf[1], bad_buf[2], bad_buf[2], NULL, NULL,
                                 NULL, 1, 8, RT_PACKED_DWEIGHT, RT_BF16, RT_ASSIGN_1);
}

static void adam_packed_fp32(void) {
    rt_cuda_adam_step_rows_dev((float*)bad_buf[0], bad_buf[1], (float*)bad_buf[2],
                               (float*)bad_buf[2], 8, (const int64_t*)bad_buf[0], 1, 1,
                               (const double*)bad_buf[0], 0.9, 0.95, 1e-8, 0.0, 1, RT_F32, 1,
                               NULL, NULL);
}

static void sgd_packed_fp32(void) {
    rt_cuda_sgd_step_rows_dev((float*)bad_buf[0], bad_buf[1], NULL, 8, (const int64_t*)bad_buf[0],
                              1, 1, (const double*)bad_buf[0], 0.0, 0.0, 0.0, 0, RT_F32, 1, NULL, NULL);
}

// A scaled linear's alpha not a power of two, or dt RT_F16 (RT_KCHECK_LINEAR_ALPHA): each
// CUDA entry point, and the CPU's fp32-storage ones, stop before touching a buffer.
static void linear_scaled_alpha3(void) {
    float* f = (float*)bad_buf[0];
    rt_linear_scaled_forward(f, f, f, 1, 8, 8, 3.0f, RT_F32);
}

static void linear_scaled_f16(void) {
    float* f = (float*)bad_buf[0];
    rt_linear_scaled_backward(f, f, f, f, f, 1, 8, 8, 2.0f, RT_F16, RT_ASSIGN_1);
}

static void linear_scaled_packed_f16(void) {
    rt_linear_scaled_packed_forward(bad_buf[0], bad_buf[1], bad_buf[2], 1, 8, 8, 0.5f,
                                    RT_PACKED_OUT, RT_F16);
}

static void linear_scaled_packed_negative(void) {
    rt_linear_scaled_packed_backward(bad_buf[0], NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 8,
                                     8, -2.0f, RT_PACKED_OUT | RT_PACKED_DINP, RT_BF16,
                                     RT_ASSIGN_1, 0, 0);
}

static void cpu_linear_scaled_alpha3(void) {
    float* f = (float*)bad_buf[0];
    cpu_rt_linear_scaled_forward(f, f, f, 1, 8, 8, 3.0f, RT_BF16);
}

static void cpu_linear_scaled_f16(void) {
    float* f = (float*)bad_buf[0];
    cpu_rt_linear_scaled_backward(f, f, f, f, f, 1, 8, 8, 0.25f, RT_F16, RT_ACCUMULATE);
}

// Row lengths a packed gradient cannot take (too short, not a multiple of 8) stop the call
// with one line naming it.
void test_grad_rows_checked(void) {
    char out[1024];
    int ok = aborts_with("rope", "dinp with row length 24, width 32, packed", out, sizeof out);
    CHECK(ok, "rope backward with dinp in rows of 24 (width 32) stops: %s", out);
    ok = aborts_with("attention", "dk with row length 36, width 32, packed", out, sizeof out);
    CHECK(ok, "attention backward with dk in rows of 36 (not a multiple of 8) stops: %s", out);
    ok = aborts_with("linear_fp32", "dout with row length 16, width 8, fp32 storage", out,
                     sizeof out);
    CHECK(ok, "linear backward with an fp32-storage dout in rows of 16 (OC 8) stops: %s", out);
    ok = aborts_with("linear_odd_oc", "packed dout with row length 24, width 12", out, sizeof out);
    CHECK(ok, "linear backward with a packed dout of OC 12 in rows of 24 (a slice of OC not a "
          "multiple of 8) stops: %s", out);
    const char* dinp_ld[6][3] = {
        {"linear_dinp_odd", "rt_linear_packed_backward: dinp with row length 20, width 16, packed",
         "packed, in rows of 20 (not a multiple of 8)"},
        {"linear_dinp_short", "rt_linear_packed_backward: dinp with row length 8, width 16, packed",
         "packed, in rows of 8 (C 16)"},
        {"linear_dinp_fp32",
         "rt_linear_packed_backward: dinp with row length 16, width 16, fp32 storage",
         "in fp32 storage, in rows of 16"},
        {"linear_dinp_added",
         "rt_linear_scaled_packed_backward: dinp with row length 16 and assign 0",
         "packed and added to (a scaled linear's), in rows of 16"},
        {"linear_dinp_null", "rt_linear_packed_backward: dinp NULL with row length 16 and assign 9",
         "NULL, in rows of 16"},
        {"linear_dinp_odd_c", "rt_linear_packed_backward: packed dinp with row length 16, width 12",
         "packed of C 12, in rows of 16 (a slice of C not a multiple of 8)"}};
    for (int i = 0; i < 6; i++) {
        ok = aborts_with(dinp_ld[i][0], dinp_ld[i][1], out, sizeof out);
        CHECK(ok, "linear backward with ld_dinp for a dinp %s stops: %s", dinp_ld[i][2], out);
    }
    ok = aborts_with("swiglu_short", "db with row length 8, width 16, packed", out, sizeof out);
    CHECK(ok, "swiglu backward with a packed db in rows of 8 (C 16) stops: %s", out);
    ok = aborts_with("swiglu_rows", "rt_swiglu_packed_backward with n = 20, C = 8", out,
                     sizeof out);
    CHECK(ok, "swiglu backward with n = 20 in rows of 8 stops: %s", out);
    ok = aborts_with("linear_dweight_acc",
                     "rt_linear_packed_backward with RT_PACKED_DWEIGHT and assign 0", out,
                     sizeof out);
    CHECK(ok, "linear backward adding to a packed dweight (no RT_ASSIGN_DWEIGHT) stops: %s", out);
    ok = aborts_with("linear_dweight_odd", "with a packed [8, 12] dweight", out, sizeof out);
    CHECK(ok, "linear backward with a packed [8, 12] dweight (C not a multiple of 8) stops: %s",
          out);
    ok = aborts_with("norm_dweight_acc",
                     "rt_layernorm_packed_backward with RT_PACKED_DWEIGHT and assign 1", out,
                     sizeof out);
    CHECK(ok, "layernorm backward adding to packed parameter gradients stops: %s", out);
    ok = aborts_with("adam_packed_fp32", "rt_cuda_adam_step_rows_dev with packed gradients of "
                     "dtype 0", out, sizeof out);
    CHECK(ok, "adam step on packed gradients of dtype RT_F32 stops: %s", out);
    ok = aborts_with("sgd_packed_fp32", "rt_cuda_sgd_step_rows_dev with packed gradients of "
                     "dtype 0", out, sizeof out);
    CHECK(ok, "sgd step on packed gradients of dtype RT_F32 stops: %s", out);
    // attention dropout's p, on both backends: the same line (RT_KCHECK_ATTENTION_DROPOUT)
    const char* hint = "(hint: attention dropout p is in [0, 1))";
    const char* drop[4][2] = {
        {"attention_dropout_p1", "rt_attention_lowmem_dropout_forward with dropout p 1"},
        {"attention_dropout_negative",
         "rt_attention_lowmem_packed_dropout_backward with dropout p -0.5"},
        {"cpu_attention_dropout_p1", "rt_attention_lowmem_dropout_forward with dropout p 1"},
        {"cpu_attention_dropout_negative",
         "rt_attention_lowmem_dropout_backward with dropout p -0.5"}};
    for (int i = 0; i < 4; i++) {
        ok = aborts_with(drop[i][0], drop[i][1], out, sizeof out) && strstr(out, hint);
        CHECK(ok, "attention dropout p outside [0, 1) stops (%s): %s", drop[i][0], out);
    }
    // a scaled linear's alpha and dt, on both backends (RT_KCHECK_LINEAR_ALPHA)
    const char* alpha_hint = "(hint: a scaled linear's alpha is a power of two)";
    const char* dt_hint = "(hint: a scaled linear's dt is RT_F32 or RT_BF16)";
    const char* scaled[6][3] = {
        {"linear_scaled_alpha3", "rt_linear_scaled_forward with alpha 3", alpha_hint},
        {"linear_scaled_f16", "rt_linear_scaled_backward with dtype 2", dt_hint},
        {"linear_scaled_packed_f16", "rt_linear_scaled_packed_forward with dtype 2", dt_hint},
        {"linear_scaled_packed_negative", "rt_linear_scaled_packed_backward with alpha -2",
         alpha_hint},
        {"cpu_linear_scaled_alpha3", "rt_linear_scaled_forward with alpha 3", alpha_hint},
        {"cpu_linear_scaled_f16", "rt_linear_scaled_backward with dtype 2", dt_hint}};
    for (int i = 0; i < 6; i++) {
        ok = aborts_with(scaled[i][0], scaled[i][1], out, sizeof out) && strstr(out, scaled[i][2]);
        CHECK(ok, "a scaled linear with alpha 3 (or -2) or dt RT_F16 stops (%s): %s", scaled[i][0],
              out);
    }
}

// The call `test_cuda_kernels --kcheck NAME` makes (main): one whose checks must stop it.
void arg_check_call(const char* name) {
    if (!strcmp(name, "rope")) rope_ld_short();
    else if (!strcmp(name, "linear_fp32")) linear_ld_fp32();
    else if (!strcmp(name, "linear_odd_oc")) linear_ld_odd_oc();
    else if (!strcmp(name, "linear_dinp_odd")) linear_dinp_ld_odd();
    else if (!strcmp(name, "linear_dinp_short")) linear_dinp_ld_short();
    else if (!strcmp(name, "linear_dinp_fp32")) linear_dinp_ld_fp32();
    else if (!strcmp(name, "linear_dinp_added")) linear_dinp_ld_added();
    else if (!strcmp(name, "linear_dinp_null")) linear_dinp_ld_null();
    else if (!strcmp(name, "linear_dinp_odd_c")) linear_dinp_ld_odd_c();
    else if (!strcmp(name, "swiglu_short")) swiglu_ld_short();
    else if (!strcmp(name, "swiglu_rows")) swiglu_rows_bad();
    else if (!strcmp(name, "linear_dweight_acc")) linear_dweight_accumulated();
    else if (!strcmp(name, "linear_dweight_odd")) linear_dweight_odd();
    else if (!strcmp(name, "norm_dweight_acc")) norm_dweight_accumulated();
    else if (!strcmp(name, "adam_packed_fp32")) adam_packed_fp32();
    else if (!strcmp(name, "sgd_packed_fp32")) sgd_packed_fp32();
    else if (!strcmp(name, "attention_dropout_p1")) attention_dropout_p1();
    else if (!strcmp(name, "attention_dropout_negative")) attention_dropout_negative();
    else if (!strcmp(name, "cpu_attention_dropout_p1")) cpu_attention_dropout_p1();
    else if (!strcmp(name, "cpu_attention_dropout_negative")) cpu_attention_dropout_negative();
    else if (!strcmp(name, "linear_scaled_alpha3")) linear_scaled_alpha3();
    else if (!strcmp(name, "linear_scaled_f16")) linear_scaled_f16();
    else if (!strcmp(name, "linear_scaled_packed_f16")) linear_scaled_packed_f16();
    else if (!strcmp(name, "linear_scaled_packed_negative")) linear_scaled_packed_negative();
    else if (!strcmp(name, "cpu_linear_scaled_alpha3")) cpu_linear_scaled_alpha3();
    else if (!strcmp(name, "cpu_linear_scaled_f16")) cpu_linear_scaled_f16();
    else attention_ld_odd();
}
