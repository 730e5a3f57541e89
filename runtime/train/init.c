// init.c — deterministic parameter initialization: each element's value is a function of
// (seed, FNV-1a of its FQN, element index) with the Philox uniform of rt_kernels.h, so any
// world size and any mesh start from the same full parameters. Each rank computes only
// the elements of its own shard, straight into it, where the sharding copy plan
// (rt_copy_shard_params, the plan rt_fsdp_shard_params applies) places them: a full copy
// per rank cost world times the work and, for Llama 1B's output layer, a 1 GB temporary.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_fsdp_copy.h"
#include "rt_kernels.h"
#include "rt_train.h"
#include "train_internal.h"

// ---- values -----------------------------------------------------------------------------

uint64_t rt_train_fnv1a(const char* s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char* p = (const unsigned char*)s; p && *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

static int64_t param_numel(const rt_model_param* p) {
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->shape[d];
    return n;
}

// out[k] = value of element e0 + k, k < n.
static void init_range(const rt_model_param* p, uint64_t seed, float* out, int64_t e0, int64_t n) {
    const uint64_t h = rt_train_fnv1a(p->fqn);
    const double scale = p->init_scale;
    const double two_pi = 6.283185307179586476925286766559;
    switch (p->init) {
    case RT_INIT_ZEROS:
        for (int64_t k = 0; k < n; k++) out[k] = 0.0f;
        break;
    case RT_INIT_ONES:
        for (int64_t k = 0; k < n; k++) out[k] = 1.0f;
        break;
    case RT_INIT_UNIFORM:
        for (int64_t k = 0; k < n; k++) {
            double u = rt_dropout_uniform(seed, h, (uint64_t)(e0 + k));
            out[k] = (float)(-scale + 2.0 * scale * u);
        }
        break;
    case RT_INIT_NORMAL:
        for (int64_t k = 0; k < n; k++) {
            const uint64_t e = (uint64_t)(e0 + k);
            double u1 = rt_dropout_uniform(seed, h, 2 * e);
            double u2 = rt_dropout_uniform(seed, h, 2 * e + 1);
            double z = sqrt(-2.0 * log(1.0 - u1)) * cos(two_pi * u2);
            out[k] = (float)(scale * z);
        }
        break;
    }
}

// A normal value costs about 75 ns on one core (two Philox blocks, a log and a cos in
// double), so a 1.5B-parameter model spent about two minutes before its first step: long
// ranges are filled by several threads, each a part of the range, with the same values.
#define INIT_THREADS_MAX 32
#define INIT_ELEMS_PER_THREAD ((int64_t)1 << 18)

typedef struct init_job {
    const rt_model_param* p;
    uint64_t seed;
    float* out;
    int64_t e0, n;
} init_job;

static void* init_job_run(void* arg) {
    init_job* j = arg;
    init_range(j->p, j->seed, j->out, j->e0, j->n);
    return NULL;
}

void rt_train_init_range(const rt_model_param* p, uint64_t seed, int64_t e0, int64_t n, float* out) {
    const int random = p->init == RT_INIT_UNIFORM || p->init == RT_INIT_NORMAL;
    int64_t nt = random ? n / INIT_ELEMS_PER_THREAD : 1;
    if (nt >= 2) {  // glibc reads /sys for the CPU count: only for ranges worth splitting
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (nt > cpus) nt = cpus;
        if (nt > INIT_THREADS_MAX) nt = INIT_THREADS_MAX;
    }
    if (nt < 2) {
        init_range(p, seed, out, e0, n);
        return;
    }
    init_job jobs[INIT_THREADS_MAX];
    pthread_t tids[INIT_THREADS_MAX];
    int started[INIT_THREADS_MAX] = {0};
    for (int t = 0; t < nt; t++) {
        const int64_t k0 = n * t / nt, k1 = n * (t + 1) / nt;
        jobs[t] = (init_job){p, seed, out + k0, e0 + k0, k1 - k0};
        // A thread that cannot start leaves its part to this one.
        if (t > 0) started[t] = pthread_create(&tids[t], NULL, init_job_run, &jobs[t]) == 0;
    }
    for (int t = 0; t < nt; t++)
        if (!started[t]) init_job_run(&jobs[t]);
    for (int t = 1; t < nt; t++)
        if (started[t]) pthread_join(tids[t], NULL);
}

void rt_train_init_param(const rt_model_param* p, uint64_t seed, float* out) {
    rt_train_init_range(p, seed, 0, param_numel(p), out);
}

// ---- into the shards --------------------------------------------------------------------

// The rank's padded shards of group g into its arena, run by run of the group's sharding
// plan: its parameter sides are per-parameter buffers (NULL offsets), so a run's src is the
// element index in its full parameter, the value's argument, and its dst the offset in the
// parameter's padded shard, which starts at the parameter's offset in the rank block;
// src < 0: padding, zeros.
static int init_group(train_run* run, rt_rank* R, int g) {
    const rt_model_group* G = &run->m->groups[g];
    const rt_fsdp_layout* L = &R->groups[g].layout;
    float* shards = train_arena_f32(R, G->params_off, G->block_numel);
    if (!shards) return 1;
    rt_copy_plan plan = {0};
    if (rt_copy_shard_params(&plan, L, NULL, NULL) != 0) {
        rt_copy_plan_free(&plan);
        train_fail(run, "rank %d: out of memory for the init plan of group '%s'", R->rank,
                   G->name);
        return 1;
    }
    for (int k = 0; k < plan.nruns; k++) {
        const rt_copy_run* r = &plan.runs[k];
        const rt_model_param* p = &run->m->params[G->params[r->param]];
        float* out = shards + L->params[r->param].offset + r->dst;
        if (r->src < 0) memset(out, 0, (size_t)r->n * sizeof(float));
        else rt_train_init_range(p, run->seed, r->src, r->n, out);
    }
    rt_copy_plan_free(&plan);
    return 0;
}

int train_init_params(train_run* run, rt_rank* R) {
    for (int g = 0; g < run->m->ngroups; g++)
        if (init_group(run, R, g)) return 1;
    return 0;
}
