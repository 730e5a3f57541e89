// Dropout driven by a counter-based RNG (Philox4x32-10, Salmon et al., SC'11): each
// element's draw is a pure function of (seed, stream, global element index), so a
// sharded run, a run split into pieces, and the backward pass all regenerate the exact
// masks of the unsharded forward without storing them. Written values are rounded to dt
// at their stores.
#include "rt_kernels.h"

#include <string.h>

#include "../../common/philox.h"
#include "kround.h"

// ----------------------------------------------------------------------------
// Philox4x32-10 (runtime/common/philox.h): one call yields the 4 lanes of counter block e/4

void rt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    rt_philox_inl(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1], out);
}

float rt_dropout_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return rt_philox_uniform_inl(seed, stream, index);
}

// Applies mask * scale to src, either writing (acc = 0), accumulating (acc = 1) or
// assigning as accumulating onto zeros (acc = 2), and rounds to dt.
static void dropout_apply_(float* dst, const float* src, size_t n, float p, uint64_t seed,
                           uint64_t stream, uint64_t offset, int acc, rt_dtype dt) {
    const float scale = rt_dropout_scale_inl(p);
    size_t i = 0;
    while (i < n) {
        const uint64_t e = offset + i;
        uint32_t o[4];
        rt_philox_block_inl(seed, stream, e >> 2, o);
        // consume the lanes of this block that fall inside [offset, offset + n)
        for (unsigned lane = (unsigned)(e & 3); lane < 4 && i < n; lane++, i++) {
            const float v = rt_philox_u01_inl(o[lane]) >= p ? src[i] * scale : 0.0f;
            dst[i] = rt_kround(acc ? RT_KBASE(dst[i], acc == 2) + v : v, dt);
        }
    }
}

// ----------------------------------------------------------------------------
// forward / backward

void rt_dropout_forward(float* out, const float* inp, size_t n, float p, uint64_t seed,
                        uint64_t stream, uint64_t offset, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_dropout_forward");
    if (p <= 0.0f) {  // exact copy (of values exact in dt), no RNG work (eval mode)
        if (n && out != inp) memmove(out, inp, n * sizeof(float));
        return;
    }
    if (p >= 1.0f) {  // everything dropped (PyTorch returns zeros)
        for (size_t i = 0; i < n; i++) out[i] = 0.0f;
        return;
    }
    dropout_apply_(out, inp, n, p, seed, stream, offset, 0, dt);
}

void rt_dropout_backward(float* dinp, const float* dout, size_t n, float p, uint64_t seed,
                         uint64_t stream, uint64_t offset, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_dropout_backward");
    const int as = assign & RT_ASSIGN_1;
    if (p <= 0.0f) {
        for (size_t i = 0; i < n; i++) dinp[i] = rt_kround(RT_KBASE(dinp[i], as) + dout[i], dt);
        return;
    }
    if (p >= 1.0f) {  // nothing kept: assigned means zeroed
        if (as)
            for (size_t i = 0; i < n; i++) dinp[i] = 0.0f;
        return;
    }
    dropout_apply_(dinp, dout, n, p, seed, stream, offset, as ? 2 : 1, dt);
}
