// weights.c — full parameters in and out, for every option that moves them: the gather of
// every group's sharded fp32 parameters into full tensors (FSDP all-gather over rank 0's
// shard group: --save, --save-hf, the conformance test) and the way back, a full parameter
// into the rank's shard (--load, --load-hf); and --save itself (rank 0 writes them as
// safetensors under every PyTorch name, tied aliases included, so load_state_dict accepts
// the file) and --load (every rank reads the full tensors, checks names, shapes and dtype,
// and keeps its shard).
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_safetensors.h"
#include "rt_train.h"
#include "train_internal.h"

// ---- helpers ----------------------------------------------------------------------------

static int64_t numel_of(const rt_model_param* p) {
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->shape[d];
    return n;
}

void train_free_full(const rt_model* m, float** full) {
    if (!full) return;
    for (int p = 0; p < m->nparams; p++) free(full[p]);
    free(full);
}

float** train_alloc_full(const rt_model* m) {
    float** full = calloc((size_t)(m->nparams > 0 ? m->nparams : 1), sizeof(float*));
    if (!full) return NULL;
    for (int p = 0; p < m->nparams; p++) {
        int64_t n = numel_of(&m->params[p]);
        if (!(full[p] = malloc((size_t)(n > 0 ? n : 1) * sizeof(float)))) {
            train_free_full(m, full);
            return NULL;
        }
    }
    return full;
}

// ---- gather -----------------------------------------------------------------------------

int train_gather_params(train_run* run, rt_rank* R, float* const* full) {
    const rt_model* m = run->m;
    if (R->rank >= m->shard) return 0;  // shard groups are runs of `shard` ranks from 0
    rt_comm* comm = R->mesh.shard;
    if (rt_rank_pull(R)) {
        train_fail(run, "rank %d: copying the parameters from the device failed", R->rank);
        rt_comm_abort(comm, "device copy failed");
        return 1;
    }
    for (int g = 0; g < m->ngroups; g++) {
        const rt_model_group* G = &m->groups[g];
        rt_fsdp_layout* L = &R->groups[g].layout;
        float* params = train_arena_f32(R, G->params_off, G->block_numel);
        float* ag = malloc((size_t)(L->total_numel > 0 ? L->total_numel : 1) * sizeof(float));
        const void** shards = calloc((size_t)L->nparams + 1, sizeof(void*));
        void** out = calloc((size_t)L->nparams + 1, sizeof(void*));
        int rc = 0;
        if (!params || !ag || !shards || !out) {
            train_fail(run, "rank %d: out of memory gathering group '%s'", R->rank, G->name);
            rt_comm_abort(comm, "out of memory gathering parameters");
            rc = 1;
        }
        if (!rc) {
            for (int i = 0; i < L->nparams; i++) {
                shards[i] = params + L->params[i].offset;
                out[i] = full ? full[G->params[i]] : NULL;
            }
            // The collective runs on a buffer of the communicator's backend (device memory
            // for the CUDA communicators); copy-in and copy-out stay on the host.
            size_t bytes = (size_t)(L->total_numel > 0 ? L->total_numel : 1) * sizeof(float);
            void* dev = rt_comm_buffer_alloc(comm, bytes);
            int st = rt_fsdp_all_gather_copy_in(L, shards, RT_F32, ag, RT_F32);
            if (st) rt_comm_abort(comm, L->error);
            else if (!dev) st = rt_comm_abort(comm, "out of memory for the gather buffer");
            if (!st) st = rt_comm_buffer_write(comm, dev, ag, bytes);
            if (!st) st = rt_fsdp_all_gather(L, comm, dev, RT_F32, NULL);
            if (!st) st = rt_comm_buffer_read(comm, ag, dev, bytes);
            if (dev) rt_comm_buffer_free(comm, dev);
            if (!st && R->rank == 0) st = rt_fsdp_all_gather_copy_out(L, ag, RT_F32, out);
            if (st) {
                train_fail(run, "rank %d: gathering the parameters of group '%s' failed: %s",
                           R->rank, G->name, L->error[0] ? L->error : rt_comm_last_error(comm));
                rc = 1;
            }
        }
        free(ag);
        free(shards);
        free(out);
        if (rc) return 1;
    }
    return 0;
}

int train_gather_full(train_run* run, rt_rank* R, const char* what, float*** full) {
    const rt_model* m = run->m;
    *full = NULL;
    if (R->rank == 0 && !(*full = train_alloc_full(m))) {
        train_fail(run, "%s: out of memory for the full parameters", what);
        if (m->shard > 1) rt_comm_abort(R->mesh.shard, "out of memory for the full parameters");
        return 1;
    }
    return R->rank < m->shard ? train_gather_params(run, R, *full) : 0;
}

// ---- shard ------------------------------------------------------------------------------

int train_shard_param(train_run* run, rt_rank* R, int p, const float* full, const char* what) {
    const rt_model* m = run->m;
    const int g = m->params[p].group;
    const rt_model_group* G = &m->groups[g];
    rt_fsdp_layout* L = &R->groups[g].layout;
    int i = 0;
    while (i < G->nparams && G->params[i] != p) i++;
    float* shards = train_arena_f32(R, G->params_off, G->block_numel);
    if (!shards || i == G->nparams) {
        train_fail(run, "%s: no shard of '%s' on rank %d", what, m->params[p].fqn, R->rank);
        return 1;
    }
    // The layout of parameter i alone: rt_fsdp_shard_params shards every parameter of its
    // layout.
    rt_fsdp_layout one = *L;
    one.nparams = 1;
    one.params = &L->params[i];
    const void* fullp[1] = {full};
    void* shardp[1] = {shards + L->params[i].offset};
    if (rt_fsdp_shard_params(&one, fullp, RT_F32, shardp) != 0) {
        train_fail(run, "%s: sharding '%s' failed: %s", what, m->params[p].fqn, one.error);
        return 1;
    }
    return 0;
}

// ---- save -------------------------------------------------------------------------------

static int write_safetensors(train_run* run, float* const* full, const char* path,
                             int64_t steps_completed) {
    const rt_model* m = run->m;
    size_t n = 0;
    for (int p = 0; p < m->nparams; p++) {
        n++;
        for (const char* const* a = m->params[p].aliases; a && *a; a++) n++;
    }
    rt_st_tensor* t = calloc(n ? n : 1, sizeof *t);
    if (!t) {
        train_fail(run, "--save %s: out of memory", path);
        return 1;
    }
    size_t k = 0;
    for (int p = 0; p < m->nparams; p++) {
        const rt_model_param* P = &m->params[p];
        t[k++] = (rt_st_tensor){P->fqn, RT_ST_F32, P->ndim, P->shape, full[p]};
        for (const char* const* a = P->aliases; a && *a; a++)
            t[k++] = (rt_st_tensor){*a, RT_ST_F32, P->ndim, P->shape, full[p]};
    }
    char step[32], seed[32];
    snprintf(step, sizeof step, "%" PRId64, steps_completed);
    snprintf(seed, sizeof seed, "%" PRIu64, run->seed);
    rt_st_meta meta[] = {{"format", "pt"},
                         {"fsdpgen_model", m->name ? m->name : ""},
                         {"fsdpgen_step", step},
                         {"fsdpgen_seed", seed}};
    char err[512];
    int rc = rt_st_write(path, t, n, meta, sizeof meta / sizeof meta[0], err, sizeof err);
    free(t);
    if (rc) {
        train_fail(run, "--save %s: %s", path, err);
        return 1;
    }
    return 0;
}

int train_save(train_run* run, rt_rank* R, const char* path, int64_t steps_completed) {
    const rt_model* m = run->m;
    char what[1024];
    snprintf(what, sizeof what, "--save %s", path);
    float** full;
    int rc = train_gather_full(run, R, what, &full);
    if (!rc && R->rank == 0) {
        rc = write_safetensors(run, full, path, steps_completed);
        if (!rc) printf("saved %d parameters to %s\n", m->nparams, path);
    }
    train_free_full(m, full);
    return train_agree(run, R) || rc;
}

// ---- load -------------------------------------------------------------------------------

// Is name a parameter name (fqn or alias) of m?
static int known_name(const rt_model* m, const char* name) {
    for (int p = 0; p < m->nparams; p++) {
        if (strcmp(m->params[p].fqn, name) == 0) return 1;
        for (const char* const* a = m->params[p].aliases; a && *a; a++)
            if (strcmp(*a, name) == 0) return 1;
    }
    return 0;
}

// Loads parameter P (under its fqn, or the first alias present) into full; every other of
// its names present in the file must hold the same values.
static int load_param(train_run* run, rt_st_file* f, const char* path, const rt_model_param* P,
                      float* full, size_t bytes) {
    char err[512], shape[128];
    const char* name = rt_st_find(f, P->fqn) ? P->fqn : NULL;
    for (const char* const* a = P->aliases; !name && a && *a; a++)
        if (rt_st_find(f, *a)) name = *a;
    if (!name) {
        rt_shape_str(P->ndim, P->shape, shape, sizeof shape);
        train_fail(run, "--load %s: parameter '%s' is missing (expected F32 %s%s)", path, P->fqn,
                   shape, P->aliases && P->aliases[0] ? ", or under a tied alias" : "");
        return 1;
    }
    if (rt_st_load(f, name, RT_ST_F32, P->ndim, P->shape, full, bytes, err, sizeof err) != 0) {
        train_fail(run, "--load: %s", err);
        return 1;
    }
    const char* names[2] = {P->fqn, NULL};
    for (const char* const* a = P->aliases; a && *a; a++) {
        names[1] = *a;
        for (int j = 0; j < 2; j++) {
            if (strcmp(names[j], name) == 0 || !rt_st_find(f, names[j])) continue;
            float* other = malloc(bytes ? bytes : 1);
            int rc = !other ? -1
                            : rt_st_load(f, names[j], RT_ST_F32, P->ndim, P->shape, other, bytes,
                                         err, sizeof err);
            int same = rc == 0 && memcmp(other, full, bytes) == 0;
            free(other);
            if (rc != 0) {
                train_fail(run, "--load: %s", other ? err : "out of memory");
                return 1;
            }
            if (!same) {
                train_fail(run, "--load %s: tied parameter '%s' and its alias '%s' hold different "
                                "values (they must be equal)", path, name, names[j]);
                return 1;
            }
        }
    }
    return 0;
}

int train_load(train_run* run, rt_rank* R, const char* path) {
    const rt_model* m = run->m;
    char err[512];
    rt_st_file* f = NULL;
    if (rt_st_open(path, &f, err, sizeof err) != 0) {
        train_fail(run, "--load: %s", err);
        return 1;
    }
    int rc = 0;
    // Strict, as load_state_dict: nothing unexpected in the file.
    for (size_t i = 0; i < rt_st_count(f) && !rc; i++) {
        const char* name = rt_st_at(f, i)->name;
        if (!known_name(m, name)) {
            train_fail(run, "--load %s: unexpected tensor '%s' (not a parameter of %s; expected "
                            "names such as '%s')", path, name, m->name,
                       m->nparams ? m->params[0].fqn : "");
            rc = 1;
        }
    }
    char what[1024];
    snprintf(what, sizeof what, "--load %s", path);
    for (int g = 0; g < m->ngroups && !rc; g++) {
        const rt_model_group* G = &m->groups[g];
        for (int i = 0; i < G->nparams && !rc; i++) {
            const rt_model_param* P = &m->params[G->params[i]];
            int64_t n = numel_of(P);
            size_t bytes = (size_t)n * sizeof(float);
            float* full = malloc(bytes ? bytes : 1);
            if (!full) {
                train_fail(run, "--load %s: out of memory for '%s'", path, P->fqn);
                rc = 1;
                break;
            }
            rc = load_param(run, f, path, P, full, bytes);
            if (!rc) rc = train_shard_param(run, R, G->params[i], full, what);
            free(full);
        }
    }
    rt_st_close(f);
    return rc;
}
