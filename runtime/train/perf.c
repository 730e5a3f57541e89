// perf.c — how fast a run goes and when it ends: the model FLOPs the generator emitted
// (rt_model.flops_per_step, generator/plan/flops.lua) over the step time as FLOP/s, MFU against
// the devices' peak (--peak-tflops, else the bf16 table peaks.def for a known GPU), the ETA
// from the mean wall time per step after step 1 (step 1 compiles: CUDA graph capture,
// first-touch allocations), and the run's one-line summary.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rt_checkpoint.h"
#include "train_internal.h"

// ---- the peak table ---------------------------------------------------------------------

static const struct {
    const char* name;
    const char* with;
    double tflops;
} peaks[] = {
#define PEAK(name, with, tflops) {name, with, tflops},
#include "peaks.def"
#undef PEAK
};

double train_peak_tflops(const char* device) {
    if (!device || !*device) return 0.0;
    for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++)
        if (strstr(device, peaks[i].name) && (!*peaks[i].with || strstr(device, peaks[i].with)))
            return peaks[i].tflops;
    return 0.0;
}

const char* train_peak_list(void) {
    static char buf[256];
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof peaks / sizeof peaks[0] && n < sizeof buf; i++)
        if (peaks[i].tflops > 0)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s%s%s %g", n ? ", " : "",
                                  peaks[i].name, *peaks[i].with ? " " : "", peaks[i].with,
                                  peaks[i].tflops);
    return buf;
}

// ---- formats ----------------------------------------------------------------------------

// 3 significant digits and a unit: "412 TFLOP", "1.23 GFLOP" (suffix "/s" for rates).
static void fmt_flops(double f, const char* suffix, char* out, size_t cap) {
    static const struct { double scale; const char* unit; } u[] = {
        {1e15, "PFLOP"}, {1e12, "TFLOP"}, {1e9, "GFLOP"}, {1e6, "MFLOP"}, {1e3, "kFLOP"}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
        if (f >= u[i].scale) {
            snprintf(out, cap, "%.3g %s%s", f / u[i].scale, u[i].unit, suffix);
            return;
        }
    snprintf(out, cap, "%.3g FLOP%s", f, suffix);
}

void train_fmt_eta(double s, char* out, size_t cap) {
    if (!(s >= 0) || s > 1e9) snprintf(out, cap, "?");
    else if (s < 9.95) snprintf(out, cap, "%.1fs", s);
    else if (s < 59.5) snprintf(out, cap, "%.0fs", s);
    else {
        long long t = llround(s);
        if (t < 3600) snprintf(out, cap, "%lldm%02llds", t / 60, t % 60);
        else if (t < 100 * 3600) snprintf(out, cap, "%lldh%02lldm", t / 3600, t / 60 % 60);
        else snprintf(out, cap, "%lldd%02lldh", t / 86400, t / 3600 % 24);
    }
}

// ---- the run ----------------------------------------------------------------------------

void train_perf_begin(train_run* run, rt_rank* R) {
    const rt_model* m = run->m;
    char dev[256];
    const int devices = rt_step_device(R, dev, sizeof dev);
    double p = run->o->peak_tflops;  // one device's (the CPU: the machine's)
    if (p <= 0 && devices > 0) p = train_peak_tflops(dev);
    run->peak_flops = p * 1e12 * (devices > 0 ? devices : 1);
    if (run->quiet || m->flops_per_step <= 0) return;
    char f[32], t[32], pk[32];
    fmt_flops((double)m->flops_per_step, "", f, sizeof f);
    fmt_flops((double)m->flops_per_step / (double)train_items_per_step(m), "", t, sizeof t);
    printf("model: %s per step (%s per %s)", f, t, m->tokens ? "token" : "sample");
    if (run->peak_flops > 0) {
        fmt_flops(run->peak_flops, "/s", pk, sizeof pk);
        if (devices > 0)
            printf("; peak %s (%d x %s%s)", pk, devices, dev,
                   run->o->peak_tflops > 0 ? ", --peak-tflops" : "");
        else printf("; peak %s (--peak-tflops)", pk);
    } else if (devices > 0) {
        printf("; no peak known for '%s' (--peak-tflops P: MFU)", dev);
    }
    printf("\n");
}

void train_perf_step(const train_run* run, int64_t i, double dt, double now, char* out,
                     size_t cap) {
    const rt_model* m = run->m;
    size_t n = 0;
    out[0] = 0;
    if (m->flops_per_step > 0 && dt > 0) {
        const double rate = (double)m->flops_per_step / dt;
        char r[32];
        fmt_flops(rate, "/s", r, sizeof r);
        n += (size_t)snprintf(out + n, cap - n, " | %s", r);
        if (run->peak_flops > 0 && n < cap)
            n += (size_t)snprintf(out + n, cap - n, " | MFU %.1f%%",
                                  100.0 * rate / run->peak_flops);
    }
    const int64_t left = run->nsteps - i - 1;
    if (i >= 1 && left > 0 && n < cap) {
        char e[32];
        train_fmt_eta((double)left * (now - run->t_first) / (double)i, e, sizeof e);
        snprintf(out + n, cap - n, " | eta %s", e);
    }
}

void train_perf_done(const train_run* run) {
    const rt_model* m = run->m;
    const train_opts* o = run->o;
    const int64_t steps = run->steps_done;
    const int64_t items = steps * train_items_per_step(m);
    const double wall = run->t_end - run->t_start;
    const char* unit = m->tokens ? "tok" : "samples";
    char line[9000], r[32];
    size_t n = (size_t)snprintf(line, sizeof line, "done: %" PRId64 " steps, %" PRId64 " %s, "
                                "%.*f s", steps, items, m->tokens ? "tokens" : "samples",
                                wall < 10 ? 2 : 1, wall);
    if (wall > 0) {
        n += (size_t)snprintf(line + n, sizeof line - n, " (%.0f %s/s", (double)items / wall, unit);
        const double rate = (double)m->flops_per_step * (double)steps / wall;
        if (m->flops_per_step > 0 && run->peak_flops > 0)
            n += (size_t)snprintf(line + n, sizeof line - n, ", MFU %.1f%%",
                                  100.0 * rate / run->peak_flops);
        else if (m->flops_per_step > 0) {
            fmt_flops(rate, "/s", r, sizeof r);
            n += (size_t)snprintf(line + n, sizeof line - n, ", %s", r);
        }
        n += (size_t)snprintf(line + n, sizeof line - n, ")");
    }
    if (steps > 0)
        n += (size_t)snprintf(line + n, sizeof line - n, ", loss %.4f -> %.4f", run->loss[0],
                              run->loss[steps - 1]);
    if (run->best_val_step > 0)
        n += (size_t)snprintf(line + n, sizeof line - n, ", best val loss %.4f at step %" PRId64,
                              run->best_val, run->best_val_step);
    char dir[4200];
    if (o->checkpoint &&
        rt_ckpt_step_path(o->checkpoint, (uint64_t)(run->start_step + steps), dir, sizeof dir) == 0)
        n += (size_t)snprintf(line + n, sizeof line - n, ", checkpoint %s", dir);
    if (o->save && n < sizeof line) snprintf(line + n, sizeof line - n, ", weights %s", o->save);
    printf("%s\n", line);
}
