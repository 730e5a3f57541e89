// The CUDA backend's attention sites (rt_model.h rt_model_attention; runtime/step/attention.c
// calls rtb_attention_*): at rank start, before the arena and any capture, each site gets
// cuDNN's plans (rt_cudnn.h, writing the gradients in rows of the site's row lengths) or
// none, as the spec's choice or RT_ATTENTION says:
//   auto     cuDNN where it takes the shape and its forward + backward time less than
//            fsdpgen's kernels' on the site's shape (attention_time.c);
//   cudnn    cuDNN wherever it takes the shape;
//   fsdpgen  never.
// cuDNN's backward is its deterministic form (dQ straight from its matmul: the same bits every
// run), or with RT_ATTENTION_BACKWARD=atomic the frontend's default (dQ accumulated in fp32
// with atomics, as PyTorch's SDPA backward; the bits may differ between runs) where cuDNN has
// it for the shape. cuDNN's workspace must fit the scratch the plan gives the site (the
// memory plan sizes it for either form; else fsdpgen's kernels).
// Every rank runs the same at each site (cuDNN only where every rank would). Rank 0 prints
// what each site runs, and why. The emulator has no cuDNN (its stub declines).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rt_comm.h"
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

int cs_attention_deterministic(void) {
    return cs_env_choice("RT_ATTENTION_BACKWARD", "deterministic", "atomic");
}

int cs_attention_check_env(void) {
    if (env_choice() == -2) {
        fprintf(stderr, "fsdpgen: RT_ATTENTION=%s: must be auto (the faster per shape), cudnn "
                "or fsdpgen\n", getenv("RT_ATTENTION"));
        return 2;
    }
    return cs_env_check("RT_ATTENTION_BACKWARD", "deterministic", "atomic", "deterministic "
                        "(cuDNN's backward with the same bits every run) or atomic (dQ summed "
                        "with atomics)");
}

// Site i's plans (the deterministic backward, or where cuDNN has it the atomic one), or NULL
// with why filled (and what in `note`: auto's timings).
static rt_cudnn_sdpa* decide(rt_rank* R, int i, int choice, int deterministic, char* why,
                             size_t why_len, char* note, size_t note_len) {
    const rt_model_attention* a = &R->model->attention[i];
    note[0] = 0;
    if (choice == RT_ATTENTION_FSDPGEN) {  // a spec that says so has no sites: the environment
        snprintf(why, why_len, "RT_ATTENTION=fsdpgen");
        return NULL;
    }
    rt_cudnn_sdpa* plan = rt_cudnn_sdpa_create(a->B, a->T, a->NH, a->NKV, a->HD, a->causal,
                                               a->dtype, deterministic, a->ld_dq, a->ld_dk,
                                               a->ld_dv, why, why_len);
    if (!plan) return NULL;
    const size_t ws = rt_cudnn_sdpa_workspace_bytes(plan);
    if (ws + a->spare_bytes > a->scratch_bytes) {
        snprintf(why, why_len, "cuDNN asks for %zu bytes of workspace, the memory plan has %zu",
                 ws, a->scratch_bytes - a->spare_bytes);
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

// What a site runs, and why, as rank 0 prints it.
typedef struct site_verdict {
    char why[512], note[128];
} site_verdict;

// Every rank decides alone (under `auto`, timed on its own GPU; a process's ranks share one
// timing per shape, attention_time.c), so processes could disagree: a site runs cuDNN
// only where it does on every rank (rt_comm_all_true), so that the ranks compute alike.
// Rank 0 prints the sites; a rank whose own reason decided a site that some other rank
// would have run on cuDNN prints that reason itself, since rank 0 cannot know it.
static int agree(rt_rank* R, site_verdict* v) {
    cuda_rank* c = R->backend;
    const int n = R->model->nattention;
    int* on = malloc(2 * (size_t)n * sizeof *on);
    if (!on) {
        fprintf(stderr, "fsdpgen: rank %d: out of host memory\n", R->rank);
        return 1;
    }
    int* off = on + n;  // all ranks without cuDNN: no rank would have run it
    for (int i = 0; i < n; i++) on[i] = c->attention[i] != NULL, off[i] = !on[i];
    const int st = rt_comm_all_true(R->comm, on, 2 * n, c->compute);  // on and off at once
    for (int i = 0; i < n && !st; i++) {
        if (c->attention[i] && !on[i]) {
            rt_cudnn_sdpa_destroy(c->attention[i]);
            c->attention[i] = NULL;
            snprintf(v[i].why, sizeof v[i].why, "another rank runs them at this site, and every "
                     "rank runs the same%s%s", v[i].note[0] ? "; this rank's cuDNN: " : "",
                     v[i].note);
        } else if (!c->attention[i] && !off[i] && R->rank != 0) {
            printf("fsdpgen: rank %d: attention %d: fsdpgen's kernels on every rank, as here "
                   "(%s)\n", R->rank, i, v[i].why);
        }
    }
    free(on);
    if (st)
        fprintf(stderr, "fsdpgen: rank %d: the ranks' attention choices: %s\n", R->rank,
                rt_comm_last_error(R->comm)[0] ? rt_comm_last_error(R->comm) : rt_status_name(st));
    return st != 0;
}

int cs_attention_init(rt_rank* R) {
    const rt_model* m = R->model;
    cuda_rank* c = R->backend;
    if (m->nattention == 0) return 0;
    const int env = env_choice();  // checked by rt_step_launch (cs_attention_check_env)
    const int choice = env >= 0 ? env : (int)m->attention_choice;
    const int deterministic = cs_attention_deterministic() != 0;  // checked with RT_ATTENTION
    c->attention = calloc((size_t)m->nattention, sizeof *c->attention);
    site_verdict* v = calloc((size_t)m->nattention, sizeof *v);
    if (!c->attention || !v) {
        free(v);
        fprintf(stderr, "fsdpgen: rank %d: out of host memory\n", R->rank);
        return 1;
    }
    for (int i = 0; i < m->nattention; i++)
        c->attention[i] =
            decide(R, i, choice, deterministic, v[i].why, sizeof v[i].why, v[i].note,
                   sizeof v[i].note);
    if (R->world > 1 && agree(R, v)) {
        free(v);
        return 1;
    }
    for (int i = 0; i < m->nattention && R->rank == 0; i++) {
        const rt_model_attention* a = &m->attention[i];
        printf("fsdpgen: attention %d [%d, %d] %d/%d heads x %d %s%s (%s): ", i, a->B, a->T,
               a->NH, a->NKV, a->HD, rt_dtype_name(a->dtype), a->causal ? " causal" : "",
               CHOICE[choice]);
        // the backward's form where RT_ATTENTION_BACKWARD asked for the atomic one
        const char* form = "";
        if (c->attention[i] && !deterministic)
            form = rt_cudnn_sdpa_deterministic(c->attention[i])
                       ? ", deterministic backward (cuDNN has no atomic one for the shape)"
                       : ", atomic backward";
        if (c->attention[i])
            printf("cudnn%s%s%s%s\n", form, v[i].note[0] ? " (" : "", v[i].note,
                   v[i].note[0] ? ")" : "");
        else
            printf("fsdpgen's kernels (%s)\n", v[i].why);
    }
    fflush(stdout);
    free(v);
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
    // cuDNN writes all three gradients: one the step does not want (NULL) goes to the
    // scratch's spare bytes, after cuDNN's workspace (rt_model.h spare_bytes)
    const rt_model_attention* a = &R->model->attention[site];
    char* spare = (char*)scratch + a->scratch_bytes - a->spare_bytes;
    void** grads[3] = {&dq, &dk, &dv};
    const int heads[3] = {a->NH, a->NKV, a->NKV};
    for (int j = 0; j < 3; j++) {
        if (*grads[j]) continue;
        *grads[j] = spare;
        spare += ((size_t)a->B * a->T * heads[j] * a->HD * 2 + 255) / 256 * 256;
    }
    if (spare > (char*)scratch + a->scratch_bytes) {
        fprintf(stderr, "fsdpgen: attention site %d: a gradient passed as NULL with %zu spare "
                "bytes in its scratch (the generated step and its model disagree)\n", site,
                a->spare_bytes);
        abort();
    }
    rt_cudnn_sdpa_backward(c->attention[site], dq, dk, dv, dout, out, q, k, v, stats, scratch,
                           (rt_cudnn_stream)c->compute);
    return 1;
}
