// driver.c — one training run: the model's ranks (rt_step_launch: threads, GPUs, or one
// process per rank under mpirun), each set up with rt_rank_init, its parameters
// initialized / loaded / resumed, then the step loop (inputs, the generated step, the loss
// mean over ranks and backward items, the step line, divergence check, periodic
// checkpoints), then --save and --checkpoint, then the summary line (perf.c). Which
// process prints the run's lines and where each process writes its trace is decided in
// "processes" below. rt_train_main (the generated binary's main) is at the end.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rt_kernels.h"
#include "rt_safetensors.h"
#include "rt_train.h"
#include "train_internal.h"

// ---- shared helpers ---------------------------------------------------------------------

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void train_fail(train_run* run, const char* fmt, ...) {
    pthread_mutex_lock(&run->mu);
    if (!run->failed) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        fprintf(stderr, "fsdpgen: %s\n", msg);
        fflush(stderr);
    }
    run->failed = 1;
    pthread_mutex_unlock(&run->mu);
}

// Every rank's `n` int64 values (this rank's in mine) and failure flag gathered on every
// rank: afterwards run->xhost[R->rank][r * (n + 1) + k] holds rank r's value k. Returns 1
// on every rank when any rank failed. Goes through the communicator (a buffer of its
// backend: device memory for NCCL), so it works whether the ranks share this process or
// not (mpirun).
static int exchange(train_run* run, rt_rank* R, const void* mine, int n) {
    const int W = R->world, blk = n + 1;
    int64_t* host = run->xhost[R->rank];
    pthread_mutex_lock(&run->mu);
    int failed = run->failed;
    pthread_mutex_unlock(&run->mu);
    if (n) memcpy(host, mine, (size_t)n * sizeof *host);
    host[n] = failed;
    void* x = run->xbuf[R->rank];
    size_t bytes = (size_t)blk * sizeof(int64_t);
    int st = rt_comm_buffer_write(R->comm, (char*)x + (size_t)R->rank * bytes, host, bytes);
    if (!st) st = rt_comm_all_gather(R->comm, (char*)x + (size_t)R->rank * bytes, x, blk, RT_I64, NULL);
    if (!st) st = rt_comm_buffer_read(R->comm, host, x, (size_t)W * bytes);
    if (st) failed = 1;  // rt_comm printed why
    for (int r = 0; !st && r < W; r++)
        if (host[(size_t)r * blk + n]) failed = 1;
    if (failed) {
        pthread_mutex_lock(&run->mu);
        run->failed = 1;
        pthread_mutex_unlock(&run->mu);
    }
    return failed;
}

int train_agree(train_run* run, rt_rank* R) { return exchange(run, R, NULL, 0); }

int train_rank_attach(train_run* run, rt_rank* R) {
    size_t bytes = (size_t)R->world * ((size_t)run->m->n_backward + 1) * sizeof(int64_t);
    run->xhost[R->rank] = malloc(bytes);
    run->xbuf[R->rank] = rt_comm_buffer_alloc(R->comm, bytes);
    if (run->xhost[R->rank] && run->xbuf[R->rank]) return 0;
    train_fail(run, "rank %d: out of memory for the driver's exchange buffer", R->rank);
    rt_comm_abort(R->comm, "out of memory");
    return 1;
}

void train_rank_detach(train_run* run, rt_rank* R) {
    free(run->xhost[R->rank]);
    if (run->xbuf[R->rank]) rt_comm_buffer_free(R->comm, run->xbuf[R->rank]);
    run->xhost[R->rank] = NULL;
    run->xbuf[R->rank] = NULL;
}

float* train_arena_f32(rt_rank* R, size_t off, int64_t numel) {
    if (off % sizeof(float) != 0) {
        fprintf(stderr, "fsdpgen: rank %d: persistent buffer at byte %zu is not fp32-aligned "
                        "(generated plan is inconsistent)\n", R->rank, off);
        return NULL;
    }
    return rt_rank_host(R, off, (size_t)(numel > 0 ? numel : 0) * sizeof(float));
}

// ---- processes --------------------------------------------------------------------------
// One process holds every rank (CPU threads, a thread per GPU, --local), or each process
// holds one (mpirun; runtime/comm/mpi.c). Every process runs rt_train_main, so the run's
// lines (header, steps, checkpoints, trace and bench summaries) come from the process that
// holds rank 0 only, while errors are printed by whichever process hits them. Each
// process writes the trace of its own ranks to its own file.

int train_path_tag(const char* path, const char* tag, char* out, size_t cap) {
    const char* base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char* dot = strrchr(base, '.');
    // A leading dot names a hidden file, not an extension (".trace" has none).
    size_t stem = dot && dot != base ? (size_t)(dot - path) : strlen(path);
    int n = snprintf(out, cap, "%.*s%s%s", (int)stem, path, tag, path + stem);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int train_trace_path(const char* path, int first, char* out, size_t cap) {
    if (first == 0) {
        int n = snprintf(out, cap, "%s", path);
        return n < 0 || (size_t)n >= cap ? -1 : 0;
    }
    char tag[32];
    snprintf(tag, sizeof tag, ".rank%d", first);
    return train_path_tag(path, tag, out, cap);
}

int train_holds_rank0(const train_run* run) { return run->here_count > 0 && run->here_first == 0; }

// Called by rank_main on each rank it starts in this process.
static void note_rank_here(train_run* run, int rank) {
    pthread_mutex_lock(&run->mu);
    if (run->here_count == 0 || rank < run->here_first) run->here_first = rank;
    run->here_count++;
    pthread_mutex_unlock(&run->mu);
}

int train_write_trace(train_run* run, const char* path) {
    if (!run->trace || run->here_count == 0) return 0;  // no rank ran here: nothing to write
    char mine[4096], err[512];
    if (train_trace_path(path, run->here_first, mine, sizeof mine) != 0) {
        fprintf(stderr, "fsdpgen: --trace %s: the path of rank %d's trace is too long (at most %zu "
                        "bytes)\n", path, run->here_first, sizeof mine - 1);
        return 1;
    }
    if (rt_trace_write(run->trace, mine, err, sizeof err) != 0) {
        fprintf(stderr, "fsdpgen: --trace %s: %s\n", mine, err);
        return 1;
    }
    unsigned long long dropped = (unsigned long long)rt_trace_dropped(run->trace);
    if (!train_holds_rank0(run)) {
        if (dropped)
            fprintf(stderr, "fsdpgen: --trace %s: %llu events dropped (the per-rank buffer was full; "
                            "trace fewer steps)\n", mine, dropped);
        return 0;
    }
    printf("trace: %llu events written to %s", (unsigned long long)rt_trace_recorded(run->trace), mine);
    const int W = run->m->world, next = run->here_count;  // this process: ranks 0..next-1
    if (next < W) {
        char other[4096];
        if (train_path_tag(path, ".rank<r>", other, sizeof other) != 0) snprintf(other, sizeof other, "%s", "?");
        if (next + 1 == W) printf("; rank %d writes its own to %s", next, other);
        else printf("; ranks %d..%d write theirs to %s, one file per process", next, W - 1, other);
    }
    if (dropped)
        printf(" (%llu dropped: the per-rank buffer was full; trace fewer steps)", dropped);
    printf("\n");
    return 0;
}

// ---- the run ----------------------------------------------------------------------------

int train_run_init(train_run* run, const rt_model* m, const train_opts* o) {
    memset(run, 0, sizeof *run);
    run->m = m;
    run->o = o;
    run->seed = o->seed;
    run->nsteps = o->steps;
    pthread_mutex_init(&run->mu, NULL);
    size_t n = (size_t)run->nsteps;
    run->xhost = calloc((size_t)m->world, sizeof *run->xhost);
    run->xbuf = calloc((size_t)m->world, sizeof *run->xbuf);
    run->loss = calloc(n, sizeof(double));
    run->step_ms = calloc(n, sizeof(double));
    run->comm_ms = calloc(n, sizeof(double));
    run->optim_ms = calloc(n, sizeof(double));
    run->peak = calloc((size_t)m->world, sizeof(size_t));
    if (!run->xhost || !run->xbuf || !run->loss || !run->step_ms || !run->comm_ms ||
        !run->optim_ms || !run->peak) {
        fprintf(stderr, "fsdpgen: out of memory for the bookkeeping of %lld steps\n",
                (long long)run->nsteps);
        train_run_free(run);
        run->m = NULL;
        return 1;
    }
    return 0;
}

void train_run_free(train_run* run) {
    free(run->xhost);
    free(run->xbuf);
    run->xhost = NULL;
    run->xbuf = NULL;
    free(run->loss);
    free(run->step_ms);
    free(run->comm_ms);
    free(run->optim_ms);
    free(run->peak);
    run->loss = run->step_ms = run->comm_ms = run->optim_ms = NULL;
    run->peak = NULL;
    pthread_mutex_destroy(&run->mu);
}

// ---- per-rank buffers -------------------------------------------------------------------

// The step's input and loss arrays. rt_rank_init may have set some itself; the driver
// fills (and frees) only those it allocates.
typedef struct rank_bufs {
    int own_tokens, own_targets, own_inputs, own_losses;
} rank_bufs;

static void** alloc_items(int n, size_t bytes) {
    void** v = calloc((size_t)n, sizeof(void*));
    if (!v) return NULL;
    for (int a = 0; a < n; a++)
        if (!(v[a] = calloc(bytes ? bytes : 1, 1))) {
            for (int b = 0; b < a; b++) free(v[b]);
            free(v);
            return NULL;
        }
    return v;
}

static void free_items(void** v, int n) {
    if (!v) return;
    for (int a = 0; a < n; a++) free(v[a]);
    free(v);
}

static int rank_alloc(train_run* run, rt_rank* R, rank_bufs* b) {
    const rt_model* m = run->m;
    size_t numel = (size_t)train_input_numel(m);
    memset(b, 0, sizeof *b);
    if (m->tokens) {
        if (!R->tokens && (R->tokens = (int32_t**)alloc_items(m->n_forward, numel * sizeof(int32_t))))
            b->own_tokens = 1;
        if (!R->targets && (R->targets = (int32_t**)alloc_items(m->n_forward, numel * sizeof(int32_t))))
            b->own_targets = 1;
        if (!R->tokens || !R->targets) goto oom;
    } else {
        if (!R->inputs && (R->inputs = (float**)alloc_items(m->n_forward, numel * sizeof(float))))
            b->own_inputs = 1;
        if (!R->inputs) goto oom;
    }
    if (!R->losses && (R->losses = calloc((size_t)m->n_backward, sizeof(double)))) b->own_losses = 1;
    if (!R->losses) goto oom;
    return 0;
oom:
    train_fail(run, "rank %d: out of memory for the step inputs (%d x %zu elements)", R->rank,
               m->n_forward, numel);
    return 1;
}

static void rank_release(train_run* run, rt_rank* R, const rank_bufs* b) {
    int n = run->m->n_forward;
    if (b->own_tokens) free_items((void**)R->tokens, n), R->tokens = NULL;
    if (b->own_targets) free_items((void**)R->targets, n), R->targets = NULL;
    if (b->own_inputs) free_items((void**)R->inputs, n), R->inputs = NULL;
    if (b->own_losses) free(R->losses), R->losses = NULL;
}

// ---- the step loop ----------------------------------------------------------------------

static int should_log(const train_run* run, int64_t i) {
    int64_t n = run->start_step + i + 1;  // 1-based step number
    return i == 0 || i + 1 == run->nsteps || n % run->o->log_every == 0;
}

static int has_lr_schedule(const rt_model* m) {
    return m->n_optimizer > 0 && (m->lr_schedule.warmup_steps > 0 || m->lr_schedule.decay != RT_LR_CONSTANT);
}

// Whether an eval follows step index i: after every --val-every-th step and the last;
// with only --val-data, after the last.
static int eval_due(const train_run* run, int64_t i) {
    const train_opts* o = run->o;
    if (!o->val_every && !o->val_data) return 0;
    return i + 1 == run->nsteps || (o->val_every && (run->start_step + i + 1) % o->val_every == 0);
}

// Marks the run diverged (every rank sees the same mean, so each marks it: under mpirun
// each process has its own run and must exit 1); rank 0 says why.
static void diverged(train_run* run, rt_rank* R, int64_t s, const char* what, double mean) {
    if (R->rank == 0)
        fprintf(stderr, "fsdpgen: step %lld: %s is %s (training diverged; lower the learning rate "
                        "or check the data)\n", (long long)(s + 1), what, isnan(mean) ? "nan" : "inf");
    pthread_mutex_lock(&run->mu);
    run->diverged = 1;
    pthread_mutex_unlock(&run->mu);
}

// The eval program over the validation batches after step s: prints `step N val loss X`,
// X the mean over ranks and batches. Returns 0, or 1 when the run failed or diverged.
static int rank_eval(train_run* run, rt_rank* R, int64_t s) {
    const int64_t W = run->m->world, K = run->o->val_batches;
    const double ts = run->trace ? rt_trace_now_us(run->trace) : 0.0;
    const double t0 = now_s();
    double sum = 0.0;
    for (int64_t v = 0; v < K; v++) {
        train_feed_val(run, R, v);
        sum += rt_step_eval(R);
    }
    if (exchange(run, R, &sum, 1)) return 1;
    const double dt = now_s() - t0;
    double total = 0.0;
    for (int64_t r = 0; r < W; r++) {  // in rank order: every rank gets the same double
        double v;
        memcpy(&v, &run->xhost[R->rank][r * 2], sizeof v);
        total += v;
    }
    const double mean = total / (double)(W * K);
    if (run->trace)
        rt_trace_complete(run->trace, R->rank, RT_TRACE_COMPUTE, "eval", "step", ts, dt * 1e6, NULL, NULL);
    if (R->rank == 0 && (!run->best_val_step || mean < run->best_val)) {
        run->best_val = mean;
        run->best_val_step = s + 1;
    }
    if (R->rank == 0 && !run->quiet)
        printf("step %lld val loss %.6f | %lld batches | %.2f ms\n", (long long)(s + 1), mean, (long long)K,
               dt * 1e3);
    if (isfinite(mean)) return 0;
    diverged(run, R, s, "the validation loss", mean);
    return 1;
}

// --logits: the eval program once more, on validation batch 0, with rank 0's logits copied
// out by rt_step_eval_logits (it changes nothing, as every eval).
int train_write_logits(train_run* run, rt_rank* R, const char* path) {
    const rt_model* m = run->m;
    const int64_t bt = m->batch * m->seq_len;
    float* logits = R->rank == 0 ? malloc((size_t)(bt * m->vocab) * sizeof(float)) : NULL;
    if (R->rank == 0 && !logits) train_fail(run, "--logits %s: out of memory", path);
    if (train_agree(run, R)) return free(logits), 1;
    train_feed_val(run, R, 0);
    R->logits_out = logits;
    rt_step_eval(R);
    int rc = 0;
    if (R->rank == 0 && R->logits_out) {
        train_fail(run, "--logits %s: the eval program passed no fp32 logits of [%lld, %lld, %lld] "
                        "(a model whose output is not float32 logits of the vocabulary)",
                   path, (long long)m->batch, (long long)m->seq_len, (long long)m->vocab);
        rc = 1;
    } else if (R->rank == 0) {
        const int64_t tshape[2] = {m->batch, m->seq_len};
        const int64_t lshape[3] = {m->batch, m->seq_len, m->vocab};
        rt_st_tensor t[2] = {{"tokens", RT_ST_I32, 2, tshape, R->tokens[0]},
                             {"logits", RT_ST_F32, 3, lshape, logits}};
        char err[512];
        if (rt_st_write(path, t, 2, NULL, 0, err, sizeof err) != 0) {
            train_fail(run, "--logits %s: %s", path, err);
            rc = 1;
        }
    }
    R->logits_out = NULL;
    free(logits);
    return train_agree(run, R) || rc;
}

// Runs the steps; returns 0, or 1 when the run failed or diverged (already reported).
static int rank_steps(train_run* run, rt_rank* R) {
    const rt_model* m = run->m;
    const int64_t W = m->world, NB = m->n_backward;
    const int64_t items = train_items_per_step(m);
    if (R->rank == 0) {
        train_perf_begin(run, R);
        run->t_start = now_s();
    }
    for (int64_t i = 0; i < run->nsteps; i++) {
        const int64_t s = run->start_step + i;
        R->step = s;
        train_feed(run, R, s);
        for (int64_t k = 0; k < NB; k++) R->losses[k] = 0.0;
        const double c0 = R->t_comm, o0 = R->t_optim;
        const double ts = run->trace ? rt_trace_now_us(run->trace) : 0.0;
        const double t0 = now_s();
        rt_step_run(R);
        // Losses travel as their bits, so every rank sums the same doubles in rank order.
        if (exchange(run, R, R->losses, (int)NB)) return 1;
        const double dt = now_s() - t0;
        R->t_total += dt;
        double sum = 0.0;
        for (int64_t r = 0; r < W; r++)
            for (int64_t k = 0; k < NB; k++) {
                double v;
                memcpy(&v, &run->xhost[R->rank][r * (NB + 1) + k], sizeof v);
                sum += v;
            }
        const double mean = sum / (double)(W * NB);
        if (run->trace) {
            char name[48];
            snprintf(name, sizeof name, "step %lld", (long long)(s + 1));
            rt_trace_complete(run->trace, R->rank, RT_TRACE_COMPUTE, name, "step", ts, dt * 1e6,
                              NULL, NULL);
        }
        if (R->rank == 0) {
            run->loss[i] = mean;
            run->step_ms[i] = dt * 1e3;
            run->comm_ms[i] = (R->t_comm - c0) * 1e3;
            run->optim_ms[i] = (R->t_optim - o0) * 1e3;
            run->steps_done = i + 1;
            // With a learning-rate schedule, the lr of the step's first optimizer.step().
            char lr[40] = "";
            if (has_lr_schedule(m)) snprintf(lr, sizeof lr, " | lr %.4e", rt_step_lr(R, 0));
            if (!run->quiet && should_log(run, i)) {
                char perf[96];
                train_perf_step(run, i, dt, now_s(), perf, sizeof perf);
                printf("step %lld loss %.6f%s | %.0f %s/s | %.2f ms%s\n", (long long)(s + 1), mean, lr,
                       dt > 0 ? (double)items / dt : 0.0, m->tokens ? "tok" : "samples", dt * 1e3, perf);
            }
        }
        if (!isfinite(mean)) {
            diverged(run, R, s, "loss", mean);
            return 1;
        }
        if (eval_due(run, i) && rank_eval(run, R, s)) return 1;
        if (run->hook) run->hook(run, R, i);
        const train_opts* o = run->o;
        if (o->checkpoint && o->checkpoint_every && (s + 1) % o->checkpoint_every == 0 &&
            i + 1 < run->nsteps)
            if (train_checkpoint_save(run, R, o->checkpoint, s + 1)) return 1;
        if (i == 0 && R->rank == 0) run->t_first = now_s();  // the ETA leaves step 1 out
    }
    return 0;
}

// The run's first line, from rank 0 as it starts.
static void print_header(const train_run* run) {
    const rt_model* m = run->m;
    const train_opts* o = run->o;
    char seed[48];
    if (o->resume && !o->seed_set) snprintf(seed, sizeof seed, "the checkpoint's");
    else snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    printf("%s: world %d (replicate %d x shard %d), steps %lld..%lld, seed %s, data %s\n",
           m->name, m->world, m->replicate, m->shard, (long long)run->start_step + 1,
           (long long)(run->start_step + run->nsteps), seed, o->data ? o->data : "synthetic");
}

static void rank_main(rt_comm* comm, void* arg) {
    train_run* run = arg;
    const rt_model* m = run->m;
    const train_opts* o = run->o;
    note_rank_here(run, rt_comm_rank(comm));
    if (rt_comm_rank(comm) == 0 && !run->quiet) print_header(run);
    rt_rank R;
    memset(&R, 0, sizeof R);
    if (rt_rank_init(&R, m, comm) != 0) {  // it printed why and aborted the communicator
        pthread_mutex_lock(&run->mu);
        run->failed = 1;
        pthread_mutex_unlock(&run->mu);
        rt_rank_free(&R);
        return;
    }
    R.trace = run->trace;
    R.t_comm = R.t_optim = R.t_total = 0.0;
    if (train_rank_attach(run, &R)) goto out_free;
    rank_bufs bufs;
    int rc = rank_alloc(run, &R, &bufs);
    if (!rc) {
        if (o->resume) rc = train_checkpoint_load(run, &R);
        else if (o->load) rc = train_load(run, &R, o->load);
        else if (o->load_hf) {
            rc = train_load_hf(run, &R, o->load_hf);
            if (!rc && o->load_peft) rc = train_load_peft(run, &R, o->load_peft);
        }
        else rc = train_init_params(run, &R);
        if (rc) train_fail(run, "rank %d: parameter setup failed", R.rank);  // first message wins
        else if (rt_rank_push(&R)) train_fail(run, "rank %d: copying the parameters to the device failed", R.rank);
    }
    if (train_agree(run, &R)) goto out;
    R.seed = run->seed;  // dropout masks (a --resume sets run->seed before the agreement)
    if (rank_steps(run, &R)) goto out;
    if (o->save && train_save(run, &R, o->save, run->start_step + run->nsteps)) goto out;
    if (o->save_hf && train_save_hf(run, &R, o->save_hf)) goto out;
    if (o->save_peft && train_save_peft(run, &R, o->save_peft)) goto out;
    if (o->checkpoint && train_checkpoint_save(run, &R, o->checkpoint, run->start_step + run->nsteps))
        goto out;
    if (o->logits && train_write_logits(run, &R, o->logits)) goto out;
    if (R.rank == 0) run->t_end = now_s();
out:
    run->peak[R.rank] = rt_arena_peak(&R.arena);
    rank_release(run, &R, &bufs);
out_free:
    train_rank_detach(run, &R);
    rt_rank_free(&R);
}

int train_run_exec(train_run* run) {
    rt_launch_opts lo = {run->o->local, run->o->no_graph};
    int rc = rt_step_launch(run->m->world, &lo, rank_main, run);
    if (rc == 2) return 2;
    return rc != 0 || run->failed || run->diverged ? 1 : 0;
}

// ---- model sanity -----------------------------------------------------------------------

// The generator guarantees these; a hand-written or corrupted model gets a clear message.
static int check_model(const rt_model* m) {
    const char* why = NULL;
    if (!m) why = "no model";
    else if (!m->step) why = "step function is NULL";
    else if (m->world < 1) why = "world < 1";
    else if (m->shard < 1 || m->replicate < 1 || m->shard * m->replicate != m->world)
        why = "mesh replicate x shard does not equal the world size";
    else if (m->n_forward < 1) why = "n_forward < 1";
    else if (m->n_backward < 1) why = "n_backward < 1";
    else if (m->nparams < 0 || (m->nparams > 0 && !m->params)) why = "bad parameter table";
    else if (m->ngroups < 0 || (m->ngroups > 0 && !m->groups)) why = "bad group table";
    else if (m->tokens && (m->batch < 1 || m->seq_len < 1 || m->vocab < 1))
        why = "token model without batch/seq_len/vocab";
    else if (!m->tokens && train_input_numel(m) < 1) why = "float model without an input shape";
    else if (m->flops_per_step < 0 || (m->flops_per_step > 0 && m->tokens_per_step != train_items_per_step(m)))
        why = "flops_per_step without tokens_per_step equal to world x forwards x batch";
    if (why) {
        fprintf(stderr, "fsdpgen: internal error: model '%s': %s (generated code is inconsistent)\n",
                m && m->name ? m->name : "?", why);
        return 1;
    }
    return 0;
}

// ---- main -------------------------------------------------------------------------------

// Opens --data (or --val-data: one batch per eval step, n_micro 1) and fetches step 0
// once, so a bad file is reported before any rank starts.
static int open_data(train_run* run, const char* opt, const char* path, int64_t n_micro, rt_data** out) {
    const rt_model* m = run->m;
    char err[512];
    if (rt_data_open(path, m->vocab, m->seq_len, out, err, sizeof err) != 0) {
        fprintf(stderr, "fsdpgen: %s: %s\n", opt, err);
        return 1;
    }
    rt_data_shape shape = {m->world, n_micro, m->batch, m->seq_len};
    size_t n = (size_t)(m->batch * m->seq_len);
    int32_t* a = malloc(n * sizeof(int32_t));
    int32_t* b = malloc(n * sizeof(int32_t));
    int rc = !a || !b ? -1 : rt_data_batch(*out, &shape, 0, 0, 0, a, b, err, sizeof err);
    if (rc != 0) fprintf(stderr, "fsdpgen: %s: %s\n", opt, !a || !b ? "out of memory" : err);
    free(a);
    free(b);
    return rc != 0;
}

// An output file's directory must exist and be writable, and the file, if there, be a
// regular one, before training starts, so that a long run does not fail only at its end.
static int check_output(const char* opt, const char* path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char* slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "fsdpgen: %s %s: directory '%s' does not exist (create it first)\n", opt,
                path, dir);
        return 1;
    }
    if (access(dir, W_OK) != 0) {
        fprintf(stderr, "fsdpgen: %s %s: directory '%s' is not writable\n", opt, path, dir);
        return 1;
    }
    // The writer replaces only regular files (and symlinks, not their targets).
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        fprintf(stderr, "fsdpgen: %s %s: it exists and is not a regular file (a directory, "
                        "device or FIFO is never replaced; give a file path)\n", opt, path);
        return 1;
    }
    return 0;
}

int rt_train_main(const rt_model* m, int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (check_model(m)) return 1;
    train_opts o;
    int rc = train_parse_args(m, 0, argc, argv, &o);
    if (rc == -1) return 0;
    if (rc) return 2;
    train_run run;
    if (train_run_init(&run, m, &o)) return 1;
    char err[512];
    rc = 0;
    if (o.save && check_output("--save", o.save)) rc = 1;
    if (!rc && o.trace && check_output("--trace", o.trace)) rc = 1;
    if (!rc && o.logits && check_output("--logits", o.logits)) rc = 1;
    if (!rc && o.save_hf && train_hf_prepare_dir("--save-hf", o.save_hf, 1)) rc = 1;
    if (!rc && o.save_peft && train_hf_prepare_dir("--save-peft", o.save_peft, 1)) rc = 1;
    if (!rc && o.load_hf && train_hf_prepare_dir("--load-hf", o.load_hf, 0)) rc = 1;
    if (!rc && o.load_peft && train_hf_prepare_dir("--load-peft", o.load_peft, 0)) rc = 1;
    if (!rc && o.data && open_data(&run, "--data", o.data, m->n_forward, &run.data)) rc = 1;
    if (!rc && o.val_data && open_data(&run, "--val-data", o.val_data, 1, &run.val_data)) rc = 1;
    if (!rc && train_checkpoint_prepare(&run)) rc = 1;
    if (!rc && o.trace && rt_trace_create(m->world, 0, 0, &run.trace, err, sizeof err) != 0) {
        fprintf(stderr, "fsdpgen: --trace %s: %s\n", o.trace, err);
        rc = 1;
    }
    if (!rc) {
        rc = train_run_exec(&run);  // rank 0 prints the header as it starts
        if (train_write_trace(&run, o.trace)) rc = 1;
        if (!rc && o.bench && train_holds_rank0(&run)) train_bench_report(&run);
        if (!rc && train_holds_rank0(&run)) train_perf_done(&run);
    }
    if (run.trace) rt_trace_destroy(run.trace);
    if (run.data) rt_data_close(run.data);
    if (run.val_data) rt_data_close(run.val_data);
    train_run_free(&run);
    return rc;
}
