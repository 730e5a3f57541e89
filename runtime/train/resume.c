// resume.c — --checkpoint / --resume: each rank saves its sharded fp32 parameters and
// optimizer state, plus the step and seed, into a new ROOT/step_N directory beside the
// older ones (rt_checkpoint.h: stage / save_rank / finish / publish with barriers between,
// so a save that fails or is killed never costs the last good checkpoint), keeping the
// newest --keep-checkpoints; --resume ROOT loads the newest complete one. Since the data
// offset, the synthetic data and the dropout streams depend only on the step index,
// restoring the step makes the continued run bit-identical to an uninterrupted one. A
// model fingerprint blob rejects a checkpoint written by another model or plan.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rt_checkpoint.h"
#include "rt_train.h"
#include "train_internal.h"

// ---- fingerprint ------------------------------------------------------------------------

static uint64_t mix(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t mix_str(uint64_t h, const char* s) {
    for (; s && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return mix(h, 0);
}

// What a checkpoint's shards depend on: the names, shapes and layout of the parameters,
// the mesh and the optimizer's state buffers (not the hyperparameters; a frozen group has
// none, a group with frozen parameters the others' alone). whole_state: as it was when such
// a group kept state for all of its parameters (legacy_state).
static int64_t model_fingerprint(const rt_model* m, int whole_state) {
    uint64_t h = mix_str(0xcbf29ce484222325ull, m->name);
    h = mix(mix(mix(h, (uint64_t)m->world), (uint64_t)m->replicate), (uint64_t)m->shard);
    h = mix(mix(h, (uint64_t)m->optim.kind), (uint64_t)m->optim.nstates);
    for (int p = 0; p < m->nparams; p++) {
        const rt_model_param* P = &m->params[p];
        h = mix(mix(mix_str(h, P->fqn), (uint64_t)P->group), (uint64_t)P->block_offset);
        for (int d = 0; d < P->ndim; d++) h = mix(h, (uint64_t)P->shape[d]);
    }
    for (int g = 0; g < m->ngroups; g++) {
        h = mix(h, (uint64_t)m->groups[g].block_numel);
        if (m->groups[g].frozen) h = mix(h, 1);  // (models without frozen groups keep theirs)
        if (m->groups[g].frozen_numel && m->optim.nstates > 0 && !whole_state)
            h = mix(mix(h, 2), (uint64_t)m->groups[g].frozen_numel);
    }
    return (int64_t)h;
}

// ---- blobs ------------------------------------------------------------------------------

typedef struct ckpt_blobs {
    int n;
    char (*names)[32];
    rt_ckpt_slot* slots;  // also used as blobs (same fields)
    int64_t fingerprint;
} ckpt_blobs;

static void blobs_free(ckpt_blobs* b) {
    free(b->names);
    free(b->slots);
}

// The blob list of this rank: "model" (fingerprint), then per group g "gG.params" and
// "gG.stateK" (none for a frozen group; the trainable parameters' alone, rt_model_grad_numel)
// pointing into the arena.
static int blobs_init(train_run* run, rt_rank* R, ckpt_blobs* b) {
    const rt_model* m = run->m;
    int nstates = m->optim.nstates > 0 ? m->optim.nstates : 0;
    memset(b, 0, sizeof *b);
    b->n = 1;
    for (int g = 0; g < m->ngroups; g++) b->n += 1 + (m->groups[g].frozen ? 0 : nstates);
    b->names = calloc((size_t)b->n, sizeof *b->names);
    b->slots = calloc((size_t)b->n, sizeof *b->slots);
    if (!b->names || !b->slots) {
        blobs_free(b);
        train_fail(run, "rank %d: out of memory for the checkpoint table", R->rank);
        return 1;
    }
    int k = 0;
    snprintf(b->names[k], sizeof b->names[k], "model");
    b->slots[k] = (rt_ckpt_slot){b->names[k], RT_ST_I64, 1, &b->fingerprint};
    k++;
    for (int g = 0; g < m->ngroups; g++) {
        const rt_model_group* G = &m->groups[g];
        const int64_t sn = rt_model_grad_numel(G);
        const int states = G->frozen ? 0 : nstates;
        float* params = train_arena_f32(R, G->params_off, G->block_numel);
        float* state = train_arena_f32(R, G->state_off, sn * states);
        if (!params || !state) {
            blobs_free(b);
            train_fail(run, "rank %d: the persistent buffers of group '%s' lie outside the arena",
                       R->rank, G->name);
            return 1;
        }
        snprintf(b->names[k], sizeof b->names[k], "g%d.params", g);
        b->slots[k] = (rt_ckpt_slot){b->names[k], RT_ST_F32, (uint64_t)G->block_numel, params};
        k++;
        for (int s = 0; s < states; s++) {
            snprintf(b->names[k], sizeof b->names[k], "g%d.state%d", g, s);
            b->slots[k] = (rt_ckpt_slot){b->names[k], RT_ST_F32, (uint64_t)sn, state + s * sn};
            k++;
        }
    }
    return 0;
}

// ---- save -------------------------------------------------------------------------------

int train_checkpoint_save(train_run* run, rt_rank* R, const char* root, int64_t steps_completed) {
    const rt_model* m = run->m;
    const uint64_t step = (uint64_t)steps_completed;
    char err[768], dir[4096];
    if (rt_ckpt_stage_path(root, step, dir, sizeof dir) != 0) {
        train_fail(run, "--checkpoint %s: the path is too long", root);
        train_agree(run, R);
        return 1;
    }
    if (R->rank == 0 && rt_ckpt_stage(root, step, err, sizeof err) != 0)
        train_fail(run, "--checkpoint %s: %s", root, err);
    if (rt_rank_pull(R)) train_fail(run, "rank %d: copying the state from the device failed", R->rank);
    if (train_agree(run, R)) goto failed;
    ckpt_blobs b;
    if (blobs_init(run, R, &b) == 0) {
        b.fingerprint = model_fingerprint(m, 0);
        rt_ckpt_blob* blobs = malloc((size_t)b.n * sizeof *blobs);
        if (!blobs) {
            train_fail(run, "rank %d: out of memory for the checkpoint table", R->rank);
        } else {
            for (int i = 0; i < b.n; i++)
                blobs[i] = (rt_ckpt_blob){b.slots[i].name, b.slots[i].dtype, b.slots[i].count,
                                          b.slots[i].data};
            rt_ckpt_state st = {step, step, run->seed, 0};
            if (rt_ckpt_save_rank(dir, m->world, R->rank, &st, blobs, (size_t)b.n, err,
                                  sizeof err) != 0)
                train_fail(run, "--checkpoint %s: rank %d: %s", root, R->rank, err);
            free(blobs);
        }
        blobs_free(&b);
    }
    if (train_agree(run, R)) goto failed;
    // Every rank file is durable: mark the staging directory complete and switch to it.
    if (R->rank == 0 && (rt_ckpt_finish(dir, m->world, step, err, sizeof err) != 0 ||
                         rt_ckpt_publish(root, step, (int)run->o->keep_checkpoints, err, sizeof err) != 0))
        train_fail(run, "--checkpoint %s: %s", root, err);
    if (train_agree(run, R)) goto failed;
    if (R->rank == 0 && !run->quiet) {
        rt_ckpt_step_path(root, step, dir, sizeof dir);
        printf("checkpoint: step %" PRId64 " saved to %s\n", steps_completed, dir);
    }
    return 0;
failed:
    // The ranks are past their writes (the agreement is collective): drop the partial save,
    // which also frees the space a full disk needs. A published one is left as it is.
    if (R->rank == 0) rt_ckpt_unstage(root, step);
    return 1;
}

// ---- load -------------------------------------------------------------------------------

// --resume ROOT: the newest complete checkpoint under it, its world size and step.
static int find_resume(train_run* run) {
    const rt_model* m = run->m;
    const char* root = run->o->resume;
    char err[768];
    int world = 0;
    uint64_t s = 0;
    int pr = rt_ckpt_find(root, run->resume_dir, sizeof run->resume_dir, &world, &s, err, sizeof err);
    if (pr < 0) {
        fprintf(stderr, "fsdpgen: --resume %s: %s\n", root, err);
        return 1;
    }
    if (pr == 0) {
        fprintf(stderr, "fsdpgen: --resume %s: no complete checkpoint there (neither %s/COMPLETE nor "
                        "a %s/step_N directory with one: no save finished, or this is not a "
                        "checkpoint directory)\n", root, root, root);
        return 1;
    }
    if (world != m->world) {
        fprintf(stderr, "fsdpgen: --resume %s: the checkpoint %s was saved with world size %d, %s "
                        "runs %d ranks (resharding a checkpoint is not supported)\n",
                root, run->resume_dir, world, m->name, m->world);
        return 1;
    }
    if (s > (uint64_t)INT64_MAX / 2) {
        fprintf(stderr, "fsdpgen: --resume %s: step %llu is out of range\n", root,
                (unsigned long long)s);
        return 1;
    }
    run->start_step = (int64_t)s;
    return 0;
}

// --checkpoint ROOT must not already hold a checkpoint newer than this run's start: its
// saves would land below it, and a later --resume ROOT would pick the stale newer one.
static int check_checkpoint_root(const train_run* run) {
    const char* root = run->o->checkpoint;
    struct stat st;
    if (stat(root, &st) == 0 && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "fsdpgen: --checkpoint %s: it exists and is not a directory (give a "
                        "directory, new or one of checkpoints)\n", root);
        return 1;
    }
    char err[768], dir[4096];
    uint64_t s = 0;
    int pr = rt_ckpt_find(root, dir, sizeof dir, NULL, &s, err, sizeof err);
    if (pr < 0) {
        fprintf(stderr, "fsdpgen: --checkpoint %s: %s\n", root, err);
        return 1;
    }
    if (pr == 1 && s > (uint64_t)run->start_step) {
        fprintf(stderr, "fsdpgen: --checkpoint %s: it holds a checkpoint of step %llu (%s), newer "
                        "than this run's start at step %lld; continue it with --resume %s, or "
                        "give another directory\n", root, (unsigned long long)s, dir,
                (long long)run->start_step, root);
        return 1;
    }
    return 0;
}

int train_checkpoint_prepare(train_run* run) {
    if (run->o->resume && find_resume(run)) return 1;
    if (run->o->checkpoint && check_checkpoint_root(run)) return 1;
    return 0;
}

// Whether this rank's file in dir is this model's checkpoint as written when a group with
// frozen parameters kept optimizer state for all of them (block_numel per buffer), which
// this binary cannot continue: loaded into scratch, to say so rather than that a blob's size
// differs.
static int legacy_state(train_run* run, rt_rank* R, const char* dir) {
    const rt_model* m = run->m;
    int mixed = 0;
    for (int g = 0; g < m->ngroups; g++) mixed |= m->groups[g].frozen_numel > 0;
    if (!mixed || m->optim.nstates <= 0) return 0;
    ckpt_blobs b;
    if (blobs_init(run, R, &b) != 0) return 0;
    int64_t scratch_n = 1;  // each state blob in turn
    for (int g = 0; g < m->ngroups; g++)
        if (m->groups[g].block_numel > scratch_n) scratch_n = m->groups[g].block_numel;
    float* scratch = malloc((size_t)scratch_n * sizeof *scratch);
    int found = 0;
    if (scratch) {
        // the slots of blobs_init: "model", then per group its params and (not frozen) states
        for (int g = 0, k = 1; g < m->ngroups; g++) {
            k++;
            for (int s = 0; s < (m->groups[g].frozen ? 0 : m->optim.nstates); s++, k++)
                b.slots[k].count = (uint64_t)m->groups[g].block_numel, b.slots[k].data = scratch;
        }
        char err[512];
        found = rt_ckpt_load_rank(dir, m->world, R->rank, NULL, b.slots, (size_t)b.n, err,
                                  sizeof err) == 0 &&
                b.fingerprint == model_fingerprint(m, 1);
    }
    free(scratch);
    blobs_free(&b);
    return found;
}

int train_checkpoint_load(train_run* run, rt_rank* R) {
    const char* dir = run->resume_dir;
    const rt_model* m = run->m;
    ckpt_blobs b;
    if (blobs_init(run, R, &b) != 0) return 1;
    char err[512];
    rt_ckpt_state st;
    int rc = 0;
    if (rt_ckpt_load_rank(dir, m->world, R->rank, &st, b.slots, (size_t)b.n, err, sizeof err) != 0) {
        if (legacy_state(run, R, dir))
            train_fail(run, "--resume %s: the checkpoint holds optimizer state for %s's frozen "
                            "parameters too, as fsdpgen wrote it before a group with frozen "
                            "parameters kept state for its trainable ones alone; this binary "
                            "cannot continue it", dir, m->name);
        else
            train_fail(run, "--resume %s: rank %d: %s (was it written by this model's binary?)",
                       dir, R->rank, err);
        rc = 1;
    } else if (b.fingerprint != model_fingerprint(m, 0)) {
        train_fail(run, "--resume %s: the checkpoint was saved by a different model or plan "
                        "(parameter names, shapes or sharding differ from %s's)", dir, m->name);
        rc = 1;
    } else if (st.step != (uint64_t)run->start_step || st.data_cursor != st.step) {
        train_fail(run, "--resume %s: rank %d holds step %llu (data cursor %llu), expected step "
                        "%lld", dir, R->rank, (unsigned long long)st.step,
                   (unsigned long long)st.data_cursor, (long long)run->start_step);
        rc = 1;
    } else if (run->o->seed_set && st.rng_seed != run->o->seed) {
        train_fail(run, "--resume %s: the checkpoint was trained with seed %llu, not --seed %llu "
                        "(the data and dropout streams would differ); drop --seed to continue it",
                   dir, (unsigned long long)st.rng_seed, (unsigned long long)run->o->seed);
        rc = 1;
    } else {
        // Every rank sets it (each process has its own run under mpirun; the checkpoint's
        // ranks all hold the same seed); read only after the agreement that follows setup.
        pthread_mutex_lock(&run->mu);
        run->seed = st.rng_seed;
        pthread_mutex_unlock(&run->mu);
    }
    blobs_free(&b);
    return rc;
}
