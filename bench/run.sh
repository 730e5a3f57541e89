#!/usr/bin/env bash
# Benchmark: fsdpgen's generated CUDA binary against PyTorch FSDP2 (eager and torch.compile)
# on one GPU, same model, batch, sequence and steps. Prints a table (ms/step, tok/s, how
# many times faster fsdpgen is, MFU, peak memory; bench/flops.py) and the targets.
# Without a GPU it only checks that the specs plan and that the PyTorch models have the
# same parameters, then prints "bench/run.sh: no GPU: nothing measured" and exits 0.
#
#   bench/run.sh [gpt2_124m|llama_1b|all] [--warmup W] [--steps N] [--peak-tflops P]
#
# A GPU counts as present when nvidia-smi lists one and CUDA_VISIBLE_DEVICES is not set
# to the empty string. Exit status: 0 all ran, 1 something failed, 2 bad arguments or a
# GPU whose peak is unknown (pass --peak-tflops).
set -u
cd "$(dirname "$0")/.."

usage() { echo "usage: bench/run.sh [gpt2_124m|llama_1b|all] [--warmup W] [--steps N] [--peak-tflops P]" >&2; exit 2; }
which=all warmup=5 steps=20 peak=""
while [[ $# -gt 0 ]]; do
  case $1 in
    gpt2_124m|llama_1b|all) which=$1 ;;
    --warmup) warmup=${2:-}; shift ;;
    --steps) steps=${2:-}; shift ;;
    --peak-tflops) peak=${2:-}; shift ;;
    *) usage ;;
  esac
  shift
done
[[ $warmup =~ ^[1-9][0-9]*$ && $steps =~ ^[1-9][0-9]*$ ]] || usage
[[ -z $peak || $peak =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage
if [[ $which == all ]]; then configs=(gpt2_124m llama_1b); else configs=("$which"); fi

# A python3 that imports torch (Debian's python3-torch is /usr/bin/python3), if any.
py=""
for cand in python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import torch' >/dev/null 2>&1; then py=$cand; break; fi
done
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0

# ---- both modes: the specs plan, the PyTorch models have the same parameters ------------
declare -A plan_gb
for c in "${configs[@]}"; do
  sched=$work/bench_$c.schedule
  if ! ./fsdpgen plan "bench/specs/$c.lua" -o "$work" >/dev/null; then
    echo "bench/run.sh: ./fsdpgen plan bench/specs/$c.lua failed"
    status=1
    continue
  fi
  bytes=$(sed -n 's/^  predicted peak *\([0-9]*\).*/\1/p' "$sched")
  plan_gb[$c]=$(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1e9 }')
  python3 bench/flops.py info "$c"
  echo "$c: fsdpgen memory plan: predicted peak ${plan_gb[$c]} GB per GPU (the arena the CUDA binary allocates; compute buffers as fp32)"
  if [[ -n $py ]]; then
    "$py" bench/torch_fsdp2.py --check-only --config "$c" --schedule "$sched" || status=1
  else
    echo "$c: no python3 can import torch: the PyTorch model check is skipped"
  fi
done

gpu=1
[[ ${CUDA_VISIBLE_DEVICES+set} == set && -z $CUDA_VISIBLE_DEVICES ]] && gpu=0
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || gpu=0
if [[ $gpu == 0 ]]; then
  echo "bench/run.sh: no GPU: nothing measured"
  exit $status
fi
[[ $status == 0 ]] || { echo "bench/run.sh: the checks above failed; nothing measured"; exit 1; }
[[ -n $py ]] || { echo "bench/run.sh: the GPU run needs a python3 with PyTorch (2.11) and FSDP2"; exit 1; }

# ---- GPU: the device's peak, then each config three ways ---------------------------------
dev=${CUDA_VISIBLE_DEVICES:-0}
dev=${dev%%,*}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$dev" | head -n 1)
if [[ -z $peak ]]; then
  peak=$(python3 bench/flops.py peak "$name") || exit 2
fi
echo "device: $name, bf16 dense peak $peak TFLOP/s; warmup $warmup steps, timed $steps steps"

results=$work/results
: >"$results"
# run_fsdpgen IMPL [VAR=VALUE...]: config $c's fsdpgen binary as row IMPL, with those settings
# of the binary's environment (docs/cli.md: RT_ATTENTION, RT_ATTENTION_BACKWARD,
# RT_OPTIMIZER_STREAM, RT_SM_MARGIN, RT_BIAS_GRAD, RT_KEEP_UNSHARDED),
# the others at their defaults whatever the caller's environment says
run_fsdpgen() {
  local impl=$1 log=$work/$c.$1.log ms="" tok=""
  shift
  echo "== $c: $impl (${*:+$* }./fsdpgen bench train bench/specs/$c.lua --cuda --steps $((warmup + steps)))"
  if env -u RT_ATTENTION -u RT_ATTENTION_BACKWARD -u RT_OPTIMIZER_STREAM -u RT_SM_MARGIN \
    -u RT_BIAS_GRAD -u RT_KEEP_UNSHARDED "$@" ./fsdpgen bench train \
    "bench/specs/$c.lua" --cuda --steps $((warmup + steps)) >"$log" 2>&1; then
    grep -E '^fsdpgen: (attention|RT_SM_MARGIN)' "$log" | sed "s/^/$impl: /"
    # runtime/train/bench.c: `bench: N steps (median over steps 2..N): M ms/step, T tok/s`
    read -r ms tok < <(sed -n 's/^bench: .*: \([0-9.]*\) ms\/step, \([0-9.]*\) tok\/s.*/\1 \2/p' "$log")
  fi
  if [[ -n $ms && -n $tok ]]; then
    grep -m 1 '^bench: ' "$log"
    echo "RESULT impl=$impl config=$c ms_per_step=$ms tokens_per_s=$tok peak_mem_gb=${plan_gb[$c]} mem_source=plan" |
      tee -a "$results"
  else
    tail -n 20 "$log"
    echo "RESULT impl=$impl config=$c error=bench_train_failed" | tee -a "$results"
    status=1
  fi
}

# run_torch IMPL: config $c in PyTorch FSDP2, eager (torch_eager) or compiled (torch_compile)
run_torch() {
  local impl=$1 log=$work/$c.$1.log flag=() line
  [[ $impl == torch_compile ]] && flag=(--compile)
  echo "== $c: $impl (bench/torch_fsdp2.py --config $c ${flag[*]} --warmup $warmup --steps $steps)"
  "$py" bench/torch_fsdp2.py --config "$c" "${flag[@]}" --warmup "$warmup" --steps "$steps" \
    --schedule "$work/bench_$c.schedule" >"$log" 2>&1
  if line=$(grep -m 1 '^RESULT ' "$log"); then
    echo "$line" | tee -a "$results"
  else
    tail -n 20 "$log"
    echo "RESULT impl=$impl config=$c error=torch_fsdp2_failed" | tee -a "$results"
    status=1
  fi
}

# The rows the targets compare first, so that a run cut short (a time limit) has them; each
# RESULT line is printed as it comes, so its log can be tabled (bench/flops.py table). Then
# cuDNN's attention with its atomic backward (dQ summed with atomics, as PyTorch's SDPA
# backward; the default is deterministic, dP kept in cuDNN's workspace), then what
# decides how much of the optimizer hides beside the backward: fsdpgen with 8 and 16
# SMs that the GEMMs and cuDNN leave to the optimizer and copy streams, and with the
# optimizer after the backward (the default steps each group beside it); last, each
# attention forced (the spec's default `auto` takes per shape the faster of cuDNN and
# fsdpgen's kernels, timed at start, and the `fsdpgen: attention` lines say which;
# bench/attention.sh times the two apart), GPT-2's bias gradients by column sums, and the
# kept parameters copied again.
for c in "${configs[@]}"; do
  run_fsdpgen fsdpgen
  run_torch torch_eager
  run_torch torch_compile
  run_fsdpgen fsdpgen_atomic RT_ATTENTION_BACKWARD=atomic
  run_fsdpgen fsdpgen_sm8 RT_SM_MARGIN=8
  run_fsdpgen fsdpgen_sm16 RT_SM_MARGIN=16
  run_fsdpgen fsdpgen_opt_after RT_OPTIMIZER_STREAM=compute
  run_fsdpgen fsdpgen_cudnn RT_ATTENTION=cudnn
  run_fsdpgen fsdpgen_kernels RT_ATTENTION=fsdpgen
  # the bias gradients by column sums, not in the weight gradients' products (GPT-2's
  # feed-forwards; Llama's linears have no bias)
  if [[ $c == gpt2_124m ]]; then run_fsdpgen fsdpgen_sums RT_BIAS_GRAD=sums; fi
  # Llama's blocks' parameters, kept from their forward for their backward at one rank,
  # copied again there as FSDP2 would (the same memory plan): what 5.8 GB of copies beside
  # compute cost (GPT-2's are 0.5 GB)
  if [[ $c == llama_1b ]]; then run_fsdpgen fsdpgen_copy_kept RT_KEEP_UNSHARDED=copy; fi
done

echo
python3 bench/flops.py table --peak-tflops "$peak" <"$results"
echo "(fsdpgen x: that row's ms/step over fsdpgen's, > 1 = fsdpgen faster; fsdpgen's peak memory is its memory plan's)"
exit $status
