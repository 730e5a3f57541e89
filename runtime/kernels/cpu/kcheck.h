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

// Column-block width for reductions over rows (bias / norm-weight gradients): the double
// accumulators of one block fit in L1 while rows stream through contiguously.
#define RT_COLBLOCK 64

#endif
