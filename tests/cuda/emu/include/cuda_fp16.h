// cuda_fp16.h of the CUDA emulator (tests/cuda/emu): __nv_bfloat16 and __half come from
// tests/cuda/cuda_emu.h through cuda_runtime.h.
#include "cuda_runtime.h"
