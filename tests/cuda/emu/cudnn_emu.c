// rt_cudnn.h on the CUDA emulator, which has no cuDNN: create declines with a reason, so the
// CUDA step backend's attention sites run fsdpgen's kernels there (runtime/cuda/step/
// attention.c); nothing can reach forward or backward without a plan.
#include <stdio.h>
#include <stdlib.h>

#include "rt_check.h"
#include "rt_cudnn.h"

rt_cudnn_sdpa* rt_cudnn_sdpa_create(int B, int T, int NH, int NKV, int HD, int causal,
                                    rt_dtype prec, int deterministic, int ld_dq, int ld_dk,
                                    int ld_dv, char* why, size_t why_len) {
    (void)B, (void)T, (void)NH, (void)NKV, (void)HD, (void)causal, (void)prec;
    (void)deterministic, (void)ld_dq, (void)ld_dk, (void)ld_dv;
    if (why && why_len) snprintf(why, why_len, "cuDNN attention: not on the CUDA emulator");
    return NULL;
}

void rt_cudnn_sdpa_destroy(rt_cudnn_sdpa* s) { (void)s; }

void rt_cudnn_set_sm_count(int sms) { (void)sms; }

size_t rt_cudnn_sdpa_workspace_bytes(const rt_cudnn_sdpa* s) {
    (void)s;
    return 0;
}

int rt_cudnn_sdpa_deterministic(const rt_cudnn_sdpa* s) {
    (void)s;
    rt_check_fail(__FILE__, __LINE__, "rt_cudnn_sdpa_deterministic", "no plan on the emulator",
                  "a bug: create returned NULL");
    return 1;
}

void rt_cudnn_sdpa_forward(const rt_cudnn_sdpa* s, void* out, float* stats, const void* q,
                           const void* k, const void* v, void* workspace,
                           rt_cudnn_stream stream) {
    (void)s, (void)out, (void)stats, (void)q, (void)k, (void)v, (void)workspace, (void)stream;
    rt_check_fail(__FILE__, __LINE__, "rt_cudnn_sdpa_forward", "no plan on the emulator",
                  "a bug: create returned NULL");
}

void rt_cudnn_sdpa_backward(const rt_cudnn_sdpa* s, void* dq, void* dk, void* dv,
                            const void* dout, const void* out, const void* q, const void* k,
                            const void* v, const float* stats, void* workspace,
                            rt_cudnn_stream stream) {
    (void)s, (void)dq, (void)dk, (void)dv, (void)dout, (void)out, (void)q, (void)k, (void)v;
    (void)stats, (void)workspace, (void)stream;
    rt_check_fail(__FILE__, __LINE__, "rt_cudnn_sdpa_backward", "no plan on the emulator",
                  "a bug: create returned NULL");
}

int rt_cudnn_sdpa_try(const rt_cudnn_sdpa* s, void* out, float* stats, void* dq, void* dk,
                      void* dv, const void* dout, const void* q, const void* k, const void* v,
                      void* workspace, rt_cudnn_stream stream, char* why, size_t why_len) {
    (void)s, (void)out, (void)stats, (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k;
    (void)v, (void)workspace, (void)stream, (void)why, (void)why_len;
    rt_check_fail(__FILE__, __LINE__, "rt_cudnn_sdpa_try", "no plan on the emulator",
                  "a bug: create returned NULL");
    return -1;
}
