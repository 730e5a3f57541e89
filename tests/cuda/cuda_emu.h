// A CPU emulation of the little CUDA that runtime/cuda/flash_attention.cuh uses, so its
// kernels and launch logic run (slowly) on a machine without a GPU: every CUDA thread of
// a block is a pthread, __syncthreads is a barrier of the block's threads, dynamic shared
// memory is one heap buffer (filled with NaN before each block, so a read of anything the
// block did not write shows up in the results; its exact size lets AddressSanitizer catch
// an overrun), and blocks run one after another on the same threads. Built with
// ThreadSanitizer it finds shared-memory races between two barriers (a missing
// __syncthreads).
//
// Not modelled: warps (the kernels use no warp intrinsics), the device's expf rounding
// (host libm here), launch limits (emu_launch checks the ones the kernels rely on and
// reports a violation as a failed check).
#ifndef FSDPGEN_TESTS_CUDA_EMU_H
#define FSDPGEN_TESTS_CUDA_EMU_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned x, y, z;
};

static thread_local uint3 threadIdx;
static uint3 blockIdx;
static dim3 blockDim, gridDim;
static float* emu_smem;
static pthread_barrier_t emu_barrier;

static inline void __syncthreads(void) { pthread_barrier_wait(&emu_barrier); }

// the kernels' dynamic shared memory
#define RTC_FA_SMEM(name) float* name = emu_smem

// ----------------------------------------------------------------------------
// launches

// Limits a real launch must respect, checked on every emulated one (largest dynamic shared
// memory any target GPU grants, sm_86/sm_89: 99 KiB; grid.y at most 65535).
#define EMU_MAX_SMEM (99 * 1024)

static int emu_limit_errors = 0;
static size_t emu_max_smem_seen = 0;
static long emu_blocks_run = 0;

template <class Args>
struct emu_launch_state {
    void (*kernel)(Args);
    const Args* args;
    dim3 grid;
    std::vector<float>* smem;
};

template <class Args>
struct emu_thread {
    const emu_launch_state<Args>* launch;
    unsigned tid;
};

// One CUDA thread: runs its part of every block, in block order. Thread 0 sets up each
// block (index, poisoned shared memory) between two barriers.
template <class Args>
static void* emu_thread_main(void* p) {
    const emu_thread<Args>* t = (const emu_thread<Args>*)p;
    const emu_launch_state<Args>* L = t->launch;
    threadIdx.x = t->tid;
    threadIdx.y = threadIdx.z = 0;
    for (unsigned z = 0; z < L->grid.z; z++)
        for (unsigned y = 0; y < L->grid.y; y++)
            for (unsigned x = 0; x < L->grid.x; x++) {
                if (t->tid == 0) {
                    blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
                    for (size_t i = 0; i < L->smem->size(); i++) (*L->smem)[i] = NAN;
                    emu_smem = L->smem->empty() ? NULL : L->smem->data();
                    emu_blocks_run++;
                }
                pthread_barrier_wait(&emu_barrier);  // the block is set up
                L->kernel(*L->args);
                pthread_barrier_wait(&emu_barrier);  // every thread left the block
            }
    return NULL;
}

// kernel<<<grid, threads, smem>>>(args): the blocks one after another, each on the same
// `threads` pthreads.
template <class Args>
static void emu_launch(void (*kernel)(Args), dim3 grid, unsigned threads, size_t smem,
                       const Args& args) {
    if (smem > EMU_MAX_SMEM || grid.y > 65535 || grid.z > 65535 || threads > 1024) {
        fprintf(stderr, "emu_launch: launch outside the GPU limits: grid (%u, %u, %u), %u "
                "threads, %zu bytes of shared memory\n", grid.x, grid.y, grid.z, threads, smem);
        emu_limit_errors++;
    }
    if (smem > emu_max_smem_seen) emu_max_smem_seen = smem;
    gridDim = grid;
    blockDim = dim3(threads);
    std::vector<float> sm(smem / sizeof(float));
    emu_launch_state<Args> L = {kernel, &args, grid, &sm};
    std::vector<pthread_t> th(threads);
    std::vector<emu_thread<Args> > ta(threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    pthread_barrier_init(&emu_barrier, NULL, threads);
    for (unsigned t = 0; t < threads; t++) {
        ta[t].launch = &L;
        ta[t].tid = t;
        if (pthread_create(&th[t], &attr, emu_thread_main<Args>, &ta[t]) != 0) {
            perror("emu_launch: pthread_create");
            abort();
        }
    }
    for (unsigned t = 0; t < threads; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&emu_barrier);
    pthread_attr_destroy(&attr);
}

#endif
