// Losses: the "sum" loss of the PyTorch tests (model(inp).sum()) and cross-entropy with
// mean reduction, fused with its softmax so no probabilities buffer is needed.
#include "rt_kernels.h"

#include <math.h>

#include "kcheck.h"
#include "kround.h"
#include "vmath.h"

// ----------------------------------------------------------------------------
// sum loss: loss = sum(logits)

void rt_sum_loss_forward(float* loss, const float* logits, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += logits[i];
    loss[0] = (float)s;
}

// d(sum)/d(logit) = 1 for every element, times the incoming dloss.
void rt_sum_loss_backward(float* dlogits, size_t n, const float* dloss, int assign) {
    const int as = assign & RT_ASSIGN_1;
    const float d = *dloss;
    for (size_t i = 0; i < n; i++) dlogits[i] = RT_KBASE(dlogits[i], as) + d;
}

// ----------------------------------------------------------------------------
// cross-entropy: loss_n = logsumexp(logits[n,:]) - logits[n, target_n], mean over rows
// whose target is not RT_IGNORE_INDEX

static void ce_check_target_(int32_t t, int n, int V) {
    RT_KCHECK(t == RT_IGNORE_INDEX || (t >= 0 && t < V), RT_KHINT_TARGET, RT_KMSG_TARGET, (int)t,
              n, V);
}

// y[j] = RT_KBASE(y[j], assign) + exp(x[j] - mx) * scale for j < n, in a loop that
// vectorises (vmath.h).
RT_VEC_CLONES
static void exp_shifted_(float* y, const float* x, int n, float mx, float scale, int assign) {
    for (int j = 0; j < n; j++) y[j] = RT_KBASE(y[j], assign) + rt_vexpf(x[j] - mx) * scale;
}

// max and sum(exp(x - max)) of one row; the max shift keeps exp from overflowing. The
// exps a chunk at a time, then summed in order.
static void row_lse_(const float* x, int V, float* mx_out, double* sum_out) {
    float mx = x[0];
    for (int j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    double s = 0.0;
    float e[256];
    for (int j0 = 0; j0 < V; j0 += 256) {
        const int n = V - j0 < 256 ? V - j0 : 256;
        exp_shifted_(e, x + j0, n, mx, 1.0f, 1);
        for (int j = 0; j < n; j++) s += e[j];
    }
    *mx_out = mx;
    *sum_out = s;
}

void rt_cross_entropy_forward(float* loss, float* losses, const float* logits,
                              const int32_t* targets, int N, int V) {
    double total = 0.0;
    int count = 0;
    for (int n = 0; n < N; n++) {
        const int32_t t = targets[n];
        ce_check_target_(t, n, V);
        if (t == RT_IGNORE_INDEX) {
            if (losses) losses[n] = 0.0f;
            continue;
        }
        const float* x = logits + (size_t)n * V;
        float mx;
        double s;
        row_lse_(x, V, &mx, &s);
        const double l = log(s) + (double)mx - (double)x[t];
        if (losses) losses[n] = (float)l;
        total += l;
        count++;
    }
    // 0/0 = NaN when every target is ignored, as PyTorch's mean reduction.
    loss[0] = (float)(total / (double)count);
}

void rt_cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets,
                               int N, int V, const float* dloss, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_cross_entropy_backward");
    const int as = assign & RT_ASSIGN_1;
    int count = 0;
    for (int n = 0; n < N; n++) {
        ce_check_target_(targets[n], n, V);
        if (targets[n] != RT_IGNORE_INDEX) count++;
    }
    if (count == 0) {  // no row contributes: zero gradient, as PyTorch
        if (as)
            for (size_t i = 0; i < (size_t)N * V; i++) dlogits[i] = 0.0f;
        return;
    }
    const double g = (double)*dloss / (double)count;
    for (int n = 0; n < N; n++) {
        const int32_t t = targets[n];
        float* dx = dlogits + (size_t)n * V;
        if (t == RT_IGNORE_INDEX) {  // adds 0
            if (as)
                for (int j = 0; j < V; j++) dx[j] = 0.0f;
            continue;
        }
        const float* x = logits + (size_t)n * V;
        float mx;
        double s;
        row_lse_(x, V, &mx, &s);
        const float gs = (float)(g / s);  // softmax_j * g = exp(x_j - mx) * (g / s)
        exp_shifted_(dx, x, V, mx, gs, as);
        dx[t] -= (float)g;
        rt_kround_buf(dx, (size_t)V, dt);
    }
}

// The CPU has no second read to save: the two kernels, in order.
void rt_cross_entropy_forward_backward(float* dlogits, float* loss, const float* logits,
                                       const int32_t* targets, int N, int V, const float* dloss,
                                       rt_dtype dt, int assign) {
    rt_cross_entropy_forward(loss, NULL, logits, targets, N, V);
    rt_cross_entropy_backward(dlogits, logits, targets, N, V, dloss, dt, assign);
}
