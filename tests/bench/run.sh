#!/usr/bin/env bash
# Checks of the benchmark (bench/) that need no GPU:
#   - both bench specs plan, and their predicted peak fits an 80 GB GPU (<= 70 GB);
#   - fsdpgen's parameter count (sum of the .schedule groups' numels) equals bench/flops.py's
#     and the PyTorch model's, names and shapes included (bench/torch_fsdp2.py --check-only;
#     skipped, with a SKIP line, where no python3 can import torch);
#   - generator/plan/flops.lua's N and FLOPs per token (the binary's MFU) equal bench/flops.py's;
#   - the FLOP formula and parameter split on tiny hand-counted configs, MFU, the GPU table;
#   - bench/run.sh, bench/norm.sh and bench/loss.sh with no GPU (CUDA_VISIBLE_DEVICES="")
#     exit 0 with their no-GPU lines; norm_rows and loss_rows refuse a bad count with their
#     usage line, exit 2.
# Ends with `N passed, N failed`.
set -u
cd "$(dirname "$0")/../.."
suite_tag="[bench]"
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_bench_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
. tests/common/suite.sh

check() {  # check OK MESSAGE
  if [ "$1" = 1 ]; then echo "PASS $2"; passed=$((passed + 1)); else echo "FAIL $2"; failed=$((failed + 1)); fi
}
is() { [ "$1" = "$2" ] && echo 1 || echo 0; }

find_python
torch=0
[ -n "$py" ] && "$py" -c 'import torch' >/dev/null 2>&1 && torch=1
plain=${py:-python3}  # bench/flops.py needs no torch
flops() { "$plain" -c "import sys; sys.path.insert(0, 'bench'); import flops; $1"; }

# ---- the specs plan; fsdpgen, flops.py and PyTorch agree on the parameters -------------------
for c in gpt2_124m llama_1b; do
  sched=$work/bench_$c.schedule
  if ! ./fsdpgen plan "bench/specs/$c.lua" -o "$work" >"$work/plan_$c.log" 2>&1; then
    check 0 "$c: ./fsdpgen plan bench/specs/$c.lua: $(tail -n 1 "$work/plan_$c.log")"
    continue
  fi
  peak=$(sed -n 's/^  predicted peak *\([0-9]*\).*/\1/p' "$sched")
  check "$([ -n "$peak" ] && [ "$peak" -le 70000000000 ] && echo 1 || echo 0)" \
    "$c: plans; predicted peak ${peak:-?} bytes per GPU <= 70 GB (the CUDA arena; compute buffers as fp32)"
  ours=$(awk '/^    params [0-9]+, numel/ { gsub(",", "", $4); s += $4 } END { print s + 0 }' "$sched")
  table=$(flops "print(flops.param_counts(flops.CONFIGS['$c'])[0])")
  check "$(is "$ours" "$table")" "$c: fsdpgen parameters (sum of group numels) $ours == bench/flops.py's $table"
  # generator/plan/flops.lua (the binary's MFU) counts from the traced ops; flops.py by formula.
  lua_fpt=$(lua5.4 - "bench/specs/$c.lua" 2>&1 <<'LUA'
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local c = require("plan.flops").count(require("tests.generator.step_c").plan(arg[1]))
print(c.matmul_params .. " " .. c.flops_per_token)
LUA
)
  py_fpt=$(flops "c = flops.CONFIGS['$c']; print(flops.param_counts(c)[1], flops.config_flops_per_token(c))")
  check "$(is "$lua_fpt" "$py_fpt")" \
    "$c: generator/plan/flops.lua's N and FLOPs/token ($lua_fpt) == bench/flops.py's ($py_fpt)"
  if [ "$torch" = 1 ]; then
    out=$("$py" bench/torch_fsdp2.py --check-only --config "$c" --schedule "$sched" 2>&1)
    rc=$?
    line=$(grep -m 1 '^CHECK ' <<<"$out")
    tp=$(sed -n 's/.* torch_params=\([0-9]*\).*/\1/p' <<<"$line")
    check "$([ $rc = 0 ] && [ "$tp" = "$ours" ] && grep -q 'agree=yes' <<<"$line" && echo 1 || echo 0)" \
      "$c: PyTorch model parameters ${tp:-?} == fsdpgen's $ours, same names, shapes and input (exit $rc)"
    [ $rc = 0 ] || echo "$out" | sed 's/^/    /'
  else
    echo "SKIP $c: PyTorch parameter count: no python3 can import torch (apt-get install python3-torch)"
  fi
done

# ---- FLOPs, MFU and peaks by hand ------------------------------------------------------------
# 6 * 1000 + 12 * 2 layers * 8 tokens * 4 dim = 6768
check "$(is "$(flops 'print(flops.flops_per_token(1000, 2, 8, 4))')" 6768)" "flops_per_token(N 1000, L 2, T 8, D 4) = 6768"
# Transformer, 1 layer, dim 4, vocab 10, max_seq_len 8, tied: tok 40 + pos 32 + block 228
# (norms 16, wq..wo 64, w1 64+16, w2 64+4) + norm 8 = 308; N = 308 - pos 32 = 276;
# seq 8: 6 * 276 + 12 * 1 * 8 * 4 = 2040.
tiny_t="dict(model='transformer', n_layers=1, dim=4, n_heads=2, vocab_size=10, max_seq_len=8, seq_len=8)"
check "$(is "$(flops "c = $tiny_t; print(*flops.param_counts(c), flops.config_flops_per_token(c))")" "308 276 2040")" \
  "tiny tied Transformer: 308 parameters, N 276 (no pos_embeddings), 2040 FLOPs/token"
# Llama, 1 layer, dim 4, 2 heads, 1 kv head, ffn 8, vocab 10: tok 40 + block 152 (norms 8,
# wq 16, wk 8, wv 8, wo 16, w1/w2/w3 96) + norm 4 + output 40 = 236; N = 236 - tok 40 = 196;
# seq 8: 6 * 196 + 384 = 1560.
tiny_l="dict(model='llama', n_layers=1, dim=4, n_heads=2, n_kv_heads=1, ffn_dim=8, vocab_size=10, max_seq_len=8, seq_len=8)"
check "$(is "$(flops "c = $tiny_l; print(*flops.param_counts(c), flops.config_flops_per_token(c))")" "236 196 1560")" \
  "tiny Llama: 236 parameters, N 196 (no tok_embeddings), 1560 FLOPs/token"
# GPT-2 124M: 6 * 123616512 + 12 * 12 * 1024 * 768 = 741699072 + 113246208
check "$(is "$(flops "print(flops.config_flops_per_token(flops.CONFIGS['gpt2_124m']))")" 854945280)" \
  "gpt2_124m: 854945280 FLOPs/token (N = 124402944 - 786432 position embeddings)"
check "$(is "$(flops 'print(flops.mfu(8e8, 1e5, 989) == 8e13 / 989e12)')" True)" "mfu = FLOPs/token * tok/s / peak"
check "$(is "$("$plain" bench/flops.py peak 'NVIDIA H100 80GB HBM3') $("$plain" bench/flops.py peak 'NVIDIA H200')" "989 989")" \
  "bf16 peaks: H100 80GB HBM3 (SXM) and H200 = 989 TFLOP/s"
check "$(is "$("$plain" bench/flops.py peak 'NVIDIA A100-SXM4-80GB')" 312)" \
  "bf16 peak of an A100 = 312 TFLOP/s (runtime/train/peaks.def, the training binary's table)"
check "$(is "$("$plain" bench/flops.py peak 'NVIDIA H100 PCIe') $("$plain" bench/flops.py peak 'NVIDIA H200 NVL')" "756 835")" \
  "bf16 peaks of the PCIe and NVL parts: H100 PCIe 756, H200 NVL 835 TFLOP/s"
"$plain" bench/flops.py peak 'Tesla T4' >/dev/null 2>&1
rc2=$?
check "$([ $rc2 = 2 ] && echo 1 || echo 0)" "an unknown GPU (Tesla T4) is refused with exit 2"

# ---- the table from bench/run.sh's log, in its run order (the target rows first) -------------
# noise lines ignored; rows in bench/run.sh's display order; a run cut after torch_eager still
# gives that verdict. 40 ms against 80: 2.00x, met.
printf '%s\n' "== gpt2_124m: fsdpgen" \
  "RESULT impl=fsdpgen config=gpt2_124m ms_per_step=40 tokens_per_s=409600 peak_mem_gb=11.11 mem_source=plan" \
  "RESULT impl=torch_eager config=gpt2_124m ms_per_step=80 tokens_per_s=204800 peak_mem_gb=19.72" \
  "bench: 25 steps" \
  "RESULT impl=fsdpgen_cudnn config=gpt2_124m error=bench_train_failed" >"$work/results"
"$plain" bench/flops.py table --peak-tflops 989 <"$work/results" >"$work/table.txt"
rows=$(awk '$1 == "gpt2_124m" { printf "%s ", $2 }' "$work/table.txt")
check "$(is "$rows" "fsdpgen fsdpgen_cudnn torch_eager ")" "flops.py table: rows in display order, not run order: $rows"
check "$(grep -qx 'gpt2_124m: speedup of fsdpgen over torch_eager: 2.00x (target >= 2.00x): met' "$work/table.txt" && echo 1 || echo 0)" \
  "flops.py table: a run cut after torch_eager still gives its verdict"

# ---- bench/run.sh without a GPU ------------------------------------------------------------
CUDA_VISIBLE_DEVICES="" bench/run.sh all >"$work/run.log" 2>&1
rc=$?
check "$([ $rc = 0 ] && grep -qx 'bench/run.sh: no GPU: nothing measured' "$work/run.log" && echo 1 || echo 0)" \
  "bench/run.sh with no GPU: exit $rc and 'bench/run.sh: no GPU: nothing measured'"
[ $rc = 0 ] || sed 's/^/    /' "$work/run.log"
for kb in norm loss; do  # bench/KB.sh runs build/bench/KB_rows
  CUDA_VISIBLE_DEVICES="" bench/$kb.sh >"$work/$kb.log" 2>&1
  rc=$?
  check "$([ $rc = 0 ] && grep -qx "${kb}_rows: no GPU: nothing measured" "$work/$kb.log" && echo 1 || echo 0)" \
    "bench/$kb.sh with no GPU: exit $rc and '${kb}_rows: no GPU: nothing measured'"
  build/bench/${kb}_rows 0 >"$work/${kb}_bad.log" 2>&1
  rc=$?
  check "$([ $rc = 2 ] && [ "$(wc -l <"$work/${kb}_bad.log")" = 1 ] && grep -q "^usage: build/bench/${kb}_rows \[iters\]" "$work/${kb}_bad.log" && echo 1 || echo 0)" \
    "${kb}_rows 0: exit $rc and one usage line"
done
bench/run.sh bogus >/dev/null 2>&1
check "$(is $? 2)" "bench/run.sh with an unknown config exits 2"

suite_summary
