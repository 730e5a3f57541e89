// init.c — deterministic parameter initialization: every rank computes each full
// parameter from (seed, FNV-1a of its FQN, element index) with the Philox uniform of
// rt_kernels.h, then keeps its shard (rt_fsdp_shard_params), so any world size and any
// mesh start from the same full parameters.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

// Elements [e0, e1) of p's values (each depends only on seed, FQN hash and index).
static void init_range(const rt_model_param* p, uint64_t seed, float* out, int64_t e0, int64_t e1) {
    const uint64_t h = rt_train_fnv1a(p->fqn);
    const double scale = p->init_scale;
    const double two_pi = 6.283185307179586476925286766559;
    switch (p->init) {
    case RT_INIT_ZEROS:
        for (int64_t e = e0; e < e1; e++) out[e] = 0.0f;
        break;
    case RT_INIT_ONES:
        for (int64_t e = e0; e < e1; e++) out[e] = 1.0f;
        break;
    case RT_INIT_UNIFORM:
        for (int64_t e = e0; e < e1; e++) {
            double u = rt_dropout_uniform(seed, h, (uint64_t)e);
            out[e] = (float)(-scale + 2.0 * scale * u);
        }
        break;
    case RT_INIT_NORMAL:
        for (int64_t e = e0; e < e1; e++) {
            double u1 = rt_dropout_uniform(seed, h, 2 * (uint64_t)e);
            double u2 = rt_dropout_uniform(seed, h, 2 * (uint64_t)e + 1);
            double z = sqrt(-2.0 * log(1.0 - u1)) * cos(two_pi * u2);
            out[e] = (float)(scale * z);
        }
        break;
    }
}

// A normal value costs about 160 ns (two Philox blocks, a log and a cos in double), so a
// 1.5B-parameter model took minutes to start on one core: large parameters are filled by
// several threads, each a range of elements, with the same values.
#define INIT_THREADS_MAX 32
#define INIT_ELEMS_PER_THREAD ((int64_t)1 << 18)

typedef struct init_job {
    const rt_model_param* p;
    uint64_t seed;
    float* out;
    int64_t e0, e1;
} init_job;

static void* init_job_run(void* arg) {
    init_job* j = arg;
    init_range(j->p, j->seed, j->out, j->e0, j->e1);
    return NULL;
}

void rt_train_init_param(const rt_model_param* p, uint64_t seed, float* out) {
    const int64_t n = param_numel(p);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t nt = n / INIT_ELEMS_PER_THREAD;
    if (nt > cpus) nt = cpus;
    if (nt > INIT_THREADS_MAX) nt = INIT_THREADS_MAX;
    if (p->init == RT_INIT_ZEROS || p->init == RT_INIT_ONES || nt < 2) {
        init_range(p, seed, out, 0, n);
        return;
    }
    init_job jobs[INIT_THREADS_MAX];
    pthread_t tids[INIT_THREADS_MAX];
    int started[INIT_THREADS_MAX] = {0};
    for (int t = 0; t < nt; t++) {
        jobs[t] = (init_job){p, seed, out, n * t / nt, n * (t + 1) / nt};
        // A thread that cannot start leaves its range to this one.
        if (t > 0) started[t] = pthread_create(&tids[t], NULL, init_job_run, &jobs[t]) == 0;
    }
    for (int t = 0; t < nt; t++)
        if (!started[t]) init_job_run(&jobs[t]);
    for (int t = 1; t < nt; t++)
        if (started[t]) pthread_join(tids[t], NULL);
}

// ---- into the shards --------------------------------------------------------------------

int train_init_params(train_run* run, rt_rank* R) {
    const rt_model* m = run->m;
    for (int g = 0; g < m->ngroups; g++) {
        const rt_model_group* G = &m->groups[g];
        rt_fsdp_layout* L = &R->groups[g].layout;
        float* shards = train_arena_f32(R, G->params_off, G->block_numel);
        if (!shards) return 1;
        for (int i = 0; i < G->nparams; i++) {
            const rt_model_param* p = &m->params[G->params[i]];
            int64_t n = param_numel(p);
            float* full = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
            if (!full) {
                train_fail(run, "rank %d: out of memory initializing '%s' (%lld floats)", R->rank,
                           p->fqn, (long long)n);
                return 1;
            }
            rt_train_init_param(p, run->seed, full);
            // One parameter of the group's layout: its shard goes to its block offset.
            rt_fsdp_layout one = *L;
            one.nparams = 1;
            one.params = &L->params[i];
            const void* fullp[1] = {full};
            void* shardp[1] = {shards + L->params[i].offset};
            int st = rt_fsdp_shard_params(&one, fullp, RT_F32, shardp);
            free(full);
            if (st) {
                train_fail(run, "rank %d: sharding '%s' failed: %s", R->rank, p->fqn, one.error);
                return 1;
            }
        }
    }
    return 0;
}
