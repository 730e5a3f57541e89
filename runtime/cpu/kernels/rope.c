// Rotary position embeddings (Meta Llama's apply_rotary_emb, complex-pair layout):
// consecutive pairs (x[2i], x[2i+1]) are rotated by angle t * theta^(-2i/HD). out and
// dinp are rounded to dt at their stores.
#include "rt_kernels.h"

#include <math.h>

#include "kround.h"

// ----------------------------------------------------------------------------
// angles: freq_i = 1 / theta^(2i/HD) and angle = t * freq_i, both in float as Meta's
// precompute_freqs_cis does (float32 arange/pow/outer); cos/sin of that float angle.

static void rope_cos_sin_(float* cs, float* sn, int t, int HD, float theta) {
    for (int i = 0; i < HD / 2; i++) {
        float freq = 1.0f / powf(theta, (float)(2 * i) / (float)HD);
        float ang = (float)t * freq;
        cs[i] = (float)cos((double)ang);
        sn[i] = (float)sin((double)ang);
    }
}

// ----------------------------------------------------------------------------
// Forward over [B,T,NH,HD]: (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos), out == inp
// allowed. Backward (back; accumulating, or assigning with as): the rotation is orthogonal,
// so the input gradient is the output gradient rotated by -angle, (d0, d1) ->
// (d0 cos + d1 sin, -d0 sin + d1 cos), added to out (dinp). Position outermost: the trig is
// computed once per (t, i) and reused for every batch row and head.

static void rope_(float* out, const float* inp, int B, int T, int NH, int HD, float theta,
                  rt_dtype dt, int back, int as) {
    RT_KCHECK_ROPE_HD(HD);
    float cs[RT_ROPE_MAX_HD / 2], sn[RT_ROPE_MAX_HD / 2];
    for (int t = 0; t < T; t++) {
        rope_cos_sin_(cs, sn, t, HD, theta);
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                size_t base = (((size_t)b * T + t) * NH + h) * HD;
                const float* x = inp + base;
                float* o = out + base;
                for (int i = 0; i < HD / 2; i++) {
                    float x0 = x[2 * i], x1 = x[2 * i + 1];  // read both first: out == inp ok
                    if (back) {
                        o[2 * i] =
                            rt_kround(RT_KBASE(o[2 * i], as) + (x0 * cs[i] + x1 * sn[i]), dt);
                        o[2 * i + 1] =
                            rt_kround(RT_KBASE(o[2 * i + 1], as) + (-x0 * sn[i] + x1 * cs[i]), dt);
                    } else {
                        o[2 * i] = rt_kround(x0 * cs[i] - x1 * sn[i], dt);
                        o[2 * i + 1] = rt_kround(x0 * sn[i] + x1 * cs[i], dt);
                    }
                }
            }
        }
    }
}

void rt_rope_forward(float* out, const float* inp, int B, int T, int NH, int HD, float theta,
                     rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_rope_forward");
    rope_(out, inp, B, T, NH, HD, theta, dt, 0, 0);
}

void rt_rope_backward(float* dinp, const float* dout, int B, int T, int NH, int HD,
                      float theta, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_rope_backward");
    rope_(dinp, dout, B, T, NH, HD, theta, dt, 1, assign & RT_ASSIGN_1);
}
