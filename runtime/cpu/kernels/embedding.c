// Embedding lookup (nn.Embedding): row gather forward, row scatter-add backward.
#include "rt_kernels.h"

#include <string.h>

#include "kcheck.h"

// ----------------------------------------------------------------------------
// forward: out[N,C] = weight[ids[n], :]

void rt_embedding_forward(float* out, const int32_t* ids, const float* weight, int N, int C,
                          int V) {
    for (int n = 0; n < N; n++) {
        int32_t id = ids[n];
        RT_KCHECK(id >= 0 && id < V, RT_KHINT_EMBEDDING_ID, RT_KMSG_EMBEDDING_ID, (int)id, n, V);
        memcpy(out + (size_t)n * C, weight + (size_t)id * C, (size_t)C * sizeof(float));
    }
}

// ----------------------------------------------------------------------------
// backward (accumulating): dweight[ids[n], :] += dout[n, :], in row order so a repeated
// id sums its rows deterministically.

void rt_embedding_backward(float* dweight, const float* dout, const int32_t* ids, int N, int C,
                           int V) {
    for (int n = 0; n < N; n++) {
        int32_t id = ids[n];
        RT_KCHECK(id >= 0 && id < V, RT_KHINT_EMBEDDING_ID, RT_KMSG_EMBEDDING_ID, (int)id, n, V);
        float* dw = dweight + (size_t)id * C;
        const float* d = dout + (size_t)n * C;
        for (int c = 0; c < C; c++) dw[c] += d[c];
    }
}

// ----------------------------------------------------------------------------
// position ids

void rt_arange_i32(int32_t* ids, int n, int32_t start) {
    for (int i = 0; i < n; i++) ids[i] = start + i;
}
