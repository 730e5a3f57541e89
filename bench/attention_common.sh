# Shared by bench/attention.sh and bench/attention_sweep.sh (sourced, from the repository
# root): their one option, the GPU check, the bench models' attention shapes, the passes,
# and the RESULT lines of bench/attention_fsdpgen.c and bench/attention_torch.py.

# attention_iters SCRIPT ARGS...: sets iters from `--iters N` (default 20), or prints
# SCRIPT's usage and exits 2.
attention_iters() {
  local script=$1
  shift
  iters=20
  if [[ $# -eq 2 && $1 == --iters && $2 =~ ^[1-9][0-9]*$ ]]; then
    iters=$2
  elif [[ $# -ne 0 ]]; then
    echo "usage: $script [--iters N]" >&2
    exit 2
  fi
}

# Whether nvidia-smi lists a GPU.
have_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

# name, B, T, NH, NKV, HD (bench/specs: GPT-2 124M at 16 x 1024, Llama 1B at 4 x 2048)
attention_shapes=("gpt2_124m 16 1024 12 12 64" "llama_1b 4 2048 32 8 64")

# The passes bench/attention_fsdpgen.c times, in its order; each is compared with SDPA's.
attention_passes=(forward backward)

# attention_result IMPL PASS OUTPUT: "ms tflops" of OUTPUT's RESULT line for IMPL and PASS
# (empty without one).
attention_result() {
  sed -n "s/^RESULT impl=$1 pass=$2 ms=\([0-9.]*\) tflops=\([0-9.]*\)$/\1 \2/p" <<<"$3"
}
