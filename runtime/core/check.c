// Reporter and hint tables behind rt_check.h. The codes are the numeric values of
// cudaError_t / ncclResult_t, which both libraries keep stable, so this file needs no CUDA.
#include "rt_check.h"

#include <stdio.h>
#include <stdlib.h>

// ---- reporter ---------------------------------------------------------------------------

RT_NORETURN void rt_check_fail(const char* file, int line, const char* expr, const char* why,
                             const char* hint) {
    fflush(stdout);
    fprintf(stderr, "%s:%d: error: %s failed: %s (hint: %s)\n", file, line, expr,
            why ? why : "unknown", hint ? hint : "none");
    fflush(stderr);
    exit(1);
}

// ---- hints ------------------------------------------------------------------------------

const char* rt_check_cuda_hint(int code) {
    switch (code) {
        case 1: return "an argument is invalid: check sizes, pointers and the device index";
        case 2: return "the GPU is out of memory: lower the batch size or check the memory plan";
        case 3: return "CUDA failed to initialise: check the driver with nvidia-smi";
        case 35: return "the NVIDIA driver is older than this CUDA runtime: update the driver";
        case 100: return "no GPU is visible: check CUDA_VISIBLE_DEVICES and nvidia-smi";
        case 101: return "invalid device ordinal: fewer GPUs are visible than ranks requested";
        case 209: return "no kernel image for this GPU: rebuild for its compute capability";
        case 700: return "illegal memory access in a kernel: run compute-sanitizer";
        default: return "run with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel";
    }
}

const char* rt_check_nccl_hint(int code) {
    switch (code) {
        case 1: return "a CUDA call inside NCCL failed: rerun with NCCL_DEBUG=INFO";
        case 2: return "a system call failed (shared memory, sockets): rerun with NCCL_DEBUG=INFO "
                       "and check /dev/shm size";
        case 3: return "NCCL internal error: rerun with NCCL_DEBUG=INFO";
        case 4: return "invalid argument: check counts, dtypes and buffers on every rank";
        case 5: return "invalid usage: ranks disagree on the collective sequence or arguments";
        case 6: return "a remote rank failed or disconnected: check the other ranks' logs";
        case 7: return "operation still in progress (non-blocking communicator)";
        default: return "rerun with NCCL_DEBUG=INFO";
    }
}

const char* rt_check_errno_hint(int err) {
    switch (err) {
        case 0: return "the data was shorter than expected or malformed";
        case ENOENT: return "the path does not exist: check the spelling and working directory";
        case EACCES: return "permission denied: check the file's permissions";
        case ENOSPC: return "the disk is full";
        case ENOMEM: return "out of host memory";
        case EAGAIN: return "a resource limit was hit (threads? check ulimit -u)";
        case EISDIR: return "the path is a directory, not a file";
        default: return "see the reason above";
    }
}
