// bench.c — the --bench report: throughput from the median step time (steps after the
// first, which pays for first touches and warm-up) and rank 0's split of a step into
// compute (= total - communication - optimizer), exposed communication (time rt_step
// spent waiting in collectives, R->t_comm) and optimizer (R->t_optim); on the CUDA
// backend, whose collectives overlap compute on their own streams, the step time only.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

void train_bench_report(const train_run* run) {
    const rt_model* m = run->m;
    int64_t n = run->steps_done;
    if (n < 1) return;
    int64_t first = n > 1 ? 1 : 0;  // skip the warm-up step when there is another
    int64_t k = n - first;
    double* t = malloc((size_t)k * sizeof(double));
    if (!t) return;
    double total = 0, comm = 0, optim = 0;
    for (int64_t i = 0; i < k; i++) {
        t[i] = run->step_ms[first + i];
        total += run->step_ms[first + i];
        comm += run->comm_ms[first + i];
        optim += run->optim_ms[first + i];
    }
    qsort(t, (size_t)k, sizeof(double), cmp_double);
    double median = k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
    free(t);
    total /= (double)k;
    comm /= (double)k;
    optim /= (double)k;
    double compute = total - comm - optim;
    double pct = total > 0 ? 100.0 / total : 0.0;
    const char* unit = m->tokens ? "tok" : "samples";
    printf("bench: %lld steps (median over steps %lld..%lld): %.3f ms/step, %.0f %s/s\n",
           (long long)n, (long long)(run->start_step + first + 1),
           (long long)(run->start_step + n), median,
           median > 0 ? (double)train_items_per_step(m) / (median * 1e-3) : 0.0, unit);
    if (strcmp(rt_step_backend(), "cpu") != 0) {
        // The collectives run on their own streams, overlapping compute: no host timer
        // can split a step; --trace shows the overlap.
        printf("bench: rank 0 per step (mean): %.3f ms; collectives overlap compute on their "
               "own streams (--trace shows them)\n", total);
        return;
    }
    printf("bench: rank 0 per step (mean): compute %.3f ms (%.1f%%) | exposed communication "
           "%.3f ms (%.1f%%) | optimizer %.3f ms (%.1f%%)\n",
           compute, compute * pct, comm, comm * pct, optim, optim * pct);
}
