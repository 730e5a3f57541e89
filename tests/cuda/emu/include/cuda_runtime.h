// cuda_runtime.h of the CUDA emulator (tests/cuda/emu): the part of the CUDA runtime API
// that runtime/cuda and its tests use, implemented on the host by
// tests/cuda/emu/cuda_runtime_emu.cc, so the CUDA kernels (compiled as C++ after
// tests/cuda/emu/launch.sed) and test_cuda_kernels run on a machine without a GPU.
//
// Device memory is host memory (cudaMalloc fills it with a NaN pattern, so a read of
// anything never written shows). By default every operation runs when it is issued, in
// issue order: a valid order for any program, since each stream and event dependency
// points from an earlier call to a later one; what this cannot show is a missing
// dependency (a race between streams). With CUDA_EMU_LAZY=1 in the environment, an
// operation on a stream other than the legacy one runs only when something needs it: a
// synchronization of its stream, its device or an event recorded after it, or an
// operation of another stream that waits for such an event. Each stream's work is
// therefore delayed as long as its dependencies allow, so an operation that reads what
// another stream writes without waiting for it sees the old contents (and one that
// writes what another stream still has to read, unordered, overwrites it first): the
// results change, and a conformance test fails. CUDA_EMU_LAZY=low delays only the streams
// of the lowest priority and runs the others at issue (see cuda_runtime_emu.cc). While a
// stream is being captured, its operations (and those of streams joined to the capture
// through an event) are recorded into the graph instead, and cudaGraphLaunch issues them
// in the recorded order on its stream; as on a GPU, cudaStreamEndCapture refuses a capture
// whose origin has not waited for every operation of the streams that joined it
// (cudaErrorStreamCaptureUnjoined). Kernels run on the fibers or pthreads of
// tests/cuda/cuda_emu.h (C++ only; C sees the host API).
#ifndef FSDPGEN_CUDA_EMU_RUNTIME_H
#define FSDPGEN_CUDA_EMU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureIsolation = 903,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureImplicit = 906,
} cudaError_t;

typedef struct emu_stream* cudaStream_t;
typedef struct emu_event* cudaEvent_t;
typedef struct emu_graph* cudaGraph_t;
typedef struct emu_graph_exec* cudaGraphExec_t;
typedef struct emu_graph_node* cudaGraphNode_t;

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2
#define cudaHostAllocDefault 0x0

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

typedef enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
} cudaStreamCaptureStatus;

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
// Accepted and ignored: the emulator runs a graph's work as its streams' own.
enum cudaGraphInstantiateFlags { cudaGraphInstantiateFlagUseNodePriority = 8 };

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int multiProcessorCount;
    int major, minor;
};

// the attributes the runtime reads (cudaDeviceGetAttribute)
enum cudaDeviceAttr {
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest);

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t stream);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value);
// what the runtime reads of a kernel's attributes: its static shared memory (0 here, where a
// __shared__ variable is a static of the host program)
struct cudaFuncAttributes {
    size_t sharedSizeBytes;
};
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func);

typedef void (*cudaHostFn_t)(void* userData);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData);

#ifdef __cplusplus
}  // extern "C"

// ----------------------------------------------------------------------------
// C++: the device side (tests/cuda/cuda_emu.h) and kernel launches

#include <array>
#include <functional>
#include <tuple>
#include <utility>

#include "../../cuda_emu.h"

#define __shared__ static  // one block runs at a time: a static is the block's shared copy
#define __align__(n) alignas(n)
#define __grid_constant__

static inline float __fmul_rn(float a, float b) { return a * b; }  // built with -ffp-contract=off
static inline float __fadd_rn(float a, float b) { return a + b; }

// Host-side operation queueing (cuda_runtime_emu.cc): runs op now, or records it into the
// graph when `stream` is being captured; cudaSuccess or the capture's error.
cudaError_t emu_enqueue(cudaStream_t stream, std::function<void()> op);
// Names a kernel node of the graph `stream` is capturing, if any, where
// CUDA_EMU_GRAPH_KERNELS asks for the lists.
void emu_note_kernel(cudaStream_t stream, const char* name);
// The calling thread's last launch error (cudaGetLastError returns and clears it).
void emu_set_launch_error(cudaError_t error);
// Whether a launch of kernel fn may use `bytes` of dynamic shared memory: up to 48 KiB, or
// up to what cudaFuncSetAttribute allowed for fn, as on the GPU. fn is NULL where the launch
// names a template whose arguments the call deduces (no address to look up without them):
// then what it allowed any kernel.
bool emu_smem_allowed(const void* fn, size_t bytes);

// The address of the kernel a launch names (launch.sed): probe(emu_void_ptr{}) casts the
// name to const void*, which works for a function, a fully specified template-id and a
// function pointer, and fails (SFINAE: NULL here) for a template still to be deduced.
struct emu_void_ptr {
    using type = const void*;
};
template <class P>
static inline auto emu_kernel_addr_(P probe, int) -> decltype(probe(emu_void_ptr{})) {
    return probe(emu_void_ptr{});
}
template <class P>
static inline const void* emu_kernel_addr_(P, long) { return nullptr; }
template <class P>
static inline const void* emu_kernel_addr(P probe) { return emu_kernel_addr_(probe, 0); }
// Whether a kernel may be given pointer p: NULL, or in (or at the end of) cudaMalloc'ed or
// pinned memory. Device memory being host memory here, a host variable passed to a kernel
// would work in the emulator and fault on the GPU; each launch checks its pointer
// arguments (not pointers inside structs) and reports the first other one:
// emu_host_pointer_argument prints it and sets cudaErrorIllegalAddress, which the launch
// check after it (RTC_CHECK_LAUNCH) reports as a GPU would.
bool emu_device_accessible(const void* p);
void emu_host_pointer_argument(int index, const void* p);
// A launch argument as the pointer it is, or NULL when it is no pointer.
template <class T>
static inline const void* emu_pointer_of(const T&) { return nullptr; }
template <class T>
static inline const void* emu_pointer_of(T* p) { return (const void*)p; }

// A device-side trap: what printf printed is out, then the emulated context is lost
// (every later call fails with cudaErrorLaunchFailure, as after a real __trap).
[[noreturn]] void emu_trap(void);
static inline void __trap(void) { emu_trap(); }

// kernel<<<grid, block, smem, stream>>>(args) reads, after tests/cuda/emu/launch.sed,
// emu_launch_at(emu_cfg(grid, block, smem, stream), name, fn, make)(args): fn the kernel's
// address or NULL (emu_kernel_addr); make(args) returns the closure that calls the kernel
// with copies of the arguments (as a launch copies them), which runs as every thread of
// the grid now or at the graph's launch.
struct emu_cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    emu_cfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0)
        : grid(g), block(b), smem(s), stream(st) {}
};
template <class Make>
struct emu_launcher {
    emu_cfg cfg;
    const char* name;
    const void* fn;
    Make make;
    template <class... A>
    void operator()(A... args) const {
        if (!emu_smem_allowed(fn, cfg.smem)) {
            emu_set_launch_error(cudaErrorInvalidValue);
            return;
        }
        if (!emu_launch_fits(cfg.grid, cfg.block, cfg.smem)) {  // reported at the launch, as on a GPU
            emu_set_launch_error(cudaErrorInvalidConfiguration);
            return;
        }
        const void* pointers[sizeof...(A) + 1] = {emu_pointer_of(args)..., nullptr};
        for (size_t i = 0; i < sizeof...(A); i++)
            if (!emu_device_accessible(pointers[i])) {
                emu_host_pointer_argument((int)i, pointers[i]);
                return;
            }
        const auto body = make(args...);
        const emu_cfg c = cfg;
        // checked again when it runs: a captured launch replays with the pointers it was
        // given, which may have been freed since (a GPU faults, or reads what is there now)
        std::array<const void*, sizeof...(A) + 1> ps;
        for (size_t i = 0; i < ps.size(); i++) ps[i] = pointers[i];
        emu_note_kernel(c.stream, name);
        const cudaError_t e = emu_enqueue(c.stream, [c, body, ps] {
            for (size_t i = 0; i + 1 < ps.size(); i++)
                if (!emu_device_accessible(ps[i])) {
                    emu_host_pointer_argument((int)i, ps[i]);
                    return;
                }
            if (!emu_launch_body(c.grid, c.block, c.smem, body))
                emu_set_launch_error(cudaErrorInvalidConfiguration);
        });
        if (e != cudaSuccess) emu_set_launch_error(e);
    }
};
template <class Make>
emu_launcher<Make> emu_launch_at(const emu_cfg& cfg, const char* name, const void* fn, Make make) {
    return emu_launcher<Make>{cfg, name, fn, make};
}

// cudaLaunchKernel(kernel, grid, block, args, smem, stream), typed (cuda_runtime.h's C++
// overload): args[i] points at parameter i.
template <class... P, size_t... I>
static inline auto emu_kernel_args(void* const* args, std::index_sequence<I...>) {
    return std::tuple<typename std::decay<P>::type...>(*(typename std::decay<P>::type*)args[I]...);
}
template <class... P>
static inline cudaError_t cudaLaunchKernel(void (*kernel)(P...), dim3 grid, dim3 block,
                                           void** args, size_t smem = 0, cudaStream_t stream = 0) {
    const auto params = emu_kernel_args<P...>(args, std::index_sequence_for<P...>());
    emu_launch_at(emu_cfg(grid, block, smem, stream), "cudaLaunchKernel", (const void*)kernel, [kernel, params] {
        return [kernel, params] { std::apply(kernel, params); };
    })();
    return cudaGetLastError();
}

// CUDA's integer and float min / max
template <class T>
static inline T min(T a, T b) {
    return b < a ? b : a;
}
template <class T>
static inline T max(T a, T b) {
    return a < b ? b : a;
}

#endif  // __cplusplus

#endif
