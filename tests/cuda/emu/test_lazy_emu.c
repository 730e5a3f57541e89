// The CUDA emulator's lazy mode (CUDA_EMU_LAZY=1, tests/cuda/emu/include/cuda_runtime.h):
// each stream's work runs only when something needs it, so a missing stream dependency
// changes results. Checks, with copies and memsets on two non-blocking streams:
//   * a read on stream B of what stream A writes sees the old contents without a wait for
//     A's event, the new ones with it;
//   * a write on A to what B still has to read, unordered, reaches B's read first; ordered
//     by an event, it does not;
//   * an event synchronization runs its stream up to the record only; a query of an event
//     whose work has not run answers "not ready" once, then runs it;
//   * pageable host memory: a copy from it reads it at the call (later host writes do not
//     reach the device), a copy to it is complete when the call returns;
//   * cudaFree and cudaDeviceSynchronize run every stream's work first (AddressSanitizer
//     would report a pending copy into freed memory);
//   * a kernel given host memory as a pointer argument fails its launch, naming the
//     argument, as it would fault on a GPU (device memory is host memory here, so it would
//     otherwise run); given device memory it runs;
//   * a wait outside a capture on an event recorded in an ended capture joins nothing.
// With CUDA_EMU_LAZY=low only streams below the highest priority are lazy: a stream of the
// highest priority runs its work at issue, so its unordered write reaches a lazy stream's
// pending read.
// Run with CUDA_EMU_LAZY=1 and =low (tests/cuda/run.sh does); ends with `N passed, N failed`.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rt_kernels.h"

enum { N = 256 };

static unsigned char host_byte(const unsigned char* d) {
    unsigned char v = 0;
    cudaMemcpy(&v, d, 1, cudaMemcpyDeviceToHost);
    return v;
}

// CUDA_EMU_LAZY=low: stream `hi` (priority -5, the highest) runs at issue, `lo` (priority
// -1) lazily.
static int test_low(void) {
    cudaStream_t hi, lo;
    unsigned char *x, *y;
    CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, -5) == cudaSuccess &&
              cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, -1) == cudaSuccess &&
              cudaMalloc((void**)&x, N) == cudaSuccess && cudaMalloc((void**)&y, N) == cudaSuccess,
          "a high- and a low-priority stream, two buffers");
    cudaMemset(x, 3, N);
    cudaMemcpyAsync(y, x, N, cudaMemcpyDeviceToDevice, lo);
    cudaMemsetAsync(x, 9, N, hi);
    unsigned char seen = 0;
    memcpy(&seen, x, 1);  // device memory is host memory here
    cudaStreamSynchronize(lo);
    CHECK(seen == 9 && host_byte(y) == 9, "the high-priority stream's write runs at issue (%d) and "
          "reaches the low-priority stream's unordered pending read (%d)", seen, host_byte(y));
    cudaFree(x);
    cudaFree(y);
    cudaStreamDestroy(hi);
    cudaStreamDestroy(lo);
    return check_summary();
}

// rt_sum_loss_backward reads its dloss on the device: a host variable's address there (as
// the generated code's loss gradient once was) must fail the launch, in a child process,
// since the failure exits.
static void test_host_pointer_argument(void) {
    float *d = NULL, *d_two = NULL, got[4] = {0};
    const float two = 2.0f;
    cudaMalloc((void**)&d, sizeof got);
    cudaMalloc((void**)&d_two, sizeof two);
    cudaMemcpy(d_two, &two, sizeof two, cudaMemcpyHostToDevice);
    rt_sum_loss_backward(d, 4, d_two, RT_ASSIGN_1);
    cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost);
    CHECK(cudaGetLastError() == cudaSuccess && got[0] == 2.0f && got[3] == 2.0f,
          "a kernel given device memory runs (dlogits %g)", got[0]);
    int fds[2];
    if (pipe(fds) != 0) abort();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        rt_sum_loss_backward(d, 4, &two, RT_ASSIGN_1);
        _exit(0);
    }
    close(fds[1]);
    char err[2048] = {0};
    size_t n = 0;
    ssize_t k;
    while (n < sizeof err - 1 && (k = read(fds[0], err + n, sizeof err - 1 - n)) > 0) n += (size_t)k;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(err, "cuda_emu: kernel argument 2 ") &&
              strstr(err, "an illegal memory access was encountered"),
          "a kernel given a host variable's address: the launch fails (exit %d), naming argument 2 "
          "and the GPU's error", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    if (!strstr(err, "cuda_emu: kernel argument 2 ")) fprintf(stderr, "%s", err);
    cudaFree(d);
    cudaFree(d_two);
}

// An event recorded in a capture that has ended: a wait on it outside a capture does not
// join the ended capture (the stream's later work runs, as on a GPU).
static void test_wait_after_capture(void) {
    cudaStream_t a, b;
    cudaEvent_t e;
    cudaGraph_t g = NULL;
    unsigned char* d = NULL;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaMalloc((void**)&d, 1);
    cudaMemset(d, 1, 1);
    cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal);
    cudaEventRecord(e, a);
    const cudaError_t end = cudaStreamEndCapture(a, &g);
    const cudaError_t wait = cudaStreamWaitEvent(b, e, 0);
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
    cudaStreamIsCapturing(b, &st);
    cudaMemsetAsync(d, 0, 1, b);
    cudaStreamSynchronize(b);
    CHECK(end == cudaSuccess && wait == cudaSuccess && st == cudaStreamCaptureStatusNone &&
              host_byte(d) == 0,
          "a wait on an event of an ended capture joins nothing: the stream's memset runs (%d)",
          host_byte(d));
    cudaGraphDestroy(g);
    cudaFree(d);
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
}

int main(void) {
    const char* mode = getenv("CUDA_EMU_LAZY");
    if (mode && strcmp(mode, "low") == 0) return test_low();
    if (!mode || strcmp(mode, "1") != 0) {
        printf("FAIL run with CUDA_EMU_LAZY=1 or low (the emulator's lazy modes)\n0 passed, 1 failed\n");
        return 1;
    }
    cudaStream_t a, b;
    cudaEvent_t ev;
    unsigned char *x, *y;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess &&
              cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess &&
              cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess &&
              cudaMalloc((void**)&x, N) == cudaSuccess && cudaMalloc((void**)&y, N) == cudaSuccess,
          "two non-blocking streams, an event, two buffers");

    // read after write
    cudaMemset(x, 1, N);
    cudaMemsetAsync(x, 7, N, a);
    cudaMemcpyAsync(y, x, N, cudaMemcpyDeviceToDevice, b);
    cudaStreamSynchronize(b);
    CHECK(host_byte(y) == 1, "B reads what A writes, no wait: the old contents (%d)", host_byte(y));
    cudaDeviceSynchronize();
    cudaMemset(x, 1, N);
    cudaMemsetAsync(x, 7, N, a);
    cudaEventRecord(ev, a);
    cudaStreamWaitEvent(b, ev, 0);
    cudaMemcpyAsync(y, x, N, cudaMemcpyDeviceToDevice, b);
    cudaStreamSynchronize(b);
    CHECK(host_byte(y) == 7, "B waits for A's event, then reads: A's write (%d)", host_byte(y));

    // write after read
    cudaDeviceSynchronize();
    cudaMemset(x, 3, N);
    cudaMemcpyAsync(y, x, N, cudaMemcpyDeviceToDevice, b);
    cudaMemsetAsync(x, 9, N, a);
    cudaStreamSynchronize(a);
    cudaStreamSynchronize(b);
    CHECK(host_byte(y) == 9, "A overwrites what B has to read, unordered: B reads the new value (%d)",
          host_byte(y));
    cudaMemset(x, 3, N);
    cudaMemcpyAsync(y, x, N, cudaMemcpyDeviceToDevice, b);
    cudaEventRecord(ev, b);
    cudaStreamWaitEvent(a, ev, 0);
    cudaMemsetAsync(x, 9, N, a);
    cudaStreamSynchronize(a);
    cudaStreamSynchronize(b);
    CHECK(host_byte(y) == 3, "A waits for B's read, then overwrites: B read the old value (%d)",
          host_byte(y));

    // an event synchronization runs its stream up to the record
    cudaDeviceSynchronize();
    cudaMemsetAsync(x, 4, N, a);
    cudaEventRecord(ev, a);
    cudaMemsetAsync(x, 5, N, a);
    cudaEventSynchronize(ev);
    unsigned char seen = 0;
    memcpy(&seen, x, 1);  // device memory is host memory here: look without synchronizing
    cudaStreamSynchronize(a);
    CHECK(seen == 4 && host_byte(x) == 5, "cudaEventSynchronize runs the work before the record "
          "only (%d), the stream's synchronization the rest (%d)", seen, host_byte(x));
    cudaMemsetAsync(x, 6, N, a);
    cudaEventRecord(ev, a);
    cudaError_t first = cudaEventQuery(ev);
    memcpy(&seen, x, 1);
    cudaError_t second = cudaEventQuery(ev);
    CHECK(first == cudaErrorNotReady && seen == 5 && second == cudaSuccess && host_byte(x) == 6 &&
              cudaGetLastError() == cudaSuccess,
          "cudaEventQuery: not ready (%s) with the work pending, then ready (%s) with it run",
          cudaGetErrorName(first), cudaGetErrorName(second));

    // pageable host memory
    unsigned char* h = malloc(N);
    memset(h, 6, N);
    cudaMemcpyAsync(x, h, N, cudaMemcpyHostToDevice, a);
    memset(h, 8, N);
    cudaStreamSynchronize(a);
    CHECK(host_byte(x) == 6, "a copy from pageable memory reads it at the call (%d)", host_byte(x));
    cudaMemsetAsync(y, 2, N, a);
    cudaMemcpyAsync(h, y, N, cudaMemcpyDeviceToHost, a);
    CHECK(h[0] == 2 && h[N - 1] == 2, "a copy to pageable memory is complete at return (%d)", h[0]);
    free(h);

    // cudaFree runs what is pending first
    cudaMemsetAsync(y, 1, N, b);
    cudaMemsetAsync(x, 1, N, a);
    CHECK(cudaFree(y) == cudaSuccess && cudaFree(x) == cudaSuccess,
          "cudaFree with work pending on both streams");
    cudaEventDestroy(ev);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    test_host_pointer_argument();
    test_wait_after_capture();
    return check_summary();
}
