#!/usr/bin/env bash
# The CUDA step backend (runtime/cuda/step) and `fsdpgen build --cuda`.
# Everywhere (CI has nvcc, cuBLAS and NCCL but no GPU): every spec below, and the
# benchmark's two, builds with --cuda (the generated C links against the CUDA backend). The
# copy plans its kernel runs are checked by tests/runtime (test_fsdp_copy).
# On the GPU (nvidia-smi lists one), or without one on the CPU emulator (tests/cuda/emu):
#   - the generated conformance test of each spec on the CUDA backend (world 2 and 4 run
#     every rank on the one GPU: --local); on the emulator's slow tier (FSDPGEN_SLOW=1) also
#     of four random microbatch programs (tests/generator/step_fuzz.lua --write);
#   - CUDA vs CPU: losses and saved parameters of the same run within a tolerance (and on
#     the emulator, the same bits in its three stream modes and without evals: in the fast
#     tier on seven specs that use every side stream, in the slow tier on all);
#   - test_seg_copy: the copy kernel against its host reference on random plans;
#   - the attention sites: what rank 0 says runs them, and RT_ATTENTION's and
#     RT_ATTENTION_BACKWARD's one-line errors;
#   - the optimizer beside the backward and after it (RT_OPTIMIZER_STREAM): the same bits
#     on the emulator, and the variable's one-line error;
#   - one rank's kept parameters copied again (RT_KEEP_UNSHARDED=copy): the same bits, the
#     variable's one-line error, and on the emulator the step's kernels plus those copies;
#   - on the emulator, the kernels of a captured step of the bench models in small as
#     tests/cuda_step/kernels/*.txt (FSDPGEN_UPDATE_GOLDEN=1 rewrites them);
#   - a root reduced in two parts, the embedding stepped by rows, every gradient in place
#     (llama_w1_bf16), against its twin whose root reduce-scatters (llama_w1_whole.lua),
#     and a tied embedding's rows no token looks up stepped beside the blocks' backward
#     (gpt2_w1_tied_rows, against gpt2_w1_whole.lua), and scales folded into their linears'
#     GEMMs (scale_fold_bf16, against a twin whose scales stay kernels; on a GPU too): the
#     same bits on the CPU and on the emulator.
# On the GPU only: every CUDA run with RT_ATTENTION=cudnn (cuDNN at every attention site
# that cuDNN takes), plus tests/cuda_step/llama_cudnn_bf16.lua (head dim 64), its auto
# timings and its run with cuDNN's atomic backward against the CPU, and
# tests/cuda_step/llama_lora_cudnn_bf16.lua (a dK no tensor needs, in the spare scratch); compute-sanitizer (memcheck, racecheck) on a small spec reports no error;
# without one it prints a SKIP line, and the emulator runs test_cuda_local (the local mode's
# communicators). Ends with `N passed, N failed`.
set -u
cd "$(dirname "$0")/../.."

work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_cuda_step.XXXXXX")
trap 'rm -rf "$work"' EXIT
suite_tag="[cuda_step]"
. tests/common/suite.sh

pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

# spec, its CPU-vs-CUDA rtol (fp32 specs 1e-3; mixed precision 3e-2) and, optionally, the
# steps of its runs on the emulator (spec_checks: default 3). Worlds 1, 2, 4 and HSDP 2 x 1
# and 2 x 4 meshes; checkpointing, int reshard_after_forward, prefetch, SGD, Adam,
# bf16 and fp16 mixed precision, GQA, packed 16-bit weights (world 1 and 4), direct
# (one-rank) all-gathers incl. a dropped one and one of a group with no unsharded
# parameters (its embedding read from the shards), and ones a reshard kept (copying nothing), attention on tensor cores (head dim 16; the
# only one here: the other specs' head dims are not multiples of 16);
# reduce-scatters of the parameters with gradients only (world 2, HSDP 2 x 2, and direct at
# world 1); microbatching (explicit async unshards before the first forward; HSDP partial
# reductions all-reduced on the last microbatch only); a step with two optimizer items
# (a root iteration, then a non-root one: per-group Adam step counts on the device); two
# forwards before one backward (each loss's gradient, of their sum, is read on the device);
# learning-rate schedules (AdamW and SGD: each optimizer item's lr read on the device, so
# the one captured graph follows the warmup and the decay); CPU offload (the persistent
# buffers in pinned host memory, read and written by the kernels); frozen parameters (a
# frozen group with no gradients or optimizer state, a block's frozen attention, frozen
# parameters between trainable ones with clipping at world 2); a tensor times a number
# (bf16), and by powers of two folded into the linears they read; LoRA with the base's and
# lora_a's input gradients stacked.
specs=(
  "tests/specs/conformance/transformer_w1_ckpt.lua 1e-3"
  "tests/specs/conformance/mlp_w2_sgd_prefetch.lua 1e-3"
  "tests/specs/conformance/transformer_w4_int_raf.lua 1e-3"
  "tests/specs/conformance/seed_divide_factor_mp.lua 3e-2"
  "tests/specs/conformance/llama_w2_fp16.lua 3e-2"
  "tests/specs/features/llama_gqa_bf16.lua 3e-2"
  "tests/specs/features/hsdp_int_reshard.lua 1e-3"
  "tests/specs/conformance/llama_w1_bf16.lua 3e-2"
  "tests/specs/features/w1_direct_all_gather.lua 3e-2"
  "tests/specs/features/w1_keep_microbatch.lua 3e-2"
  "tests/specs/features/hsdp_shard1_keep.lua 3e-2"
  "tests/specs/features/w1_offload_keep.lua 3e-2"
  "tests/specs/features/w1_embedding_group.lua 3e-2"
  "tests/specs/features/gpt2_w1_tied_rows.lua 3e-2"
  "tests/specs/conformance/llama_w4_bf16_int_raf.lua 3e-2"
  "tests/specs/features/llama_tc_attention_bf16.lua 3e-2"
  "tests/specs/features/transformer_attn_dropout_bf16.lua 3e-2"
  "tests/specs/features/list_group_unused_module.lua 1e-3"
  "tests/specs/features/hsdp_unused_module.lua 1e-3"
  "tests/torch/step_programs/retain_graph_one_group_w1.lua 1e-3"
  "tests/specs/features/microbatch_1f1b.lua 1e-3"
  "tests/torch/step_programs/hsdp_reduce_scatter_only.lua 1e-3"
  "tests/torch/step_programs/non_root_forward.lua 1e-3"
  "tests/specs/seed/multi_forward_raf_true_ckpt_none.lua 1e-3"
  "tests/specs/features/lr_schedule_warmup_cosine.lua 1e-3 10"
  "tests/torch/step_programs/lr_schedule_linear.lua 1e-3 5"
  "tests/specs/features/offload_cpu.lua 3e-2"
  "tests/specs/features/frozen_llama_w1_bf16.lua 3e-2"
  "tests/specs/features/frozen_between.lua 1e-3"
  "tests/specs/features/scale_bf16.lua 3e-2"
  "tests/specs/features/scale_fold_bf16.lua 3e-2"
  # lora_b starts at zeros, so after 3 AdamW steps each element is a few lr-sized moves and
  # the tensor's norm is small: the 2 or 3 elements whose bf16 gradient is near zero and takes
  # another sign on the GPU (another summation order) move it by about 4%
  "tests/specs/features/lora_llama_w1_ckpt_bf16.lua 8e-2"
  "tests/specs/features/lora_llama_stacked_bf16.lua 8e-2"
  "tests/specs/features/lora_llama_stacked_w1_bf16.lua 8e-2"
)

gpu=1
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q GPU; then gpu=0; fi

# The emulator's fast tier runs every spec's conformance test and CUDA-vs-CPU comparison,
# and the bit-identity runs below (every stream mode, with and without evals) on these
# specs, which between them use every side stream: prefetch, post-forward sub-groups,
# HSDP's all-reduce, explicit async unshards, two forwards, offload. FSDPGEN_SLOW=1
# (tests/run_all.sh --all) runs them on every spec, and the random programs below.
slow=${FSDPGEN_SLOW:-0}
# the emulated libraries: without sanitizers, in the slow tier with ASan + UBSan
emu="" emu_san=""
[ "$slow" = 1 ] && emu=_san emu_san="-fsanitize=address,undefined"
bit_specs=" mlp_w2_sgd_prefetch llama_w4_bf16_int_raf hsdp_int_reshard microbatch_1f1b"
bit_specs+=" multi_forward_raf_true_ckpt_none offload_cpu gpt2_w1_tied_rows "

# On the emulator's slow tier, also four of tests/generator/step_fuzz.lua's random
# microbatch programs (fp32; world 1, 2, 4 or HSDP 2 x 2; checkpointing, prefetch, explicit
# unshards and reshards, setters per microbatch): the lazy stream modes below check the
# events between the step's streams on programs nobody wrote by hand. Not on the GPU, whose
# device time goes to what only it can show.
# They are tests/conformance/run.sh's first four (the same seed), at its path: a spec name
# has one build folder (build/fuzz_mbN/), which refuses a spec of that name from elsewhere.
if [ "$gpu" = 0 ] && [ "$slow" = 1 ]; then
    mkdir -p build/fuzz_specs
    if lua5.4 tests/generator/step_fuzz.lua --write build/fuzz_specs 4; then
        for i in 1 2 3 4; do specs+=("build/fuzz_specs/fuzz_mb$i.lua 1e-3"); done
    else
        fail "tests/generator/step_fuzz.lua --write: no random programs"
    fi
    # And eight of the FSDP2 oracle's random specs (tests/fsdp2/random_specs.py, seed 77):
    # Llamas in bf16 at one rank (the one-rank plans), at 4 and 8 ranks and on an HSDP
    # 2 x 1 mesh, checkpointed or with frozen parts, and a Transformer on HSDP 2 x 2 with
    # dropout. Not every random spec keeps CUDA vs CPU within rtol: Adam moves an element
    # whose gradient is near zero by lr either way, so one element of a zero-initialized
    # bias may end 2 lr apart (rand_77_9's; with SGD it agrees).
    mkdir -p build/random_specs
    if python3 tests/fsdp2/random_specs.py build/random_specs --seed 77 --count 157 >/dev/null; then
        for i in 3 5 8 26 28 32 44 156; do
            r=1e-3
            grep -q bf16 "build/random_specs/rand_77_$i.lua" && r=3e-2
            specs+=("build/random_specs/rand_77_$i.lua $r")
        done
    else
        fail "tests/fsdp2/random_specs.py: no random specs"
    fi
fi

# ---- build (no GPU needed) ----------------------------------------------------------------

if ! ninja -f runtime/cuda_step.ninja cuda_step >"$work/build.log" 2>&1; then
    cat "$work/build.log"
    echo "$suite_tag build of runtime/cuda/step failed"
    echo "0 passed, 1 failed"
    exit 1
fi

# On a GPU also a spec at the bench models' head dim, whose attention cuDNN takes.
[ "$gpu" = 1 ] && specs+=("tests/cuda_step/llama_cudnn_bf16.lua 3e-2")
# ... and LoRA there, its first block's dK (no tensor needs it) in the site's spare scratch;
# lora_b starts at zeros (lora_llama_w1_ckpt_bf16's tolerance, above)
[ "$gpu" = 1 ] && specs+=("tests/cuda_step/llama_lora_cudnn_bf16.lua 8e-2")
# The benchmark's own binaries (bench/run.sh runs them on a GPU; 2 s each here): their
# step C at the full sizes compiles and links, so a GPU run does not find it broken.
for spec in bench/specs/gpt2_124m.lua bench/specs/llama_1b.lua; do
    if ./fsdpgen build "$spec" --cuda -o "$work/bench_build" >"$work/b.log" 2>&1; then
        pass "fsdpgen build $spec --cuda (the benchmark's binary): $(tail -n 1 "$work/b.log")"
    else
        cat "$work/b.log"
        fail "fsdpgen build $spec --cuda (the benchmark's binary)"
    fi
done
rm -rf "$work/bench_build"
# Every build first, one at a time (ninja's build log is shared): the CUDA binaries, and the
# CPU binaries the comparisons below run; the checks of the binaries then run two specs at
# a time.
for entry in "${specs[@]}"; do
    read -r spec rtol <<<"$entry"
    if ./fsdpgen build "$spec" --cuda >"$work/b.log" 2>&1; then
        pass "fsdpgen build $spec --cuda: $(tail -n 1 "$work/b.log")"
    else
        cat "$work/b.log"
        fail "fsdpgen build $spec --cuda"
    fi
    ./fsdpgen build "$spec" >"$work/b.log" 2>&1 || { cat "$work/b.log"; fail "fsdpgen build $spec"; }
done
# llama_w1_bf16's and gpt2_w1_tied_rows' twins whose roots reduce whole (whole_checks), and
# scale_fold_bf16's whose scales stay kernels (fold_checks; a spec's build folder takes it
# from one path)
mkdir -p build/fold_specs
sed -e 's/self\.lora_b(h) \* self\.s/self.lora_b(h) * 1 * self.s/' -e 's/"scale_fold_bf16"/"scale_fold_twin"/' \
    tests/specs/features/scale_fold_bf16.lua >build/fold_specs/scale_fold_twin.lua
for twin in tests/cuda_step/llama_w1_whole.lua tests/cuda_step/gpt2_w1_whole.lua build/fold_specs/scale_fold_twin.lua; do
    for cuda in --cuda ""; do
        ./fsdpgen build "$twin" $cuda >"$work/b.log" 2>&1 ||
            { cat "$work/b.log"; fail "fsdpgen build $twin $cuda"; }
    done
done

# ---- the generated binaries: on the GPU, or on the emulator ---------------------------------
# Without a GPU, each spec's --cuda objects are relinked against the emulated CUDA libraries
# (tests/cuda/emu: runtime/cuda and runtime/cuda/step compiled for the host, one-rank NCCL;
# in the slow tier built with ASan + UBSan), so the same checks run there, in the emulator's
# lazy modes: the conformance tests with CUDA_EMU_LAZY=1 (each stream's work runs only when
# something waits for it), CUDA vs CPU with CUDA_EMU_LAZY=low (only compute, the
# all-reduce and the optimizer stream wait to be needed; the copy-in, all-gather and
# reduce-scatter streams run at issue), so a missing wait between the step's streams changes the results either
# way; compute-sanitizer needs the GPU.

if [ "$gpu" = 0 ]; then
    skipped+=("compute-sanitizer: SKIP no GPU (nvidia-smi lists none); conformance and CUDA vs CPU run on the emulator instead")
    if ! ninja -f runtime/cuda.ninja "build/cuda/emu$emu/librt_kernels_cuda_emu.a" >"$work/emu.log" 2>&1 ||
        ! ninja -f runtime/cuda_step.ninja "cuda_step_emu$emu" >>"$work/emu.log" 2>&1 ||
        ! ninja build/train/librt_train.a build/io/librt_io.a build/runtime/librt_mpi_stub.a \
            build/runtime/librt_core.a >>"$work/emu.log" 2>&1; then
        cat "$work/emu.log"
        fail "build of the emulated CUDA libraries"
        suite_summary
        exit $?
    fi
    CUDA_EMU_LAZY=1 run_suite "emulated test_cuda_local" "build/cuda_step/test_cuda_local_emu$emu"
    run_suite "emulated test_seg_copy" "build/cuda_step/test_seg_copy_emu$emu"
else
    run_suite test_seg_copy build/cuda_step/test_seg_copy
fi

# cuda_binary NAME MAIN sets bin to spec NAME's CUDA binary whose main object is MAIN (main:
# the training binary, test: the conformance test): as built on a GPU, else the same objects
# relinked for the emulator; returns non-zero (counted as a failure) if that link fails.
cuda_binary() {
    local name=$1 main=$2 dir=build/$1 suffix=""
    [ "$main" = test ] && suffix=_test
    bin=$dir/${name}_cuda$suffix
    [ "$gpu" = 1 ] && return 0
    bin=$dir/${name}_cuda_emu$suffix
    local objs=("$dir/obj_cuda/${name}_$main.o" "$dir/obj_cuda/${name}_step.o")
    [ "$main" = test ] && objs+=("$dir/obj_cuda/${name}_reference_step.o")
    if ! g++ -o "$bin" "${objs[@]}" -Wl,--start-group build/train/librt_train.a \
        "build/cuda_step/emu$emu/librt_step_cuda_emu.a" "build/cuda/emu$emu/librt_kernels_cuda_emu.a" \
        build/io/librt_io.a build/runtime/librt_mpi_stub.a build/runtime/librt_core.a \
        -Wl,--end-group $emu_san -lm -pthread >"$work/link.$name.$main.log" 2>&1; then
        cat "$work/link.$name.$main.log"
        fail "link of $bin"
        return 1
    fi
}

where=$([ "$gpu" = 1 ] && echo GPU || echo emulator)
py=python3  # the comparisons and trace sums need no PyTorch
# On a GPU the attention sites run cuDNN wherever it takes the shape (the spec's `auto` could
# keep fsdpgen's kernels on these small shapes), so the checks below cover it; the emulator
# has no cuDNN and runs fsdpgen's kernels there.
[ "$gpu" = 1 ] && export RT_ATTENTION=cudnn
# The binary run with VAR=VALUE must stop at start with exactly the one line WANT.
env_error() {
    local name=$1 var=$2 value=$3 want=$4 log=$work/$1.$2.log
    if env "$var=$value" "$bin" --steps 1 >"$log" 2>&1; then
        fail "$name with $var=$value: ran (must stop with: $want)"
    elif [ "$(cat "$log")" = "$want" ]; then
        pass "$name with $var=$value: stops with one line naming it"
    else
        cat "$log"
        fail "$name with $var=$value: not the one-line error"
    fi
}
# vs_cpu_with VAR=VALUE TAG: the spec's CUDA run with that setting against its CPU run,
# within its tolerance (run_spec's name, bin, steps, val, where and rtol).
vs_cpu_with() {
    env "$1" "$bin" "${steps[@]}" "${val[@]}" --save "$work/$name.$2.safetensors" \
        >"$work/$name.$2.log" 2>&1
    PYTHONPATH=tests/common run_suite "cuda_vs_cpu/$name with $1 ($where)" "$py" \
        tests/cuda_step/compare_runs.py "$work/$name.cpu.log" "$work/$name.$2.log" \
        "$work/$name.cpu.safetensors" "$work/$name.$2.safetensors" "$rtol" "$name"
}
# Whether two --save files hold the same tensors, bit for bit (their metadata names the spec).
same_tensors() { "$py" tests/common/same_tensors.py "$1" "$2"; }
# In llama_w1_bf16's spec_checks: its root is reduced in two parts (the output head's before
# the blocks' backward, whose optimizer stream steps it beside them; the embedding's after),
# and so is its last block (its MLP's before its attention's backward),
# the embedding's step split by rows (those no token looks up stepped from the step's
# start with a zero gradient) and every group's gradients in place (the optimizer rounds
# them as it reads them), its twin tests/cuda_step/llama_w1_whole.lua's each in a
# reduce-scatter and its root stepped whole. In gpt2_w1_tied_rows' the root is reduced in
# four parts: the final norm's and the tied embedding's rows no token looks up before the
# blocks' backward (RT_ROWS_FINAL, beside it), the position embedding's and the rows looked
# up after it; its twin is tests/cuda_step/gpt2_w1_whole.lua. The CPU binaries, and on the
# emulator the CUDA ones, save the same bits.
# whole_checks TWIN PARTS IN_PLACE ROWS: the schedule's parts, reductions in place and
# optimizer lines by rows, the twin's none; the same bits.
whole_checks() {
    local whole=$1 want_parts=$2 want_in_place=$3 want_rows=$4 parts in_place rows
    parts=$(grep -cE '^  rs .*; part [0-9]+ of [0-9]+: ' "build/$name/$name.schedule")
    in_place=$(grep -c '^  rs .* in place: ' "build/$name/$name.schedule")
    rows=$(grep -cE '^  compute  optimizer .*, the rows (no token of the step|the step.s tokens) look' \
        "build/$name/$name.schedule")
    if [ "$parts" = "$want_parts" ] && [ "$in_place" = "$want_in_place" ] && [ "$rows" = "$want_rows" ] &&
        ! grep -qE '; part [0-9]+ of | in place: |, the rows ' "build/$whole/$whole.schedule"; then
        pass "$name: its schedule has $parts parts, $in_place reductions in place and $rows optimizer lines by rows; $whole's each reduction a reduce-scatter"
    else
        fail "$name: $parts parts (want $want_parts), $in_place reductions in place (want $want_in_place) and $rows row lines (want $want_rows) in its schedule, or its twin's in parts, in place or by rows"
    fi
    same_as_twin "$whole" "the root reduced in parts, the gradients in place," \
        "the root's parts stepped on the optimizer stream, the gradients rounded as it reads them," \
        "$whole's reduce-scatters"
}
# scale_fold_bf16's twin (build/fold_specs/scale_fold_twin.lua: each folded scale after a scale
# by 1, which alone folds): 4 scales folded in both schedules, the twin's 4 others and the
# head's kept as kernels; the same bits.
fold_checks() {
    local twin=scale_fold_twin folded=() kept=()
    for s in "$name" "$twin"; do  # the step's forward lines (the eval's follow them)
        awk '/^eval /{exit} /^  compute  forward .* scale \[/' "build/$s/$s.schedule" >"$work/$s.scales"
        folded+=("$(grep -c '(folded into the linear: same buffer)' "$work/$s.scales")")
        kept+=("$(grep -vc 'folded into' "$work/$s.scales")")
    done
    if [ "${folded[*]} ${kept[*]}" = "4 4 1 5" ]; then
        pass "$name: 4 scales folded into their linears, the head's kept; $twin's 4 by 1 folded, the 5 others kept"
    else
        fail "$name: scales folded ${folded[0]} (want 4) and kept ${kept[0]} (want 1); $twin's folded ${folded[1]} (want 4), kept ${kept[1]} (want 5)"
    fi
    same_as_twin "$twin" "the scales folded into the GEMMs' alpha" "the scales folded into cuBLAS's alpha" \
        "$twin's scale kernels" 1
}
# same_as_twin TWIN CPU_WHAT CUDA_WHAT TWIN_WHAT [ON_GPU]: the twin's CPU binary, and on the
# emulator (with ON_GPU 1 on a GPU too: cuBLAS picks its kernels by shape, not by alpha) its
# CUDA one, run as this spec's did and save the same bits.
same_as_twin() {
    local twin=$1
    "build/$twin/$twin" "${steps[@]}" "${val[@]}" --save "$work/$twin.cpu.safetensors" \
        >"$work/$twin.cpu.log" 2>&1
    if same_tensors "$work/$name.cpu.safetensors" "$work/$twin.cpu.safetensors"; then
        pass "$name (CPU): $2 save the bits of $4"
    else
        fail "$name (CPU): saved other parameters than $twin"
    fi
    [ "$gpu" = 1 ] && [ "${5:-0}" != 1 ] && return
    local own_bin=$bin
    cuda_binary "$twin" main || return
    CUDA_EMU_LAZY=low "$bin" "${steps[@]}" "${val[@]}" --save "$work/$twin.cuda.safetensors" \
        >"$work/$twin.cuda.log" 2>&1
    if same_tensors "$work/$name.cuda.safetensors" "$work/$twin.cuda.safetensors"; then
        pass "$name ($where): $3 save the bits of $4"
    else
        fail "$name ($where): saved other parameters than $twin"
    fi
    bin=$own_bin
}
# spec_checks SPEC RTOL [EMU_STEPS]: the checks of one spec's binaries (run in a subshell: its
# counts go to the caller through files). On the GPU the conformance test runs its 10 steps
# and the other runs 5 (evals after steps 2, 4 and 5). On the emulator, where a step of the
# attention specs takes seconds, they run EMU_STEPS (default 3: the first step, which
# captures the CUDA graph, its replays, evals after steps 2 and 3 and the step after one):
# each step runs the same schedule, so more steps add time, not paths. The learning-rate
# schedules keep enough steps to reach their decay.
spec_checks() {
    local spec=$1 rtol=$2 name steps=(--steps 5) conf_steps=()
    name=$(basename "$spec" .lua)
    if [ "$gpu" = 0 ]; then
        steps=(--steps "${3:-3}")
        conf_steps=(--steps "${3:-3}")
    fi
    cuda_binary "$name" test && CUDA_EMU_LAZY=1 run_suite "conformance/$name ($where)" "$bin" "${conf_steps[@]}"
    cuda_binary "$name" main || return
    # The eval program after every second step and the last, where the spec has one.
    val=(--val-every 2 --val-batches 2)
    grep -q '^eval       not available' "build/$name/$name.schedule" && val=()
    "build/$name/$name" "${steps[@]}" "${val[@]}" --save "$work/$name.cpu.safetensors" >"$work/$name.cpu.log" 2>&1
    CUDA_EMU_LAZY=low "$bin" "${steps[@]}" "${val[@]}" --save "$work/$name.cuda.safetensors" >"$work/$name.cuda.log" 2>&1
    PYTHONPATH=tests/common run_suite "cuda_vs_cpu/$name ($where)" "$py" tests/cuda_step/compare_runs.py \
        "$work/$name.cpu.log" "$work/$name.cuda.log" "$work/$name.cpu.safetensors" \
        "$work/$name.cuda.safetensors" "$rtol" "$name"
    if [[ $name == offload_cpu ]]; then  # the persistent buffers in pinned host memory
        if grep -q '^fsdpgen: offload_policy: 57408 bytes (56.1 KiB) of sharded parameters' "$work/$name.cuda.log"; then
            pass "$name: the CUDA binary keeps the plan's 57408 persistent bytes per rank in pinned host memory"
        else
            fail "$name: no 'offload_policy: 57408 bytes (56.1 KiB) ... in pinned host memory' line"
        fi
    fi
    # what runs the attention site, said at start: fsdpgen's kernels on the emulator, cuDNN
    # on a GPU where the spec has the bench models' head dim (and under auto, the timings)
    local want=
    if [[ $name = llama_cudnn_bf16 ]]; then
        RT_ATTENTION=auto "$bin" --steps 1 >"$work/$name.auto.log" 2>&1
        if grep -qE '^fsdpgen: attention 0 .* \(auto\): (cudnn \(forward \+ backward [0-9.]+ ms, fsdpgen.s [0-9.]+ ms\)|fsdpgen.s kernels \(faster: )' \
            "$work/$name.auto.log"; then
            pass "$name with RT_ATTENTION=auto: $(grep -m 1 '^fsdpgen: attention 0' "$work/$name.auto.log")"
        else
            tail -n 5 "$work/$name.auto.log"
            fail "$name with RT_ATTENTION=auto: no site line with both timings"
        fi
    fi
    [[ $gpu = 0 && $name = llama_w1_bf16 ]] &&
        want="fsdpgen: attention 0 [2, 16] 4/2 heads x 12 bf16 causal (auto): fsdpgen's kernels (cuDNN attention: not on the CUDA emulator)"
    [[ $name = llama_cudnn_bf16 ]] && want="fsdpgen: attention 0 [2, 128] 4/2 heads x 64 bf16 causal (cudnn): cudnn"
    if [[ -n $want ]]; then
        if grep -qF "$want" "$work/$name.cuda.log"; then
            pass "$name: rank 0 says what runs its attention site: ${want#fsdpgen: }"
        else
            grep '^fsdpgen: attention' "$work/$name.cuda.log"
            fail "$name: no line '$want'"
        fi
        env_error "$name" RT_ATTENTION flash \
            "fsdpgen: RT_ATTENTION=flash: must be auto (the faster per shape), cudnn or fsdpgen"
        # a good value runs, and the site line says the backward's form only with cuDNN
        if [ "$gpu" = 0 ]; then
            RT_ATTENTION_BACKWARD=atomic "$bin" --steps 1 >"$work/$name.atomic1.log" 2>&1
            if grep -qxF "$want" "$work/$name.atomic1.log"; then
                pass "$name with RT_ATTENTION_BACKWARD=atomic: runs, the same site line"
            else
                tail -n 3 "$work/$name.atomic1.log"
                fail "$name with RT_ATTENTION_BACKWARD=atomic: no line '$want'"
            fi
        fi
        env_error "$name" RT_ATTENTION_BACKWARD fast \
            "fsdpgen: RT_ATTENTION_BACKWARD=fast: must be deterministic (cuDNN's backward with the same bits every run) or atomic (dQ summed with atomics)"
    fi
    # cuDNN's backward with dQ summed by atomics (RT_ATTENTION_BACKWARD=atomic): said at
    # start, and within the CPU's tolerance
    if [[ $name = llama_cudnn_bf16 ]]; then
        vs_cpu_with RT_ATTENTION_BACKWARD=atomic atomic
        local line="fsdpgen: attention 0 [2, 128] 4/2 heads x 64 bf16 causal (cudnn): cudnn, atomic backward"
        if grep -qxF "$line" "$work/$name.atomic.log"; then
            pass "$name with RT_ATTENTION_BACKWARD=atomic: rank 0 says ${line#fsdpgen: }"
        else
            grep '^fsdpgen: attention' "$work/$name.atomic.log"
            fail "$name with RT_ATTENTION_BACKWARD=atomic: no line '$line'"
        fi
    fi
    # where the optimizer steps run (RT_OPTIMIZER_STREAM): the same bits either way, and one
    # line for a bad value. On a GPU also without the CUDA graph: the emulator runs a side
    # stream only when compute waits for it, so only a GPU can show the optimizer beside the
    # backward reading a gradient before its last write (the root's head part steps beside
    # the blocks' backward). Every kernel of this spec is deterministic on one GPU (cuBLAS
    # on one stream with a fixed workspace, the embedding's sorted backward, no atomics).
    if [[ $name = llama_w1_bf16 || $name = gpt2_w1_tied_rows ]]; then
        local where=emulator label="RT_OPTIMIZER_STREAM=compute" same=1
        CUDA_EMU_LAZY=low RT_OPTIMIZER_STREAM=compute "$bin" "${steps[@]}" "${val[@]}" \
            --save "$work/$name.optc.safetensors" >"$work/$name.optc.log" 2>&1 &&
            cmp -s "$work/$name.cuda.safetensors" "$work/$name.optc.safetensors" || same=0
        if [ "$gpu" = 1 ]; then
            where=GPU label="$label and --no-graph"
            "$bin" "${steps[@]}" "${val[@]}" --no-graph --save "$work/$name.nograph.safetensors" \
                >"$work/$name.nograph.log" 2>&1 &&
                cmp -s "$work/$name.cuda.safetensors" "$work/$name.nograph.safetensors" || same=0
        fi
        if [ $same = 1 ]; then
            pass "$name ($where): the default (the optimizer beside the backward, the step a CUDA graph) and $label save the same bits"
        else
            fail "$name ($where): $label saved other parameters than the default (a race between the optimizer stream and the backward?)"
        fi
        if [[ $name = gpt2_w1_tied_rows ]]; then
            # the feed-forwards' bias gradients by column sums (RT_BIAS_GRAD=sums), not in
            # their weight gradients' products: within the CPU's tolerance too; a bad value
            # is one line
            vs_cpu_with RT_BIAS_GRAD=sums sums
            env_error "$name" RT_BIAS_GRAD colsum \
                "fsdpgen: RT_BIAS_GRAD=colsum: must be epilogue (a linear's assigned bias gradient in its weight gradient's product) or sums (column sums)"
            whole_checks gpt2_w1_whole 4 6 2
        else
            env_error "$name" RT_OPTIMIZER_STREAM early \
                "fsdpgen: RT_OPTIMIZER_STREAM=early: must be side (each group's step beside the backward, after its reduction) or compute (after the backward)"
            # SMs left to the side streams (RT_SM_MARGIN): a bad value is one line; on a GPU,
            # where cuBLAS and cuDNN choose their kernels for fewer SMs, the run stays within the
            # CPU's tolerance (the emulator's GEMMs are the same loops either way: the list of a
            # step's kernels below shows the count reaching every GEMM)
            env_error "$name" RT_SM_MARGIN 8SMs \
                "fsdpgen: RT_SM_MARGIN=8SMs: must be a whole number of SMs from 0 to 1023 (the SMs the GEMMs and cuDNN's attention leave to the optimizer and copy streams)"
            [ "$gpu" = 0 ] && env_error "$name" RT_SM_MARGIN 4 \
                "fsdpgen: RT_SM_MARGIN=4: must leave the GEMMs at least one of the GPU's 4 SMs (0 to 3)"
            [ "$gpu" = 1 ] && vs_cpu_with RT_SM_MARGIN=16 margin
            whole_checks llama_w1_whole 4 5 2
        fi
    fi
    # the parameters a reshard kept copied again at their next all-gather (RT_KEEP_UNSHARDED,
    # bench/run.sh's fsdpgen_copy_kept row): the same bits, and one line for a bad value
    if [[ $name = w1_keep_microbatch ]]; then
        if CUDA_EMU_LAZY=low RT_KEEP_UNSHARDED=copy "$bin" "${steps[@]}" "${val[@]}" --save "$work/$name.copy.safetensors" \
            >"$work/$name.copy.log" 2>&1 && cmp -s "$work/$name.cuda.safetensors" "$work/$name.copy.safetensors"; then
            pass "$name ($where): RT_KEEP_UNSHARDED=copy (the kept parameters copied again) saves the default's bits"
        else
            fail "$name ($where): RT_KEEP_UNSHARDED=copy saved other parameters than the default (or failed)"
        fi
        env_error "$name" RT_KEEP_UNSHARDED again \
            "fsdpgen: RT_KEEP_UNSHARDED=again: must be keep (an all-gather of parameters a reshard kept copies nothing) or copy (it copies the shards again)"
    fi
    [[ $name = scale_fold_bf16 ]] && fold_checks
    [ "$gpu" = 1 ] && return
    [ "$slow" = 1 ] || [[ $bit_specs == *" $name "* ]] || return
    # The emulator's arithmetic is the same in any order, so the run with every stream at
    # issue (0) and with every stream waiting to be needed (1) must save the low run's bits
    # exactly: a side stream touching bytes the plan gave to another buffer too early or too
    # late changes some in one mode, even within rtol.
    same=1
    for mode in 0 1; do
        CUDA_EMU_LAZY=$mode "$bin" "${steps[@]}" "${val[@]}" --save "$work/$name.lazy$mode.safetensors" \
            >"$work/$name.lazy$mode.log" 2>&1 &&
            cmp -s "$work/$name.cuda.safetensors" "$work/$name.lazy$mode.safetensors" || same=0
    done
    if [ $same = 1 ]; then
        pass "lazy modes/$name (emulator): CUDA_EMU_LAZY=0, low and 1 save the same bits"
    else
        fail "lazy modes/$name (emulator): CUDA_EMU_LAZY=0, low and 1 save different parameters" \
            "(streams race: an access their events do not order)"
    fi
    [ ${#val[@]} = 0 ] && return
    # The evals change no bit of the training.
    if CUDA_EMU_LAZY=low "$bin" "${steps[@]}" --save "$work/$name.noval.safetensors" >"$work/$name.noval.log" 2>&1 &&
        cmp -s "$work/$name.cuda.safetensors" "$work/$name.noval.safetensors"; then
        pass "eval/$name (emulator): the run with evals ($(grep -c 'val loss' "$work/$name.cuda.log")) saves the bits of the run without"
    else
        fail "eval/$name (emulator): the evals changed the trained parameters"
    fi
}
# Two specs at a time, each into its own files; printed and counted in the list's order.
i=0
for entry in "${specs[@]}"; do
    read -r spec rtol emu_steps <<<"$entry"
    i=$((i + 1))
    [ "$i" -gt 2 ] && wait -n
    (
        passed=0 failed=0 skipped=()
        spec_checks "$spec" "$rtol" $emu_steps
        echo "$passed $failed" >"$work/spec$i.tally"
        [ ${#skipped[@]} -gt 0 ] && printf '%s\n' "${skipped[@]}" >"$work/spec$i.skipped"
    ) >"$work/spec$i.out" 2>&1 &
done
wait
for ((k = 1; k <= i; k++)); do
    cat "$work/spec$k.out"
    if read -r p f <"$work/spec$k.tally" 2>/dev/null; then
        passed=$((passed + p)) failed=$((failed + f))
    else
        failed=$((failed + 1))
        echo "$suite_tag the checks of ${specs[k - 1]%% *} ended without their counts"
    fi
    [ -f "$work/spec$k.skipped" ] && mapfile -t -O "${#skipped[@]}" skipped <"$work/spec$k.skipped"
done

# --trace's waits of compute for collectives (tests/gpu/trace_waits.py): the script's sums on
# hand-made traces; a CUDA binary's trace has, per rank and step, one all-gather wait per
# all_gather_wait and all_gather_drop line of its schedule; a CPU binary's trace has none.
run_suite "trace_waits.py on hand-made traces" "$py" tests/gpu/test_trace_waits.py
name=mlp_w2_sgd_prefetch
if cuda_binary "$name" main; then
    # the step's sections only (the eval program's and the step after one's follow them)
    want=$(awk '/^eval /{exit} /^  compute  all_gather_(wait|drop) /{n++} END{print n+0}' "build/$name/$name.schedule")
    "$bin" --steps 3 --trace "$work/$name.trace.json" >"$work/trace.log" 2>&1
    rc=$?
    "$py" tests/gpu/trace_waits.py "$work/$name.trace.json" >"$work/waits.txt" 2>&1
    # each rank's all-gather waits per step, summed over its sections
    got=$(awk '/^rank/ { if (r != "") printf "%s ", n; r = $2; n = 0 }
        { while (match($0, /all-gathers [0-9.]+ ms in [0-9.]+ waits/)) {
              s = substr($0, RSTART, RLENGTH); split(s, w, " "); n += w[5]; $0 = substr($0, RSTART + RLENGTH) } }
        END { if (r != "") printf "%s", n }' "$work/waits.txt")
    if [ "$rc" = 0 ] && [ "$got" = "$want $want" ]; then
        pass "$name --trace ($where): per rank and step, $want all-gather waits as the schedule's lines ($(grep -m 1 'forward' "$work/waits.txt" | sed 's/^ *//'))"
    else
        cat "$work/trace.log" "$work/waits.txt"
        fail "$name --trace ($where): exit $rc; all-gather waits per step of ranks 0 and 1: '$got', want $want each"
    fi
    ./fsdpgen run "tests/specs/conformance/$name.lua" -- --steps 2 --trace "$work/cpu.trace.json" >"$work/cpu_trace.log" 2>&1
    if "$py" tests/gpu/trace_waits.py "$work/cpu.trace.json" >"$work/cpu_waits.txt" 2>&1; then
        fail "trace_waits.py on a CPU binary's trace: exit 0 (it has no waits)"
    elif grep -q "no compute-stream wait spans" "$work/cpu_waits.txt"; then
        pass "trace_waits.py on a CPU binary's trace: says it has no wait spans, exit 1"
    else
        cat "$work/cpu_trace.log" "$work/cpu_waits.txt"
        fail "trace_waits.py on a CPU binary's trace: no 'no compute-stream wait spans' line"
    fi
fi
# The kernels of a captured step, on the emulator (CUDA_EMU_GRAPH_KERNELS: the graph's nodes
# by name) for the bench models in small (their kernel choices at small shapes): the same
# list as tests/cuda_step/kernels/NAME.txt, so a change that adds or removes launches shows
# in review. FSDPGEN_UPDATE_GOLDEN=1 rewrites the lists.
if [ "$gpu" = 0 ]; then
    for spec in tests/cuda_step/llama_bench_shape.lua tests/cuda_step/gpt2_bench_shape.lua; do
        name=$(basename "$spec" .lua)
        golden=tests/cuda_step/kernels/$name.txt
        if ! ./fsdpgen build "$spec" --cuda >"$work/b.log" 2>&1; then
            cat "$work/b.log"
            fail "fsdpgen build $spec --cuda"
            continue
        fi
        cuda_binary "$name" main || continue
        rm -f "$work/graph.txt"
        # the first step runs eagerly, the second is captured
        if ! CUDA_EMU_GRAPH_KERNELS=$work/graph.txt "$bin" --steps 2 >"$work/run.log" 2>&1 ||
            [ ! -s "$work/graph.txt" ]; then
            cat "$work/run.log"
            fail "$name: two steps on the emulator, the second captured"
            continue
        fi
        {
            echo "# The kernels of one captured training step of $name on the CUDA backend,"
            echo "# by name (cublas_gemm, cub_radix_sort, memset, memcpy, nccl: those calls), as"
            echo "# the CUDA emulator records the graph; tests/cuda_step/$name.lua says why this"
            echo "# spec. Do not edit: FSDPGEN_UPDATE_GOLDEN=1 tests/cuda_step/run.sh rewrites it."
            # the first graph: the step's
            awk 'NR == 1 { print "total " $2; n = $2; next } NR > n + 1 { exit } { print }' "$work/graph.txt" |
                { read -r total; echo "$total"; sort | uniq -c | sort -k1,1nr -k2; }
        } >"$work/$name.kernels"
        # RT_SM_MARGIN=1: every GEMM of the step (cuBLAS and cuBLASLt's bias epilogue) is
        # planned for 3 of the emulator's 4 SMs (its node cublas_gemm@3), nothing else changes
        rm -f "$work/graph1.txt"
        RT_SM_MARGIN=1 CUDA_EMU_GRAPH_KERNELS=$work/graph1.txt "$bin" --steps 2 >"$work/run1.log" 2>&1
        if grep -q "^fsdpgen: RT_SM_MARGIN=1: GEMMs and cuDNN's attention planned for 3 of the GPU's 4 SMs" \
            "$work/run1.log" && cmp -s <(sed 's/^cublas_gemm$/cublas_gemm@3/' "$work/graph.txt") \
            "$work/graph1.txt"; then
            pass "$name with RT_SM_MARGIN=1: rank 0 says so, and each GEMM of the step is planned for 3 of 4 SMs"
        else
            head -n 3 "$work/run1.log"
            fail "$name with RT_SM_MARGIN=1: no line saying so, or the step's kernels are not the default's with every GEMM at 3 SMs"
        fi
        # RT_BIAS_GRAD=sums: the step's kernels and, for each bias gradient the weight
        # gradient's product computed (GPT-2's feed-forwards), a column sum more
        rm -f "$work/graph2.txt"
        RT_BIAS_GRAD=sums CUDA_EMU_GRAPH_KERNELS=$work/graph2.txt "$bin" --steps 2 >"$work/run2.log" 2>&1
        more=$(diff <(sort "$work/graph.txt") <(sort "$work/graph2.txt") | grep -c '^> colsum_chunk_kernel')
        other=$(diff <(sort "$work/graph.txt") <(sort "$work/graph2.txt") |
            grep -v -e '^> colsum_chunk_kernel' -e '^[<>] graph ' | grep -c '^[<>]')
        want=0
        [[ $name = gpt2_bench_shape ]] && want=4
        if [ "$more" = "$want" ] && [ "$other" = 0 ]; then
            pass "$name with RT_BIAS_GRAD=sums: the step's kernels and $want column sums more"
        else
            fail "$name with RT_BIAS_GRAD=sums: $more column sums more (want $want), $other other kernels differ"
        fi
        # RT_KEEP_UNSHARDED=copy: the step's kernels and each block's kept parameters copied
        # again at its forward and its backward all-gather (two segment copies each: fp32 and
        # packed 16-bit storage), and Llama's root's at its forward's (two more; GPT-2's root
        # is not kept)
        rm -f "$work/graph3.txt"
        RT_KEEP_UNSHARDED=copy CUDA_EMU_GRAPH_KERNELS=$work/graph3.txt "$bin" --steps 2 >"$work/run3.log" 2>&1
        more=$(diff <(sort "$work/graph.txt") <(sort "$work/graph3.txt") | grep -c '^> seg_copy_kernel')
        other=$(diff <(sort "$work/graph.txt") <(sort "$work/graph3.txt") |
            grep -v -e '^> seg_copy_kernel' -e '^[<>] graph ' | grep -c '^[<>]')
        want=8
        [[ $name = llama_bench_shape ]] && want=10
        if [ "$more" = "$want" ] && [ "$other" = 0 ]; then
            pass "$name with RT_KEEP_UNSHARDED=copy: the step's kernels and $want segment copies more (the kept parameters copied at every all-gather)"
        else
            fail "$name with RT_KEEP_UNSHARDED=copy: $more segment copies more (want $want), $other other kernels differ"
        fi
        if [ "${FSDPGEN_UPDATE_GOLDEN:-0}" = 1 ]; then
            cp "$work/$name.kernels" "$golden"
            pass "$name: kernels of a step written to $golden ($(sed -n 's/^total //p' "$golden"))"
        elif diff -u "$golden" "$work/$name.kernels" >"$work/kernels.diff" 2>&1; then
            pass "$name: the kernels of a step as $golden ($(sed -n 's/^total //p' "$golden") launches)"
        else
            cat "$work/kernels.diff"
            fail "$name: the kernels of a step differ from $golden (FSDPGEN_UPDATE_GOLDEN=1 rewrites it)"
        fi
    done
    suite_summary
    exit $?
fi

sanitizer=/usr/local/cuda/bin/compute-sanitizer
command -v compute-sanitizer >/dev/null 2>&1 && sanitizer=compute-sanitizer
# sanitize SPEC ATTENTION: memcheck and racecheck on SPEC's CUDA binary (built above), 2
# steps, with RT_ATTENTION=ATTENTION. A sanitizer that refuses the device (as under gVisor:
# "Device not supported") is a skip, said once, and the later runs are not tried.
sanitizer_refused=0
sanitize() {
    local spec=$1 attention=$2 name tool
    name=$(basename "$spec" .lua)
    for tool in memcheck racecheck; do
        [ "$sanitizer_refused" = 1 ] && return
        if RT_ATTENTION=$attention "$sanitizer" --tool "$tool" --error-exitcode 9 \
            "build/$name/${name}_cuda" --steps 2 --no-graph >"$work/san.log" 2>&1; then
            pass "compute-sanitizer --tool $tool on $spec, RT_ATTENTION=$attention (2 steps): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$work/san.log" | tail -n 1)"
        elif grep -qi "device not supported" "$work/san.log"; then
            sanitizer_refused=1
            skipped+=("compute-sanitizer: SKIP it refused this GPU ($(grep -i -m 1 "device not supported" "$work/san.log" | sed 's/^[= ]*//'))")
        else
            tail -n 30 "$work/san.log"
            fail "compute-sanitizer --tool $tool on $spec, RT_ATTENTION=$attention"
        fi
    done
}
if [ -x "$sanitizer" ] || command -v "$sanitizer" >/dev/null 2>&1; then
    sanitize tests/specs/conformance/mlp_w2_sgd_prefetch.lua auto
    # the tensor-core attention (shared-memory tiles, cp.async, ldmatrix)
    sanitize tests/specs/features/llama_tc_attention_bf16.lua fsdpgen
    # cuDNN's attention at its site
    sanitize tests/cuda_step/llama_cudnn_bf16.lua cudnn
else
    skipped+=("compute-sanitizer: SKIP not found")
fi
suite_summary
