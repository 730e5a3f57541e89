// Private to the kernels of both backends (runtime/cpu/kernels, runtime/cuda/kernels):
// host-side argument checks that abort with a file:line message, and the assign rule of
// backward kernels (RT_KBASE), each defined once for both. Kernels check only what would
// corrupt memory (an id out of range, an unsupported shape) or a generator bug (a dt
// outside the enum); such a failure has nothing to return to, so the process aborts,
// after flushing stdout so the error comes after what the run printed.
#ifndef FSDPGEN_COMMON_KCHECK_H
#define FSDPGEN_COMMON_KCHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define RT_KCHECK(cond, hint, ...)                                                 \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fflush(stdout);                                                        \
            fprintf(stderr, "%s:%d: error: ", __FILE__, __LINE__);                 \
            fprintf(stderr, __VA_ARGS__);                                          \
            fprintf(stderr, " (hint: %s)\n", hint);                                \
            abort();                                                               \
        }                                                                          \
    } while (0)

// A kernel's dt (rt_kernels.h "Mixed precision") or attention's operand precision: the
// CPU multiplies in fp32 whatever it says, but a value outside fp32/bf16/fp16 is a
// generator bug the CUDA backend would reject, so both reject it.
#define RT_KCHECK_DT(dt, kernel)                                                          \
    RT_KCHECK((dt) == RT_F32 || (dt) == RT_BF16 || (dt) == RT_F16,                        \
              "dt is the op's tensor dtype: RT_F32, RT_BF16 or RT_F16", "%s with dtype %d", \
              kernel, (int)(dt))

// Attention's heads: query heads in groups over the kv heads, of a positive head dim.
#define RT_KCHECK_ATTENTION_HEADS(NH, NKV, HD)                                            \
    do {                                                                                  \
        RT_KCHECK((NH) > 0 && (NKV) > 0 && (NH) % (NKV) == 0,                             \
                  "n_heads must be a multiple of n_kv_heads",                             \
                  "attention with %d query heads and %d kv heads", (int)(NH), (int)(NKV)); \
        RT_KCHECK((HD) > 0, "head dim must be positive", "attention head dim %d", (int)(HD)); \
    } while (0)

// Attention's dropout probability: in [0, 1) (p >= 1 would scale by infinity; NaN fails).
#define RT_KCHECK_ATTENTION_DROPOUT(p, kernel)                                             \
    RT_KCHECK((p) >= 0.0f && (p) < 1.0f, "attention dropout p is in [0, 1)",               \
              "%s with dropout p %g", kernel, (double)(p))

// Data checks: token ids and targets out of range. The CPU kernels check them with
// RT_KCHECK, the CUDA kernels on the device (cuda_common.cuh, RTC_DEVICE_FAIL), with the
// same hint and message (a format string literal: "embedding id %d at row %d ...").
#define RT_KHINT_EMBEDDING_ID "check the token data against the model's vocab_size"
#define RT_KMSG_EMBEDDING_ID "embedding id %d at row %d is outside [0, %d)"
#define RT_KHINT_TARGET "targets must be class ids in [0, vocab_size) or -100 (ignored)"
#define RT_KMSG_TARGET "cross-entropy target %d at row %d is outside [0, %d)"

// Rotary embeddings rotate pairs of a head's dims, up to RT_ROPE_MAX_HD (rt_kernels.h).
#define RT_KCHECK_ROPE_HD(HD)                                                    \
    RT_KCHECK((HD) % 2 == 0 && (HD) > 0 && (HD) <= RT_ROPE_MAX_HD,                \
              "rotary embeddings need an even head dim up to RT_ROPE_MAX_HD",    \
              "rope head dim %d is not even or exceeds %d", (int)(HD), RT_ROPE_MAX_HD)

// Packed 16-bit buffers (rt_kernels.h "packed 16-bit storage") hold bf16 or fp16 values.
#define RT_KCHECK_PACKED_DT(dt, kernel)                                                   \
    RT_KCHECK((dt) == RT_BF16 || (dt) == RT_F16,                                          \
              "packed storage is 16-bit: dt RT_BF16 or RT_F16", "%s with dtype %d", kernel, \
              (int)(dt))

// Packed norm outputs are dense rows (rt_kernels.h "packed 16-bit storage").
#define RT_KCHECK_PACKED_ROWS(C, kernel)                                                  \
    RT_KCHECK((C) % 8 == 0, "a packed output's rows are dense: C a multiple of 8",        \
              "%s with C = %d", kernel, (int)(C))

// A residual add and the norm of its sum in one call (rt_residual_*norm_packed_forward): the
// norm reads the sum in the storage the add writes it.
#define RT_KCHECK_RESIDUAL_NORM(packed_add, packed_norm, kernel)                          \
    RT_KCHECK(!((packed_add) & RT_PACKED_OUT) == !((packed_norm) & RT_PACKED_INP),        \
              "the norm reads the sum in the storage the add writes it",                  \
              "%s: packed_add %d, packed_norm %d", kernel, (int)(packed_add),             \
              (int)(packed_norm))

// rt_embedding_packed_forward: a 16-bit dt; packed output rows dense.
#define RT_KCHECK_EMBEDDING_PACKED(C, packed, dt)                                         \
    do {                                                                                  \
        RT_KCHECK_PACKED_DT(dt, "rt_embedding_packed_forward");                          \
        if ((packed) & RT_PACKED_OUT)                                                     \
            RT_KCHECK_PACKED_ROWS(C, "rt_embedding_packed_forward");                      \
    } while (0)

// A packed gradient's row length (rt_kernels.h "Gradient row lengths"): 0 (dense rows), or
// where the gradient is packed a multiple of 8 (16-byte rows, as the GPU's GEMMs read them)
// of at least its width W.
#define RT_KCHECK_PACKED_LD(ld, W, is_packed, grad, kernel)                                 \
    RT_KCHECK((ld) == 0 || ((is_packed) && (ld) >= (W) && (ld) % 8 == 0),                   \
              "a gradient's row length is 0 (dense) or, packed, a multiple of 8 >= its width", \
              "%s: %s with row length %d, width %d, %s", kernel, grad, (int)(ld), (int)(W),   \
              (is_packed) ? "packed" : "fp32 storage")

// A row length (rt_kernels.h "Gradient row lengths": rt_linear_packed_backward's ld_dout,
// rt_swiglu_packed_backward's ld_da and ld_db, 0 already replaced by the dense one):
// packed, a multiple of 8 of at least the width W (a column slice of a wider 16-bit matrix,
// or the operand's own rows of RT_LD16(W)); in fp32 storage W itself (dense rows).
#define RT_KCHECK_ROW_LD(ld, W, is_packed, what, kernel)                                      \
    RT_KCHECK((is_packed) ? (ld) >= (W) && (ld) % 8 == 0 : (ld) == (W),                       \
              "a row length is, packed, a multiple of 8 >= the width; in fp32 storage, the "  \
              "width",                                                                        \
              "%s: %s with row length %d, width %d, %s", kernel, what, (int)(ld), (int)(W),    \
              (is_packed) ? "packed" : "fp32 storage")

// A linear's dout in rows of ld_dout (RT_KCHECK_ROW_LD; 0 becomes the dense rows' length,
// in place): packed with OC not a multiple of 8, it is its own rows of RT_LD16(OC), zero
// padding, not a slice of a wider matrix: the GPU's dinp GEMM sums over OC rounded up to 8
// (linear.cu), which the padding's zeros keep exact.
#define RT_KCHECK_LINEAR_DOUT_LD(ld, OC, packed, kernel)                                      \
    do {                                                                                      \
        if ((ld) == 0) (ld) = (packed) & RT_PACKED_OUT ? RT_LD16(OC) : (OC);                  \
        RT_KCHECK_ROW_LD(ld, OC, (packed) & RT_PACKED_OUT, "dout", kernel);                    \
        RT_KCHECK(!((packed) & RT_PACKED_OUT) || (OC) % 8 == 0 || (ld) == RT_LD16(OC),         \
                  "a packed dout is a column slice only with OC a multiple of 8; else its "   \
                  "rows are RT_LD16(OC)",                                                     \
                  "%s: packed dout with row length %d, width %d", kernel, (int)(ld), (int)(OC)); \
    } while (0)

// A linear's dinp in rows of ld_dinp (rt_kernels.h "Gradient row lengths"; 0 becomes the
// dense rows' length, in place): a column slice (not 0) is written, not added to (an
// addition reads dense rows), packed in rows of a multiple of 8 >= C (RT_KCHECK_PACKED_LD),
// and C a multiple of 8: the GPU's GEMM writes C rounded up to 8 columns of each row.
#define RT_KCHECK_LINEAR_DINP_LD(ld, C, dinp, packed, assign, kernel)                      \
    do {                                                                                   \
        RT_KCHECK((ld) == 0 || ((dinp) && ((assign) & RT_ASSIGN_1)),                       \
                  "ld_dinp is 0 unless dinp is given and assigned (RT_ASSIGN_1)",          \
                  "%s: dinp %swith row length %d and assign %d", kernel,                   \
                  (dinp) ? "" : "NULL ", (int)(ld), (int)(assign));                        \
        RT_KCHECK_PACKED_LD(ld, C, (packed) & RT_PACKED_DINP, "dinp", kernel);             \
        RT_KCHECK((ld) == 0 || (C) % 8 == 0,                                               \
                  "a packed dinp is a column slice only with C a multiple of 8; else "     \
                  "ld_dinp is 0",                                                          \
                  "%s: packed dinp with row length %d, width %d", kernel, (int)(ld), (int)(C)); \
        if ((ld) == 0) (ld) = (packed) & RT_PACKED_DINP ? RT_LD16(C) : (C);                \
    } while (0)

// swiglu's packed backward (rt_swiglu_packed_backward): n values in rows of C, whose
// gradients da and db have rows of ld_da and ld_db (RT_KCHECK_ROW_LD; 0 becomes C, in
// place).
#define RT_KCHECK_SWIGLU_ROWS(n, C, da, db, ld_da, ld_db, packed, kernel)                  \
    do {                                                                                   \
        RT_KCHECK((C) > 0 && (size_t)(n) % (size_t)(C) == 0,                               \
                  "swiglu's n values are rows of C: C > 0 and n a multiple of C",          \
                  "%s with n = %zu, C = %d", kernel, (size_t)(n), (int)(C));               \
        if ((ld_da) == 0) (ld_da) = (C);                                                   \
        if ((ld_db) == 0) (ld_db) = (C);                                                   \
        if (da) RT_KCHECK_ROW_LD(ld_da, C, (packed) & RT_PACKED_DINP, "da", kernel);       \
        if (db) RT_KCHECK_ROW_LD(ld_db, C, (packed) & RT_PACKED_DINP2, "db", kernel);      \
    } while (0)

// A linear's packed weight (RT_PACKED_INP2) is dense 16-bit rows that the GPU's GEMMs read
// in place, without the zero rows a copy gets up to the next multiple of 8 (linear.cu).
#define RT_KCHECK_PACKED_WEIGHT(OC, C, packed, kernel)                                    \
    RT_KCHECK(!((packed) & RT_PACKED_INP2) || ((OC) % 8 == 0 && (C) % 8 == 0),             \
              "a packed weight is [OC, C] with OC and C multiples of 8",                  \
              "%s with a packed [%d, %d] weight", kernel, (int)(OC), (int)(C))

#define RT_KCHECK_PACKED_BIAS(OC, packed, kernel)                                         \
    RT_KCHECK(!((packed) & RT_PACKED_INP3) || (OC) % 8 == 0,                               \
              "a linear's packed bias has OC values, OC a multiple of 8",                 \
              "%s with a packed bias of %d values", kernel, (int)(OC))

// Packed parameter gradients (RT_PACKED_DWEIGHT) are assigned: adding to a 16-bit value
// would round it twice. A linear's are dense [OC, C] rows and OC values (its GEMM writes
// the rows in place).
#define RT_KCHECK_PACKED_DWEIGHT(packed, assign, kernel)                                   \
    RT_KCHECK(!((packed) & RT_PACKED_DWEIGHT) || ((assign) & RT_ASSIGN_DWEIGHT),           \
              "packed parameter gradients are assigned: pass RT_ASSIGN_DWEIGHT",          \
              "%s with RT_PACKED_DWEIGHT and assign %d", kernel, (int)(assign))
#define RT_KCHECK_PACKED_DWEIGHT_LINEAR(OC, C, packed, kernel)                             \
    RT_KCHECK(!((packed) & RT_PACKED_DWEIGHT) || ((OC) % 8 == 0 && (C) % 8 == 0),          \
              "a packed dweight is [OC, C] with OC and C multiples of 8",                 \
              "%s with a packed [%d, %d] dweight", kernel, (int)(OC), (int)(C))

// Every check of rt_linear_packed_backward's (and rt_linear_scaled_packed_backward's)
// arguments, one list for both backends; kernel names the caller.
#define RT_KCHECK_LINEAR_PACKED_BACKWARD(dinp, OC, C, ld_dout, ld_dinp, packed, dt, assign, \
                                         kernel)                                           \
    do {                                                                                   \
        const char* kernel_ = kernel;                                                      \
        RT_KCHECK_PACKED_DT(dt, kernel_);                                                  \
        RT_KCHECK_PACKED_WEIGHT(OC, C, packed, kernel_);                                   \
        RT_KCHECK_LINEAR_DOUT_LD(ld_dout, OC, packed, kernel_);                            \
        RT_KCHECK_LINEAR_DINP_LD(ld_dinp, C, dinp, packed, assign, kernel_);               \
        RT_KCHECK_PACKED_DWEIGHT(packed, assign, kernel_);                                 \
        RT_KCHECK_PACKED_DWEIGHT_LINEAR(OC, C, packed, kernel_);                           \
    } while (0)

// A scaled linear's alpha (rt_kernels.h rt_linear_scaled_forward): a power of two, which
// scales exactly (and keeps the sign of a zero, which a negative one would flip where the
// scale's kernel does not), and dt fp32 or bf16, whose subnormals begin where fp32's do.
#define RT_KCHECK_LINEAR_ALPHA(alpha, dt, kernel)                                      \
    do {                                                                               \
        int e_;                                                                        \
        RT_KCHECK((alpha) > 0.0f && frexpf(alpha, &e_) == 0.5f,                       \
                  "a scaled linear's alpha is a power of two",                         \
                  "%s with alpha %g", kernel, (double)(alpha));                        \
        RT_KCHECK((dt) == RT_F32 || (dt) == RT_BF16,                                   \
                  "a scaled linear's dt is RT_F32 or RT_BF16", "%s with dtype %d",     \
                  kernel, (int)(dt));                                                  \
    } while (0)

// swiglu(x, x)'s or x + x's one gradient buffer adds both contributions: it cannot be
// packed.
#define RT_KCHECK_PACKED_ALIAS(da, db, packed, kernel)                                    \
    RT_KCHECK(!(da) || (da) != (db) || !((packed) & (RT_PACKED_DINP | RT_PACKED_DINP2)),  \
              "da and db are one buffer only in fp32 storage",                            \
              "%s with da == db packed", kernel)

// Lowmem attention backward: gradient outputs that are one buffer take both contributions
// in separate stores (the CUDA kernels write dQ and dK/dV in two launches), so they cannot
// be rounded to a 16-bit dt at their store.
#define RT_KCHECK_ATTENTION_ALIAS(dq, dk, dv, dt)                                      \
    RT_KCHECK((dt) == RT_F32 || !(((dq) && ((dq) == (dk) || (dq) == (dv))) ||           \
                                  ((dk) && (dk) == (dv))),                             \
              "gradient outputs that are one buffer need dt RT_F32",                    \
              "lowmem attention backward with aliased dq/dk/dv and dt %d", (int)(dt))

// ---- the assign rule --------------------------------------------------------------------

// The value a backward kernel adds its contribution to: the gradient's current value, or
// 0 where the call assigns it (rt_kernels.h "Assign"; 0 + x keeps the bits of accumulating
// onto a zeroed buffer). x is not read when assigning. Host and device code alike.
#define RT_KBASE(x, assigning) ((assigning) ? 0.0f : (x))

#endif
