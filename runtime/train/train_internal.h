// train_internal.h — what the files of the training driver share: the parsed options, the
// run (state shared by the rank threads), and the per-file entry points.
//
// Error discipline inside rank threads: a rank that hits an error calls train_fail (the
// first message of the run is printed, later ones are dropped), then every rank meets in
// train_agree, which returns non-zero on every rank when any rank failed, so all ranks
// leave together and nobody waits in a collective for a peer that gave up.
#ifndef FSDPGEN_TRAIN_INTERNAL_H
#define FSDPGEN_TRAIN_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rt_data.h"
#include "rt_model.h"
#include "rt_step.h"
#include "rt_trace.h"

// ---- options (cli.c) ---------------------------------------------------------------------

typedef struct train_opts {
    int64_t steps;
    int steps_set;
    uint64_t seed;
    int seed_set;
    int64_t log_every;
    const char* data;
    const char* val_data;      // validation tokens (--val-data), or NULL
    int64_t val_every;         // eval after every N-th step (0: only after the last, with
                               // --val-data; neither: no eval)
    int64_t val_batches;       // validation batches per eval (default 8)
    int val_batches_set;
    const char* save;
    const char* load;
    const char* save_hf;       // --save-hf DIR (Hugging Face directory), or NULL
    const char* save_peft;     // --save-peft DIR (a LoRA model's adapters as PEFT saves them), or NULL
    const char* load_peft;     // --load-peft DIR (such adapters, onto --load-hf's model), or NULL
    const char* load_hf;       // --load-hf DIR, or NULL
    const char* logits;        // --logits FILE: the eval's logits of validation batch 0, or NULL
    const char* checkpoint;
    int64_t checkpoint_every;  // 0: only at the end
    int64_t keep_checkpoints;  // the newest K of ROOT's checkpoints are kept (0: all)
    const char* resume;
    const char* trace;
    int bench;
    int verbose;
    int local;                 // --local (CUDA binaries): every rank on GPU 0
    int no_graph;              // --no-graph (CUDA binaries): no CUDA graph replay
    double peak_tflops;        // --peak-tflops: one device's peak (the CPU: the machine's), 0: none
} train_opts;

// Parses argv for a training binary (conformance = 0) or a conformance test (1). Returns 0
// to run, 2 after printing a bad-argument line, or -1 after printing --help (exit 0).
int train_parse_args(const rt_model* m, int conformance, int argc, char** argv, train_opts* o);

// ---- the run (driver.c) ------------------------------------------------------------------

struct train_run;
// Called on every rank after step index `idx` (0-based within this run); collective.
typedef void (*train_hook)(struct train_run* run, rt_rank* R, int64_t idx);

typedef struct train_run {
    const rt_model* m;
    const train_opts* o;
    uint64_t seed;           // param init, synthetic data, dropout
    int64_t start_step;      // 0, or the step a --resume checkpoint holds
    char resume_dir[4096];   // --resume: the checkpoint found under it (ROOT/step_N, or ROOT)
    int64_t nsteps;
    rt_data* data;           // --data, or NULL (synthetic)
    rt_data* val_data;       // --val-data, or NULL (synthetic, or no eval)
    rt_trace* trace;         // --trace, or NULL
    int quiet;               // no step lines (conformance)
    train_hook hook;
    void* hook_arg;
    // Shared between ranks.
    pthread_mutex_t mu;
    int failed;              // sticky: some rank failed
    int diverged;            // the mean loss was not finite
    int64_t** xhost;         // [world] each rank's host side of train_agree's exchange
                             // (also every rank's step losses, as bits) ...
    void** xbuf;             // ... and its communicator buffer (device memory for NCCL)
    double* loss;            // [nsteps] mean loss per step
    double* step_ms;         // [nsteps] rank 0's step time
    double* comm_ms;         // [nsteps] rank 0's exposed communication
    double* optim_ms;        // [nsteps] rank 0's optimizer time
    size_t* peak;            // [world] measured arena peak at the end
    int64_t steps_done;
    // Rank 0's, for the step lines and the summary (perf.c).
    double peak_flops;       // FLOP/s of every device the ranks use, 0: unknown (no MFU)
    double t_start, t_first, t_end;  // wall clock: step 1 starts, step 1 (and its eval,
                             // checkpoint) ends, the run ends (after --save, --checkpoint)
    double best_val;         // the lowest validation loss ...
    int64_t best_val_step;   // ... and its step (0: no eval)
    int here_first;          // the lowest rank this process ran (mpirun: its only one) ...
    int here_count;          // ... and how many (0: none started)
} train_run;

// Sets up run for m and o (allocations); returns 0 or prints and returns 1.
int train_run_init(train_run* run, const rt_model* m, const train_opts* o);
void train_run_free(train_run* run);
// Runs every rank; returns the exit status (0, or 1).
int train_run_exec(train_run* run);

// Records a rank's failure (the first one of the run is printed as "fsdpgen: ...").
void train_fail(train_run* run, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// A rank's driver state (the buffers train_agree exchanges through), after rt_rank_init
// and before anything collective of this file; detach before rt_rank_free. Attach returns
// 0, or 1 after train_fail and aborting the communicator.
int train_rank_attach(train_run* run, rt_rank* R);
void train_rank_detach(train_run* run, rt_rank* R);
// Agreement of all ranks (a collective over the communicator, so it also holds across
// processes): returns 1 on every rank when any rank failed (or the collective did).
int train_agree(train_run* run, rt_rank* R);

// ---- processes (driver.c) ------------------------------------------------------------------
// Under mpirun each process holds one rank and runs rt_train_main itself; otherwise one
// process holds every rank. The process holding rank 0 prints the run's lines; errors are
// printed by whichever process hits them; each process writes its ranks' trace.

// path with tag inserted before the extension of its last component (out.json + ".rank1"
// -> out.rank1.json; out -> out.rank1; a leading dot is no extension: .trace -> .trace.rank1).
// Returns 0, or -1 when it does not fit in cap bytes.
int train_path_tag(const char* path, const char* tag, char* out, size_t cap);
// The trace file of the process whose lowest rank is `first`: path itself for rank 0,
// else path tagged ".rank<first>". Returns 0, or -1 when it does not fit.
int train_trace_path(const char* path, int first, char* out, size_t cap);
// Whether this process ran rank 0 (it prints the run's summary lines).
int train_holds_rank0(const train_run* run);
// After train_run_exec: writes this process's trace (run->trace, no-op without one) to
// train_trace_path(path, run->here_first); the process holding rank 0 prints where it and
// the other processes wrote. Returns 0, or 1 after printing why.
int train_write_trace(train_run* run, const char* path);

// A checked fp32 pointer into the rank's arena that does not move the measured peak (the
// driver's own accesses to the persistent buffers are not part of the step's plan).
float* train_arena_f32(rt_rank* R, size_t off, int64_t numel);

// ---- per-file entry points ---------------------------------------------------------------

// init.c: deterministic parameter init into the sharded params. Returns 0 (cannot fail
// except on memory, reported through train_fail).
int train_init_params(train_run* run, rt_rank* R);

// data_feed.c: fills R->tokens/targets/inputs for step s. A file batch that fails (the file
// was truncated or rewritten during the run) calls train_fail and feeds token 0, so the
// step's collectives still match and the exchange after it ends the run on every rank.
void train_feed(train_run* run, rt_rank* R, int64_t s);
// ... and forward item 0's with validation batch v (0-based) of every eval: from --val-data
// as step v of a one-microbatch shape, else synthetic as step -1 - v of microbatch 0 (a
// stream no training step draws).
void train_feed_val(train_run* run, rt_rank* R, int64_t v);

// weights.c: --save / --load, and the gather the conformance test uses. full[p] (numel of
// param p floats, for every param p of the model) is filled on rank 0 only; every rank of
// rank 0's shard group must call (others may call too: they do nothing).
int train_gather_params(train_run* run, rt_rank* R, float* const* full);
// The same into full parameters it allocates (train_alloc_full) on rank 0, *full (NULL on
// the other ranks), for an option that writes them (what: "--save PATH", the messages'
// start). Collective as train_gather_params. Returns 0, or 1 after train_fail.
int train_gather_full(train_run* run, rt_rank* R, const char* what, float*** full);
// Keeps this rank's padded shard of model parameter p from its full values (fp32), for
// --load and --load-hf (what: "--load PATH", the messages' start). Returns 0, or 1 after
// train_fail.
int train_shard_param(train_run* run, rt_rank* R, int p, const float* full, const char* what);
int train_save(train_run* run, rt_rank* R, const char* path, int64_t steps_completed);
int train_load(train_run* run, rt_rank* R, const char* path);
// Full fp32 buffers of every parameter (NULL when out of memory), and their release.
float** train_alloc_full(const rt_model* m);
void train_free_full(const rt_model* m, float** full);

// hf.c, hf_load.c, hf_config.c: --save-hf / --load-hf (m->hf's map). prepare_dir, on the main thread
// before training: DIR must be a directory, not a symlink (create: made if absent, and
// writable); returns 0, or 1 after printing why. Save and load are collective, as above.
int train_hf_prepare_dir(const char* opt, const char* dir, int create);
int train_save_hf(train_run* run, rt_rank* R, const char* dir);
int train_save_peft(train_run* run, rt_rank* R, const char* dir);
// --load-peft DIR, after --load-hf: the adapters of a PEFT LoRA directory onto the model's.
int train_load_peft(train_run* run, rt_rank* R, const char* dir);
// Adapter k (0: lora_A, 1: lora_B; src[0] its parameter) of adapted weight e as PEFT
// stores it: its name (malloc'd; NULL when out of memory), shape and row order.
rt_hf_tensor train_peft_tensor(const rt_model* m, const rt_hf_tensor* e, int k);
int train_load_hf(train_run* run, rt_rank* R, const char* dir);
// DIR/config.json written from m->hf, or checked against it (err: the first field that
// differs). Return 0, or -1 with one line in err.
int train_hf_write_config(const rt_model* m, const char* dir, char* err, size_t errlen);
int train_hf_check_config(const rt_model* m, const char* dir, char* err, size_t errlen);
// Elements of HF tensor e, and the move between it and its parameters p[k] (full values of
// e->src[k]): to_hf 1 fills hf from them, 0 fills them from hf (ZEROS: nothing).
int64_t train_hf_numel(const rt_hf_tensor* e);
void train_hf_move(const rt_model* m, const rt_hf_tensor* e, float* const* p, float* hf, int to_hf);

// driver.c: --logits: after training, the eval program on validation batch 0; rank 0 writes
// its tokens and logits as safetensors ("tokens" I32 [batch, seq_len], "logits" F32
// [batch, seq_len, vocab]). Collective; returns 0, or 1 after train_fail.
int train_write_logits(train_run* run, rt_rank* R, const char* path);

// resume.c: --checkpoint / --resume. Save writes ROOT/step_<steps_completed> (collective).
int train_checkpoint_save(train_run* run, rt_rank* R, const char* root, int64_t steps_completed);
// Loads run->resume_dir (set by train_checkpoint_prepare).
int train_checkpoint_load(train_run* run, rt_rank* R);
// Main thread, before the ranks start: with --resume, finds the newest complete checkpoint
// (run->resume_dir, run->start_step) and checks its world size; with --checkpoint, checks
// that ROOT holds none newer than the start. Returns 0, or prints and returns 1.
int train_checkpoint_prepare(train_run* run);

// bench.c: the --bench report from run->step_ms / comm_ms / optim_ms.
void train_bench_report(const train_run* run);

// perf.c: throughput, MFU, ETA and the summary (rank 0). The bf16 dense peak of a GPU by
// its name (peaks.def), 0 when unknown.
double train_peak_tflops(const char* device);
// The listed GPUs and their peaks: "H100 989, H200 989, A100 312".
const char* train_peak_list(void);
// "0.3s", "12s", "1m23s", "2h05m", "3d04h" ("?" for a negative or non-finite time).
void train_fmt_eta(double s, char* out, size_t cap);
// Sets run->peak_flops (inside the launch: it asks the backend for the device) and prints
// the `model: F per step ...` line.
void train_perf_begin(train_run* run, rt_rank* R);
// The step line's tail for step index i that took dt seconds, at wall time now:
// " | F FLOP/s | MFU U% | eta E" (the parts that apply).
void train_perf_step(const train_run* run, int64_t i, double dt, double now, char* out, size_t cap);
// The run's last line: `done: N steps, T tokens, S s (...), loss a -> b, ...`.
void train_perf_done(const train_run* run);

// Numbers of one step.
int64_t train_items_per_step(const rt_model* m);  // tokens (token models) or samples
int64_t train_input_numel(const rt_model* m);     // floats of one forward item's input

#endif
