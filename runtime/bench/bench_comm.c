// bench_comm: an nccl-tests-style bandwidth table of all-gather and reduce-scatter over
// rt_comm (threads or NCCL backend), with data checks, plus this machine's single-thread
// memcpy bandwidth measured in the same run so the bus bandwidth can be read as a
// fraction of it. `./fsdpgen bench comm ARGS` execs this binary.
//
//   size    bytes of the whole buffer: all-gather output / reduce-scatter input
//   count   elements in that buffer (each rank sends or receives count / world)
//   algbw   size / time;  busbw = algbw * (world - 1) / world  (nccl-tests' factor)
//   #wrong  elements (over all ranks) that differ from the expected values
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt_comm.h"

// ---- options ----------------------------------------------------------------------------

typedef struct opts {
    int world;
    int nccl;
    rt_dtype dtype;
    int64_t min_bytes, max_bytes;
    int iters;   // 0: automatic (fewer for large sizes)
    int warmup;
    int ops;     // bit 0 all_gather, bit 1 reduce_scatter
    int check;
} opts;

static void usage(FILE* f) {
    fprintf(f,
            "usage: bench_comm [--world N] [--backend threads|nccl] [--dtype fp32|bf16|fp16]\n"
            "                  [--min-bytes B] [--max-bytes B] [--op all|all_gather|reduce_scatter]\n"
            "                  [--iters N] [--warmup N] [--no-check]\n"
            "  sizes accept K, M, G suffixes (powers of 1024); defaults: --world 4 (threads) or\n"
            "  every visible GPU (nccl), fp32, 1K to 256M, automatic iterations\n");
}

static int parse_bytes(const char* s, int64_t* out) {
    char* end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0) return -1;
    int64_t mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1024, end++;
    else if (*end == 'M' || *end == 'm') mult = 1024 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mult = (int64_t)1024 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end || v > INT64_MAX / mult) return -1;
    *out = (int64_t)v * mult;
    return 0;
}

static int parse_int(const char* s, int* out) {
    char* end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 1 << 20) return -1;
    *out = (int)v;
    return 0;
}

// What an option takes, for the error line of a bad value.
static const char* allowed_values(const char* opt) {
    if (!strcmp(opt, "--backend")) return "threads or nccl";
    if (!strcmp(opt, "--dtype")) return "fp32, bf16 or fp16";
    if (!strcmp(opt, "--op")) return "all, all_gather or reduce_scatter";
    if (!strcmp(opt, "--min-bytes") || !strcmp(opt, "--max-bytes")) return "a size >= 1 such as 4096, 64K or 1G";
    if (!strcmp(opt, "--warmup")) return "an integer from 0 to 1048576";
    return "an integer from 1 to 1048576";
}

static int parse_args(int argc, char** argv, opts* o) {
    *o = (opts){.world = -1, .dtype = RT_F32, .min_bytes = 1024, .max_bytes = (int64_t)256 << 20,
                .warmup = 2, .ops = 3, .check = 1};
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--no-check")) {
            o->check = 0;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_comm: error: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--world")) bad = parse_int(v, &o->world) || o->world < 1;
        else if (!strcmp(a, "--backend")) {
            if (!strcmp(v, "threads")) o->nccl = 0;
            else if (!strcmp(v, "nccl")) o->nccl = 1;
            else bad = 1;
        } else if (!strcmp(a, "--dtype")) bad = rt_dtype_parse(v, &o->dtype) || !rt_dtype_is_float(o->dtype);
        else if (!strcmp(a, "--min-bytes")) bad = parse_bytes(v, &o->min_bytes) || o->min_bytes < 1;
        else if (!strcmp(a, "--max-bytes")) bad = parse_bytes(v, &o->max_bytes) || o->max_bytes < 1;
        else if (!strcmp(a, "--iters")) bad = parse_int(v, &o->iters) || o->iters < 1;
        else if (!strcmp(a, "--warmup")) bad = parse_int(v, &o->warmup);
        else if (!strcmp(a, "--op")) {
            if (!strcmp(v, "all")) o->ops = 3;
            else if (!strcmp(v, "all_gather")) o->ops = 1;
            else if (!strcmp(v, "reduce_scatter")) o->ops = 2;
            else bad = 1;
        } else {
            fprintf(stderr, "bench_comm: error: unknown option %s (options: --world, --backend, --dtype, "
                    "--min-bytes, --max-bytes, --op, --iters, --warmup, --no-check, --help)\n", a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "bench_comm: error: bad value '%s' for %s (allowed: %s)\n", v, a, allowed_values(a));
            return -1;
        }
    }
    if (o->min_bytes > o->max_bytes) {
        fprintf(stderr, "bench_comm: error: --min-bytes is larger than --max-bytes\n");
        return -1;
    }
    return 0;
}

// ---- timing -----------------------------------------------------------------------------

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Fewer iterations for large sizes so the whole table stays around a minute.
static int iters_for(const opts* o, int64_t bytes) {
    if (o->iters) return o->iters;
    int64_t n = ((int64_t)1 << 30) / bytes;
    return n < 5 ? 5 : n > 200 ? 200 : (int)n;
}

// One thread's memcpy bandwidth (bytes copied per second) on 64 MiB buffers: 6 timings of
// 4 copies each after a warm-up. Returns the best; *mean gets the mean over all 24 copies.
// The ratios use the best (conservative: on a shared machine a slower reading is someone
// else's load, and a higher baseline only lowers the ratios).
static double memcpy_bw(double* mean) {
    size_t n = (size_t)64 << 20;
    char* a = malloc(n);
    char* b = malloc(n);
    *mean = 0;
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    memcpy(b, a, n);
    double best = 0, total = 0;
    for (int rep = 0; rep < 6; rep++) {
        double t0 = now_s();
        for (int i = 0; i < 4; i++) {
            memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
            __asm__ volatile("" : : "r"(a), "r"(b) : "memory");  // keep the copies
        }
        double dt = now_s() - t0;
        total += dt;
        if ((double)n * 4 / dt > best) best = (double)n * 4 / dt;
    }
    *mean = (double)n * 24 / total;
    free(a);
    free(b);
    return best;
}

// ---- data -------------------------------------------------------------------------------

// Small integers in [-2, 2]: sums over up to 128 ranks stay exact in bf16 and fp16.
static float pattern(int rank, int64_t i) { return (float)((rank * 7 + i * 3) % 5 - 2); }

// ---- the ranks --------------------------------------------------------------------------

typedef struct shared {
    const opts* o;
    double mcpy;
    _Atomic long wrong;
    _Atomic int errors;
    double best_bus[2][2];  // [op][inplace] busbw at the largest size
    int64_t best_size[2];
} shared;

typedef struct result {
    double us, algbw, busbw;
    long wrong;
} result;

// Runs op `which` (0 all-gather, 1 reduce-scatter) over `bytes` total, out-of-place or in
// place; every rank calls it, rank 0's timing is returned.
static result run_op(rt_comm* comm, shared* sh, int which, int inplace, int64_t count, void* dsend, void* drecv,
                     float* hf, char* hb, char* hexp) {
    const opts* o = sh->o;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    rt_dtype dt = o->dtype;
    size_t es = rt_dtype_size(dt);
    int64_t per = count / n;  // elements each rank sends (all-gather) or receives (reduce-scatter)
    int st = 0;
    // Inputs: all-gather sends `per` elements, reduce-scatter `count`.
    int64_t nin = which == 0 ? per : count;
    for (int64_t i = 0; i < nin; i++) hf[i] = pattern(r, i);
    rt_convert(hb, dt, hf, RT_F32, (size_t)nin);
    // In place: all-gather input is the rank's block of recv; reduce-scatter output is the
    // rank's block of send.
    char* send = dsend;
    char* recv = drecv;
    const void* in = send;
    void* out = recv;
    if (which == 0 && inplace) in = recv + (size_t)(r * per) * es;
    if (which == 1 && inplace) out = send + (size_t)(r * per) * es;
    int iters = iters_for(o, count * (int64_t)es);
    rt_redop sum = rt_red_sum();
#define DO_OP() \
    (which == 0 ? rt_comm_all_gather(comm, in, recv, per, dt, NULL) \
                : rt_comm_reduce_scatter(comm, send, out, per, dt, sum, NULL))
    // Fill, warm up, time.
    st |= rt_comm_buffer_write(comm, (void*)in, hb, (size_t)nin * es);
    for (int i = 0; i < o->warmup && !st; i++) st |= DO_OP();
    st |= rt_comm_barrier(comm, NULL);
    double t0 = now_s();
    for (int i = 0; i < iters && !st; i++) st |= DO_OP();
    st |= rt_comm_sync(comm, NULL);
    st |= rt_comm_barrier(comm, NULL);
    double dt_s = (now_s() - t0) / iters;
    // Check: refill (an in-place reduce-scatter overwrote its input), run once, compare.
    long wrong = 0;
    if (o->check && !st) {
        st |= rt_comm_buffer_write(comm, (void*)in, hb, (size_t)nin * es);
        st |= DO_OP();
        st |= rt_comm_sync(comm, NULL);
        int64_t nout = which == 0 ? count : per;
        st |= rt_comm_buffer_read(comm, hb, which == 0 ? (const void*)recv : (const void*)out, (size_t)nout * es);
        for (int64_t i = 0; i < nout; i++) {
            float want;
            if (which == 0) {
                want = pattern((int)(i / per), i % per);
            } else {
                want = 0;
                for (int s = 0; s < n; s++) want += pattern(s, r * per + i);
            }
            rt_store_f32(hexp, dt, 0, want);
            wrong += memcmp(hb + i * es, hexp, es) != 0;
        }
    }
#undef DO_OP
    if (st) atomic_fetch_add(&sh->errors, 1);
    atomic_fetch_add(&sh->wrong, wrong);
    st = rt_comm_barrier(comm, NULL);  // every rank's wrong count is in
    result res = {dt_s * 1e6, 0, 0, 0};
    double bytes = (double)count * (double)es;
    res.algbw = bytes / dt_s / 1e9;
    res.busbw = res.algbw * (n - 1) / n;
    res.wrong = atomic_load(&sh->wrong);
    st |= rt_comm_barrier(comm, NULL);
    if (r == 0) atomic_store(&sh->wrong, 0);
    st |= rt_comm_barrier(comm, NULL);
    if (st) atomic_fetch_add(&sh->errors, 1);
    return res;
}

static void bench_rank(rt_comm* comm, void* arg) {
    shared* sh = arg;
    const opts* o = sh->o;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    size_t es = rt_dtype_size(o->dtype);
    size_t maxb = (size_t)o->max_bytes;
    void* dsend = rt_comm_buffer_alloc(comm, maxb);
    void* drecv = rt_comm_buffer_alloc(comm, maxb);
    float* hf = malloc(maxb / es * sizeof(float) + sizeof(float));
    char* hb = malloc(maxb + 16);
    char hexp[8];
    int ok = dsend && drecv && hf && hb;
    // Everyone must agree whether to go on, or the ranks that did allocate would hang.
    // The vote goes through a backend buffer (device memory for nccl).
    float okf = ok ? 1.0f : 0.0f, all_ok = 0;
    void* vote = rt_comm_buffer_alloc(comm, sizeof(float));
    int vst = vote ? rt_comm_buffer_write(comm, vote, &okf, sizeof okf) : RT_ERR_NOMEM;
    if (!vst) vst = rt_comm_all_reduce(comm, vote, vote, 1, RT_F32, rt_red_sum(), NULL);
    if (!vst) vst = rt_comm_buffer_read(comm, &all_ok, vote, sizeof all_ok);
    rt_comm_buffer_free(comm, vote);
    if (!vst && all_ok == (float)n) {
        static const char* names[2] = {"all_gather", "reduce_scatter"};
        if (r == 0) {
            printf("#\n#%-34s %-45s %s\n", "", "out-of-place", "in-place");
            printf("# %-15s %11s %11s %9s %7s %7s %7s %7s %9s %7s %7s %7s %7s\n", "op", "size(B)", "count",
                   "time(us)", "algbw", "busbw", "bus/mcp", "#wrong", "time(us)", "algbw", "busbw", "bus/mcp",
                   "#wrong");
            printf("# %-15s %11s %11s %9s %7s %7s %7s %7s %9s %7s %7s %7s %7s\n", "", "", "(elements)", "",
                   "(GB/s)", "(GB/s)", "", "", "", "(GB/s)", "(GB/s)", "", "");
            fflush(stdout);
        }
        for (int which = 0; which < 2; which++) {
            if (!(o->ops & (1 << which))) continue;
            for (int64_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 2) {
                int64_t count = bytes / (int64_t)es / n * n;
                if (count < n) continue;  // too small to give every rank an element
                result oop = run_op(comm, sh, which, 0, count, dsend, drecv, hf, hb, hexp);
                result ip = run_op(comm, sh, which, 1, count, dsend, drecv, hf, hb, hexp);
                if (r == 0) {
                    double m = sh->mcpy / 1e9;
                    printf("  %-15s %11lld %11lld %9.1f %7.2f %7.2f %7.2f %7ld %9.1f %7.2f %7.2f %7.2f %7ld\n",
                           names[which], (long long)(count * (int64_t)es), (long long)count, oop.us, oop.algbw,
                           oop.busbw, m > 0 ? oop.busbw / m : 0, oop.wrong, ip.us, ip.algbw, ip.busbw,
                           m > 0 ? ip.busbw / m : 0, ip.wrong);
                    fflush(stdout);
                    sh->best_bus[which][0] = oop.busbw;
                    sh->best_bus[which][1] = ip.busbw;
                    sh->best_size[which] = count * (int64_t)es;
                }
                if (atomic_load(&sh->errors)) break;
                if (bytes > INT64_MAX / 2) break;
            }
        }
    } else {
        if (r == 0)
            fprintf(stderr, "bench_comm: error: cannot allocate 2 x %lld bytes on every rank (hint: lower "
                    "--max-bytes or --world)\n", (long long)o->max_bytes);
        atomic_fetch_add(&sh->errors, 1);
    }
    rt_comm_buffer_free(comm, dsend);
    rt_comm_buffer_free(comm, drecv);
    free(hf);
    free(hb);
}

// ---- main -------------------------------------------------------------------------------

int main(int argc, char** argv) {
    opts o;
    if (parse_args(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    if (o.world < 0) {
        if (o.nccl) {
            o.world = rt_nccl_device_count();
            if (o.world < 1) {
                fprintf(stderr, "bench_comm: error: the nccl backend needs a GPU and none is usable\n");
                return 1;
            }
        } else {
            o.world = 4;
        }
    }
    // Two buffers of max-bytes per rank live at once (host memory for threads).
    if (!o.nccl) {
        double need = 2.0 * (double)o.max_bytes * o.world;
        double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        if (have > 0 && need > 0.6 * have) {
            fprintf(stderr, "bench_comm: error: world %d x 2 x %lld bytes needs %.1f GiB, more than 60%% of this "
                    "machine's %.1f GiB (hint: lower --max-bytes)\n", o.world, (long long)o.max_bytes,
                    need / (1 << 30), have / (1 << 30));
            return 2;
        }
    }
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.o = &o;
    double mcpy_mean = 0;
    sh.mcpy = memcpy_bw(&mcpy_mean);
    printf("# bench_comm: backend %s, world %d, dtype %s, sizes %lld..%lld bytes, reduction sum\n",
           o.nccl ? "nccl" : "threads", o.world, rt_dtype_name(o.dtype), (long long)o.min_bytes,
           (long long)o.max_bytes);
    printf("# memcpy bandwidth (1 thread, 64 MiB buffers): best %.2f GB/s, mean %.2f GB/s; bus/mcp = busbw / "
           "best memcpy\n", sh.mcpy / 1e9, mcpy_mean / 1e9);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("# host: %ld cores online\n", cores);
    fflush(stdout);
    double t0 = now_s();
    int rc = o.nccl ? rt_nccl_run(o.world, bench_rank, &sh) : rt_threads_run(o.world, bench_rank, &sh);
    double total = now_s() - t0;
    // Measured again after the table: on a shared machine the two differ when the load
    // changed during the run, which is worth knowing when reading the ratios.
    double mean_end = 0, mcpy_end = memcpy_bw(&mean_end);
    printf("# memcpy bandwidth after the run: best %.2f GB/s, mean %.2f GB/s (the table used best %.2f GB/s; "
           "the summary below uses the higher best)\n", mcpy_end / 1e9, mean_end / 1e9, sh.mcpy / 1e9);
    if (mcpy_end > sh.mcpy) sh.mcpy = mcpy_end;
    static const char* names[2] = {"all_gather", "reduce_scatter"};
    for (int which = 0; which < 2; which++) {
        if (!(o.ops & (1 << which)) || !sh.best_size[which]) continue;
        printf("# %-14s at %lld bytes: busbw %.2f GB/s out-of-place (%.2f of memcpy %.2f GB/s), %.2f GB/s "
               "in-place (%.2f)\n",
               names[which], (long long)sh.best_size[which], sh.best_bus[which][0], sh.best_bus[which][0] / (sh.mcpy / 1e9),
               sh.mcpy / 1e9,
               sh.best_bus[which][1], sh.best_bus[which][1] / (sh.mcpy / 1e9));
    }
    printf("# total time %.1f s, %s\n", total, rc || sh.errors ? "FAILED" : "ok");
    return rc || sh.errors ? 1 : 0;
}
