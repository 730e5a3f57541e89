// Token data for training: a file of tokens read with pread, and the batch fetch
// whose offset formula is part of the contract (a PyTorch reference run slices the
// same file the same way, so both see identical batches).
//
// File format: a name ending in `.u16` holds little-endian uint16 tokens, one ending in
// `.u32` little-endian uint32 tokens (a vocabulary above 65536, as Llama 3's); any other
// file is raw bytes, each byte one token (0..255).
//
// Functions that can fail return 0 on success and -1 on failure, filling `err`
// (`errlen` bytes) with one line saying what was wrong and what was expected.
#ifndef FSDPGEN_RT_DATA_H
#define FSDPGEN_RT_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_data rt_data;

// How one optimizer step is cut into sequences (all counts > 0).
typedef struct {
    int64_t world_size;  // W ranks
    int64_t n_micro;     // A microbatches per step (gradient accumulation)
    int64_t batch;       // B sequences per microbatch per rank
    int64_t seq_len;     // T tokens per sequence
} rt_data_shape;

// Opens a token file for sequences of `seq_len` tokens from a vocabulary of
// `vocab_size` tokens. Checks: the file exists and is a regular file (a FIFO, device or
// directory is refused without blocking), is not empty, a `.u16` / `.u32` file's length is
// a multiple of 2 / 4 bytes, a `.u16` file is not given a vocabulary above 65536, the file
// has more than `seq_len` tokens (a sequence needs T + 1 for its shifted targets), and
// every token is < vocab_size (the first offender is reported with its token offset).
int rt_data_open(const char *path, int64_t vocab_size, int64_t seq_len, rt_data **out,
                 char *err, size_t errlen);
void rt_data_close(rt_data *d);

// Number of tokens N in the file.
int64_t rt_data_n_tokens(const rt_data *d);
// Token at index i (0 <= i < N); -1 for another i or when it cannot be read.
int32_t rt_data_token(const rt_data *d, int64_t i);

// The contract: sequence b of rank r in microbatch a of step s starts at
//   o = ((((s*A + a)*W + r)*B + b)*T) mod (N - T)
// The product is computed exactly (128-bit), so it equals 64-bit arithmetic whenever
// that does not overflow. Returns -1 for invalid input (a count <= 0, n_tokens <= T,
// or a negative index).
int64_t rt_data_offset(const rt_data_shape *shape, int64_t n_tokens, int64_t step,
                       int64_t micro, int64_t rank, int64_t row);

// Fills inputs[B][T] with tokens o..o+T-1 and targets[B][T] with o+1..o+T for every
// row b of (step, micro, rank). shape->seq_len must equal the one given to open. Fails
// (one line naming the file and the offset) when the file was truncated since open, or a
// token read is >= vocab_size (the file was rewritten).
int rt_data_batch(const rt_data *d, const rt_data_shape *shape, int64_t step,
                  int64_t micro, int64_t rank, int32_t *inputs, int32_t *targets,
                  char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
