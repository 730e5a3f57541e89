// Process-wide setup for the CPU kernels.
#include "rt_kernels.h"

#include <cblas.h>

// ----------------------------------------------------------------------------
// init

void rt_kernels_init(void) {
    // Ranks are threads of one process: each rank's GEMMs must stay on its own thread,
    // or OpenBLAS's pool would multiply the thread count by the world size.
    openblas_set_num_threads(1);
}
