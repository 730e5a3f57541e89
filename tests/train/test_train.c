// test_train.c — tests of the training driver (runtime/train) over the hand-written models
// of tiny_model.c: in-process checks of parameter init, shard split, synthetic data and the
// --save/--load round trip, then the training binary and the conformance test run as
// subprocesses for exit codes, messages and files (resume bit-identity, corrupt inputs,
// divergence, bad arguments).
//
// usage: test_train TINY_TRAIN TINY_CONFORMANCE WORKDIR
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rt_checkpoint.h"
#include "rt_comm.h"
#include "rt_kernels.h"
#include "rt_safetensors.h"
#include "rt_step.h"
#include "rt_train.h"
#include "tiny_model.h"
#include "train_internal.h"

static const char* g_train;
static const char* g_conf;
static const char* g_dir;

// ---- files ------------------------------------------------------------------------------

// WORKDIR/name (a few rotating buffers, so several may be live in one call).
static const char* P(const char* name) {
    static char buf[8][4096];
    static int k;
    char* b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", g_dir, name);
    return b;
}

static char* read_all(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char* s = malloc(cap + 1);
    size_t r;
    while (s && (r = fread(s + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) s = realloc(s, (cap *= 2) + 1);
    }
    fclose(f);
    if (!s) return NULL;
    s[n] = 0;
    if (len) *len = n;
    return s;
}

static int write_all(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int exists(const char* path) { return access(path, F_OK) == 0; }

static int same_file(const char* a, const char* b) {
    size_t na = 0, nb = 0;
    char* x = read_all(a, &na);
    char* y = read_all(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int copy_file(const char* from, const char* to) {
    size_t n = 0;
    char* s = read_all(from, &n);
    int rc = s ? write_all(to, s, n) : -1;
    free(s);
    return rc;
}

static int copy_ckpt(const char* from, const char* to) {
    mkdir(to, 0755);
    char a[4096], b[4096];
    const char* names[] = {"rank00000.ckpt", "rank00001.ckpt", "COMPLETE"};
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/%s", from, names[i]);
        snprintf(b, sizeof b, "%s/%s", to, names[i]);
        if (copy_file(a, b)) return -1;
    }
    return 0;
}

// ---- subprocesses -----------------------------------------------------------------------

typedef struct proc {
    int rc;     // exit status, or 128 + signal
    char* out;  // stdout
    char* err;  // stderr
} proc;

static void proc_free(proc* p) {
    free(p->out);
    free(p->err);
    p->out = p->err = NULL;
}

// Runs bin with TINY_MODEL=model and the NULL-terminated arguments; 120 s at most.
static proc run(const char* bin, const char* model, ...) {
    const char* argv[64];
    int n = 0;
    argv[n++] = bin;
    va_list ap;
    va_start(ap, model);
    const char* a;
    while ((a = va_arg(ap, const char*)) && n < 63) argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    const char* out = P("proc.out");
    const char* err = P("proc.err");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0) _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        if (model) setenv("TINY_MODEL", model, 1);
        else unsetenv("TINY_MODEL");
        alarm(120);
        execv(bin, (char* const*)argv);
        _exit(127);
    }
    proc p = {-1, NULL, NULL};
    int st = 0;
    if (pid > 0 && waitpid(pid, &st, 0) == pid)
        p.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    p.out = read_all(out, NULL);
    p.err = read_all(err, NULL);
    if (!p.out) p.out = strdup("");
    if (!p.err) p.err = strdup("");
    return p;
}

static int has(const char* s, const char* sub) { return s && strstr(s, sub) != NULL; }

static int count_lines(const char* s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

// The "loss X" of step n's line, or NULL.
static const char* loss_of(const char* out, int n, char* buf, size_t cap) {
    char key[32];
    snprintf(key, sizeof key, "step %d loss ", n);
    const char* p = strstr(out, key);
    if (!p) return NULL;
    p += strlen(key);
    size_t k = 0;
    while (p[k] && p[k] != ' ' && k + 1 < cap) buf[k] = p[k], k++;
    buf[k] = 0;
    return buf;
}

// Prints a failed process's output so the failure can be diagnosed.
static void show(const proc* p) {
    printf("  exit %d\n  stdout: %s\n  stderr: %s\n", p->rc, p->out, p->err);
}

#define CHECK_PROC(p, cond, ...)      \
    do {                              \
        int ok_ = (cond);             \
        CHECK(ok_, __VA_ARGS__);      \
        if (!ok_) show(&(p));         \
    } while (0)

// ---- in-process: init, shard split, data ------------------------------------------------

static void test_fnv_and_init(void) {
    CHECK(rt_train_fnv1a("") == 0xcbf29ce484222325ull && rt_train_fnv1a("a") == 0xaf63dc4c8601ec8cull,
          "FNV-1a test vectors ('' and 'a')");
    const rt_model_param* w = &tiny_model.params[0];
    float a[20], b[20], c[20];
    rt_train_init_param(w, 1234, a);
    rt_train_init_param(w, 1234, b);
    rt_train_init_param(w, 1235, c);
    int in_range = 1, differs = 0;
    for (int i = 0; i < 20; i++) {
        in_range &= a[i] >= -0.5f && a[i] < 0.5f;
        differs += a[i] != c[i];
    }
    CHECK(!memcmp(a, b, sizeof a), "init is deterministic: same seed, same 20 values");
    CHECK(differs >= 19, "init depends on the seed: %d of 20 values differ", differs);
    CHECK(in_range, "UNIFORM(0.5) values lie in [-0.5, 0.5)");
    float u0 = rt_dropout_uniform(1234, rt_train_fnv1a("lin.weight"), 0);
    CHECK(a[0] == (float)(-0.5 + 1.0 * u0), "UNIFORM element 0 = -s + 2 s u(seed, fnv(fqn), 0)");

    static float big[40000];
    rt_model_param nrm = {.fqn = "x.weight", .ndim = 1, .shape = {40000}, .init = RT_INIT_NORMAL,
                          .init_scale = 2.0};
    rt_train_init_param(&nrm, 7, big);
    double s = 0, ss = 0;
    for (int i = 0; i < 40000; i++) s += big[i], ss += (double)big[i] * big[i];
    double mean = s / 40000, sd = sqrt(ss / 40000 - mean * mean);
    CHECK(fabs(mean) < 0.05 && fabs(sd - 2.0) < 0.05, "NORMAL(0, 2) over 40000 values: mean %.4f std %.4f",
          mean, sd);
    // A range (threaded once long enough) equals that slice of the whole parameter.
    static float whole[700001], part[600001];
    rt_model_param nrm2 = {.fqn = "y.weight", .ndim = 2, .shape = {7, 100000}, .init = RT_INIT_NORMAL,
                           .init_scale = 0.02};
    rt_model_param uni = {.fqn = "u.weight", .ndim = 1, .shape = {700001}, .init = RT_INIT_UNIFORM,
                          .init_scale = 0.1};
    int same = 1;
    rt_train_init_param(&uni, 3, whole);
    rt_train_init_range(&uni, 3, 99999, 600001, part);
    same &= !memcmp(whole + 99999, part, 600001 * sizeof(float));
    rt_train_init_param(&nrm2, 3, whole);
    rt_train_init_range(&nrm2, 3, 12345, 600001 - 12346, part);
    same &= !memcmp(whole + 12345, part, (600001 - 12346) * sizeof(float));
    CHECK(same, "rt_train_init_range: elements [e0, e0 + n) of UNIFORM and NORMAL parameters equal that "
          "slice of rt_train_init_param (ranges of 587655 and 600001 values, several threads)");
    rt_model_param ones = {.fqn = "n.weight", .ndim = 1, .shape = {7}, .init = RT_INIT_ONES};
    rt_model_param zeros = {.fqn = "n.bias", .ndim = 1, .shape = {7}, .init = RT_INIT_ZEROS};
    float o[7], z[7];
    rt_train_init_param(&ones, 1, o);
    rt_train_init_param(&zeros, 1, z);
    int ok = 1;
    for (int i = 0; i < 7; i++) ok &= o[i] == 1.0f && z[i] == 0.0f;
    CHECK(ok, "ONES and ZEROS are exact");
}

static void test_synthetic(void) {
    int32_t t1[12], g1[12], t2[12], g2[12], t3[12];
    rt_train_synthetic_tokens(5, 16, 3, 1, 0, 2, 6, t1, g1);
    rt_train_synthetic_tokens(5, 16, 3, 1, 0, 2, 6, t2, g2);
    rt_train_synthetic_tokens(5, 16, 3, 1, 1, 2, 6, t3, NULL);
    int shift = 1, range = 1, diff = 0;
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 5; t++) shift &= g1[b * 6 + t] == t1[b * 6 + t + 1];
    for (int i = 0; i < 12; i++) {
        range &= t1[i] >= 0 && t1[i] < 16 && g1[i] >= 0 && g1[i] < 16;
        diff += t1[i] != t3[i];
    }
    CHECK(!memcmp(t1, t2, sizeof t1) && !memcmp(g1, g2, sizeof g1), "synthetic tokens are deterministic");
    CHECK(shift, "synthetic targets are the next token of the same stream");
    CHECK(range, "synthetic tokens and targets lie in [0, vocab)");
    CHECK(diff > 4, "synthetic tokens differ between ranks (%d of 12)", diff);
    float x[12], y[12];
    rt_train_synthetic_inputs(5, 0, 0, 0, 12, x);
    rt_train_synthetic_inputs(5, 1, 0, 0, 12, y);
    int in = 1, d = 0;
    for (int i = 0; i < 12; i++) in &= x[i] >= -1.0f && x[i] < 1.0f, d += x[i] != y[i];
    CHECK(in && d > 10, "synthetic float inputs lie in [-1, 1) and change with the step");
}

// rt_step_lr against the formula's values computed by hand (lr 0.01, 2 optimizer items per
// step: optimizer step i = 2 * step + item): warmup 4, cosine to 1e-3 at i = 12.
static void test_lr_schedule(void) {
    rt_model m = tiny_model;
    m.optim.lr = 0.01;
    m.n_optimizer = 2;
    m.lr_schedule = (rt_lr_schedule){RT_LR_COSINE, 4, 12, 1e-3};
    rt_rank R = {.model = &m};
    const struct {
        int64_t step;
        int item;
        double want;
    } cos_cases[] = {
        {0, 0, 0.0025},                            // i 0: warmup (0 + 1) / 4
        {1, 1, 0.01},                              // i 3: the warmup's end, lr
        {2, 0, 0.01},                              // i 4: the decay's start, cos 0
        {4, 0, 0.001 + 0.009 * 0.5},               // i 8: halfway, cos(pi / 2) = 0
        {6, 0, 0.001},                             // i 12: total_steps, min_lr
        {50, 1, 0.001},                            // i 101: after it, min_lr
    };
    int ok = 1;
    for (size_t k = 0; k < sizeof cos_cases / sizeof cos_cases[0]; k++) {
        R.step = cos_cases[k].step;
        const double got = rt_step_lr(&R, cos_cases[k].item);
        if (fabs(got - cos_cases[k].want) > 1e-15) {
            ok = 0;
            printf("  step %lld item %d: lr %.17g, want %.17g\n", (long long)cos_cases[k].step,
                   cos_cases[k].item, got, cos_cases[k].want);
        }
    }
    CHECK(ok, "rt_step_lr: warmup then cosine, at 6 optimizer steps (end of warmup, halfway, "
              "total_steps, after it)");
    m.lr_schedule = (rt_lr_schedule){RT_LR_LINEAR, 0, 4, 2e-3};
    R.step = 1;  // i 2 and 3: halfway and three quarters of the way to min_lr
    CHECK(fabs(rt_step_lr(&R, 0) - 0.006) < 1e-15 && fabs(rt_step_lr(&R, 1) - 0.004) < 1e-15,
          "rt_step_lr: linear decay without warmup (%.17g, %.17g)", rt_step_lr(&R, 0),
          rt_step_lr(&R, 1));
    m.lr_schedule = (rt_lr_schedule){RT_LR_CONSTANT, 0, 0, 0.0};
    R.step = 1000;
    CHECK(rt_step_lr(&R, 1) == 0.01, "rt_step_lr: no schedule gives the optimizer's lr");
}

// Rank function of the in-process checks: init (seed 99), compare the shard with the full
// parameters; --save; scramble; --load; compare again.
typedef struct inproc {
    train_opts o;
    train_run run;
    const char* path;
    int shard_ok[2], padding_ok[2], save_rc[2], load_rc[2], roundtrip_ok[2];
} inproc;

static void inproc_rank(rt_comm* comm, void* arg) {
    inproc* c = arg;
    rt_rank R;
    if (rt_rank_init(&R, &tiny_model, comm)) return;
    if (train_rank_attach(&c->run, &R)) {
        rt_rank_free(&R);
        return;
    }
    int r = R.rank;
    train_init_params(&c->run, &R);
    float* block = train_arena_f32(&R, tiny_model.groups[0].params_off, 15);
    float w[20], b[5];
    rt_train_init_param(&tiny_model.params[0], 99, w);
    rt_train_init_param(&tiny_model.params[1], 99, b);
    int rows = r == 0 ? 3 : 2, ok = 1, pad = 1;
    for (int i = 0; i < rows * 4; i++) ok &= block[i] == w[r * 12 + i];
    for (int i = 0; i < rows; i++) ok &= block[12 + i] == b[r * 3 + i];
    for (int i = rows * 4; i < 12; i++) pad &= block[i] == 0.0f;
    for (int i = rows; i < 3; i++) pad &= block[12 + i] == 0.0f;
    c->shard_ok[r] = ok;
    c->padding_ok[r] = pad;
    float before[15];
    memcpy(before, block, sizeof before);
    c->save_rc[r] = train_save(&c->run, &R, c->path, 0);
    for (int i = 0; i < 15; i++) block[i] = 1e9f;
    c->load_rc[r] = train_load(&c->run, &R, c->path);
    c->roundtrip_ok[r] = !memcmp(before, block, sizeof before);
    train_agree(&c->run, &R);
    train_rank_detach(&c->run, &R);
    rt_rank_free(&R);
}

static void test_shard_and_roundtrip(void) {
    inproc c;
    memset(&c, 0, sizeof c);
    c.o.steps = 1;
    c.o.seed = 99;
    c.o.log_every = 1;
    c.path = P("inproc.safetensors");
    if (train_run_init(&c.run, &tiny_model, &c.o)) {
        CHECK(0, "train_run_init");
        return;
    }
    c.run.quiet = 1;
    int rc = rt_threads_run(2, inproc_rank, &c);
    CHECK(rc == 0 && !c.run.failed, "in-process init / save / load ran on 2 ranks (rc %d)", rc);
    for (int r = 0; r < 2; r++) {
        CHECK(c.shard_ok[r], "rank %d holds rows %s of the full init (weight and bias)", r,
              r ? "3..4" : "0..2");
        CHECK(c.padding_ok[r], "rank %d's padding rows are zero", r);
        CHECK(c.save_rc[r] == 0 && c.load_rc[r] == 0 && c.roundtrip_ok[r],
              "rank %d: --save then --load restores its shard bit for bit", r);
    }
    train_run_free(&c.run);
    // The file: every name (the tied alias too), F32, full shapes, the init values.
    rt_st_file* f = NULL;
    char err[256];
    float w[20], b[5], fw[20], fb[5], fa[5];
    rt_train_init_param(&tiny_model.params[0], 99, w);
    rt_train_init_param(&tiny_model.params[1], 99, b);
    int64_t sw[2] = {5, 4}, sb[1] = {5};
    int ok = rt_st_open(c.path, &f, err, sizeof err) == 0 && rt_st_count(f) == 3 &&
             rt_st_load(f, "lin.weight", RT_ST_F32, 2, sw, fw, sizeof fw, err, sizeof err) == 0 &&
             rt_st_load(f, "lin.bias", RT_ST_F32, 1, sb, fb, sizeof fb, err, sizeof err) == 0 &&
             rt_st_load(f, "head.bias", RT_ST_F32, 1, sb, fa, sizeof fa, err, sizeof err) == 0;
    CHECK(ok, "saved file holds lin.weight [5, 4], lin.bias [5] and its alias head.bias, F32 (%s)",
          ok ? "ok" : err);
    CHECK(ok && !memcmp(fw, w, sizeof w) && !memcmp(fb, b, sizeof b) && !memcmp(fa, b, sizeof b),
          "saved tensors equal the full init values exactly");
    CHECK(f && rt_st_meta_get(f, "format") && !strcmp(rt_st_meta_get(f, "format"), "pt"),
          "saved file has metadata format=pt");
    rt_st_close(f);
}

// ---- processes: who prints, where each process's trace goes (mpirun) ---------------------

static void test_trace_paths(void) {
    static const struct {
        const char* path;
        int first;
        const char* want;
    } cases[] = {
        {"out.json", 0, "out.json"},           {"out.json", 1, "out.rank1.json"},
        {"dir/out.json", 12, "dir/out.rank12.json"},
        {"/abs/t.json", 3, "/abs/t.rank3.json"}, {"out", 2, "out.rank2"},
        {"a.b/out", 1, "a.b/out.rank1"},        {"dir/.trace", 1, "dir/.trace.rank1"},
        {"x.tar.gz", 5, "x.tar.rank5.gz"},      {"./t.json", 7, "./t.rank7.json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[256] = "";
        int rc = train_trace_path(cases[i].path, cases[i].first, out, sizeof out);
        CHECK(rc == 0 && !strcmp(out, cases[i].want), "trace path of the process with first rank %d "
              "for '%s': '%s' (want '%s')", cases[i].first, cases[i].path, out, cases[i].want);
    }
    char small[12];
    CHECK(train_trace_path("out.json", 1, small, sizeof small) == -1 &&
              train_trace_path("out.json", 0, small, 8) == -1 &&
              train_trace_path("out.json", 0, small, 9) == 0,
          "a path that does not fit the buffer: -1 (out.rank1.json in 12 bytes; out.json in 8), "
          "fits in 9");
    char pat[64];
    CHECK(train_path_tag("dir/out.json", ".rank<r>", pat, sizeof pat) == 0 &&
              !strcmp(pat, "dir/out.rank<r>.json"),
          "the pattern rank 0 prints: '%s'", pat);
}

// What train_write_trace did for one process's view of the run.
typedef struct trace_out {
    int rc;
    char* out;
    char* err;
} trace_out;

// Runs train_write_trace(run, path) in a child process (its stdout and stderr captured), as
// the process that ran ranks [first, first + count) of run's world.
static trace_out write_trace_as(train_run* run, int first, int count, const char* path) {
    run->here_first = first;
    run->here_count = count;
    const char* out = P("wt.out");
    const char* err = P("wt.err");
    fflush(stdout);
    trace_out t = {-1, NULL, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr)) _exit(126);
        int rc = train_write_trace(run, path);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    int st = 0;
    if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st)) t.rc = WEXITSTATUS(st);
    t.out = read_all(out, NULL);
    t.err = read_all(err, NULL);
    if (!t.out) t.out = strdup("");
    if (!t.err) t.err = strdup("");
    return t;
}

static void trace_out_free(trace_out* t) {
    free(t->out);
    free(t->err);
}

static void test_process_trace(void) {
    // A world of 4 ranks; under mpirun each process records only its own rank's spans.
    rt_model m4 = tiny_model;
    m4.world = 4;
    train_opts o;
    memset(&o, 0, sizeof o);
    o.steps = 1;
    train_run run;
    char err[256];
    if (train_run_init(&run, &m4, &o) || rt_trace_create(4, 0, 0, &run.trace, err, sizeof err)) {
        CHECK(0, "train_run_init / rt_trace_create");
        return;
    }
    // (Span names unlike the streams' names, which every rank's metadata carries.)
    rt_trace_complete(run.trace, 0, RT_TRACE_COMPUTE, "step 1", "step", 0, 5, NULL, NULL);
    rt_trace_complete(run.trace, 0, RT_TRACE_REDUCE_SCATTER, "rank-0-span", "reduce_scatter", 1, 2,
                      NULL, NULL);

    // One process holds every rank (CPU threads, a thread per GPU): PATH, one line.
    run.here_first = 0, run.here_count = 4;
    CHECK(train_holds_rank0(&run), "the process holding ranks 0..3 holds rank 0");
    trace_out t = write_trace_as(&run, 0, 4, P("all.json"));
    char want[512];
    snprintf(want, sizeof want, "trace: 2 events written to %s\n", P("all.json"));
    CHECK(t.rc == 0 && !strcmp(t.out, want) && !t.err[0] && exists(P("all.json")) &&
              !exists(P("all.rank1.json")),
          "every rank here: writes PATH and says so in one line ('%s')", t.out);
    trace_out_free(&t);

    // mpirun, rank 0's process: PATH, and where the others go.
    t = write_trace_as(&run, 0, 1, P("mpi.json"));
    char* body = read_all(P("mpi.json"), NULL);
    snprintf(want, sizeof want, "trace: 2 events written to %s; ranks 1..3 write theirs to %s, one "
                                "file per process\n", P("mpi.json"), P("mpi.rank<r>.json"));
    CHECK(t.rc == 0 && !strcmp(t.out, want) && !t.err[0] && has(body, "\"traceEvents\"") &&
              has(body, "rank-0-span"),
          "rank 0 of 4 processes: writes PATH, says once where ranks 1..3 write ('%s')", t.out);
    free(body);
    trace_out_free(&t);

    // mpirun, rank 2's process: PATH.rank2, silently.
    rt_trace* mine = run.trace;
    if (rt_trace_create(4, 0, 0, &run.trace, err, sizeof err) == 0) {
        rt_trace_complete(run.trace, 2, RT_TRACE_ALL_REDUCE, "rank-2-span", "all_reduce", 3, 4, NULL, NULL);
        CHECK(!train_holds_rank0(&(train_run){.here_first = 2, .here_count = 1}),
              "the process holding rank 2 does not hold rank 0");
        t = write_trace_as(&run, 2, 1, P("mpi.json"));
        body = read_all(P("mpi.rank2.json"), NULL);
        char* zero = read_all(P("mpi.json"), NULL);
        CHECK(t.rc == 0 && !t.out[0] && !t.err[0] && has(body, "rank-2-span") &&
                  !has(body, "rank-0-span") && has(zero, "rank-0-span") && !has(zero, "rank-2-span"),
              "rank 2's process writes its spans to mpi.rank2.json, prints nothing, leaves rank 0's "
              "mpi.json alone");
        free(body);
        free(zero);
        trace_out_free(&t);
        rt_trace_destroy(run.trace);
    }
    run.trace = mine;

    // Two processes of two ranks each would name the files by their first rank.
    rt_model m2 = tiny_model;
    run.m = &m2;
    t = write_trace_as(&run, 0, 1, P("two.json"));
    snprintf(want, sizeof want, "trace: 2 events written to %s; rank 1 writes its own to %s\n",
             P("two.json"), P("two.rank<r>.json"));
    CHECK(t.rc == 0 && !strcmp(t.out, want), "world 2, rank 0's process names rank 1's file ('%s')", t.out);
    trace_out_free(&t);
    run.m = &m4;

    // No rank started in this process (the launch failed): nothing written or printed.
    t = write_trace_as(&run, 0, 0, P("none.json"));
    CHECK(t.rc == 0 && !t.out[0] && !exists(P("none.json")),
          "no rank ran here: no trace file, no line");
    trace_out_free(&t);

    // A file that cannot be written: exit 1 naming this process's file.
    t = write_trace_as(&run, 3, 1, P("no_such_dir/x.json"));
    CHECK(t.rc == 1 && has(t.err, "fsdpgen: --trace ") && has(t.err, "no_such_dir/x.rank3.json") &&
              count_lines(t.err) == 1,
          "an unwritable trace: 1, one line naming x.rank3.json ('%s')", t.err);
    trace_out_free(&t);
    rt_trace_destroy(run.trace);
    run.trace = NULL;
    train_run_free(&run);
}

// The CPU path: one process runs every rank, so it holds rank 0 and prints everything once;
// each rank's dropout seed is the run's.
typedef struct seen {
    uint64_t seed[2];
} seen;

static void seed_hook(train_run* run, rt_rank* R, int64_t idx) {
    (void)idx;
    ((seen*)run->hook_arg)->seed[R->rank] = R->seed;
}

static void test_one_process(void) {
    train_opts o;
    memset(&o, 0, sizeof o);
    o.steps = 1;
    o.seed = 4242;
    o.log_every = 1;
    train_run tr;
    seen s = {{0, 0}};
    if (train_run_init(&tr, &tiny_model, &o)) {
        CHECK(0, "train_run_init");
        return;
    }
    tr.quiet = 1;
    tr.hook = seed_hook;
    tr.hook_arg = &s;
    int rc = train_run_exec(&tr);
    CHECK(rc == 0 && tr.here_first == 0 && tr.here_count == 2 && train_holds_rank0(&tr),
          "threads: this process ran ranks %d..%d of 2 and holds rank 0", tr.here_first,
          tr.here_first + tr.here_count - 1);
    CHECK(s.seed[0] == 4242 && s.seed[1] == 4242, "every rank's dropout seed is --seed (%llu, %llu)",
          (unsigned long long)s.seed[0], (unsigned long long)s.seed[1]);
    train_run_free(&tr);

    proc p = run(g_train, "tok", "--steps", "2", "--bench", "--trace", P("one.json"), NULL);
    int headers = 0;
    for (const char* q = p.out; (q = strstr(q, "tok: world 2")); q++) headers++;
    CHECK_PROC(p, p.rc == 0 && headers == 1 && has(p.out, "trace: ") &&
                      !has(p.out, ".rank<r>") && exists(P("one.json")) && !exists(P("one.rank1.json")) &&
                      has(p.out, "bench: "),
               "2 ranks in one process: one header, one trace file (no per-rank files), bench");
    proc_free(&p);
}

// ---- subprocess: runs -------------------------------------------------------------------

static void test_basic_run(void) {
    proc p = run(g_train, "tiny", "--steps", "5", "--log-every", "2", NULL);
    CHECK_PROC(p, p.rc == 0, "tiny --steps 5 --log-every 2 exits 0");
    CHECK_PROC(p, has(p.out, "step 1 loss ") && has(p.out, "step 2 loss ") &&
                      !has(p.out, "step 3 loss ") && has(p.out, "step 4 loss ") &&
                      has(p.out, "step 5 loss "),
               "step lines 1, 2, 4, 5 (first, every 2nd, last)");
    CHECK_PROC(p, has(p.out, " samples/s | ") && has(p.out, " ms | ") && has(p.out, "FLOP/s\n"),
               "step line has samples/s, ms and the model's FLOP/s");
    CHECK_PROC(p, has(p.out, "step 1 loss ") && has(p.out, " | lr 5.0000e-03 | ") &&
                      has(p.out, " | lr 1.0000e-02 | "),
               "with an lr schedule (warmup 2), step lines 1 and 2 print lr 5e-3 and 1e-2");
    proc q = run(g_train, "tiny", "--steps", "5", "--log-every=2", NULL);
    char a[32], b[32];
    CHECK(loss_of(p.out, 5, a, sizeof a) && loss_of(q.out, 5, b, sizeof b) && !strcmp(a, b),
          "two runs print the same step-5 loss (%s)", a);
    proc s = run(g_train, "tiny", "--steps", "2", "--seed", "77", NULL);
    char c[32];
    CHECK(loss_of(s.out, 1, c, sizeof c) && loss_of(p.out, 1, a, sizeof a) && strcmp(a, c),
          "--seed changes the run (step 1 loss %s vs %s)", c, a);
    proc_free(&p);
    proc_free(&q);
    proc_free(&s);

    p = run(g_train, "tok", "--steps", "3", "--bench", NULL);
    CHECK_PROC(p, p.rc == 0 && has(p.out, " tok/s | ") && has(p.out, "bench: ") &&
                      has(p.out, "exposed communication") && has(p.out, "optimizer"),
               "tok --bench: tok/s step lines and the compute/communication/optimizer split");
    proc_free(&p);

    p = run(g_train, "tiny", "--steps", "2", "--trace", P("t.json"), NULL);
    char* t = read_all(P("t.json"), NULL);
    CHECK_PROC(p, p.rc == 0 && has(t, "\"traceEvents\"") && has(t, "step 1") && has(t, "step 2") &&
                      has(t, "reduce_scatter"),
               "--trace writes a Chrome trace with per-rank step spans and rt_step's collectives");
    free(t);
    proc_free(&p);

    p = run(g_train, "tiny", "--help", NULL);
    CHECK_PROC(p, p.rc == 0 && has(p.out, "--steps N") && has(p.out, "--checkpoint-every N") &&
                      has(p.out, "--keep-checkpoints K") && has(p.out, "--resume DIR"),
               "--help exits 0 and documents the options");
    proc_free(&p);
}

// The eval program (--val-every, --val-batches): its lines, and a run's training bits
// unchanged by it.
static void test_eval(void) {
    proc p = run(g_train, "tiny", "--steps", "4", "--val-every", "2", "--val-batches", "3", "--save",
                 P("eval.safetensors"), NULL);
    CHECK_PROC(p, p.rc == 0 && !has(p.out, "step 1 val loss ") && has(p.out, "step 2 val loss ") &&
                      !has(p.out, "step 3 val loss ") && has(p.out, "step 4 val loss ") &&
                      has(p.out, " | 3 batches | "),
               "--val-every 2 --val-batches 3: `step N val loss X | 3 batches` after steps 2 and 4");
    proc q = run(g_train, "tiny", "--steps", "4", "--save", P("plain.safetensors"), NULL);
    CHECK_PROC(q, q.rc == 0 && same_file(P("eval.safetensors"), P("plain.safetensors")),
               "the evals leave the trained parameters bit-identical to a run without them");
    char a[32], b[32];
    CHECK(loss_of(p.out, 4, a, sizeof a) && loss_of(q.out, 4, b, sizeof b) && !strcmp(a, b),
          "... and the step-4 loss (%s)", a);
    proc r = run(g_train, "tiny", "--steps", "4", "--val-every", "3", "--val-batches", "3", NULL);
    const char* v1 = strstr(p.out, "step 4 val loss ");
    const char* v2 = strstr(r.out, "step 4 val loss ");
    CHECK_PROC(r, r.rc == 0 && has(r.out, "step 3 val loss ") && v1 && v2 &&
                      !strncmp(v1, v2, strcspn(v1, "|")),
               "--val-every 3 of 4 steps: after step 3 and the last, which equals the other run's");
    proc_free(&p);
    proc_free(&q);
    proc_free(&r);
    p = run(g_train, "tiny_packed", "--steps", "1", "--val-every", "1", NULL);
    CHECK_PROC(p, p.rc == 2 && has(p.err, "fsdpgen: bad argument --val-every: the eval program is not "
                                          "available for this spec: ") && count_lines(p.err) == 1,
               "a model without an eval program: --val-every is a bad argument (exit 2, one line)");
    proc_free(&p);
}

static void test_resume(void) {
    proc a = run(g_train, "tiny", "--steps", "5", "--checkpoint", P("ckA"), "--save", P("a.st"), NULL);
    proc b = run(g_train, "tiny", "--steps", "3", "--checkpoint", P("ckB"), NULL);
    CHECK_PROC(a, a.rc == 0 && exists(P("ckA/step_00000005/COMPLETE")) &&
                      has(a.out, "checkpoint: step 5 saved to ") && has(a.out, "ckA/step_00000005"),
               "5 steps + checkpoint: exit 0, ckA/step_00000005 with its COMPLETE marker");
    CHECK_PROC(b, b.rc == 0 && exists(P("ckB/step_00000003/COMPLETE")) && !exists(P("ckB/step_00000003.tmp")),
               "3 steps + checkpoint: exit 0, ckB/step_00000003 complete, no staging directory left");
    // The copy is a checkpoint as written before step directories (COMPLETE in the
    // directory itself), which --resume still reads.
    copy_ckpt(P("ckB/step_00000003"), P("ckB_copy"));
    proc c = run(g_train, "tiny", "--resume", P("ckB"), "--steps", "2", "--checkpoint", P("ckC"),
                 "--save", P("c.st"), NULL);
    CHECK_PROC(c, c.rc == 0 && has(c.out, "step 4 loss") && has(c.out, "step 5 loss") &&
                      !has(c.out, "step 3 loss"),
               "--resume ckB --steps 2 runs steps 4 and 5");
    CHECK(same_file(P("ckA/step_00000005/rank00000.ckpt"), P("ckC/step_00000005/rank00000.ckpt")) &&
              same_file(P("ckA/step_00000005/rank00001.ckpt"), P("ckC/step_00000005/rank00001.ckpt")),
          "resumed params + optimizer state equal the uninterrupted run's, byte for byte");
    CHECK(same_file(P("a.st"), P("c.st")), "resumed --save file equals the uninterrupted one");
    char x[32], y[32], u[32], v[32];
    CHECK(loss_of(a.out, 4, x, 32) && loss_of(c.out, 4, y, 32) && !strcmp(x, y) &&
              loss_of(a.out, 5, u, 32) && loss_of(c.out, 5, v, 32) && !strcmp(u, v),
          "resumed step 4/5 losses equal the uninterrupted ones (%s %s)", y, v);
    proc_free(&a);
    proc_free(&b);
    proc_free(&c);

    a = run(g_train, "tiny", "--steps", "5", "--checkpoint", P("ckE"), "--checkpoint-every", "2", NULL);
    CHECK_PROC(a, a.rc == 0 && has(a.out, "checkpoint: step 2 saved") &&
                      has(a.out, "checkpoint: step 4 saved") && has(a.out, "checkpoint: step 5 saved"),
               "--checkpoint-every 2 saves after steps 2 and 4 and at the end");
    CHECK(!exists(P("ckE/step_00000002")) && exists(P("ckE/step_00000004/COMPLETE")) &&
              exists(P("ckE/step_00000005/COMPLETE")),
          "... and keeps the newest 2 (the default): steps 4 and 5, step 2 removed");
    proc_free(&a);
    a = run(g_train, "tiny", "--steps", "3", "--checkpoint", P("ckK"), "--checkpoint-every", "1",
            "--keep-checkpoints", "0", NULL);
    CHECK_PROC(a, a.rc == 0 && exists(P("ckK/step_00000001/COMPLETE")) &&
                      exists(P("ckK/step_00000002/COMPLETE")) && exists(P("ckK/step_00000003/COMPLETE")),
               "--keep-checkpoints 0 keeps every checkpoint");
    proc_free(&a);
    // What a killed save leaves (a staging directory, a step directory whose removal was
    // cut short) is never resumed: the newest complete one is.
    copy_ckpt(P("ckE/step_00000005"), P("ckE/step_00000006.tmp"));
    copy_ckpt(P("ckE/step_00000005"), P("ckE/step_00000007"));
    unlink(P("ckE/step_00000007/COMPLETE"));
    a = run(g_train, "tiny", "--resume", P("ckE"), "--steps", "1", "--checkpoint", P("ckE"), NULL);
    CHECK_PROC(a, a.rc == 0 && has(a.out, "steps 6..6") && has(a.out, "checkpoint: step 6 saved") &&
                      exists(P("ckE/step_00000006/COMPLETE")) && !exists(P("ckE/step_00000006.tmp")) &&
                      exists(P("ckE/step_00000005/COMPLETE")) && !exists(P("ckE/step_00000004")),
               "--resume ckE past a staging step 6 and an incomplete step 7: resumes step 5, saves "
               "step 6 over the staging leftover, keeps 5 and 6");
    proc_free(&a);
    // A fresh run into a directory with newer checkpoints is refused before training.
    a = run(g_train, "tiny", "--steps", "1", "--checkpoint", P("ckE"), NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: --checkpoint ") && has(a.err, "step 6") &&
                      has(a.err, "--resume") && count_lines(a.err) == 1 && !has(a.out, "step 1 loss") &&
                      exists(P("ckE/step_00000006/COMPLETE")),
               "--checkpoint into a directory holding a newer step: exit 1 before training, one line");
    proc_free(&a);

    a = run(g_train, "tiny", "--resume", P("ckB_copy"), "--steps", "1", "--seed", "5", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "seed"), "resume with another --seed exits 1 naming the seed");
    proc_free(&a);
    // A checkpoint as written before step directories: resumed, and saving into the same
    // directory adds a step directory, which is then the newest.
    copy_ckpt(P("ckB_copy"), P("ckOld"));
    a = run(g_train, "tiny", "--resume", P("ckOld"), "--steps", "2", "--checkpoint", P("ckOld"), NULL);
    CHECK_PROC(a, a.rc == 0 && has(a.out, "steps 4..5") && exists(P("ckOld/step_00000005/COMPLETE")) &&
                      same_file(P("ckOld/step_00000005/rank00001.ckpt"), P("ckA/step_00000005/rank00001.ckpt")),
               "an old-layout checkpoint (COMPLETE in DIR) resumes bit-identically into DIR/step_00000005");
    proc_free(&a);
    a = run(g_train, "tiny", "--resume", P("ckOld"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 0 && has(a.out, "steps 6..6"), "... and --resume DIR then picks step 5 over DIR's own step 3");
    proc_free(&a);

    // Corruptions: one flipped payload byte, a truncated rank file, no COMPLETE marker, a
    // checkpoint of another model, a directory that does not exist.
    copy_ckpt(P("ckB_copy"), P("ckD"));
    size_t n = 0;
    char* s = read_all(P("ckD/rank00001.ckpt"), &n);
    if (s && n > 8) s[n - 5] ^= 0x40;
    if (s) write_all(P("ckD/rank00001.ckpt"), s, n);
    a = run(g_train, "tiny", "--resume", P("ckD"), "--steps", "1", "--checkpoint", P("ckOut"),
            "--save", P("out.st"), NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: --resume") && count_lines(a.err) == 1,
               "a flipped byte in a rank file: exit 1, one line");
    CHECK(!exists(P("ckOut")) && !exists(P("out.st")),
          "... and no checkpoint or save is written");
    proc_free(&a);
    if (s && n > 100) write_all(P("ckD/rank00001.ckpt"), s, n / 2);
    a = run(g_train, "tiny", "--resume", P("ckD"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: --resume"), "a truncated rank file: exit 1");
    proc_free(&a);
    free(s);
    copy_ckpt(P("ckB_copy"), P("ckF"));
    unlink(P("ckF/COMPLETE"));
    a = run(g_train, "tiny", "--resume", P("ckF"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "no complete checkpoint"), "no COMPLETE marker: exit 1");
    proc_free(&a);
    a = run(g_train, "tok", "--resume", P("ckB_copy"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: --resume"),
               "another model's checkpoint: exit 1 (%s)", a.err);
    proc_free(&a);
    a = run(g_train, "tiny", "--resume", P("no_such_dir"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "no complete checkpoint"), "missing directory: exit 1");
    proc_free(&a);
    // Saving into a path below a regular file fails cleanly.
    write_all(P("plainfile"), "x", 1);
    a = run(g_train, "tiny", "--steps", "1", "--checkpoint", P("plainfile/ck"), NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: --checkpoint"), "unwritable --checkpoint: exit 1");
    proc_free(&a);
}

// A group with a frozen parameter (tiny_frozen: its bias): a checkpoint holds optimizer
// state for the weight alone and resumes bit-identically; one written with state for the
// bias too (tiny's, which tiny_frozen's binary wrote before) is refused with one line saying
// so, and tiny refuses tiny_frozen's with the usual line.
static void test_frozen(void) {
    proc a = run(g_train, "tiny_frozen", "--steps", "5", "--checkpoint", P("fzA"), "--save", P("fa.st"), NULL);
    proc b = run(g_train, "tiny_frozen", "--steps", "3", "--checkpoint", P("fzB"), NULL);
    proc c = run(g_train, "tiny_frozen", "--resume", P("fzB"), "--steps", "2", "--checkpoint", P("fzC"),
                 "--save", P("fc.st"), NULL);
    CHECK_PROC(c, a.rc == 0 && b.rc == 0 && c.rc == 0 && has(c.out, "steps 4..5") &&
                      same_file(P("fzA/step_00000005/rank00000.ckpt"), P("fzC/step_00000005/rank00000.ckpt")) &&
                      same_file(P("fzA/step_00000005/rank00001.ckpt"), P("fzC/step_00000005/rank00001.ckpt")) &&
                      same_file(P("fa.st"), P("fc.st")),
               "a frozen bias: 3 steps, then 2 resumed, equal 5 uninterrupted ones byte for byte");
    int64_t fingerprint = 0;
    float params[15], state0[12], state1[12];
    const rt_ckpt_slot slots[] = {{"model", RT_ST_I64, 1, &fingerprint},
                                  {"g0.params", RT_ST_F32, 15, params},
                                  {"g0.state0", RT_ST_F32, 12, state0},
                                  {"g0.state1", RT_ST_F32, 12, state1}};
    char err[512] = "";
    for (int r = 0; r < 2; r++)
        CHECK(rt_ckpt_load_rank(P("fzA/step_00000005"), 2, r, NULL, slots, 4, err, sizeof err) == 0,
              "rank %d's checkpoint: the 15 parameters, and AdamW's 2 states of the weight's 12 "
              "elements alone (%s)", r, err);
    proc_free(&a);
    proc_free(&b);
    proc_free(&c);
    a = run(g_train, "tiny", "--steps", "3", "--checkpoint", P("fzOld"), NULL);
    b = run(g_train, "tiny_frozen", "--resume", P("fzOld"), "--steps", "1", "--save", P("fz_old.st"), NULL);
    CHECK_PROC(b, a.rc == 0 && b.rc == 1 &&
                      has(b.err, "holds optimizer state for tiny's frozen parameters too") &&
                      count_lines(b.err) == 1 && !has(b.out, "step 4 loss") && !exists(P("fz_old.st")),
               "a checkpoint with optimizer state for the frozen bias too: exit 1, one line saying so");
    c = run(g_train, "tiny", "--resume", P("fzB"), "--steps", "1", NULL);
    CHECK_PROC(c, c.rc == 1 && has(c.err, "blob 'g0.state0' has 12 F32 elements, expected 15 F32") &&
                      !has(c.err, "frozen") && count_lines(c.err) == 1,
               "tiny resuming tiny_frozen's checkpoint: exit 1, the blob's size, nothing of frozen state");
    proc_free(&a);
    proc_free(&b);
    proc_free(&c);
}

static void test_bad_weights(void) {
    proc a = run(g_train, "tiny", "--steps", "2", "--save", P("w.st"), NULL);
    CHECK_PROC(a, a.rc == 0, "--save w.st");
    proc_free(&a);
    a = run(g_train, "tiny", "--load", P("w.st"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 0, "--load of a saved file trains");
    proc_free(&a);
    size_t n = 0;
    char* s = read_all(P("w.st"), &n);
    if (s) write_all(P("trunc.st"), s, n - 7);
    free(s);
    a = run(g_train, "tiny", "--load", P("trunc.st"), "--steps", "1", "--save", P("x.st"),
            "--checkpoint", P("ckT"), NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: --load") && has(a.err, "trunc.st") &&
                      count_lines(a.err) == 1 && !exists(P("x.st")) && !exists(P("ckT")),
               "truncated safetensors: exit 1, one line naming the file, nothing saved or checkpointed");
    proc_free(&a);

    float data[20] = {0};
    int64_t s45[2] = {4, 5}, s54[2] = {5, 4}, s5[1] = {5};
    char err[256];
    rt_st_tensor bad_shape[] = {{"lin.weight", RT_ST_F32, 2, s45, data},
                                {"lin.bias", RT_ST_F32, 1, s5, data}};
    rt_st_write(P("shape.st"), bad_shape, 2, NULL, 0, err, sizeof err);
    a = run(g_train, "tiny", "--load", P("shape.st"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "lin.weight") && has(a.err, "[4, 5]") && has(a.err, "[5, 4]"),
               "wrong shape: exit 1 naming the tensor, found and expected shapes");
    proc_free(&a);
    rt_st_tensor bad_name[] = {{"lin.wieght", RT_ST_F32, 2, s54, data},
                               {"lin.bias", RT_ST_F32, 1, s5, data}};
    rt_st_write(P("name.st"), bad_name, 2, NULL, 0, err, sizeof err);
    a = run(g_train, "tiny", "--load", P("name.st"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "lin.wieght"), "unexpected name: exit 1 naming it");
    proc_free(&a);
    rt_st_tensor missing[] = {{"lin.weight", RT_ST_F32, 2, s54, data}};
    rt_st_write(P("missing.st"), missing, 1, NULL, 0, err, sizeof err);
    a = run(g_train, "tiny", "--load", P("missing.st"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "'lin.bias' is missing"), "missing tensor: exit 1 naming it");
    proc_free(&a);
    uint16_t half[5] = {0};
    rt_st_tensor f16[] = {{"lin.weight", RT_ST_F32, 2, s54, data}, {"lin.bias", RT_ST_F16, 1, s5, half}};
    rt_st_write(P("f16.st"), f16, 2, NULL, 0, err, sizeof err);
    a = run(g_train, "tiny", "--load", P("f16.st"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "lin.bias") && has(a.err, "F32"),
               "wrong dtype: exit 1 naming the tensor and F32");
    proc_free(&a);
    float other[5] = {1, 2, 3, 4, 5};
    rt_st_tensor untied[] = {{"lin.weight", RT_ST_F32, 2, s54, data}, {"lin.bias", RT_ST_F32, 1, s5, data},
                             {"head.bias", RT_ST_F32, 1, s5, other}};
    rt_st_write(P("untied.st"), untied, 3, NULL, 0, err, sizeof err);
    a = run(g_train, "tiny", "--load", P("untied.st"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "head.bias") && has(a.err, "tied"),
               "tied names with different values: exit 1");
    proc_free(&a);
    rt_st_tensor alias_only[] = {{"lin.weight", RT_ST_F32, 2, s54, data}, {"head.bias", RT_ST_F32, 1, s5, other}};
    rt_st_write(P("alias.st"), alias_only, 2, NULL, 0, err, sizeof err);
    a = run(g_train, "tiny", "--load", P("alias.st"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 0, "a tied parameter present only under its alias loads");
    proc_free(&a);
    a = run(g_train, "tiny", "--load", P("nothing.st"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "nothing.st"), "missing safetensors file: exit 1");
    proc_free(&a);
}

static void test_data(void) {
    unsigned char tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (unsigned char)((i * 7 + i / 13) % 16);
    write_all(P("good.bin"), tok, sizeof tok);
    write_all(P("short.bin"), tok, 3);
    tok[500] = 200;
    write_all(P("vocab.bin"), tok, sizeof tok);
    proc a = run(g_train, "tok", "--data", P("good.bin"), "--steps", "3", NULL);
    proc b = run(g_train, "tok", "--data", P("good.bin"), "--steps", "3", NULL);
    proc c = run(g_train, "tok", "--steps", "3", NULL);
    char x[32], y[32], z[32];
    CHECK_PROC(a, a.rc == 0 && loss_of(a.out, 3, x, 32) && loss_of(b.out, 3, y, 32) && !strcmp(x, y),
               "--data good.bin: exit 0, deterministic (step 3 loss %s)", x);
    CHECK(loss_of(c.out, 3, z, 32) && strcmp(x, z), "file data differs from synthetic data");
    proc_free(&a);
    proc_free(&b);
    proc_free(&c);
    a = run(g_train, "tok", "--data", P("absent.bin"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "absent.bin") && count_lines(a.err) == 1,
               "missing data file: exit 1, one line naming it");
    proc_free(&a);
    a = run(g_train, "tok", "--data", P("short.bin"), "--steps", "1", "--checkpoint", P("ckS"), NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "short.bin") && !exists(P("ckS")),
               "data file shorter than a sequence: exit 1, no checkpoint");
    proc_free(&a);
    a = run(g_train, "tok", "--data", P("vocab.bin"), "--steps", "1", NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "vocab"), "token out of the vocabulary: exit 1");
    proc_free(&a);
}

static void test_divergence(void) {
    proc a = run(g_train, "tiny_nan", "--steps", "5", "--save", P("nan.st"), "--checkpoint",
                 P("ckN"), NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: step 2: loss is ") &&
                      has(a.err, "training diverged") && !has(a.out, "step 3 loss"),
               "lr 1e38: step 2's loss is not finite, exit 1 with the divergence line");
    CHECK(!exists(P("nan.st")) && !exists(P("ckN")), "no --save and no checkpoint after it");
    proc_free(&a);
}

static void test_setup_failures(void) {
    proc a = run(g_train, "tiny_wrong", "--steps", "1", "--save", P("wrong.st"), NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: rank 1") && has(a.err, "lin.weight") &&
                      !exists(P("wrong.st")),
               "a sharding plan the runtime rejects: exit 1 naming the parameter, nothing saved");
    proc_free(&a);
    // Plans the runtime rejects before step 1: exit 1 with a line naming what is wrong, no
    // loss printed, nothing saved.
    static const struct {
        const char *model, *file, *err, *what;
    } rejected[] = {
        {"tiny_wrong_reduction", "wrong_rs.st",
         "reduction 1 of group 'lin': planned block of 4 elements, the layout has 3",
         "a reduction of some parameters with a block the runtime recomputes otherwise: exit 1 "
         "naming it, nothing saved"},
        {"tiny_bad_index", "bad_index.st",
         "reduction 1 of group 'lin' must list 1 to 1 of its parameter indices",
         "a reduction listing a parameter the group does not have: exit 1 naming it, nothing saved"},
        {"tiny_packed", "packed.st", "'lin.weight' of group 'lin' is planned packed",
         "a packed parameter the runtime rejects (fp32 group, [5, 4]): exit 1 naming it, "
         "nothing saved"},
        {"tiny_from_shard", "from_shard.st",
         "'lin.bias' of group 'lin' is planned to be read from the sharded parameters",
         "a parameter read from the shards at two shard ranks: exit 1 naming it, nothing saved"},
        {"tiny_word", "word.st",
         "'lin.bias' of group 'lin' is planned at word 24 of the unsharded parameters, the "
         "layout has it at 20",
         "a parameter planned at a word of the unsharded parameters the runtime recomputes "
         "otherwise: exit 1 naming it, nothing saved"},
        {"tiny_words", "words.st",
         "group 'lin' plans 30 words of unsharded parameters, the layout has 28",
         "a group's unsharded parameters planned at a size the runtime recomputes otherwise: "
         "exit 1 naming it, nothing saved"},
        {"tiny_unsynced", "unsynced.st",
         "all-gather of group 'lin' before the all-gather streams waited for compute",
         "a step that all-gathers before any all_gather_sync: exit 1 naming the group, "
         "nothing saved"},
        {"tiny_frozen_wrong", "frozen_wrong.st",
         "group 'lin': planned 2 elements of frozen shards in a block, the layout has 3",
         "a group planned with another count of frozen elements than the layout's: exit 1 "
         "naming it, nothing saved"},
        {"tiny_stale", "stale.st",
         "optimizer step of group 'lin' without a reduce-scatter since the last one",
         "a second optimizer step with no gradients since the first: exit 1 naming the "
         "group, nothing saved"},
    };
    for (size_t i = 0; i < sizeof rejected / sizeof rejected[0]; i++) {
        a = run(g_train, rejected[i].model, "--steps", "1", "--save", P(rejected[i].file), NULL);
        CHECK_PROC(a, a.rc == 1 && has(a.err, rejected[i].err) && !has(a.out, "step 1 loss") &&
                          !exists(P(rejected[i].file)),
                   "%s", rejected[i].what);
        proc_free(&a);
    }
    a = run(g_train, "tiny", "--steps", "1", "--save", P("no_such_dir/x.st"), NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: --save") && count_lines(a.err) == 1 &&
                      !has(a.out, "step 1 loss"),
               "--save into a missing directory: exit 1 before training, one line");
    proc_free(&a);
    // --save onto a FIFO or a device node (made here: a regressed writer would replace it)
    // is refused before training, and the node is left as it was.
    mkfifo(P("save_fifo"), 0644);
    int have_dev = mknod(P("save_dev"), S_IFCHR | 0666, makedev(1, 3)) == 0;
    const char* nodes[] = {"save_fifo", "save_dev"};
    for (int k = 0; k < 1 + have_dev; k++) {
        a = run(g_train, "tiny", "--steps", "1", "--save", P(nodes[k]), NULL);
        struct stat st;
        CHECK_PROC(a, a.rc == 1 && has(a.err, "not a regular file") && count_lines(a.err) == 1 &&
                          !has(a.out, "step 1 loss") && stat(P(nodes[k]), &st) == 0 &&
                          (k ? S_ISCHR(st.st_mode) : S_ISFIFO(st.st_mode)),
                   "--save onto a %s: exit 1 before training, one line, the node left as it was",
                   k ? "character device" : "FIFO");
        proc_free(&a);
    }
    a = run(g_train, "tiny", "--steps", "1", "--trace", P("no_such_dir/t.json"), NULL);
    CHECK_PROC(a, a.rc == 1 && has(a.err, "fsdpgen: --trace") && !has(a.out, "step 1 loss"),
               "--trace into a missing directory: exit 1 before training");
    proc_free(&a);
}

static void test_bad_args(void) {
    const char* cases[][4] = {
        {"--bogus", NULL},
        {"--steps", "0", NULL},
        {"--steps", "abc", NULL},
        {"--steps", NULL},
        {"--seed", "-1", NULL},
        {"--log-every", "2x", NULL},
        {"--checkpoint-every", "3", NULL},
        {"--keep-checkpoints", "3", NULL},  // without --checkpoint
        {"--keep-checkpoints", "-1", NULL},
        {"--load", "a.st", "--resume", "d"},
        {"--data", "x.bin", NULL},  // tiny takes float inputs
        {"positional", NULL},
        {"--bench=1", NULL},
        {"--val-batches", "3", NULL},  // without --val-every or --val-data
        {"--val-every", "0", NULL},
        {"--val-data", "x.bin", NULL},  // tiny takes float inputs
        {"--peak-tflops", "0", NULL},
        {"--peak-tflops", "-5", NULL},
        {"--peak-tflops", "fast", NULL},
        {"--peak-tflops", "nan", NULL},
        {"--peak-tflops", "1e400", NULL},
        {"--peak-tflops", "", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char** c = cases[i];
        proc p = run(g_train, "tiny", c[0], c[1], c[1] ? c[2] : NULL, c[1] && c[2] ? c[3] : NULL, NULL);
        CHECK_PROC(p, p.rc == 2 && !strncmp(p.err, "fsdpgen: bad argument ", 22) &&
                          count_lines(p.err) == 1,
                   "bad argument %s %s: exit 2, one line: %.*s", c[0], c[1] ? c[1] : "",
                   (int)strcspn(p.err, "\n"), p.err);
        proc_free(&p);
    }
    proc p = run(g_conf, NULL, "--save", "x", NULL);
    CHECK_PROC(p, p.rc == 2 && has(p.err, "bad argument"), "conformance: --save is a bad argument (exit 2)");
    proc_free(&p);
}

static void test_conformance(void) {
    proc p = run(g_conf, NULL, "--verbose", NULL);
    CHECK_PROC(p, p.rc == 0 && has(p.out, "11 passed, 0 failed") && has(p.out, "FORWARD unshard \"lin\"") &&
                      has(p.out, "PASS memory") && has(p.out, "PASS parity eval loss") &&
                      has(p.out, "PASS events: 2 of 2 ranks recorded exactly the 3 planned step-2 (after the eval)"),
               "conformance of tiny: 11 passed (the eval's events, counts, loss and step 2 after it "
               "included), events printed with --verbose");
    proc_free(&p);
    p = run(g_conf, NULL, "--steps", "1", NULL);
    CHECK_PROC(p, p.rc == 0 && has(p.out, "after step 1"), "conformance --steps 1");
    proc_free(&p);
    p = run(g_conf, "tiny_bad", NULL);
    CHECK_PROC(p, p.rc == 1 && has(p.out, "FAIL events") && has(p.out, "FAIL counts") &&
                      has(p.out, "FAIL memory") && has(p.out, "PASS parity loss") &&
                      has(p.out, "first difference: rank 0 event 2") && has(p.out, "3 passed, 3 failed"),
               "wrongly planned events, counts and peak: those 3 checks fail, exit 1");
    proc_free(&p);
}

// ---- throughput, MFU, ETA, summary (perf.c) -----------------------------------------------

// The text after `key` in the first line of out that has it, up to " |" or the line end.
static const char* field(const char* out, const char* line_start, const char* key, char* buf,
                         size_t cap) {
    const char* l = strstr(out, line_start);
    if (!l) return NULL;
    size_t len = strcspn(l, "\n");
    const char* k = strstr(l, key);
    if (!k || k >= l + len) return NULL;
    k += strlen(key);
    size_t n = 0;
    while (k + n < l + len && strncmp(k + n, " |", 2) && n + 1 < cap) buf[n] = k[n], n++;
    buf[n] = 0;
    return buf;
}

// "0.3s", "12s", "1m23s", "2h05m" -> seconds (-1 for anything else).
static double eta_seconds(const char* e) {
    double a = 0, b = 0;
    char u1 = 0, u2 = 0;
    int n = e ? sscanf(e, "%lf%c%lf%c", &a, &u1, &b, &u2) : 0;
    if (n == 2 && u1 == 's') return a;
    if (n == 4 && u1 == 'm' && u2 == 's') return 60 * a + b;
    if (n == 4 && u1 == 'h' && u2 == 'm') return 3600 * a + 60 * b;
    return -1;
}

static void test_perf(void) {
    // The peak table (runtime/train/peaks.def, which bench/flops.py reads too).
    CHECK(train_peak_tflops("NVIDIA H100 80GB HBM3") == 989 && train_peak_tflops("NVIDIA H200") == 989 &&
              train_peak_tflops("NVIDIA A100-SXM4-80GB") == 312 &&
              train_peak_tflops("NVIDIA A100 80GB PCIe") == 312,
          "peaks: H100 SXM 989, H200 989, A100 (SXM and PCIe) 312 TFLOP/s");
    CHECK(train_peak_tflops("NVIDIA H100 PCIe") == 756 && train_peak_tflops("NVIDIA H100 NVL") == 835 &&
              train_peak_tflops("NVIDIA H200 NVL") == 835,
          "peaks: H100 PCIe 756, H100 NVL and H200 NVL 835 TFLOP/s (not the SXM parts' 989)");
    CHECK(train_peak_tflops("Tesla T4") == 0 && train_peak_tflops("") == 0 && train_peak_tflops(NULL) == 0,
          "peaks: T4 and no name are not in the table");
    CHECK(has(train_peak_list(), "H100 989") && has(train_peak_list(), "A100 312") &&
              has(train_peak_list(), "H100 PCIe 756, H100 NVL 835, H200 NVL 835"),
          "the --help list of peaks: %s", train_peak_list());
    const struct { double s; const char* want; } etas[] = {
        {0.34, "0.3s"}, {9.94, "9.9s"}, {12.4, "12s"}, {59.4, "59s"}, {59.6, "1m00s"},
        {83, "1m23s"}, {3599.4, "59m59s"}, {3725, "1h02m"}, {100 * 3600.0, "4d04h"}, {-1, "?"},
        {NAN, "?"}};
    for (size_t i = 0; i < sizeof etas / sizeof etas[0]; i++) {
        char e[32];
        train_fmt_eta(etas[i].s, e, sizeof e);
        CHECK(!strcmp(e, etas[i].want), "eta of %g s is '%s' (got '%s')", etas[i].s, etas[i].want, e);
    }

    // CPU, no --peak-tflops: FLOP/s, no MFU; ETA on the lines between the first and the last.
    proc p = run(g_train, "tiny_slow", "--steps", "5", "--val-every", "2", NULL);
    char b[64], e2[32], e3[32], e4[32];
    CHECK_PROC(p, p.rc == 0 && has(p.out, "model: 900 FLOP per step (150 FLOP per sample)\n"),
               "the model line: 900 FLOPs per step, 150 per sample, no peak on the CPU");
    CHECK_PROC(p, field(p.out, "step 2 loss ", " ms | ", b, sizeof b) && has(b, "FLOP/s") &&
                      !has(p.out, "MFU"),
               "CPU without --peak-tflops: step lines print FLOP/s (%s) and no MFU", b);
    int e_ok = field(p.out, "step 2 loss ", " | eta ", e2, sizeof e2) &&
               field(p.out, "step 3 loss ", " | eta ", e3, sizeof e3) &&
               field(p.out, "step 4 loss ", " | eta ", e4, sizeof e4);
    double s2 = eta_seconds(e2), s3 = eta_seconds(e3), s4 = eta_seconds(e4);
    CHECK_PROC(p, e_ok && s2 > s3 && s3 > s4 && s4 > 0 && s2 < 2.0,
               "ETA on steps 2..4 decreases (%s, %s, %s: 100 ms steps, evals included)",
               e_ok ? e2 : "?", e_ok ? e3 : "?", e_ok ? e4 : "?");
    CHECK_PROC(p, field(p.out, "step 1 loss ", "", b, sizeof b) && !has(b, "eta") &&
                      field(p.out, "step 5 loss ", "", b, sizeof b) && !has(b, "eta"),
               "no ETA on step 1 (no step time after it yet) nor on the last step");
    CHECK_PROC(p, has(p.out, "\ndone: 5 steps, 30 samples, ") && has(p.out, "FLOP/s), loss ") &&
                      has(p.out, ", best val loss ") && !has(p.out, "checkpoint") &&
                      !has(p.out, "weights") && !strcmp(p.out + strlen(p.out) - 1, "\n") &&
                      !strstr(strstr(p.out, "\ndone: ") + 1, "\n\n"),
               "summary: `done: 5 steps, 30 samples, ...`, loss, best val loss, no checkpoint");
    proc_free(&p);

    // --peak-tflops: MFU on the step lines and in the summary; checkpoint and weights named.
    p = run(g_train, "tiny", "--steps", "4", "--log-every", "2", "--peak-tflops", "1e-9",
            "--checkpoint", P("ckP"), "--save", P("perf.st"), NULL);
    char ck[600], line[1200];
    snprintf(ck, sizeof ck, ", checkpoint %s/step_00000004, weights %s\n", P("ckP"), P("perf.st"));
    CHECK_PROC(p, p.rc == 0 && field(p.out, "step 2 loss ", " | MFU ", b, sizeof b) && has(b, "%") &&
                      has(p.out, "; peak 1 kFLOP/s (--peak-tflops)\n"),
               "--peak-tflops 1e-9 (1000 FLOP/s): MFU on the step lines (%s), the peak named", b);
    const char* d = strstr(p.out, "\ndone: 4 steps, 24 samples, ");
    snprintf(line, sizeof line, "%.*s", d ? (int)strcspn(d + 1, "\n") : 0, d ? d + 1 : "");
    CHECK_PROC(p, d && has(line, " samples/s, MFU ") && has(line, "), loss ") && has(p.out, ck) &&
                      !has(line, "val loss"),
               "summary with MFU, the checkpoint DIR/step_N and the weights: %s", line);
    proc_free(&p);

    // No model FLOPs (tok: an embedding lookup only): no FLOP/s or MFU even with a peak.
    p = run(g_train, "tok", "--steps", "2", "--peak-tflops", "100", NULL);
    CHECK_PROC(p, p.rc == 0 && !has(p.out, "FLOP") && !has(p.out, "MFU") &&
                      has(p.out, "done: 2 steps, 48 tokens, ") && has(p.out, " tok/s), loss "),
               "a model without FLOPs: no FLOP/s, no MFU; summary in tokens (2 x 24)");
    proc_free(&p);
}

// ---- main -------------------------------------------------------------------------------

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 4) {
        fprintf(stderr, "usage: %s TINY_TRAIN TINY_CONFORMANCE WORKDIR\n", argv[0]);
        return 2;
    }
    g_train = argv[1];
    g_conf = argv[2];
    g_dir = argv[3];
    rt_kernels_init();
    test_fnv_and_init();
    test_synthetic();
    test_lr_schedule();
    test_shard_and_roundtrip();
    test_trace_paths();
    test_process_trace();
    test_one_process();
    test_basic_run();
    test_eval();
    test_resume();
    test_frozen();
    test_bad_weights();
    test_data();
    test_divergence();
    test_setup_failures();
    test_bad_args();
    test_perf();
    test_conformance();
    return check_summary();
}
