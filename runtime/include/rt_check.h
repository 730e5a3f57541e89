// Checks for calls that can fail at run time (CUDA, NCCL, files, system calls): on failure
// they print one line `file:line: error: CALL failed: WHY (hint: WHAT TO DO)` and exit
// with status 1 (docs/cli.md, "Exit status": 1 = failure at run time). The CUDA/NCCL macros expand to
// cudaGetErrorString / ncclGetErrorString, so they compile only where cuda_runtime.h /
// nccl.h are included; the hint tables live in core/check.c and need neither header.
// C and C++ (nvcc) include it alike: C linkage, and RT_NORETURN for the reporter.
#ifndef RT_CHECK_H
#define RT_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

// A function that does not return, in the spelling of the including language (C11's
// _Noreturn is no C++ keyword, and nvcc's host compiler rejects it).
#ifdef __cplusplus
#define RT_NORETURN [[noreturn]]
#else
#define RT_NORETURN _Noreturn
#endif

#ifdef __cplusplus
extern "C" {
#endif

// ---- reporters (core/check.c) -----------------------------------------------------------

// Prints `file:line: error: <expr> failed: <why> (hint: <hint>)` and exits(1).
RT_NORETURN void rt_check_fail(const char* file, int line, const char* expr, const char* why,
                             const char* hint);
// Hints for numeric error codes (stable across CUDA/NCCL releases).
const char* rt_check_cuda_hint(int code);
const char* rt_check_nccl_hint(int code);
const char* rt_check_errno_hint(int err);

#ifdef __cplusplus
}
#endif

// ---- macros -----------------------------------------------------------------------------

// RT_CHECK_CUDA(cudaMalloc(&p, n));
#define RT_CHECK_CUDA(call)                                                            \
    do {                                                                               \
        int rt_code_ = (int)(call);                                                    \
        if (rt_code_ != 0)                                                             \
            rt_check_fail(__FILE__, __LINE__, #call,                                   \
                          cudaGetErrorString((cudaError_t)rt_code_),                   \
                          rt_check_cuda_hint(rt_code_));                               \
    } while (0)

// RT_CHECK_NCCL(ncclAllGather(...));
#define RT_CHECK_NCCL(call)                                                            \
    do {                                                                               \
        int rt_code_ = (int)(call);                                                    \
        if (rt_code_ != 0)                                                             \
            rt_check_fail(__FILE__, __LINE__, #call,                                   \
                          ncclGetErrorString((ncclResult_t)rt_code_),                  \
                          rt_check_nccl_hint(rt_code_));                               \
    } while (0)

// RT_CHECK_FILE(f = fopen(path, "rb"), path): the expression must be non-zero/non-NULL;
// errno names the reason, path says which file.
#define RT_CHECK_FILE(expr, path)                                                      \
    do {                                                                               \
        errno = 0;                                                                     \
        if (!(expr)) {                                                                 \
            int rt_err_ = errno;                                                       \
            char rt_why_[512];                                                         \
            snprintf(rt_why_, sizeof rt_why_, "%s: %s", (path) ? (path) : "(null)",     \
                     rt_err_ ? strerror(rt_err_) : "short read/write or bad data");     \
            rt_check_fail(__FILE__, __LINE__, #expr, rt_why_,                          \
                          rt_check_errno_hint(rt_err_));                               \
        }                                                                              \
    } while (0)

// RT_CHECK_SYS(pthread_create(...) == 0, "pthread_create"): a system call's condition.
#define RT_CHECK_SYS(cond, what)                                                       \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            int rt_err_ = errno;                                                       \
            rt_check_fail(__FILE__, __LINE__, what, rt_err_ ? strerror(rt_err_) : "failed", \
                          rt_check_errno_hint(rt_err_));                               \
        }                                                                              \
    } while (0)

// RT_CHECK_RT(rt_comm_all_gather(...), comm_error_string): an rt_* call returning 0 on
// success; `why` is evaluated only on failure (e.g. rt_comm_last_error(comm)).
#define RT_CHECK_RT(call, why)                                                         \
    do {                                                                               \
        if ((call) != 0)                                                               \
            rt_check_fail(__FILE__, __LINE__, #call, (why),                            \
                          "see the message above; rerun with RT_COMM_TIMEOUT_MS raised if " \
                          "a rank was only slow");                                     \
    } while (0)

#endif
