// Dropout driven by a counter-based RNG (Philox4x32-10, Salmon et al., SC'11): each
// element's draw is a pure function of (seed, stream, global element index), so a
// sharded run, a run split into pieces, and the backward pass all regenerate the exact
// masks of the unsharded forward without storing them. Written values are rounded to dt
// at their stores.
#include "rt_kernels.h"

#include <string.h>

#include "kround.h"

// ----------------------------------------------------------------------------
// Philox4x32-10

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u  // golden ratio
#define PHILOX_W1 0xBB67AE85u  // sqrt(3) - 1

void rt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {  // key schedule: bumped between rounds
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

// ----------------------------------------------------------------------------
// draws: one Philox call yields the 4 lanes of counter block e/4

static inline void philox_block_(uint64_t seed, uint64_t stream, uint64_t block, uint32_t o[4]) {
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    rt_philox4x32_10(ctr, key, o);
}

// Top 24 bits: every value is exactly representable in float and u < 1.
static inline float u01_(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

float rt_dropout_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t o[4];
    philox_block_(seed, stream, index >> 2, o);
    return u01_(o[index & 3]);
}

// Applies mask * scale to src, either writing (acc = 0), accumulating (acc = 1) or
// assigning as accumulating onto zeros (acc = 2), and rounds to dt.
static void dropout_apply_(float* dst, const float* src, size_t n, float p, uint64_t seed,
                           uint64_t stream, uint64_t offset, int acc, rt_dtype dt) {
    const float scale = (float)(1.0 / (1.0 - (double)p));
    size_t i = 0;
    while (i < n) {
        const uint64_t e = offset + i;
        uint32_t o[4];
        philox_block_(seed, stream, e >> 2, o);
        // consume the lanes of this block that fall inside [offset, offset + n)
        for (unsigned lane = (unsigned)(e & 3); lane < 4 && i < n; lane++, i++) {
            const float v = u01_(o[lane]) >= p ? src[i] * scale : 0.0f;
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
