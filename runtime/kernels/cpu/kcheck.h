// Internal to the CPU kernels: argument checks that abort with a file:line message.
// Kernels check only what would corrupt memory (an id out of range, an unsupported
// shape); such a failure is a generator or data bug, so there is nothing to return.
#ifndef FSDPGEN_KERNELS_CPU_KCHECK_H
#define FSDPGEN_KERNELS_CPU_KCHECK_H

#include <stdio.h>
#include <stdlib.h>

#define RT_KCHECK(cond, hint, ...)                                                 \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: error: ", __FILE__, __LINE__);                 \
            fprintf(stderr, __VA_ARGS__);                                          \
            fprintf(stderr, " (hint: %s)\n", hint);                                \
            abort();                                                               \
        }                                                                          \
    } while (0)

// A kernel's dt (rt_kernels.h "Mixed precision") or attention's operand precision: the
// CPU multiplies in fp32 whatever it says, but a value outside fp32/bf16/fp16 is a
// generator bug the CUDA backend would reject, so it is rejected here too.
#define RT_KCHECK_DT(dt, kernel)                                                          \
    RT_KCHECK((dt) == RT_F32 || (dt) == RT_BF16 || (dt) == RT_F16,                        \
              "dt is the op's tensor dtype: RT_F32, RT_BF16 or RT_F16", "%s with dtype %d", \
              kernel, (int)(dt))

// Column-block width for reductions over rows (bias / norm-weight gradients): the double
// accumulators of one block fit in L1 while rows stream through contiguously.
#define RT_COLBLOCK 64

#endif
