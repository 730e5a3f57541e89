// The host-only parts of rt_cudnn.h: argument checks with their one-line reasons, and the
// [B, heads, T, HD] view cuDNN gets of the runtime's packed [B,T,heads*HD] tensors (a
// gradient's rows possibly longer: a column slice of a wider matrix). No cuDNN or CUDA
// call, so tests/cuda/test_cudnn_host.c checks them on any machine.
#include <stdio.h>

#include "rt_cudnn.h"

// A gradient's row length: 0 (dense) or a multiple of 8 (16-byte rows) of at least width.
static int bad_ld(int ld, int64_t width) { return ld != 0 && (ld < width || ld % 8 != 0); }

int rt_cudnn_sdpa_check(int B, int T, int NH, int NKV, int HD, rt_dtype prec, int ld_dq,
                        int ld_dk, int ld_dv, char* why, size_t why_len) {
    const char* bad = NULL;
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || HD <= 0)
        bad = "B, T, NH, NKV and HD must be positive";
    else if (NH % NKV != 0)
        bad = "NH must be a multiple of NKV (grouped-query attention)";
    else if (prec != RT_BF16 && prec != RT_F16)
        bad = "precision must be bf16 or fp16 (cuDNN's fused attention is 16-bit)";
    else if ((double)B * T * NH * HD > 0x1p40 || (double)B * NH * T * T > 0x1p50)
        bad = "the tensors are too large";
    else if (bad_ld(ld_dq, (int64_t)NH * HD) || bad_ld(ld_dk, (int64_t)NKV * HD) ||
             bad_ld(ld_dv, (int64_t)NKV * HD))
        bad = "a gradient's row length must be 0 (dense) or a multiple of 8 >= its width";
    else if ((double)B * T * ld_dq > 0x1p40 || (double)B * T * ld_dk > 0x1p40 ||
             (double)B * T * ld_dv > 0x1p40)
        bad = "the gradients' rows are too long";
    if (!bad) return 0;
    if (why && why_len)
        snprintf(why, why_len,
                 "cuDNN attention: %s (got B=%d T=%d NH=%d NKV=%d HD=%d %s ld_dq=%d ld_dk=%d "
                 "ld_dv=%d)", bad, B, T, NH, NKV, HD, rt_dtype_name(prec), ld_dq, ld_dk, ld_dv);
    return -1;
}

void rt_cudnn_sdpa_layout(int B, int T, int heads, int HD, int ld, int transpose,
                          int64_t dim[4], int64_t stride[4]) {
    const int64_t row = ld ? ld : (int64_t)heads * HD;  // elements from one token to the next
    dim[0] = B, dim[1] = heads, dim[2] = T, dim[3] = HD;
    stride[0] = (int64_t)T * row, stride[1] = HD, stride[2] = row, stride[3] = 1;
    if (transpose) {
        int64_t t = dim[2];
        dim[2] = dim[3], dim[3] = t;
        t = stride[2];
        stride[2] = stride[3], stride[3] = t;
    }
}

size_t rt_cudnn_sdpa_stats_floats(int B, int NH, int T) { return (size_t)B * NH * T; }
