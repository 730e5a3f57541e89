// cli.c — command-line options of a generated training binary and of a generated
// conformance test: parsing (`--opt VALUE` or `--opt=VALUE`), the --help text, and the
// one-line `fsdpgen: bad argument ...: what is allowed` errors (exit status 2).
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

// ---- help -------------------------------------------------------------------------------

static int cuda(void) { return strcmp(rt_step_backend(), "cuda") == 0; }

// The options of CUDA binaries (rt_launch_opts), in both help texts.
static const char* cuda_help(void) {
    return cuda() ? "  --local               run every rank on GPU 0 (tests a multi-rank schedule on\n"
                    "                        one GPU; the default with fewer GPUs than ranks)\n"
                    "  --no-graph            run every step eagerly (default: capture the step\n"
                    "                        once as a CUDA graph and replay it)\n"
                  : "";
}

static void print_train_help(const rt_model* m, const char* prog) {
    printf("usage: %s [options]\n"
           "Trains %s (%s, %s) on %d ranks (%s; mesh replicate %d x shard %d).\n"
           "\n"
           "options:\n"
           "  --steps N             optimizer steps to run (default 20; with --resume: N more)\n"
           "  --seed S              seed of parameter init, synthetic data and dropout\n"
           "                        (default %" PRIu64 ", the spec's)\n"
           "  --log-every N         print every N-th step line (default 1; the first and the\n"
           "                        last step are always printed)\n"
           "  --data FILE           token file (raw bytes, or little-endian uint16 / uint32\n"
           "                        when the name ends in .u16 / .u32); without it the data\n"
           "                        is synthetic\n"
           "  --val-every N         after every N-th step and the last, the eval program's\n"
           "                        loss on the validation batches: `step N val loss X`\n"
           "  --val-data FILE       validation tokens (as --data; needed with --data); alone:\n"
           "                        one eval after the last step\n"
           "  --val-batches K       validation batches per eval (default 8), the same ones\n"
           "                        at every eval\n"
           "  --save FILE           after training, write every parameter (fp32, full shapes,\n"
           "                        under its PyTorch name and each tied alias) as safetensors\n"
           "  --load FILE           before step 1, read every parameter from safetensors\n"
           "                        (fp32, the model's names and shapes)\n"
           "  --save-hf DIR         after training, write DIR/config.json and\n"
           "                        DIR/model.safetensors for Hugging Face's from_pretrained\n"
           "                        (Llama, GPT-2; DIR is created if absent)\n"
           "  --save-peft DIR       after training, write a LoRA model's adapters as PEFT\n"
           "                        saves them: DIR/adapter_config.json and\n"
           "                        DIR/adapter_model.safetensors (PeftModel.from_pretrained)\n"
           "  --load-peft DIR       with --load-hf: then read a PEFT LoRA directory\n"
           "                        (adapter_config.json checked) onto the model's adapters\n"
           "  --load-hf DIR         before step 1, read a Hugging Face directory (config.json\n"
           "                        checked; F32, BF16 or F16 tensors)\n"
           "  --logits FILE         after training, the eval program on validation batch 0:\n"
           "                        rank 0's tokens and logits as safetensors (CPU binaries)\n"
           "  --checkpoint DIR      save a resumable checkpoint (per-rank parameter shards,\n"
           "                        optimizer state, step) at the end, as DIR/step_N, beside\n"
           "                        the older ones (a failed save leaves them intact)\n"
           "  --checkpoint-every N  ... and after every N-th step (needs --checkpoint)\n"
           "  --keep-checkpoints K  keep the newest K checkpoints in DIR (default 2; 0: all)\n"
           "  --resume DIR          continue from the newest complete checkpoint in DIR (same\n"
           "                        world size); bit-identical to an uninterrupted run\n"
           "  --trace FILE          write a Chrome trace (Perfetto) of every rank\n"
           "  --bench               print throughput and the compute / exposed communication /\n"
           "                        optimizer split of a step\n"
           "  --peak-tflops P       peak TFLOP/s of one GPU (the CPU: of the machine) for the\n"
           "                        MFU in step lines (default on a GPU: its bf16 dense peak\n"
           "                        if listed: %s)\n"
           "%s"
           "  --help                this text\n"
           "\n"
           "Each step prints `step N loss X | T %s/s | M ms | F TFLOP/s | MFU U%% | eta E`,\n"
           "X the mean over ranks and backward items, F the model FLOPs (PaLM: 6N + 12LTd\n"
           "per token) over the step time, E from the mean step after step 1; the last line is\n"
           "`done: N steps, ...`.\n"
           "Synthetic data (without --data): %s,\n"
           "drawn from Philox keyed by (seed, step, microbatch, rank, index); see rt_train.h.\n"
           "Exit status: 0 ok, 1 failure at run time (I/O, a loss that is nan or inf),\n"
           "2 bad arguments.\n",
           prog, m->name, m->spec_file ? m->spec_file : "?", m->generator ? m->generator : "?",
           m->world, cuda() ? "GPUs" : "threads", m->replicate, m->shard, m->seed, train_peak_list(),
           cuda_help(),
           m->tokens ? "tok" : "samples",
           m->tokens ? "tokens uniform in [0, vocab), targets the next token"
                     : "inputs uniform in [-1, 1)");
}

static void print_conformance_help(const rt_model* m, const char* prog) {
    printf("usage: %s [options]\n"
           "Conformance test of %s (%s): runs it sharded (mesh %d x %d) and as the reference\n"
           "(replicate %d x shard 1) on %d ranks with the same seed and synthetic data, and\n"
           "checks the step-1 events, the collective counts, loss and parameter parity and\n"
           "the memory peak.\n"
           "\n"
           "options:\n"
           "  --steps N    steps of each run (default 10)\n"
           "  --seed S     seed (default %" PRIu64 ")\n"
           "  --verbose    also print the step-1 events as `STATE KIND \"GROUP\"` lines\n"
           "%s"
           "  --help       this text\n"
           "\n"
           "Prints one PASS/FAIL line per check and `N passed, N failed`. Exit status: 0 all\n"
           "passed, 1 a check failed, 2 bad arguments.\n",
           prog, m->name, m->spec_file ? m->spec_file : "?", m->replicate, m->shard, m->world,
           m->world, m->seed, cuda_help());
}

// ---- values -----------------------------------------------------------------------------

static int bad(const char* opt, const char* val, const char* allowed) {
    if (val)
        fprintf(stderr, "fsdpgen: bad argument %s '%s': %s\n", opt, val, allowed);
    else
        fprintf(stderr, "fsdpgen: bad argument %s: %s\n", opt, allowed);
    return 2;
}

// Decimal integer in [lo, hi]; returns 0 or 2 after the message.
static int parse_int(const char* opt, const char* s, int64_t lo, int64_t hi, int64_t* out) {
    char allowed[128];
    snprintf(allowed, sizeof allowed, "expected an integer from %" PRId64 " to %" PRId64, lo, hi);
    if (!s || !*s || s[0] == ' ') return bad(opt, s, allowed);
    errno = 0;
    char* end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return bad(opt, s, allowed);
    *out = v;
    return 0;
}

static int parse_seed(const char* opt, const char* s, uint64_t* out) {
    const char* allowed = "expected an unsigned 64-bit integer (decimal, or hex with 0x)";
    if (!s || !*s || s[0] == '-' || s[0] == '+' || s[0] == ' ') return bad(opt, s, allowed);
    errno = 0;
    char* end = NULL;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) return bad(opt, s, allowed);
    *out = v;
    return 0;
}

// A peak in TFLOP/s: a finite number > 0 (at most 1e6, a thousand of today's GPUs).
static int parse_peak(const char* opt, const char* s, double* out) {
    const char* allowed = "expected a positive number of TFLOP/s (one GPU's peak, e.g. 989; "
                          "on the CPU, the machine's), at most 1e6";
    if (!s || !*s || s[0] == ' ') return bad(opt, s, allowed);
    errno = 0;
    char* end = NULL;
    double v = strtod(s, &end);
    if (errno || *end || !(v > 0) || v > 1e6) return bad(opt, s, allowed);
    *out = v;
    return 0;
}

static int parse_path(const char* opt, const char* s, const char** out) {
    if (!s || !*s) return bad(opt, s, "expected a non-empty path");
    *out = s;
    return 0;
}

// ---- parsing ----------------------------------------------------------------------------

#define MAX_STEPS ((int64_t)1 << 40)
#define MAX_VAL_BATCHES ((int64_t)1 << 20)

enum { O_STEPS, O_SEED, O_LOG, O_DATA, O_VAL_DATA, O_VAL_EVERY, O_VAL_BATCHES, O_SAVE, O_LOAD,
       O_SAVE_HF, O_SAVE_PEFT, O_LOAD_PEFT, O_LOAD_HF, O_LOGITS, O_CKPT, O_CKPT_EVERY, O_KEEP_CKPT, O_RESUME, O_TRACE,
       O_BENCH, O_PEAK, O_VERBOSE, O_LOCAL, O_NO_GRAPH, O_HELP };

typedef struct opt_def {
    const char* name;
    int id;
    const char* value;       // its value's placeholder in messages, NULL: takes none
    int train, conformance;  // valid where
} opt_def;

static const opt_def opts[] = {
    {"--steps", O_STEPS, "N", 1, 1},
    {"--seed", O_SEED, "S", 1, 1},
    {"--log-every", O_LOG, "N", 1, 0},
    {"--data", O_DATA, "FILE", 1, 0},
    {"--val-data", O_VAL_DATA, "FILE", 1, 0},
    {"--val-every", O_VAL_EVERY, "N", 1, 0},
    {"--val-batches", O_VAL_BATCHES, "K", 1, 0},
    {"--save", O_SAVE, "FILE", 1, 0},
    {"--load", O_LOAD, "FILE", 1, 0},
    {"--save-hf", O_SAVE_HF, "DIR", 1, 0},
    {"--save-peft", O_SAVE_PEFT, "DIR", 1, 0},
    {"--load-peft", O_LOAD_PEFT, "DIR", 1, 0},
    {"--load-hf", O_LOAD_HF, "DIR", 1, 0},
    {"--logits", O_LOGITS, "FILE", 1, 0},
    {"--checkpoint", O_CKPT, "DIR", 1, 0},
    {"--checkpoint-every", O_CKPT_EVERY, "N", 1, 0},
    {"--keep-checkpoints", O_KEEP_CKPT, "K", 1, 0},
    {"--resume", O_RESUME, "DIR", 1, 0},
    {"--trace", O_TRACE, "FILE", 1, 0},
    {"--bench", O_BENCH, NULL, 1, 0},
    {"--peak-tflops", O_PEAK, "P", 1, 0},
    {"--verbose", O_VERBOSE, NULL, 0, 1},
    {"--local", O_LOCAL, NULL, 1, 1},
    {"--no-graph", O_NO_GRAPH, NULL, 1, 1},
    {"--help", O_HELP, NULL, 1, 1},
};
#define NOPTS (sizeof opts / sizeof opts[0])

// Whether option d exists in this binary (a training binary or a conformance test; the
// CUDA options only in CUDA binaries).
static int available(const opt_def* d, int conformance) {
    return (conformance ? d->conformance : d->train) &&
           (cuda() || (d->id != O_LOCAL && d->id != O_NO_GRAPH));
}

// "allowed: --steps N, --seed S, ...": the options of this binary.
static const char* allowed_list(int conformance) {
    static char buf[512];
    size_t n = (size_t)snprintf(buf, sizeof buf, "allowed:");
    for (size_t k = 0; k < NOPTS && n < sizeof buf; k++)
        if (available(&opts[k], conformance))
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s %s%s%s", n > 8 ? "," : "", opts[k].name,
                                  opts[k].value ? " " : "", opts[k].value ? opts[k].value : "");
    return buf;
}

int train_parse_args(const rt_model* m, int conformance, int argc, char** argv, train_opts* o) {
    memset(o, 0, sizeof *o);
    o->steps = conformance ? 10 : 20;
    o->seed = m->seed;
    o->log_every = 1;
    o->val_batches = 8;
    o->keep_checkpoints = 2;
    int keep_set = 0;
    const char* prog = argc > 0 && argv[0] ? argv[0] : m->name;
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
        const char* eq = strchr(arg, '=');
        size_t nlen = eq && strncmp(arg, "--", 2) == 0 ? (size_t)(eq - arg) : strlen(arg);
        const opt_def* d = NULL;
        for (size_t k = 0; k < NOPTS; k++)
            if (strlen(opts[k].name) == nlen && strncmp(opts[k].name, arg, nlen) == 0 &&
                available(&opts[k], conformance))
                d = &opts[k];
        if (!d) {
            char what[160];
            snprintf(what, sizeof what, "'%.120s'", arg);
            return bad(what, NULL, strncmp(arg, "--", 2) == 0 ? allowed_list(conformance)
                                                               : "unexpected positional argument; "
                                                                 "see --help");
        }
        const char* val = NULL;
        if (d->value) {
            if (eq && nlen < strlen(arg)) val = eq + 1;
            else if (i + 1 < argc) val = argv[++i];
            else return bad(d->name, NULL, "missing its value (see --help)");
        } else if (eq && nlen < strlen(arg)) {
            return bad(d->name, eq + 1, "takes no value");
        }
        int rc = 0;
        switch (d->id) {
        case O_STEPS: rc = parse_int(d->name, val, 1, MAX_STEPS, &o->steps); o->steps_set = 1; break;
        case O_SEED: rc = parse_seed(d->name, val, &o->seed); o->seed_set = 1; break;
        case O_LOG: rc = parse_int(d->name, val, 1, MAX_STEPS, &o->log_every); break;
        case O_DATA: rc = parse_path(d->name, val, &o->data); break;
        case O_VAL_DATA: rc = parse_path(d->name, val, &o->val_data); break;
        case O_VAL_EVERY: rc = parse_int(d->name, val, 1, MAX_STEPS, &o->val_every); break;
        case O_VAL_BATCHES:
            rc = parse_int(d->name, val, 1, MAX_VAL_BATCHES, &o->val_batches);
            o->val_batches_set = 1;
            break;
        case O_SAVE: rc = parse_path(d->name, val, &o->save); break;
        case O_LOAD: rc = parse_path(d->name, val, &o->load); break;
        case O_SAVE_HF: rc = parse_path(d->name, val, &o->save_hf); break;
        case O_SAVE_PEFT: rc = parse_path(d->name, val, &o->save_peft); break;
        case O_LOAD_PEFT: rc = parse_path(d->name, val, &o->load_peft); break;
        case O_LOAD_HF: rc = parse_path(d->name, val, &o->load_hf); break;
        case O_LOGITS: rc = parse_path(d->name, val, &o->logits); break;
        case O_CKPT: rc = parse_path(d->name, val, &o->checkpoint); break;
        case O_CKPT_EVERY: rc = parse_int(d->name, val, 1, MAX_STEPS, &o->checkpoint_every); break;
        case O_KEEP_CKPT:
            rc = parse_int(d->name, val, 0, 1000000, &o->keep_checkpoints);
            keep_set = 1;
            break;
        case O_RESUME: rc = parse_path(d->name, val, &o->resume); break;
        case O_TRACE: rc = parse_path(d->name, val, &o->trace); break;
        case O_BENCH: o->bench = 1; break;
        case O_PEAK: rc = parse_peak(d->name, val, &o->peak_tflops); break;
        case O_VERBOSE: o->verbose = 1; break;
        case O_LOCAL: o->local = 1; break;
        case O_NO_GRAPH: o->no_graph = 1; break;
        case O_HELP:
            if (conformance) print_conformance_help(m, prog);
            else print_train_help(m, prog);
            return -1;
        }
        if (rc) return rc;
    }
    // Combinations.
    if (o->load && o->resume)
        return bad("--load", o->load, "cannot be combined with --resume (the checkpoint holds "
                                      "the parameters); use one of them");
    if (o->load_hf && (o->load || o->resume))
        return bad("--load-hf", o->load_hf, "cannot be combined with --load or --resume (each sets "
                                            "the parameters); use one of them");
    const char* hf_opt = o->save_hf     ? "--save-hf"
                         : o->save_peft ? "--save-peft"
                         : o->load_peft ? "--load-peft"
                         : o->load_hf   ? "--load-hf"
                                        : NULL;
    if (hf_opt && !m->hf) {
        char why[640];
        snprintf(why, sizeof why, "this spec's model has no Hugging Face form: %s",
                 m->hf_unavailable ? m->hf_unavailable : "(no reason given)");
        return bad(hf_opt, NULL, why);
    }
    const char* peft_opt = o->save_peft ? "--save-peft" : o->load_peft ? "--load-peft" : NULL;
    if (peft_opt && !m->hf->peft_config)
        return bad(peft_opt, NULL, "this spec's model has no LoRA adapters (models.Llama's "
                                   "lora_modules makes them)");
    if (o->load_peft && !o->load_hf)
        return bad("--load-peft", o->load_peft, "needs --load-hf DIR, the base model the adapters "
                                                "go on");
    if (o->logits && (!m->tokens || !m->eval || m->loss != RT_LOSS_CROSS_ENTROPY || cuda()))
        return bad("--logits", o->logits, cuda() ? "CPU binaries only (build without --cuda)"
                   : !m->eval ? "the eval program is not available for this spec"
                              : "needs a token model with a cross-entropy loss");
    if (o->checkpoint_every && !o->checkpoint)
        return bad("--checkpoint-every", NULL, "needs --checkpoint DIR");
    if (keep_set && !o->checkpoint)
        return bad("--keep-checkpoints", NULL, "needs --checkpoint DIR");
    if (o->data && !m->tokens)
        return bad("--data", o->data, "this model takes float inputs, not tokens; run it "
                                      "without --data (synthetic inputs)");
    if (o->val_data && !m->tokens)
        return bad("--val-data", o->val_data, "this model takes float inputs, not tokens; run it "
                                              "without --val-data (synthetic inputs)");
    if (o->data && o->val_every && !o->val_data)
        return bad("--val-every", NULL, "with --data, give the validation tokens with --val-data FILE "
                                        "(synthetic validation batches are for synthetic training data)");
    if (o->val_batches_set && !o->val_data && !o->val_every)
        return bad("--val-batches", NULL, "needs --val-every N or --val-data FILE");
    if ((o->val_data || o->val_every) && !m->eval) {
        char why[640];
        snprintf(why, sizeof why, "the eval program is not available for this spec: %s",
                 m->eval_unavailable ? m->eval_unavailable : "(no reason given)");
        return bad(o->val_data ? "--val-data" : "--val-every", NULL, why);
    }
    return 0;
}
