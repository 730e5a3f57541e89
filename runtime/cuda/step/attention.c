// The CUDA backend's attention sites (rt_model.h rt_model_attention; runtime/step/attention.c
// calls rtb_attention_*): at rank start, before the arena and any capture, each site gets
// cuDNN's plans (rt_cudnn.h, the deterministic backward) or none, as the spec's choice or
// RT_ATTENTION says:
//   auto     cuDNN where it takes the shape and its forward + backward time less than
//            fsdpgen's kernels' on the site's shape (attention_time.c);
//   cudnn    cuDNN wherever it takes the shape;
//   fsdpgen  never.
// cuDNN's workspace must fit the scratch the plan gives the site (else fsdpgen's kernels).
// Rank 0 prints what each site runs, and why. The emulator has no cuDNN (its stub declines).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rt_cuda.h"
#include "rt_cudnn.h"

static const char* const CHOICE[] = {"auto", "cudnn", "fsdpgen"};

// RT_ATTENTION's choice (auto, cudnn or fsdpgen), -1 when unset or empty, -2 otherwise.
static int env_choice(void) {
    const char* env = getenv("RT_ATTENTION");
    if (!env || !*env) return -1;
    for (int k = 0; k < 3; k++)
        if (!strcmp(env, CHOICE[k])) return k;
    return -2;
}

int cs_attention_check_env(void) {
    if (env_choice() != -2) return 0;
    fprintf(stderr, "fsdpgen: RT_ATTENTION=%s: must be auto (the faster per shape), cudnn or "
            "fsdpgen\n", getenv("RT_ATTENTION"));
    return 2;
}

// Site i's plans, or NULL with why filled (and what in `note`: auto's timings).
static rt_cudnn_sdpa* decide(rt_rank* R, int i, int choice, char* why, size_t why_len,
                             char* note, size_t note_len) {
    const rt_model_attention* a = &R->model->attention[i];
    note[0] = 0;
    if (choice == RT_ATTENTION_FSDPGEN) {  // a spec that says so has no sites: the environment
        snprintf(why, why_len, "RT_ATTENTION=fsdpgen");
        return NULL;
    }
    rt_cudnn_sdpa* plan = rt_cudnn_sdpa_create(a->B, a->T, a->NH, a->NKV, a->HD, a->causal,
                                               a->dtype, 1, why, why_len);
    if (!plan) return NULL;
    const size_t ws = rt_cudnn_sdpa_workspace_bytes(plan);
    if (ws > a->scratch_bytes) {
        snprintf(why, why_len, "cuDNN asks for %zu bytes of workspace, the memory plan has %zu",
                 ws, a->scratch_bytes);
        rt_cudnn_sdpa_destroy(plan);
        return NULL;
    }
    char failed[400];
    if (!cs_attention_try(R, a, plan, failed, sizeof failed)) {
        snprintf(why, why_len, "cuDNN's plan failed its first run: %s", failed);
        rt_cudnn_sdpa_destroy(plan);
        return NULL;
    }
    if (choice == RT_ATTENTION_CUDNN) return plan;
    double t_cudnn, t_ours;
    cs_attention_time(R, a, plan, &t_cudnn, &t_ours);
    if (t_cudnn < 0.0) {
        snprintf(note, note_len, "not timed: no device memory for the site's tensors");
        return plan;
    }
    snprintf(note, note_len, "forward + backward %.3f ms, fsdpgen's %.3f ms", t_cudnn, t_ours);
    if (t_cudnn < t_ours) return plan;
    snprintf(why, why_len, "faster: %.3f ms forward + backward, cuDNN's %.3f ms", t_ours,
             t_cudnn);
    rt_cudnn_sdpa_destroy(plan);
    return NULL;
}

int cs_attention_init(rt_rank* R) {
    const rt_model* m = R->model;
    cuda_rank* c = R->backend;
    if (m->nattention == 0) return 0;
    const int env = env_choice();  // checked by rt_step_launch (cs_attention_check_env)
    const int choice = env >= 0 ? env : (int)m->attention_choice;
    c->attention = calloc((size_t)m->nattention, sizeof *c->attention);
    if (!c->attention) {
        fprintf(stderr, "fsdpgen: rank %d: out of host memory\n", R->rank);
        return 1;
    }
    for (int i = 0; i < m->nattention; i++) {
        char why[512] = "", note[128];
        c->attention[i] = decide(R, i, choice, why, sizeof why, note, sizeof note);
        if (R->rank != 0) continue;
        const rt_model_attention* a = &m->attention[i];
        printf("fsdpgen: attention %d [%d, %d] %d/%d heads x %d %s%s (%s): ", i, a->B, a->T,
               a->NH, a->NKV, a->HD, rt_dtype_name(a->dtype), a->causal ? " causal" : "",
               CHOICE[choice]);
        if (c->attention[i])
            printf("cudnn%s%s%s\n", note[0] ? " (" : "", note, note[0] ? ")" : "");
        else
            printf("fsdpgen's kernels (%s)\n", why);
    }
    fflush(stdout);
    rt_cuda_release_scratch();  // what the timing of fsdpgen's kernels grew
    return 0;
}

void cs_attention_free(rt_rank* R) {
    cuda_rank* c = R->backend;
    if (!c->attention) return;
    for (int i = 0; i < R->model->nattention; i++) rt_cudnn_sdpa_destroy(c->attention[i]);
    free(c->attention);
    c->attention = NULL;
}

int rtb_attention_forward(rt_rank* R, int site, void* out, float* stats, float* scratch,
                          const void* q, const void* k, const void* v) {
    const cuda_rank* c = R->backend;
    if (!c->attention || !c->attention[site]) return 0;
    rt_cudnn_sdpa_forward(c->attention[site], out, stats, q, k, v, scratch,
                          (rt_cudnn_stream)c->compute);
    return 1;
}

int rtb_attention_backward(rt_rank* R, int site, void* dq, void* dk, void* dv, float* scratch,
                           const void* dout, const void* out, const void* q, const void* k,
                           const void* v, const float* stats) {
    const cuda_rank* c = R->backend;
    if (!c->attention || !c->attention[site]) return 0;
    rt_cudnn_sdpa_backward(c->attention[site], dq, dk, dv, dout, out, q, k, v, stats, scratch,
                           (rt_cudnn_stream)c->compute);
    return 1;
}
