// rt_train.h — the training driver: the main() of a generated training binary and of a
// generated conformance test, plus the deterministic sources they use (parameter init,
// synthetic data) so that a PyTorch reference can reproduce them exactly.
//
// A generated main.c is one line:
//     int main(int argc, char** argv) { return rt_train_main(&<name>_model, argc, argv); }
// and a generated conformance test:
//     return rt_conformance_main(&<name>_model, &<name>_reference_model, argc, argv);
//
// Exit status (docs/cli.md, "Exit status"): 0 success, 1 failure at run time (I/O, a diverged loss, a
// failed check), 2 bad arguments. Every user-facing error is one line starting with
// "fsdpgen: ". Run a binary with --help for its options.
//
// Link: librt_train.a librt_step.a librt_kernels.a librt_io.a librt_core.a
//       -lopenblas -lm -pthread
#ifndef FSDPGEN_RT_TRAIN_H
#define FSDPGEN_RT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "rt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- mains ------------------------------------------------------------------------------

// Trains m on m->world threads (threads backend): parameter init (or --load/--resume),
// --steps steps each printing `step N loss X | T tok/s | M ms | F FLOP/s | MFU | eta` on
// rank 0, then --save / --checkpoint / --trace / --bench and the `done: ...` summary
// (runtime/train/perf.c). Returns the process exit status.
int rt_train_main(const rt_model* m, int argc, char** argv);

// Runs `sharded` and `reference` (the same model planned with mesh {replicate = world,
// shard = 1}) with the same seed and synthetic data (10 steps, --steps N overrides) and
// checks events, collective counts, loss and parameter parity, and the memory peak. Prints
// one PASS/FAIL line per check and `N passed, N failed`; returns 0 when all pass, else 1
// (2 for bad arguments).
int rt_conformance_main(const rt_model* sharded, const rt_model* reference, int argc,
                        char** argv);

// ---- deterministic sources --------------------------------------------------------------
// u(seed, stream, e) below is rt_dropout_uniform (Philox4x32-10, 24-bit uniform in [0, 1)).

// 64-bit FNV-1a of the bytes of s (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t rt_train_fnv1a(const char* s);

// Full value of parameter p (numel(shape) floats, row-major) for `seed`. With
// h = rt_train_fnv1a(p->fqn) and element e:
//   ZEROS 0; ONES 1;
//   UNIFORM -scale + 2 * scale * u(seed, h, e)                    (computed in double);
//   NORMAL  scale * sqrt(-2 ln(1 - u(seed, h, 2e))) * cos(2 pi u(seed, h, 2e + 1))
//           (Box–Muller, computed in double); each value then rounded to fp32.
void rt_train_init_param(const rt_model_param* p, uint64_t seed, float* out);
// Elements [e0, e0 + n) of that value: out[k] is element e0 + k (a rank's rows of it).
void rt_train_init_range(const rt_model_param* p, uint64_t seed, int64_t e0, int64_t n, float* out);

// The RNG stream of the synthetic inputs of forward item `micro` of `rank` at 0-based step
// `step`: FNV-1a over the 4 bytes "data" followed by step, micro and rank as 8-byte
// little-endian integers each.
uint64_t rt_train_data_stream(int64_t step, int64_t micro, int64_t rank);

// Synthetic tokens [batch, seq_len]: with s = rt_train_data_stream(step, micro, rank) and
// tok(e) = min(floor(u(seed, s, e) * vocab), vocab - 1), row b holds
//   tokens[b][t] = tok(b * (seq_len + 1) + t), targets[b][t] = tok(b * (seq_len + 1) + t + 1)
// (targets: the next token of the same stream). targets may be NULL. Meant for vocab
// up to 2^24 (the uniform has 24 bits).
void rt_train_synthetic_tokens(uint64_t seed, int64_t vocab, int64_t step, int64_t micro,
                               int64_t rank, int64_t batch, int64_t seq_len, int32_t* tokens,
                               int32_t* targets);

// Synthetic float inputs: out[e] = 2 * u(seed, rt_train_data_stream(step, micro, rank), e) - 1,
// uniform in [-1, 1), for e < n.
void rt_train_synthetic_inputs(uint64_t seed, int64_t step, int64_t micro, int64_t rank,
                               int64_t n, float* out);

#ifdef __cplusplus
}
#endif
#endif
