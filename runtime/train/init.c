// init.c — deterministic parameter initialization: every rank computes each full
// parameter from (seed, FNV-1a of its FQN, element index) with the Philox uniform of
// rt_kernels.h, then keeps its shard (rt_fsdp_shard_params), so any world size and any
// mesh start from the same full parameters.
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

void rt_train_init_param(const rt_model_param* p, uint64_t seed, float* out) {
    const int64_t n = param_numel(p);
    const uint64_t h = rt_train_fnv1a(p->fqn);
    const double scale = p->init_scale;
    const double two_pi = 6.283185307179586476925286766559;
    switch (p->init) {
    case RT_INIT_ZEROS:
        for (int64_t e = 0; e < n; e++) out[e] = 0.0f;
        break;
    case RT_INIT_ONES:
        for (int64_t e = 0; e < n; e++) out[e] = 1.0f;
        break;
    case RT_INIT_UNIFORM:
        for (int64_t e = 0; e < n; e++) {
            double u = rt_dropout_uniform(seed, h, (uint64_t)e);
            out[e] = (float)(-scale + 2.0 * scale * u);
        }
        break;
    case RT_INIT_NORMAL:
        for (int64_t e = 0; e < n; e++) {
            double u1 = rt_dropout_uniform(seed, h, 2 * (uint64_t)e);
            double u2 = rt_dropout_uniform(seed, h, 2 * (uint64_t)e + 1);
            double z = sqrt(-2.0 * log(1.0 - u1)) * cos(two_pi * u2);
            out[e] = (float)(scale * z);
        }
        break;
    }
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
