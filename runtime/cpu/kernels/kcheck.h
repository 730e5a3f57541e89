// Internal to the CPU kernels: the argument checks shared with the CUDA kernels, and the
// column-block width of their reductions.
#ifndef FSDPGEN_KERNELS_CPU_KCHECK_H
#define FSDPGEN_KERNELS_CPU_KCHECK_H

#include "../../common/kcheck.h"  // RT_KCHECK, RT_KCHECK_DT

// Column-block width for reductions over rows (bias / norm-weight gradients): the double
// accumulators of one block fit in L1 while rows stream through contiguously.
#define RT_COLBLOCK 64

#endif
