// --trace on the CUDA backend: spans timed on the GPU with CUDA events recorded on the
// stream that runs them (compute sections, all-gather copy-in, all-gather, reduce-scatter,
// all-reduce, optimizer), written to the Chrome trace after the step finished, one trace
// thread per stream, so overlap of collectives and compute shows as it happened. The
// step's GPU start is placed on the trace's host clock by measuring back from the moment
// the host saw the step end. Under mpirun each process holds one rank and writes its own
// trace file (runtime/train/driver.c).
#include <stdlib.h>

#include "backend.h"

static cudaEvent_t timing_event(rt_rank* R) {
    cudaEvent_t e;
    CS(R, cudaEventCreate(&e));
    return e;
}

void cs_trace_begin(rt_rank* R) {
    cuda_rank* c = R->backend;
    if (!c->spans) {
        c->spans = calloc(CS_MAX_SPANS, sizeof *c->spans);
        if (!c->spans) rt_rank_die(R, "out of host memory for the trace");
        c->t0 = timing_event(R);
        c->t_end = timing_event(R);
    }
    c->nspans = 0;
    c->section = -1;
    CS(R, cudaEventRecord(c->t0, c->compute));
}

int cs_trace_open(rt_rank* R, cudaStream_t stream, int tid, const char* name, const char* cat) {
    cuda_rank* c = R->backend;
    if (!R->trace || !c->spans) return -1;
    if (c->nspans == CS_MAX_SPANS) {
        c->dropped++;
        return -1;
    }
    cs_span* s = &c->spans[c->nspans];
    if (!s->start) {  // events are made once and reused every step
        s->start = timing_event(R);
        s->end = timing_event(R);
    }
    s->tid = tid;
    s->name = name;
    s->cat = cat;
    CS(R, cudaEventRecord(s->start, stream));
    return c->nspans++;
}

void cs_trace_close(rt_rank* R, int span, cudaStream_t stream) {
    if (span < 0) return;
    CS(R, cudaEventRecord(((cuda_rank*)R->backend)->spans[span].end, stream));
}

void cs_trace_section(rt_rank* R, const char* phase) {
    cuda_rank* c = R->backend;
    if (!c->spans) return;
    cs_trace_close(R, c->section, c->compute);
    c->section = phase ? cs_trace_open(R, c->compute, RT_TRACE_COMPUTE, phase, "compute") : -1;
    if (!phase) CS(R, cudaEventRecord(c->t_end, c->compute));
}

void cs_trace_flush(rt_rank* R) {
    cuda_rank* c = R->backend;
    if (!c->spans) return;
    float total_ms = 0;
    CS(R, cudaEventElapsedTime(&total_ms, c->t0, c->t_end));
    double t0_us = rt_trace_now_us(R->trace) - 1e3 * total_ms;
    for (int k = 0; k < c->nspans; k++) {
        float at = 0, dur = 0;
        CS(R, cudaEventElapsedTime(&at, c->t0, c->spans[k].start));
        CS(R, cudaEventElapsedTime(&dur, c->spans[k].start, c->spans[k].end));
        rt_trace_complete(R->trace, R->rank, c->spans[k].tid, c->spans[k].name, c->spans[k].cat,
                          t0_us + 1e3 * at, 1e3 * dur, NULL, NULL);
    }
    // On the rank that dropped them (its own process's file under mpirun).
    if (c->dropped) {
        rt_trace_instant(R->trace, R->rank, RT_TRACE_COMPUTE, "trace spans dropped (over 4096 per step)",
                         "trace", t0_us, NULL, NULL);
        c->dropped = 0;
    }
    c->nspans = 0;
}
