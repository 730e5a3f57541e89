// Tests of rt_arena (views at planned offsets, bounds and alignment errors, the measured
// peak), rt_tensor shape arithmetic, and the rt_check.h macros (run in child processes,
// since a failed check exits).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rt_arena.h"
#include "rt_check.h"
#include "rt_tensor.h"

// ---- arena ------------------------------------------------------------------------------

static void test_views(void) {
    rt_arena a;
    CHECK(rt_arena_init(&a, 1024, "rank 3") == 0 && a.capacity == 1024 && a.peak == 0,
          "init 1024 bytes: capacity %zu, peak %zu", a.capacity, a.peak);
    CHECK(((uintptr_t)a.base % RT_ARENA_ALIGN) == 0, "base is %d-byte aligned", RT_ARENA_ALIGN);
    rt_tensor t;
    int64_t s4[1] = {4};
    CHECK(rt_arena_view(&a, "x", 0, RT_F32, 1, s4, &t) == 0 && t.data == a.base && rt_tensor_nbytes(&t) == 16,
          "view x fp32 [4] at 0: 16 bytes at the base");
    CHECK(rt_arena_peak(&a) == 16, "peak after x: %zu (want 16)", rt_arena_peak(&a));
    int64_t s2[1] = {2};
    CHECK(rt_arena_view(&a, "y", 100, RT_F32, 1, s2, &t) == 0 && rt_arena_peak(&a) == 108,
          "view y fp32 [2] at 100: peak %zu (want 108)", rt_arena_peak(&a));
    CHECK(rt_arena_view(&a, "x again", 0, RT_BF16, 1, s4, &t) == 0 && rt_arena_peak(&a) == 108,
          "a lower view leaves the peak at %zu", rt_arena_peak(&a));
    int64_t s16[2] = {16, 16};
    CHECK(rt_arena_view(&a, "full", 0, RT_F32, 2, s16, &t) == 0 && rt_arena_peak(&a) == 1024,
          "view [16, 16] fp32 fills the arena exactly: peak %zu", rt_arena_peak(&a));

    int64_t s200[1] = {200};
    int st = rt_arena_view(&a, "layers.0.ag_out", 512, RT_F32, 1, s200, &t);
    CHECK(st == -1 && t.data == NULL && strstr(a.error, "layers.0.ag_out") && strstr(a.error, "past the capacity 1024") &&
              strstr(a.error, "ends at byte 1312"),
          "view past the capacity fails: \"%s\"", a.error);
    st = rt_arena_view(&a, "odd", 2, RT_F32, 1, s4, &t);
    CHECK(st == -1 && strstr(a.error, "not aligned to its element size 4"), "misaligned view fails: \"%s\"", a.error);
    st = rt_arena_view(&a, "huge", 8, RT_F32, 1, (int64_t[]){INT64_MAX / 2}, &t);
    CHECK(st == -1, "an absurdly large view fails: \"%s\"", a.error);
    st = rt_arena_view(&a, "neg", 0, RT_F32, 1, (int64_t[]){-1}, &t);
    CHECK(st == -1 && strstr(a.error, "invalid dtype or shape"), "negative dim fails: \"%s\"", a.error);
    CHECK(rt_arena_bytes(&a, "raw", 1000, 24) != NULL && rt_arena_bytes(&a, "raw", 1000, 25) == NULL,
          "raw bytes [1000, 1024) fit, [1000, 1025) do not");
    CHECK(rt_arena_peak(&a) == 1024, "failed views do not move the peak: %zu", rt_arena_peak(&a));
    CHECK(rt_arena_check_peak(&a, 1024) == 0, "planned peak 1024 matches the measured 1024");
    CHECK(rt_arena_check_peak(&a, 1000) == -1 && strstr(a.error, "exceeds the planned peak 1000 bytes by 24"),
          "planned peak 1000 < measured fails: \"%s\"", a.error);
    rt_arena_free(&a);

    rt_arena z;
    CHECK(rt_arena_init(&z, 0, "empty") == 0 && rt_arena_view(&z, "v", 0, RT_F32, 1, s4, &t) == -1,
          "a zero-capacity arena refuses a non-empty view");
    rt_arena_free(&z);
}

// ---- tensors ----------------------------------------------------------------------------

static void test_shapes(void) {
    int64_t n = -1;
    CHECK(rt_shape_numel(2, (int64_t[]){17, 257}, &n) == 0 && n == 4369, "numel of [17, 257] = %lld", (long long)n);
    CHECK(rt_shape_numel(0, NULL, &n) == 0 && n == 1, "a scalar has numel 1");
    CHECK(rt_shape_numel(2, (int64_t[]){0, 5}, &n) == 0 && n == 0, "numel of [0, 5] = 0");
    CHECK(rt_shape_numel(3, (int64_t[]){INT64_MAX / 2, 2, 2}, &n) == -1, "overflowing shape is rejected");
    CHECK(rt_shape_numel(RT_MAX_DIMS + 1, (int64_t[RT_MAX_DIMS + 1]){0}, &n) == -1, "too many dims are rejected");
    char buf[32];
    CHECK(strcmp(rt_shape_str(2, (int64_t[]){64, 312}, buf, sizeof buf), "[64, 312]") == 0, "shape string %s", buf);
    rt_tensor t;
    float data[6];
    CHECK(rt_tensor_init(&t, data, RT_BF16, 2, (int64_t[]){2, 3}) == 0 && rt_tensor_numel(&t) == 6 &&
              rt_tensor_nbytes(&t) == 12,
          "bf16 [2, 3] tensor: 6 elements, 12 bytes");
}

// ---- rt_check.h -------------------------------------------------------------------------

// Runs fn in a child with stderr captured; returns the exit status and the text.
static int run_child(void (*fn)(void), char* out, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t k;
    while (len + 1 < cap && (k = read(fd[0], out + len, cap - 1 - len)) > 0) len += (size_t)k;
    while (len > 0 && out[len - 1] == '\n') len--;  // one-line messages print inline
    out[len] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void child_file(void) {
    FILE* f;
    RT_CHECK_FILE(f = fopen("/nonexistent/weights.safetensors", "rb"), "/nonexistent/weights.safetensors");
    fclose(f);
}

static void child_view(void) {
    rt_arena a;
    rt_arena_init(&a, 64, "rank 0");
    RT_ARENA_VIEW(&a, "grads", 32, RT_F32, 1, ((int64_t[]){16}));
}

static void child_sys(void) {
    errno = ENOMEM;
    RT_CHECK_SYS(0, "mmap of the arena");
}

static void child_ok(void) {
    FILE* f;
    RT_CHECK_FILE(f = fopen("/dev/null", "rb"), "/dev/null");
    fclose(f);
    RT_CHECK_SYS(1, "nothing");
}

static void test_checks(void) {
    char out[1024];
    int st = run_child(child_file, out, sizeof out);
    CHECK(st == 1 && strstr(out, "test_arena.c:") && strstr(out, "No such file or directory") &&
              strstr(out, "hint: the path does not exist"),
          "RT_CHECK_FILE on a missing file exits 1 with file:line and a hint: %s", out);
    st = run_child(child_view, out, sizeof out);
    CHECK(st == 1 && strstr(out, "test_arena.c:") && strstr(out, "'grads'") && strstr(out, "capacity 64"),
          "RT_ARENA_VIEW past the capacity exits 1 naming the view: %s", out);
    st = run_child(child_sys, out, sizeof out);
    CHECK(st == 1 && strstr(out, "mmap of the arena failed") && strstr(out, "out of host memory"),
          "RT_CHECK_SYS exits 1 with the errno text and a hint: %s", out);
    st = run_child(child_ok, out, sizeof out);
    CHECK(st == 0 && out[0] == '\0', "passing checks print nothing and continue");
    CHECK(strstr(rt_check_cuda_hint(2), "out of memory") != NULL, "CUDA error 2 hint: %s", rt_check_cuda_hint(2));
    CHECK(strstr(rt_check_nccl_hint(5), "disagree") != NULL, "NCCL error 5 hint: %s", rt_check_nccl_hint(5));
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_views();
    test_shapes();
    test_checks();
    return check_summary();
}
