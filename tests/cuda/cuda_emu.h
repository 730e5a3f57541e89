// A CPU emulation of the little CUDA that runtime/cuda/kernels/flash_attention.cuh and
// flash_attention_tc.cuh use, so their kernels and launch logic run (slowly) on a machine
// without a GPU: every CUDA thread of a block is a pthread, __syncthreads is a barrier of
// the block's threads, __syncwarp a barrier of the warp's 32 threads, dynamic shared memory
// is one heap buffer (128-byte aligned, and filled before each block with 0x7FFF7FFF, a
// NaN as fp32 and as either 16-bit half in bf16 and fp16, so a read of anything the block
// did not write shows up in the results; its exact size lets AddressSanitizer catch an
// overrun), and blocks run one after another on the same threads (a pool kept between
// launches). Built with
// ThreadSanitizer it finds shared-memory races between two barriers (a missing
// __syncthreads or __syncwarp).
//
// Warp-level operations, modelled from their documented semantics:
//   * __shfl_xor_sync with the full mask: each lane publishes its value, a warp barrier,
//     each lane reads its partner's, a warp barrier.
//   * mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32, as the kernels'
//     rtc_tc_mma<E>(d, a, b) (d += a b): each lane publishes its A registers (4, two
//     elements each) and B registers (2), a warp barrier, then each lane rebuilds the whole
//     16x16 A and 16x8 B tiles from the lane mapping of the PTX ISA's "Matrix Fragments for
//     mma.m16n8k16 with floating point type" (groupID = lane >> 2, threadID_in_group =
//     lane % 4; A element a_i: row groupID + 8 for i in {2, 3, 6, 7}, column
//     2 threadID_in_group + (i & 1) + 8 for i >= 4; B element b_i: row (k)
//     2 threadID_in_group + (i & 1) + 8 for i >= 2, column groupID; C/D element c_i: row
//     groupID + 8 for i >= 2, column 2 threadID_in_group + (i & 1)) and computes its own four
//     accumulators. The mapping is written here from the documentation alone, not from the
//     kernels, so a kernel that assumed another one fails its tests. Products are exact
//     (16-bit products are exact in fp32) and summed in fp32 in k order: tensor cores also
//     multiply exactly and accumulate in (at least) fp32, in an undocumented order, so sums
//     agree with the hardware within fp32 round-off, not bit for bit. The published
//     registers are double-buffered per warp (a lane writes one buffer while a slower lane
//     may still read the other), so one barrier per call suffices. E = float is an
//     emulator-only instantiation: a register is a pair of floats, nothing is rounded.
//   * ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16, as rtc_tc_ldsm<E>(r, row) and
//     rtc_tc_ldsm_t: each lane publishes its row address, a warp barrier, each lane takes
//     register j from matrix j (rows from lanes 8 j .. 8 j + 7) by the PTX ISA's "Warp-level
//     matrix load instruction: ldmatrix" layout (lane l: row l / 4, elements 2 (l % 4) and
//     2 (l % 4) + 1; with .trans, element l / 4 of rows 2 (l % 4) and 2 (l % 4) + 1), a warp
//     barrier. Every row address must be 16-byte aligned and inside the shared memory.
//   * cp.async (rtc_cp8: 8 elements, rtc_cp1f: one float; zero-fill when not valid),
//     commit_group and wait_group N, per thread as on the GPU: an issued copy poisons its
//     destination at once (so a read before the wait that covers it sees NaN, and
//     ThreadSanitizer sees the write where it was issued) and copies its data when a
//     wait_group retires its group (all but the newest N committed groups). A block that
//     ends with copies not waited for is reported as a failed launch check.
//   * Every lane of a warp must make the same number of warp-collective calls (mma,
//     ldmatrix and shuffles) in a block; the emulator counts them and reports a divergent
//     warp as a failed launch check.
//
// Not modelled: the device's expf/exp2f rounding (host libm here), the tensor cores'
// internal summation order, launch limits (emu_launch checks the ones the kernels rely on
// and reports a violation as a failed check).
#ifndef FSDPGEN_TESTS_CUDA_EMU_H
#define FSDPGEN_TESTS_CUDA_EMU_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "../../runtime/common/dtype_bits.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned x, y, z;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) {
    float4 v = {x, y, z, w};
    return v;
}

// Barriers of the block's threads and of a warp's (EMU_FIBERS: counters, see emu_run_threads;
// otherwise pthread barriers).
#ifdef EMU_FIBERS
struct emu_barrier_t {
    unsigned count, arrived;
    unsigned long generation;
};
#else
typedef pthread_barrier_t emu_barrier_t;
#endif
static inline void emu_barrier_wait(emu_barrier_t* b);

inline uint3 blockIdx;
inline dim3 blockDim, gridDim;
inline float* emu_smem;
inline size_t emu_smem_bytes;
inline emu_barrier_t emu_barrier;
inline emu_barrier_t* emu_warp_barriers;  // one per warp of the block
struct emu_warp_slots {
    double lane[32];  // a float, double or int per lane (__shfl_xor_sync)
};
inline emu_warp_slots* emu_shfl_slots;  // one per warp

struct emu_copy {  // a cp.async copy (below)
    void* dst;
    const void* src;  // NULL: zero-fill
    size_t bytes;
};

// What each CUDA thread has of its own: its index, and the emulator's per-lane bookkeeping.
struct emu_thread_state {
    uint3 idx;             // threadIdx
    unsigned tid;          // its linear index in the block
    long warp_calls;       // warp-collective calls in the block
    unsigned mma_buffer;   // this lane's next mma.sync buffer (0 at block start)
    unsigned ldsm_buffer;  // this lane's next ldmatrix buffer (0 at block start)
    std::vector<emu_copy> copies;  // cp.async issued, not yet landed, in order
    std::vector<size_t> groups;    // per committed group: its end in copies
};
// The running CUDA thread's state: the pthread's own, or (EMU_FIBERS) the running fiber's.
// emu_cur_ptr starts as a constant (NULL), so reading it is one thread-pointer load; an
// initializer of &emu_own_state (not a constant) made every threadIdx call the TLS init
// function, several per cent of the emulated tests' time.
inline thread_local emu_thread_state emu_own_state;
inline thread_local emu_thread_state* emu_cur_ptr = NULL;
static inline emu_thread_state*& emu_cur_ref(void) {
    if (__builtin_expect(emu_cur_ptr == NULL, 0)) emu_cur_ptr = &emu_own_state;
    return emu_cur_ptr;
}
#define emu_cur (emu_cur_ref())
#define threadIdx (emu_cur->idx)

static inline void __syncthreads(void) { emu_barrier_wait(&emu_barrier); }

static inline void emu_fatal(const char* what) {
    fprintf(stderr, "cuda_emu: %s\n", what);
    abort();
}

static inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) {
    if (mask != 0xFFFFFFFFu) emu_fatal("__syncwarp: only the full mask is emulated");
    emu_barrier_wait(&emu_warp_barriers[emu_cur->tid / 32]);
}

// The value of lane (this lane ^ lane_mask) of the warp (T: float, double, int, unsigned).
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= sizeof(double), "__shfl_xor_sync: at most 8 bytes emulated");
    emu_cur->warp_calls++;
    if (mask != 0xFFFFFFFFu || width != 32 || lane_mask < 0 || lane_mask > 31)
        emu_fatal("__shfl_xor_sync: only the full mask and width 32 are emulated");
    const unsigned w = emu_cur->tid / 32, lane = emu_cur->tid % 32;
    memcpy(&emu_shfl_slots[w].lane[lane], &v, sizeof v);
    __syncwarp();
    T r;
    memcpy(&r, &emu_shfl_slots[w].lane[lane ^ (unsigned)lane_mask], sizeof r);
    __syncwarp();  // every lane read before the slots are reused
    return r;
}

// Device-memory atomics and fences (the "last block" count, column_sums.cuh): real ones, so
// that they hold with a pthread per CUDA thread as with fibers; blocks run one after
// another here, so the last block is always the grid's last.
static inline unsigned atomicAdd(unsigned* p, unsigned v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T>
static inline T __ldcg(const T* p) {  // a load that skips L1: a plain one here
    return *p;
}

// the kernels' dynamic shared memory
#define RTC_FA_SMEM(name) float* name = emu_smem
#define RTC_TC_SMEM(name) unsigned char* name = (unsigned char*)emu_smem
#define RTC_DW_SMEM_DECL(name) double* name = (double*)emu_smem
#define RTC_CE_SMEM_DECL(name) unsigned char* name = (unsigned char*)emu_smem

// ----------------------------------------------------------------------------
// 16-bit floats (cuda_bf16.h, cuda_fp16.h): the bits, converted from and to float
// implicitly (as those headers allow) as the host runtime does (runtime/common/dtype_bits.h:
// round to nearest even, the device intrinsics' rounding). One template, two types.
template <rt_dtype DT>
struct emu_float16 {
    uint16_t bits;
    emu_float16() = default;
    emu_float16(float x) : bits(rt_bits16_from_f32_inl(x, DT)) {}
    operator float() const { return rt_bits16_to_f32_inl(bits, DT); }
    static emu_float16 from_bits(uint16_t b) {
        emu_float16 h;
        h.bits = b;
        return h;
    }
};
typedef emu_float16<RT_BF16> __nv_bfloat16;
typedef emu_float16<RT_F16> __half;
static inline __nv_bfloat16 __float2bfloat16_rn(float x) { return __nv_bfloat16(x); }
static inline float __bfloat162float(__nv_bfloat16 h) { return rt_bf16_to_f32_inl(h.bits); }
static inline __half __float2half_rn(float x) { return __half(x); }
static inline float __half2float(__half h) { return rt_f16_to_f32_inl(h.bits); }

static inline float emu_to_float(__nv_bfloat16 h) { return __bfloat162float(h); }
static inline float emu_to_float(__half h) { return __half2float(h); }
static inline float emu_to_float(float x) { return x; }

// ----------------------------------------------------------------------------
// mma.sync m16n8k16 (see the top of this file)

// Each warp's published registers, two buffers used alternately by successive calls.
struct emu_mma_slots {
    float a[2][32][8];
    float b[2][32][4];
};
inline emu_mma_slots* emu_mma;                 // one per warp

// The two elements of one register, low half first.
template <class E>
static inline void emu_reg_floats(uint32_t r, float* f) {
    const E lo = E::from_bits((uint16_t)(r & 0xFFFFu)), hi = E::from_bits((uint16_t)(r >> 16));
    f[0] = emu_to_float(lo);
    f[1] = emu_to_float(hi);
}
template <class E, class Pair>
static inline void emu_reg_floats(const Pair& r, float* f) {  // E = float: {lo, hi}
    f[0] = r.lo;
    f[1] = r.hi;
}

// Lane `lane`'s four accumulators d += A B from the warp's published tiles (the mapping
// above), summed in k order. Not sanitized: A and B are the emulator's own buffers (the
// kernel's registers were read, checked, when the lanes published them); the checks on
// these 128 loads per call were a third of the emulated tensor-core attention's time.
__attribute__((no_sanitize("address", "undefined"))) static inline void emu_mma_lane(
    float (&d)[4], const float (*A)[8], const float (*B)[4], unsigned lane) {
    const int group = (int)lane >> 2, tig = (int)lane % 4;
    for (int i = 0; i < 4; i++) {
        const int row = group + (i >= 2 ? 8 : 0), col = 2 * tig + (i & 1);
        float acc = d[i];
        for (int k = 0; k < 16; k++) {
            // A (row, k): lane 4 (row % 8) + (k % 8) / 2, element (k & 1) + 2 [row >= 8] +
            // 4 [k >= 8]; B (k, col): lane 4 col + (k % 8) / 2, element (k & 1) + 2 [k >= 8]
            const float x = A[4 * (row % 8) + (k % 8) / 2][(k & 1) + (row >= 8 ? 2 : 0) +
                                                            (k >= 8 ? 4 : 0)];
            const float y = B[4 * col + (k % 8) / 2][(k & 1) + (k >= 8 ? 2 : 0)];
            acc += x * y;
        }
        d[i] = acc;
    }
}

template <class E, class R>
static inline void rtc_tc_mma(float (&d)[4], const R (&a)[4], const R (&b)[2]) {
    emu_cur->warp_calls++;
    const unsigned w = emu_cur->tid / 32, lane = emu_cur->tid % 32, buf = emu_cur->mma_buffer;
    emu_cur->mma_buffer ^= 1u;
    float* ap = emu_mma[w].a[buf][lane];
    float* bp = emu_mma[w].b[buf][lane];
    for (int i = 0; i < 4; i++) emu_reg_floats<E>(a[i], ap + 2 * i);
    for (int i = 0; i < 2; i++) emu_reg_floats<E>(b[i], bp + 2 * i);
    __syncwarp();
    emu_mma_lane(d, emu_mma[w].a[buf], emu_mma[w].b[buf], lane);
}

// ----------------------------------------------------------------------------
// ldmatrix (see the top of this file)

inline int emu_limit_errors = 0;

// `bytes` bytes at p lie inside the block's shared memory, aligned to min(bytes, 16).
static inline void emu_check_smem_row(const void* p, size_t bytes, const char* what) {
    const char *c = (const char*)p, *s = (const char*)emu_smem;
    const uintptr_t mask = (bytes < 16 ? bytes : 16) - 1;
    if (((uintptr_t)p & mask) != 0 || s == NULL || c < s || c + bytes > s + emu_smem_bytes) {
        fprintf(stderr, "cuda_emu: %s: %zu bytes at %p: misaligned or outside the shared memory "
                "(%p, %zu bytes)\n", what, bytes, p, (const void*)s, emu_smem_bytes);
        emu_fatal("bad shared-memory address");
    }
}

struct emu_ldsm_slots {
    const void* row[2][32];
};
inline emu_ldsm_slots* emu_ldsm;              // one per warp

// One register from two elements, the first in the low half.
template <class E>
static inline void emu_set_reg(uint32_t& r, E lo, E hi) {
    r = (uint32_t)lo.bits | (uint32_t)hi.bits << 16;
}
template <class E, class Pair>
static inline void emu_set_reg(Pair& r, float lo, float hi) {  // E = float: {lo, hi}
    r.lo = lo;
    r.hi = hi;
}

template <class E, class R>
static inline void emu_ldsm_x4(R (&r)[4], const E* row, bool trans) {
    emu_cur->warp_calls++;
    emu_check_smem_row(row, 8 * sizeof(E), "ldmatrix row");
    const unsigned w = emu_cur->tid / 32, lane = emu_cur->tid % 32, buf = emu_cur->ldsm_buffer;
    emu_cur->ldsm_buffer ^= 1u;
    emu_ldsm[w].row[buf][lane] = row;
    __syncwarp();
    const void* const* rows = emu_ldsm[w].row[buf];
    for (int j = 0; j < 4; j++) {
        const int a = (int)lane / 4, c = 2 * ((int)lane % 4);
        const E *p0, *p1;  // the register's two elements
        if (!trans) {
            p0 = (const E*)rows[8 * j + a] + c;
            p1 = p0 + 1;
        } else {
            p0 = (const E*)rows[8 * j + c] + a;
            p1 = (const E*)rows[8 * j + c + 1] + a;
        }
        emu_set_reg<E>(r[j], *p0, *p1);
    }
}
template <class E, class R>
static inline void rtc_tc_ldsm(R (&r)[4], const E* row) {
    emu_ldsm_x4<E>(r, row, false);
}
template <class E, class R>
static inline void rtc_tc_ldsm_t(R (&r)[4], const E* row) {
    emu_ldsm_x4<E>(r, row, true);
}

// ----------------------------------------------------------------------------
// cp.async (see the top of this file)

static inline void emu_cp_issue(void* dst, const void* src, size_t bytes, bool valid) {
    emu_check_smem_row(dst, bytes, "cp.async destination");
    if (((uintptr_t)src & ((bytes < 16 ? bytes : 16) - 1)) != 0)
        emu_fatal("cp.async: misaligned source");
    const uint32_t poison = 0x7FFF7FFFu;  // NaN as fp32, bf16 and fp16
    for (size_t i = 0; i < bytes; i += 4) memcpy((char*)dst + i, &poison, 4);
    emu_copy c = {dst, valid ? src : NULL, bytes};
    emu_cur->copies.push_back(c);
}
template <class E>
static inline void rtc_cp8(E* dst, const E* src, bool valid) {
    emu_cp_issue(dst, src, 8 * sizeof(E), valid);
}
static inline void rtc_cp1f(float* dst, const float* src, bool valid) {
    emu_cp_issue(dst, src, sizeof(float), valid);
}
static inline void rtc_cp_commit(void) { emu_cur->groups.push_back(emu_cur->copies.size()); }
template <int N>
static inline void rtc_cp_wait(void) {
    if (emu_cur->groups.size() <= (size_t)N) return;
    const size_t done = emu_cur->groups[emu_cur->groups.size() - 1 - N];  // copies of the retired groups
    for (size_t i = 0; i < done; i++) {
        const emu_copy& c = emu_cur->copies[i];
        if (c.src)
            memcpy(c.dst, c.src, c.bytes);
        else
            memset(c.dst, 0, c.bytes);
    }
    emu_cur->copies.erase(emu_cur->copies.begin(), emu_cur->copies.begin() + (long)done);
    emu_cur->groups.erase(emu_cur->groups.begin(), emu_cur->groups.end() - N);
    for (size_t& e : emu_cur->groups) e -= done;
}

// ----------------------------------------------------------------------------
// launches

// Limits a real launch must respect, checked on every emulated one (largest dynamic shared
// memory any target GPU grants, sm_86/sm_89: 99 KiB; grid.y at most 65535).
#define EMU_MAX_SMEM (99 * 1024)

// The shared-memory limit checked: EMU_MAX_SMEM, unless a test raises it for a kernel
// instantiation that never runs on a GPU (the tensor-core kernels' float mode).
inline size_t emu_smem_limit = EMU_MAX_SMEM;
inline size_t emu_max_smem_seen = 0;
inline long emu_blocks_run = 0;
// Blocks run last to first (emu_set_block_order): a GPU runs them in any order, so a kernel
// whose results depend on which block runs last (the "last block" sums) shows it.
inline bool emu_blocks_reversed = false;

template <class Body>
struct emu_launch_state {
    const Body* body;  // one CUDA thread's work in the current block
    dim3 grid, block;
    unsigned threads;  // block.x * block.y * block.z
    float* smem;
    size_t smem_floats;
    std::vector<long>* warp_calls;  // per thread, of the block just run
};

// After a block: every lane of a warp made the same number of warp-collective calls (thread 0, once
// every thread has published its count and passed a barrier).
template <class Body>
static void emu_check_warps(const emu_launch_state<Body>* L) {
    const std::vector<long>& n = *L->warp_calls;
    for (unsigned t = 0; t < L->threads; t++)
        if (n[t] != n[t - t % 32]) {
            fprintf(stderr, "cuda_emu: block (%u, %u, %u): thread %u made %ld warp-collective calls, lane 0 "
                    "of its warp %ld (divergent warp-collective calls)\n", blockIdx.x,
                    blockIdx.y, blockIdx.z, t, n[t], n[t - t % 32]);
            emu_limit_errors++;
            return;
        }
}

// One CUDA thread: runs its part of every block, in block order. Thread 0 sets up each
// block (index, poisoned shared memory) between two barriers.
template <class Body>
static void emu_thread_main(void* launch, unsigned tid) {
    const emu_launch_state<Body>* L = (const emu_launch_state<Body>*)launch;
    emu_cur->tid = tid;
    threadIdx.x = tid % L->block.x;
    threadIdx.y = tid / L->block.x % L->block.y;
    threadIdx.z = tid / (L->block.x * L->block.y);
    bool first = true;
    const bool rev = emu_blocks_reversed;
    const dim3 g = L->grid;
    for (unsigned z = 0; z < L->grid.z; z++)
        for (unsigned y = 0; y < L->grid.y; y++)
            for (unsigned x = 0; x < L->grid.x; x++) {
                if (tid == 0) {
                    if (!first) emu_check_warps(L);
                    blockIdx.x = rev ? g.x - 1 - x : x, blockIdx.y = rev ? g.y - 1 - y : y;
                    blockIdx.z = rev ? g.z - 1 - z : z;
                    const uint32_t poison = 0x7FFF7FFFu;  // NaN as fp32, bf16 and fp16
                    for (size_t i = 0; i < L->smem_floats; i++)
                        memcpy(&L->smem[i], &poison, sizeof poison);
                    emu_smem = L->smem_floats ? L->smem : NULL;
                    emu_smem_bytes = L->smem_floats * sizeof(float);
                    emu_blocks_run++;
                }
                first = false;
                emu_cur->warp_calls = 0;
                emu_cur->mma_buffer = emu_cur->ldsm_buffer = 0;
                emu_barrier_wait(&emu_barrier);  // the block is set up
                (*L->body)();
                (*L->warp_calls)[tid] = emu_cur->warp_calls;
                if (!emu_cur->copies.empty()) {
                    fprintf(stderr, "cuda_emu: block (%u, %u, %u): thread %u ended with %zu "
                            "cp.async copies not waited for\n", blockIdx.x, blockIdx.y,
                            blockIdx.z, tid, emu_cur->copies.size());
                    __atomic_add_fetch(&emu_limit_errors, 1, __ATOMIC_RELAXED);
                    emu_cur->copies.clear();
                }
                emu_cur->groups.clear();
                emu_barrier_wait(&emu_barrier);  // every thread left the block
            }
    if (tid == 0 && !first) emu_check_warps(L);
}

#ifdef EMU_FIBERS
// ----------------------------------------------------------------------------
// EMU_FIBERS: the CUDA threads as fibers on the launching thread, switched only where one
// waits at a barrier: many times faster than a pthread per CUDA thread (a barrier of 256
// pthreads on two cores costs hundreds of futex wake-ups), with the same semantics but
// ThreadSanitizer's race detection, which needs real threads. A barrier nobody can
// complete (threads of a block waiting at different barriers, or some threads gone) is
// reported as a deadlock, where pthreads would hang.

#include <sys/mman.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN_FIBERS 1
#endif

#define EMU_FIBER_STACK ((size_t)256 << 10)  // mapped lazily: only touched pages cost

// A fiber's saved context and the switch between two. On x86-64 a switch saves the
// callee-saved registers and the floating-point control words on the stack it leaves and
// swaps stack pointers (about 25 ns); ucontext's swapcontext also saves and restores the
// signal mask, two system calls per switch (about 1 us here), which made most of the
// emulated tests' time. Other architectures (or -DEMU_FIBERS_UCONTEXT) keep ucontext.
#if defined(__x86_64__) && !defined(EMU_FIBERS_UCONTEXT)
#include <stdint.h>
struct emu_ctx {
    void* sp;
};
// Pushes rbp, rbx, r12-r15 and MXCSR / the x87 control word, stores the stack pointer in
// *from, loads to and pops the same from there: returns into the other context.
__attribute__((naked, noinline, unused)) static void emu_ctx_swap_sp(void** /*from*/, void* /*to*/) {
    __asm__ volatile(
        "pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
        "subq $8, %rsp\n\tstmxcsr (%rsp)\n\tfnstcw 4(%rsp)\n\t"
        "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
        "ldmxcsr (%rsp)\n\tfldcw 4(%rsp)\n\taddq $8, %rsp\n\t"
        "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret\n\t");
}
// A new fiber's first return lands here: fn (r13) of arg (r12), which never returns.
__attribute__((naked, noinline, unused)) static void emu_ctx_entry(void) {
    __asm__ volatile("movq %r12, %rdi\n\tcallq *%r13\n\tud2\n\t");
}
static inline void emu_ctx_swap(emu_ctx* from, emu_ctx* to) { emu_ctx_swap_sp(&from->sp, to->sp); }
// c starts fn(arg) on [stack, stack + size) at its first switch-in: a frame as
// emu_ctx_swap_sp leaves one, returning to emu_ctx_entry with the stack 16-byte aligned.
static inline void emu_ctx_make(emu_ctx* c, void* stack, size_t size, void (*fn)(int), int arg) {
    uint64_t* top = (uint64_t*)(((uintptr_t)stack + size) & ~(uintptr_t)15);
    uint64_t* sp = top - 8;
    uint32_t mxcsr;
    uint16_t fpucw;
    __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpucw));
    sp[0] = (uint64_t)mxcsr | (uint64_t)fpucw << 32;
    sp[1] = sp[2] = 0;  // r15, r14
    sp[3] = (uint64_t)(uintptr_t)fn;  // r13
    sp[4] = (uint64_t)(unsigned)arg;  // r12
    sp[5] = sp[6] = 0;                // rbx, rbp
    sp[7] = (uint64_t)(uintptr_t)emu_ctx_entry;
    c->sp = sp;
}
#else
#include <ucontext.h>
struct emu_ctx {
    ucontext_t uc;
};
static inline void emu_ctx_swap(emu_ctx* from, emu_ctx* to) { swapcontext(&from->uc, &to->uc); }
static inline void emu_ctx_make(emu_ctx* c, void* stack, size_t size, void (*fn)(int), int arg) {
    if (getcontext(&c->uc) != 0) emu_fatal("getcontext");
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, (void (*)(void))fn, 1, arg);
}
#endif

struct emu_fiber {
    emu_ctx ctx;
    void* stack;
    unsigned index;  // its CUDA thread
    bool done;
    emu_thread_state state;
    void* asan_fake_stack;
};
struct emu_fiber_sched {
    emu_ctx ctx;  // the launching thread's
    std::vector<emu_fiber*> fibers;  // grown to the largest block, stacks kept
    void (*job)(void*, unsigned);
    void* launch;
    unsigned threads;     // of this launch
    unsigned long idle;   // switches since the last barrier released or fiber finished
    const void* sched_stack;  // AddressSanitizer: the launching thread's stack
    size_t sched_stack_size;
    bool sched_stack_known;   // (recorded when the launch's first fiber starts)
    ~emu_fiber_sched() {
        for (emu_fiber* f : fibers) {
            munmap(f->stack, EMU_FIBER_STACK);
            delete f;
        }
    }
};
inline emu_fiber_sched emu_sched;  // launches are serialized (emu_launch_mu)
inline thread_local emu_fiber* emu_cur_fiber;

// Switches from the running fiber (waiting at a barrier, or finished) straight to the next
// live one in round-robin order, or back to the launching thread when none is left. The
// order is the one a scheduler loop visiting threads 0, 1, ... would give, with one switch
// instead of two (a switch and its AddressSanitizer stack annotations were most of the
// emulator's own time).
static inline void emu_fiber_yield(bool finished) {
    emu_fiber_sched& S = emu_sched;
    emu_fiber* f = emu_cur_fiber;
    if (++S.idle > 2 * (unsigned long)S.threads + 2) {
        fprintf(stderr, "cuda_emu: deadlock: every live thread of block (%u, %u, %u) waits at "
                "a barrier that the others never reach\n", blockIdx.x, blockIdx.y, blockIdx.z);
        abort();
    }
    emu_fiber* g = NULL;
    for (unsigned i = 1; i <= S.threads && !g; i++) {
        emu_fiber* h = S.fibers[(f->index + i) % S.threads];
        if (!h->done) g = h;
    }
    if (g == f) return;  // the only live thread: its barrier loop counts to the deadlock
    if (g) {
        emu_cur_fiber = g;
        emu_cur = &g->state;
    }
#ifdef EMU_ASAN_FIBERS
    __sanitizer_start_switch_fiber(finished ? NULL : &f->asan_fake_stack,
                                   g ? g->stack : S.sched_stack,
                                   g ? EMU_FIBER_STACK : S.sched_stack_size);
#endif
    emu_ctx_swap(&f->ctx, g ? &g->ctx : &S.ctx);  // a finished fiber is never switched back to
#ifdef EMU_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(f->asan_fake_stack, NULL, NULL);
#endif
    (void)finished;
}

static inline void emu_fiber_main(int index) {
    emu_fiber_sched& S = emu_sched;
#ifdef EMU_ASAN_FIBERS
    if (!S.sched_stack_known) {
        __sanitizer_finish_switch_fiber(NULL, &S.sched_stack, &S.sched_stack_size);
        S.sched_stack_known = true;
    } else {
        __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
    }
#endif
    emu_fiber* f = S.fibers[(size_t)index];
    S.job(S.launch, (unsigned)index);
    f->done = true;
    S.idle = 0;
    emu_fiber_yield(true);
}

static inline void emu_barrier_init(emu_barrier_t* b, unsigned count) { *b = {count, 0, 0}; }
static inline void emu_barrier_destroy(emu_barrier_t*) {}
static inline void emu_barrier_wait(emu_barrier_t* b) {
    if (++b->arrived == b->count) {
        b->arrived = 0;
        b->generation++;
        emu_sched.idle = 0;
        return;
    }
    const unsigned long g = b->generation;
    while (b->generation == g) emu_fiber_yield(false);
}

// job(launch, t) for t < threads as fibers, round robin until every one has returned: the
// launching thread starts thread 0; the last fiber to finish switches back.
inline void emu_run_threads(unsigned threads, void (*job)(void*, unsigned), void* launch) {
    emu_fiber_sched& S = emu_sched;
    if (threads == 0) return;
    while (S.fibers.size() < threads) {
        emu_fiber* f = new emu_fiber();
        f->stack = mmap(NULL, EMU_FIBER_STACK, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (f->stack == MAP_FAILED) emu_fatal("mmap (fiber stack)");
        S.fibers.push_back(f);
    }
    S.job = job;
    S.launch = launch;
    S.threads = threads;
    S.idle = 0;
    S.sched_stack_known = false;
    for (unsigned t = 0; t < threads; t++) {
        emu_fiber* f = S.fibers[t];
        f->index = t;
        f->done = false;
        f->state = emu_thread_state();
        emu_ctx_make(&f->ctx, f->stack, EMU_FIBER_STACK, emu_fiber_main, (int)t);
    }
    emu_thread_state* own = emu_cur;
    emu_fiber* first = S.fibers[0];
    emu_cur_fiber = first;
    emu_cur = &first->state;
    void* fake = NULL;
#ifdef EMU_ASAN_FIBERS
    __sanitizer_start_switch_fiber(&fake, first->stack, EMU_FIBER_STACK);
#endif
    emu_ctx_swap(&S.ctx, &first->ctx);
#ifdef EMU_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    (void)fake;
    emu_cur = own;
    emu_cur_fiber = NULL;
}

#else  // pthreads

static inline void emu_barrier_init(emu_barrier_t* b, unsigned count) {
    pthread_barrier_init(b, NULL, count);
}
static inline void emu_barrier_destroy(emu_barrier_t* b) { pthread_barrier_destroy(b); }
static inline void emu_barrier_wait(emu_barrier_t* b) { pthread_barrier_wait(b); }

// The CUDA threads' pthreads: a pool kept between launches, worker t running CUDA thread t
// of every launch with more than t threads (creating a block's 128-256 threads and their
// stacks on every launch cost more than the kernels). Grows to the largest block; joined
// at exit.
struct emu_pool_state {
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    std::vector<pthread_t> workers;
    unsigned long generation;  // launches started
    unsigned active;           // threads of the current launch
    unsigned running;          // of those, not finished yet
    bool quit;
    void (*job)(void* launch, unsigned tid);
    void* launch;
};
inline emu_pool_state emu_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                                  PTHREAD_COND_INITIALIZER, std::vector<pthread_t>(), 0, 0, 0,
                                  false, NULL, NULL};

struct emu_worker_arg {
    unsigned tid;
    unsigned long seen;  // the generation when the worker was created
};

inline void* emu_worker(void* p) {
    const emu_worker_arg w = *(emu_worker_arg*)p;
    delete (emu_worker_arg*)p;
    unsigned long seen = w.seen;
    pthread_mutex_lock(&emu_pool.mu);
    for (;;) {
        while (!emu_pool.quit && emu_pool.generation == seen)
            pthread_cond_wait(&emu_pool.start, &emu_pool.mu);
        if (emu_pool.quit) break;
        seen = emu_pool.generation;
        if (w.tid >= emu_pool.active) continue;  // a smaller block
        void (*job)(void*, unsigned) = emu_pool.job;
        void* launch = emu_pool.launch;
        pthread_mutex_unlock(&emu_pool.mu);
        job(launch, w.tid);
        pthread_mutex_lock(&emu_pool.mu);
        if (--emu_pool.running == 0) pthread_cond_signal(&emu_pool.done);
    }
    pthread_mutex_unlock(&emu_pool.mu);
    return NULL;
}

inline void emu_pool_join(void) {
    pthread_mutex_lock(&emu_pool.mu);
    emu_pool.quit = true;
    pthread_cond_broadcast(&emu_pool.start);
    pthread_mutex_unlock(&emu_pool.mu);
    for (size_t i = 0; i < emu_pool.workers.size(); i++) pthread_join(emu_pool.workers[i], NULL);
    emu_pool.workers.clear();
}

// job(launch, t) on worker t for t < threads; returns when every one has returned.
inline void emu_run_threads(unsigned threads, void (*job)(void*, unsigned), void* launch) {
    pthread_mutex_lock(&emu_pool.mu);
    if (emu_pool.workers.empty()) atexit(emu_pool_join);
    while (emu_pool.workers.size() < threads) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 1 << 20);
        emu_worker_arg* w = new emu_worker_arg{(unsigned)emu_pool.workers.size(),
                                               emu_pool.generation};
        pthread_t t;
        if (pthread_create(&t, &attr, emu_worker, w) != 0) {
            perror("emu_launch: pthread_create");
            abort();
        }
        pthread_attr_destroy(&attr);
        emu_pool.workers.push_back(t);
    }
    emu_pool.job = job;
    emu_pool.launch = launch;
    emu_pool.active = emu_pool.running = threads;
    emu_pool.generation++;
    pthread_cond_broadcast(&emu_pool.start);
    while (emu_pool.running != 0) pthread_cond_wait(&emu_pool.done, &emu_pool.mu);
    pthread_mutex_unlock(&emu_pool.mu);
}

#endif  // EMU_FIBERS

// One launch at a time (the emulator's block state is global): host threads that launch
// concurrently (the runtime's rank threads) take turns.
inline pthread_mutex_t emu_launch_mu = PTHREAD_MUTEX_INITIALIZER;

// body() as every thread of a grid of `block`-shaped blocks with smem bytes of dynamic
// shared memory: the blocks one after another, each on the same pthreads. Returns false
// (and runs nothing) for a launch outside the GPU limits.
// Whether a launch is within the GPU's limits; reports and counts one that is not.
static inline bool emu_launch_fits(dim3 grid, dim3 block, size_t smem) {
    const unsigned long long threads64 = (unsigned long long)block.x * block.y * block.z;
    if (smem > emu_smem_limit || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
        grid.z > 65535 || threads64 > 1024 || threads64 == 0 || block.z > 64) {
        fprintf(stderr, "emu_launch: launch outside the GPU limits: grid (%u, %u, %u), block "
                "(%u, %u, %u), %zu bytes of shared memory\n", grid.x, grid.y, grid.z, block.x,
                block.y, block.z, smem);
        __atomic_add_fetch(&emu_limit_errors, 1, __ATOMIC_RELAXED);
        return false;
    }
    return true;
}

template <class Body>
static bool emu_launch_body(dim3 grid, dim3 block, size_t smem, const Body& body) {
    if (!emu_launch_fits(grid, block, smem)) return false;
    const unsigned threads = block.x * block.y * block.z;
    pthread_mutex_lock(&emu_launch_mu);
    if (emu_smem_limit == EMU_MAX_SMEM && smem > emu_max_smem_seen) emu_max_smem_seen = smem;
    gridDim = grid;
    blockDim = block;
    const size_t smem_floats = smem / sizeof(float);
    void* sm_raw = NULL;  // exactly smem bytes, so AddressSanitizer sees an overrun
    if (smem_floats && posix_memalign(&sm_raw, 128, smem_floats * sizeof(float)) != 0)
        emu_fatal("posix_memalign (shared memory)");
    float* sm = (float*)sm_raw;
    std::vector<long> warp_calls(threads);
    emu_launch_state<Body> L = {&body, grid, block, threads, sm, smem_floats, &warp_calls};
    const unsigned warps = (threads + 31) / 32;
    std::vector<emu_barrier_t> wb(warps);
    std::vector<emu_warp_slots> slots(warps);
    std::vector<emu_mma_slots> mma_slots(warps);
    std::vector<emu_ldsm_slots> ldsm_slots(warps);
    for (unsigned w = 0; w < warps; w++) {
        const unsigned n = w + 1 < warps || threads % 32 == 0 ? 32 : threads % 32;
        emu_barrier_init(&wb[w], n);
    }
    emu_warp_barriers = wb.data();
    emu_shfl_slots = slots.data();
    emu_mma = mma_slots.data();
    emu_ldsm = ldsm_slots.data();
    emu_barrier_init(&emu_barrier, threads);
    emu_run_threads(threads, emu_thread_main<Body>, &L);
    emu_barrier_destroy(&emu_barrier);
    for (unsigned w = 0; w < warps; w++) emu_barrier_destroy(&wb[w]);
    free(sm);
    pthread_mutex_unlock(&emu_launch_mu);
    return true;
}

// kernel<<<grid, threads, smem>>>(args) for the flash kernels' one-struct signature.
template <class Args>
static void emu_launch(void (*kernel)(Args), dim3 grid, unsigned threads, size_t smem,
                       const Args& args) {
    emu_launch_body(grid, dim3(threads), smem, [&] { kernel(args); });
}

#endif
