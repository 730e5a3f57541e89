// data_feed.c — the inputs of each step and of each eval's validation batches: token
// batches from the --data / --val-data file (rt_data.h's offset contract, shape {world,
// n_forward, batch, seq_len}, or n_micro 1 for validation), or synthetic tokens / float
// inputs drawn from Philox keyed by (seed, step, microbatch, rank, index), so that every
// step's data depends only on its index (what makes --resume bit-identical).
#include <stdio.h>
#include <string.h>

#include "rt_kernels.h"
#include "rt_train.h"
#include "train_internal.h"

// ---- sizes ------------------------------------------------------------------------------

int64_t train_input_numel(const rt_model* m) {
    if (m->tokens) return m->batch * m->seq_len;
    int64_t n = 1;
    for (int d = 0; d < m->input_ndim; d++) n *= m->input_shape[d];
    return n;
}

int64_t train_items_per_step(const rt_model* m) {
    int64_t per = m->tokens ? m->batch * m->seq_len : (m->input_ndim > 0 ? m->input_shape[0] : 1);
    return (int64_t)m->world * m->n_forward * per;
}

// ---- synthetic --------------------------------------------------------------------------

static uint64_t fnv_bytes(uint64_t h, const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    return fnv_bytes(h, b, 8);
}

uint64_t rt_train_data_stream(int64_t step, int64_t micro, int64_t rank) {
    uint64_t h = fnv_bytes(0xcbf29ce484222325ull, (const unsigned char*)"data", 4);
    h = fnv_u64(h, (uint64_t)step);
    h = fnv_u64(h, (uint64_t)micro);
    return fnv_u64(h, (uint64_t)rank);
}

static int32_t synth_token(uint64_t seed, uint64_t stream, uint64_t e, int64_t vocab) {
    int64_t t = (int64_t)((double)rt_dropout_uniform(seed, stream, e) * (double)vocab);
    return (int32_t)(t < vocab ? t : vocab - 1);
}

void rt_train_synthetic_tokens(uint64_t seed, int64_t vocab, int64_t step, int64_t micro,
                               int64_t rank, int64_t batch, int64_t seq_len, int32_t* tokens,
                               int32_t* targets) {
    uint64_t s = rt_train_data_stream(step, micro, rank);
    for (int64_t b = 0; b < batch; b++) {
        uint64_t row = (uint64_t)(b * (seq_len + 1));
        // Each draw once: targets are the tokens shifted by one.
        int32_t prev = synth_token(seed, s, row, vocab);
        for (int64_t t = 0; t < seq_len; t++) {
            int32_t next = synth_token(seed, s, row + (uint64_t)t + 1, vocab);
            tokens[b * seq_len + t] = prev;
            if (targets) targets[b * seq_len + t] = next;
            prev = next;
        }
    }
}

void rt_train_synthetic_inputs(uint64_t seed, int64_t step, int64_t micro, int64_t rank,
                               int64_t n, float* out) {
    uint64_t s = rt_train_data_stream(step, micro, rank);
    for (int64_t e = 0; e < n; e++) out[e] = 2.0f * rt_dropout_uniform(seed, s, (uint64_t)e) - 1.0f;
}

// ---- per step ---------------------------------------------------------------------------

// Fills forward item `item`'s input: microbatch `micro` of step `s` from the token file
// `data` cut into n_micro microbatches per step, or without a file the synthetic batch of
// (synth_step, micro).
static void feed_item(train_run* run, rt_rank* R, int item, const rt_data* data, int64_t n_micro, int64_t s,
                      int64_t micro, int64_t synth_step) {
    const rt_model* m = run->m;
    if (!m->tokens) {
        rt_train_synthetic_inputs(run->seed, synth_step, micro, R->rank, train_input_numel(m), R->inputs[item]);
        return;
    }
    if (!data) {
        rt_train_synthetic_tokens(run->seed, m->vocab, synth_step, micro, R->rank, m->batch, m->seq_len,
                                  R->tokens[item], R->targets[item]);
        return;
    }
    rt_data_shape shape = {m->world, n_micro, m->batch, m->seq_len};
    char err[512];
    // Fails when the file was truncated or rewritten since open. The rank then records
    // the error and runs this step on token 0 everywhere (valid for any vocab), so its
    // peers never wait for it in a collective; the exchange after the step fails the run
    // on every rank before anything is printed or saved.
    if (rt_data_batch(data, &shape, s, micro, R->rank, R->tokens[item], R->targets[item], err, sizeof err) != 0) {
        train_fail(run, "%s: %s", data == run->val_data ? "--val-data" : "--data", err);
        memset(R->tokens[item], 0, (size_t)(m->batch * m->seq_len) * sizeof(int32_t));
        memset(R->targets[item], 0, (size_t)(m->batch * m->seq_len) * sizeof(int32_t));
    }
}

void train_feed(train_run* run, rt_rank* R, int64_t s) {
    for (int a = 0; a < run->m->n_forward; a++) feed_item(run, R, a, run->data, run->m->n_forward, s, a, s);
}

void train_feed_val(train_run* run, rt_rank* R, int64_t v) {
    feed_item(run, R, 0, run->val_data, 1, v, 0, -1 - v);
}
