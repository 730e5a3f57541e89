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
// forward over [B,T,NH,HD]: (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)

void rt_rope_forward(float* out, const float* inp, int B, int T, int NH, int HD, float theta,
                     rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_rope_forward");
    RT_KCHECK_ROPE_HD(HD);
    float cs[RT_ROPE_MAX_HD / 2], sn[RT_ROPE_MAX_HD / 2];
    // Position outermost: the trig is computed once per (t, i) and reused for every
    // batch row and head.
    for (int t = 0; t < T; t++) {
        rope_cos_sin_(cs, sn, t, HD, theta);
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                size_t base = (((size_t)b * T + t) * NH + h) * HD;
                const float* x = inp + base;
                float* o = out + base;
                for (int i = 0; i < HD / 2; i++) {
                    float x0 = x[2 * i], x1 = x[2 * i + 1];  // read both first: out == inp ok
                    o[2 * i] = rt_kround(x0 * cs[i] - x1 * sn[i], dt);
                    o[2 * i + 1] = rt_kround(x0 * sn[i] + x1 * cs[i], dt);
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// backward (accumulating): the rotation is orthogonal, so the input gradient is the
// output gradient rotated by -angle: (d0, d1) -> (d0 cos + d1 sin, -d0 sin + d1 cos)

void rt_rope_backward(float* dinp, const float* dout, int B, int T, int NH, int HD,
                      float theta, rt_dtype dt, int assign) {
    const int as = assign & RT_ASSIGN_1;
    RT_KCHECK_DT(dt, "rt_rope_backward");
    RT_KCHECK_ROPE_HD(HD);
    float cs[RT_ROPE_MAX_HD / 2], sn[RT_ROPE_MAX_HD / 2];
    for (int t = 0; t < T; t++) {
        rope_cos_sin_(cs, sn, t, HD, theta);
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                size_t base = (((size_t)b * T + t) * NH + h) * HD;
                const float* d = dout + base;
                float* dx = dinp + base;
                for (int i = 0; i < HD / 2; i++) {
                    float d0 = d[2 * i], d1 = d[2 * i + 1];
                    dx[2 * i] = rt_kround(RT_KBASE(dx[2 * i], as) + (d0 * cs[i] + d1 * sn[i]), dt);
                    dx[2 * i + 1] =
                        rt_kround(RT_KBASE(dx[2 * i + 1], as) + (-d0 * sn[i] + d1 * cs[i]), dt);
                }
            }
        }
    }
}
