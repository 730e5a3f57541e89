// cuDNN loaded when first used (dlopen) instead of linked, so a program with librt_cudnn.a
// (every --cuda binary) starts on a machine without cuDNN, where rt_cudnn_sdpa_create then
// declines with the reason and fsdpgen's kernels run. The library is RT_CUDNN_SO when set
// (e.g. the libcudnn.so.9 inside PyTorch's wheel), else libcudnn.so.9 on the loader's path
// (the binaries' rpath has /usr/local/cuda/lib64). Defines the twelve cuDNN entry points
// librt_cudnn.a calls, each forwarding to the loaded library's.
#include <cudnn.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "rt_cudnn.h"

#define CUDNN_ENTRY_POINTS(X)                                                                    \
    X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetVersion) X(cudnnGetErrorString) \
    X(cudnnGetLastErrorString) X(cudnnBackendCreateDescriptor)                                 \
    X(cudnnBackendDestroyDescriptor) X(cudnnBackendFinalize) X(cudnnBackendSetAttribute)       \
    X(cudnnBackendGetAttribute) X(cudnnBackendExecute)

#define POINTER(name) static __typeof__(name)* p_##name;
CUDNN_ENTRY_POINTS(POINTER)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[512];  // empty once loaded

static void load(void) {
    const char* so = getenv("RT_CUDNN_SO");
    if (!so || !*so) so = "libcudnn.so.9";
    void* lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "cannot load %s (%s)", so, dlerror());
        return;
    }
    const char* missing = NULL;
#define RESOLVE(name)                                              \
    if (!missing && !(p_##name = (__typeof__(name)*)dlsym(lib, #name))) missing = #name;
    CUDNN_ENTRY_POINTS(RESOLVE)
#undef RESOLVE
    if (missing)
        snprintf(load_error, sizeof load_error, "%s has no %s (cuDNN 9 needed)", so, missing);
}

int rt_cudnn_load(char* why, size_t why_len) {
    pthread_once(&once, load);
    if (!load_error[0]) return 0;
    if (why && why_len) snprintf(why, why_len, "cuDNN attention: %s", load_error);
    return -1;
}

#define LOADED() (rt_cudnn_load(NULL, 0) == 0)

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
    return LOADED() ? p_cudnnCreate(handle) : CUDNN_STATUS_NOT_INITIALIZED;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
    return LOADED() ? p_cudnnDestroy(handle) : CUDNN_STATUS_NOT_INITIALIZED;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
    return LOADED() ? p_cudnnSetStream(handle, stream) : CUDNN_STATUS_NOT_INITIALIZED;
}
size_t cudnnGetVersion(void) { return LOADED() ? p_cudnnGetVersion() : 0; }
const char* cudnnGetErrorString(cudnnStatus_t status) {
    return LOADED() ? p_cudnnGetErrorString(status) : "cuDNN not loaded";
}
void cudnnGetLastErrorString(char* message, size_t max_size) {
    if (LOADED()) p_cudnnGetLastErrorString(message, max_size);
    else if (message && max_size) snprintf(message, max_size, "%s", load_error);
}
cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t* descriptor) {
    return LOADED() ? p_cudnnBackendCreateDescriptor(type, descriptor)
                    : CUDNN_STATUS_NOT_INITIALIZED;
}
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
    return LOADED() ? p_cudnnBackendDestroyDescriptor(descriptor) : CUDNN_STATUS_NOT_INITIALIZED;
}
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
    return LOADED() ? p_cudnnBackendFinalize(descriptor) : CUDNN_STATUS_NOT_INITIALIZED;
}
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void* elements) {
    return LOADED() ? p_cudnnBackendSetAttribute(descriptor, name, type, count, elements)
                    : CUDNN_STATUS_NOT_INITIALIZED;
}
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t* count, void* elements) {
    return LOADED() ? p_cudnnBackendGetAttribute(descriptor, name, type, requested, count,
                                                 elements)
                    : CUDNN_STATUS_NOT_INITIALIZED;
}
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t variant_pack) {
    return LOADED() ? p_cudnnBackendExecute(handle, plan, variant_pack)
                    : CUDNN_STATUS_NOT_INITIALIZED;
}
