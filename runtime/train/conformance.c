// conformance.c — rt_conformance_main, the main() of a generated conformance test: runs the
// sharded model and its reference (same model, mesh {replicate = world, shard = 1}: full
// parameters on every rank, gradients all-reduced) on the threads backend with the same
// seed and synthetic data, and checks
//   events   every rank's step-1 FSDP events equal the planned ones, in order;
//   counts   every rank's collective counts equal the planned ones (nothing missing or extra);
//   eval     with an eval program (run after step 1 on step 1's first input): its events and
//            counts, its loss against the reference's, and step 2's events and counts after
//            it, as planned (the step after an eval's where the model has one);
//   parity   per-step mean loss and the full parameters after step 1 and after the last step
//            agree with the reference: |a - b| <= atol + rtol * |b|;
//   memory   every rank's measured arena peak equals the planned peak (the largest of the
//            step's, the eval's and the step after an eval's).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_kernels.h"
#include "rt_train.h"
#include "rt_units.h"
#include "train_internal.h"

// ---- capture ----------------------------------------------------------------------------

typedef struct conf_event {
    char state[32], kind[32];
    int group;
} conf_event;

// One program's events and collective counts on every rank.
typedef struct conf_record {
    conf_event** events;     // [world][nevents[r]]
    int* nevents;
    rt_step_count** counts;  // [world][ncounts[r]]
    int* ncounts;
} conf_record;

typedef struct conf_capture {
    conf_record step1;       // step 1
    conf_record eval;        // the eval program after step 1 (models with one)
    conf_record step2;       // step 2, after that eval
    double* eval_loss;       // [world] each rank's eval loss
    float** params_first;    // [nparams] full, after step 1
    float** params_last;     // [nparams] full, after the last step
} conf_capture;

static int64_t numel_of(const rt_model_param* p) {
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->shape[d];
    return n;
}

static float** alloc_params(const rt_model* m) {
    float** v = calloc((size_t)m->nparams + 1, sizeof(float*));
    for (int p = 0; v && p < m->nparams; p++)
        if (!(v[p] = calloc((size_t)numel_of(&m->params[p]) + 1, sizeof(float)))) return v;
    return v;
}

static void free_params(const rt_model* m, float** v) {
    if (!v) return;
    for (int p = 0; p < m->nparams; p++) free(v[p]);
    free(v);
}

static int record_init(conf_record* r, int world) {
    r->events = calloc((size_t)world, sizeof *r->events);
    r->nevents = calloc((size_t)world, sizeof *r->nevents);
    r->counts = calloc((size_t)world, sizeof *r->counts);
    r->ncounts = calloc((size_t)world, sizeof *r->ncounts);
    return r->events && r->nevents && r->counts && r->ncounts ? 0 : 1;
}

static void record_free(conf_record* r, int world) {
    for (int k = 0; k < world; k++) {
        if (r->events) free(r->events[k]);
        if (r->counts) free(r->counts[k]);
    }
    free(r->events);
    free(r->nevents);
    free(r->counts);
    free(r->ncounts);
}

static int capture_init(conf_capture* c, const rt_model* m) {
    memset(c, 0, sizeof *c);
    int bad = record_init(&c->step1, m->world) | record_init(&c->eval, m->world) |
              record_init(&c->step2, m->world);
    c->eval_loss = calloc((size_t)m->world, sizeof *c->eval_loss);
    c->params_first = alloc_params(m);
    c->params_last = alloc_params(m);
    int ok = !bad && c->eval_loss && c->params_first && c->params_last;
    for (int p = 0; ok && p < m->nparams; p++) ok = c->params_first[p] && c->params_last[p];
    return ok ? 0 : 1;
}

static void capture_free(conf_capture* c, const rt_model* m) {
    record_free(&c->step1, m->world);
    record_free(&c->eval, m->world);
    record_free(&c->step2, m->world);
    free(c->eval_loss);
    free_params(m, c->params_first);
    free_params(m, c->params_last);
}

// Copies the rank's events and counts of the program it just ran into rec.
static int record_rank(conf_record* rec, const rt_rank* R) {
    int r = R->rank, n = R->nevents > 0 ? R->nevents : 0;
    rec->events[r] = calloc((size_t)n + 1, sizeof(conf_event));
    rec->counts[r] = calloc((size_t)(R->ncounts > 0 ? R->ncounts : 0) + 1, sizeof(rt_step_count));
    if (!rec->events[r] || !rec->counts[r]) return 1;
    for (int i = 0; i < n; i++) {
        snprintf(rec->events[r][i].state, sizeof rec->events[r][i].state, "%s",
                 R->events[i].state ? R->events[i].state : "(null)");
        snprintf(rec->events[r][i].kind, sizeof rec->events[r][i].kind, "%s",
                 R->events[i].kind ? R->events[i].kind : "(null)");
        rec->events[r][i].group = R->events[i].group;
    }
    rec->nevents[r] = n;
    for (int i = 0; i < R->ncounts && i < RT_STEP_MAX_COUNTS; i++) rec->counts[r][i] = R->counts[i];
    rec->ncounts[r] = R->ncounts < RT_STEP_MAX_COUNTS ? R->ncounts : RT_STEP_MAX_COUNTS;
    return 0;
}

// After each step, on every rank: step 1's events and counts, then (models with an eval
// program) an eval on step 1's first input with its events, counts and loss, and step 2's
// events and counts (the eval must leave them as planned); the full parameters after
// step 1 and after the last step.
static void capture_hook(train_run* run, rt_rank* R, int64_t idx) {
    conf_capture* c = run->hook_arg;
    if (idx == 0) {
        if (record_rank(&c->step1, R)) {
            train_fail(run, "rank %d: out of memory capturing events", R->rank);
            return;
        }
        if (train_gather_params(run, R, c->params_first)) return;
        if (run->m->eval) {
            c->eval_loss[R->rank] = rt_step_eval(R);
            if (record_rank(&c->eval, R)) train_fail(run, "rank %d: out of memory capturing events", R->rank);
        }
    }
    if (idx == 1 && run->m->eval && record_rank(&c->step2, R))
        train_fail(run, "rank %d: out of memory capturing events", R->rank);
    if (idx == run->nsteps - 1) train_gather_params(run, R, c->params_last);
}

// ---- running ----------------------------------------------------------------------------

// Runs m for o's steps with the capture hook; returns 0 or 1 (the failure was printed).
static int run_model(const rt_model* m, const train_opts* o, train_run* run, conf_capture* c) {
    if (train_run_init(run, m, o)) return 1;
    run->quiet = 1;
    run->hook = capture_hook;
    run->hook_arg = c;
    if (capture_init(c, m)) {
        fprintf(stderr, "fsdpgen: out of memory for the conformance captures of %s\n", m->name);
        return 1;
    }
    return train_run_exec(run);
}

// The checks compare every rank's captures in this process, and MPI starts only once per
// process (the reference would be a second run): under mpirun a process holds one rank.
// Returns 0, or 1 after saying so.
static int not_all_ranks_here(const train_run* run) {
    if (run->here_count == 0 || run->here_count == run->m->world) return 0;
    fprintf(stderr, "fsdpgen: the conformance test runs all %d ranks in one process, but this "
                    "process ran %d (started by mpirun?); run it without mpirun\n",
            run->m->world, run->here_count);
    return 1;
}

// ---- checks -----------------------------------------------------------------------------

static int passed_, failed_;

static void verdict(int ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(int ok, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) passed_++;
    else failed_++;
}

static const char* group_name(const rt_model* m, int g) {
    return g >= 0 && g < m->ngroups ? m->groups[g].name : "(bad group index)";
}

// Every rank's recorded events (rec) against the planned ones; `what` names the program.
static void check_events(const rt_model* m, const rt_model_expect* e, const conf_record* rec, const char* what,
                         int verbose) {
    const rt_model_event* planned = e->events;
    const int nplanned = e->nevents;
    printf("events: %d planned in %s\n", nplanned, what);
    if (verbose) {
        for (int i = 0; i < rec->nevents[0]; i++)
            printf("%s %s \"%s\"\n", rec->events[0][i].state, rec->events[0][i].kind,
                   group_name(m, rec->events[0][i].group));
    }
    int bad_ranks = 0;
    char first[512] = "";
    for (int r = 0; r < m->world; r++) {
        const conf_event* ev = rec->events[r];
        int n = rec->nevents[r], diff = -1;
        for (int i = 0; i < n || i < nplanned; i++) {
            if (i >= n || i >= nplanned || strcmp(ev[i].state, planned[i].state) != 0 ||
                strcmp(ev[i].kind, planned[i].kind) != 0 ||
                strcmp(group_name(m, ev[i].group), planned[i].group) != 0) {
                diff = i;
                break;
            }
        }
        if (diff < 0) continue;
        bad_ranks++;
        if (first[0]) continue;
        char got[160], want[160];
        if (diff < n)
            snprintf(got, sizeof got, "%s %s \"%s\"", ev[diff].state, ev[diff].kind,
                     group_name(m, ev[diff].group));
        else
            snprintf(got, sizeof got, "nothing (only %d events recorded)", n);
        if (diff < nplanned)
            snprintf(want, sizeof want, "%s %s \"%s\"", planned[diff].state, planned[diff].kind,
                     planned[diff].group);
        else
            snprintf(want, sizeof want, "nothing (only %d events planned)", nplanned);
        snprintf(first, sizeof first, "rank %d event %d: got %s, planned %s", r, diff + 1, got, want);
    }
    if (bad_ranks) printf("events: first difference: %s\n", first);
    verdict(!bad_ranks, "events: %d of %d ranks recorded exactly the %d planned %s events",
            m->world - bad_ranks, m->world, nplanned, what);
}

static int find_count(const rt_step_count* v, int n, const char* what) {
    for (int i = 0; i < n; i++)
        if (strcmp(v[i].what, what) == 0) return i;
    return -1;
}

static void check_counts(const rt_model* m, const rt_model_expect* e, const conf_record* rec, const char* what) {
    const rt_model_count* planned = e->counts;
    const int nplanned = e->ncounts;
    printf("counts: planned in %s", what);
    for (int i = 0; i < nplanned; i++)
        printf("%s %s %d", i ? "," : "", planned[i].what, planned[i].count);
    printf("%s\n", nplanned ? "" : " none");
    int bad = 0;
    for (int r = 0; r < m->world; r++) {
        const rt_step_count* got = rec->counts[r];
        int n = rec->ncounts[r];
        for (int i = 0; i < nplanned; i++) {
            int j = find_count(got, n, planned[i].what);
            int v = j < 0 ? 0 : got[j].count;
            if (v != planned[i].count) {
                if (!bad++)
                    printf("counts: rank %d: %s %d, planned %d%s\n", r, planned[i].what, v,
                           planned[i].count, j < 0 ? " (missing)" : "");
            }
        }
        for (int j = 0; j < n; j++) {
            int known = 0;
            for (int i = 0; i < nplanned; i++) known |= strcmp(planned[i].what, got[j].what) == 0;
            if (!known && got[j].count != 0 && !bad++)
                printf("counts: rank %d: %s %d, not planned (extra)\n", r, got[j].what, got[j].count);
        }
    }
    verdict(!bad, "counts: every rank's %s collective counts equal the %d planned (%d "
                  "differences)", what, nplanned, bad);
}

typedef struct diff_stats {
    double max_abs, max_rel;
    int64_t n, bad;
    int64_t worst;  // index of the largest abs difference
} diff_stats;

static void diff_add(diff_stats* d, double a, double b, double rtol, double atol, int64_t idx) {
    double ad = fabs(a - b);
    double rel = fabs(b) > 0 ? ad / fabs(b) : (ad > 0 ? INFINITY : 0);
    int ok = ad <= atol + rtol * fabs(b);  // false for nan
    if (!(ad <= d->max_abs)) d->max_abs = ad, d->worst = idx;
    if (rel > d->max_rel || isnan(rel)) d->max_rel = rel;
    d->n++;
    if (!ok) d->bad++;
}

static void check_loss(const train_run* a, const train_run* b, double rtol, double atol, int verbose) {
    diff_stats d = {0, 0, 0, 0, -1};
    for (int64_t i = 0; i < a->nsteps; i++) {
        diff_add(&d, a->loss[i], b->loss[i], rtol, atol, i);
        if (verbose)
            printf("step %lld loss sharded %.9g reference %.9g\n", (long long)(i + 1), a->loss[i],
                   b->loss[i]);
    }
    printf("loss: step 1 sharded %.9g reference %.9g; step %lld sharded %.9g reference %.9g\n",
           a->loss[0], b->loss[0], (long long)a->nsteps, a->loss[a->nsteps - 1],
           b->loss[b->nsteps - 1]);
    verdict(!d.bad, "parity loss: %lld steps, %lld outside rtol %g atol %g (max abs diff %.3g, "
                    "max rel diff %.3g)", (long long)d.n, (long long)d.bad, rtol, atol, d.max_abs,
            d.max_rel);
}

// The eval's loss after step 1, mean over ranks, against the reference's.
static void check_eval_loss(const rt_model* m, const conf_capture* a, const conf_capture* b, double rtol,
                            double atol) {
    double sa = 0.0, sb = 0.0;
    for (int r = 0; r < m->world; r++) sa += a->eval_loss[r], sb += b->eval_loss[r];
    sa /= m->world, sb /= m->world;
    diff_stats d = {0, 0, 0, 0, -1};
    diff_add(&d, sa, sb, rtol, atol, 0);
    verdict(!d.bad, "parity eval loss after step 1: sharded %.9g reference %.9g (rtol %g atol %g)", sa, sb,
            rtol, atol);
}

static void check_params(const rt_model* m, float* const* a, float* const* b, const char* when,
                         double rtol, double atol) {
    diff_stats all = {0, 0, 0, 0, -1};
    int worst_p = -1;
    double worst = -1;
    for (int p = 0; p < m->nparams; p++) {
        diff_stats d = {0, 0, 0, 0, -1};
        int64_t n = numel_of(&m->params[p]);
        for (int64_t e = 0; e < n; e++) diff_add(&d, a[p][e], b[p][e], rtol, atol, e);
        if (d.bad && (worst_p < 0 || !(d.max_abs <= worst))) worst_p = p, worst = d.max_abs;
        if (!(d.max_abs <= all.max_abs)) all.max_abs = d.max_abs;
        if (d.max_rel > all.max_rel || isnan(d.max_rel)) all.max_rel = d.max_rel;
        all.n += d.n;
        all.bad += d.bad;
    }
    if (worst_p >= 0)
        printf("params %s: largest difference in '%s' (max abs diff %.3g)\n", when,
               m->params[worst_p].fqn, worst);
    verdict(!all.bad, "parity params %s: %d tensors, %lld elements, %lld outside rtol %g atol %g "
                      "(max abs diff %.3g, max rel diff %.3g)", when, m->nparams,
            (long long)all.n, (long long)all.bad, rtol, atol, all.max_abs, all.max_rel);
}

// One program's events and counts.
static void check_program(const rt_model* m, const rt_model_expect* e, const conf_record* rec, const char* what,
                          int verbose) {
    check_events(m, e, rec, what, verbose);
    check_counts(m, e, rec, what);
}

static void check_memory(const rt_model* m, const train_run* run) {
    size_t planned = m->expect.peak;
    if (m->eval && m->eval_expect.peak > planned) planned = m->eval_expect.peak;
    if (m->step_after_eval && m->after_eval_expect.peak > planned) planned = m->after_eval_expect.peak;
    int bad = 0;
    for (int r = 0; r < m->world; r++)
        if (run->peak[r] != planned) {
            if (!bad)
                printf("memory: rank %d measured peak %zu bytes (%s), planned %zu\n", r, run->peak[r],
                       rt_units_bytes(run->peak[r]).s, planned);
            bad++;
        }
    verdict(!bad, "memory: %d of %d ranks measured exactly the planned peak of %zu bytes, %s (arena "
                  "%zu bytes)", m->world - bad, m->world, planned, rt_units_bytes(planned).s,
            m->arena_bytes);
}

// The reference must be the same model: same parameters, world and inputs.
static const char* reference_mismatch(const rt_model* s, const rt_model* r) {
    if (r->world != s->world) return "world size";
    if (r->nparams != s->nparams) return "number of parameters";
    for (int p = 0; p < s->nparams; p++) {
        if (strcmp(s->params[p].fqn, r->params[p].fqn) != 0) return "parameter names";
        if (numel_of(&s->params[p]) != numel_of(&r->params[p])) return "parameter shapes";
    }
    if (r->tokens != s->tokens || train_input_numel(r) != train_input_numel(s) ||
        r->n_forward != s->n_forward || r->n_backward != s->n_backward || r->vocab != s->vocab)
        return "inputs";
    return NULL;
}

// ---- main -------------------------------------------------------------------------------

int rt_conformance_main(const rt_model* sharded, const rt_model* reference, int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!sharded || !reference || !sharded->step || !reference->step) {
        fprintf(stderr, "fsdpgen: internal error: conformance test without both models\n");
        return 1;
    }
    train_opts o;
    int rc = train_parse_args(sharded, 1, argc, argv, &o);
    if (rc == -1) return 0;
    if (rc) return 2;
    const char* why = reference_mismatch(sharded, reference);
    if (why) {
        fprintf(stderr, "fsdpgen: internal error: the reference model of %s differs in its %s\n",
                sharded->name, why);
        return 1;
    }
    double rtol = 1e-5, atol = 1e-6;
    for (int g = 0; g < sharded->ngroups; g++)
        if (sharded->groups[g].param_dtype != RT_F32 || sharded->groups[g].reduce_dtype != RT_F32)
            rtol = 1e-3;
    printf("conformance: %s (%s): world %d, sharded mesh %d x %d vs reference mesh %d x %d, %lld "
           "steps, seed %llu\n", sharded->name, sharded->spec_file ? sharded->spec_file : "?",
           sharded->world, sharded->replicate, sharded->shard, reference->replicate,
           reference->shard, (long long)o.steps, (unsigned long long)o.seed);

    train_run a, b;
    conf_capture ca, cb;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&ca, 0, sizeof ca);
    memset(&cb, 0, sizeof cb);
    int ra = run_model(sharded, &o, &a, &ca);
    if (a.m && not_all_ranks_here(&a)) {
        rc = 2;  // said why; no check ran
    } else if (ra || run_model(reference, &o, &b, &cb)) {
        verdict(0, "run: the %s model did not complete %lld steps (see the error above)",
                ra ? "sharded" : "reference", (long long)o.steps);
    } else {
        const rt_model* m = sharded;
        check_program(m, &m->expect, &ca.step1, "step-1", o.verbose);
        if (m->eval) {
            check_program(m, &m->eval_expect, &ca.eval, "eval", o.verbose);
            check_eval_loss(m, &ca, &cb, rtol, atol);
            if (o.steps > 1 && m->step_after_eval)  // FSDP2's prefetch after an eval differs
                check_program(m, &m->after_eval_expect, &ca.step2, "step-2 (the step after an eval)", 0);
            else if (o.steps > 1)
                check_program(m, &m->expect, &ca.step2, "step-2 (after the eval)", 0);
        } else {
            printf("eval: not checked: %s\n", m->eval_unavailable ? m->eval_unavailable
                                                                  : "the model has no eval program");
        }
        check_loss(&a, &b, rtol, atol, o.verbose);
        check_params(sharded, ca.params_first, cb.params_first, "after step 1", rtol, atol);
        char when[48];
        snprintf(when, sizeof when, "after step %lld", (long long)o.steps);
        check_params(sharded, ca.params_last, cb.params_last, when, rtol, atol);
        check_memory(sharded, &a);
    }
    capture_free(&ca, sharded);
    capture_free(&cb, reference);
    if (a.m) train_run_free(&a);
    if (b.m) train_run_free(&b);
    if (rc == 2) return 2;
    printf("%d passed, %d failed\n", passed_, failed_);
    return failed_ ? 1 : 0;
}
