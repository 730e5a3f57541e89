#!/usr/bin/env bash
# Hugging Face export and import (--save-hf, --load-hf). tests/hf/map.lua: which models
# map and the one-line refusals of the others. Then a tiny Llama with grouped-query
# attention and a tiny GPT-2 (tests/hf/*.lua), each built once and run at world size 2:
#   - train 2 steps, --save-hf DIR, --logits FILE; transformers' from_pretrained(DIR) has
#     no missing or unexpected keys and its logits on the same tokens equal the binary's
#     (1e-4 relative), and a control with the layout left unconverted fails;
#   - round trip: --load-hf DIR then one step saves (--save) the same bits as --load of
#     the original --save then one step;
#   - BF16 and F16 directories written by transformers, a sharded one (an index and
#     several files) and GPT-2 named as on the hub load, and train as the same F32
#     values do (the --save files are equal);
#   - LoRA (tests/hf/hf_llama_lora.lua): --load-hf of hf_llama's directory gives hf_llama's
#     first loss (the adapters start at zero), and after training --save-hf merges the
#     adapters: transformers' logits from that directory equal the binary's with them, as do
#     PEFT's from --save-peft's adapters on hf_llama's directory (with peft installed);
#     --load-peft of those adapters, and of PEFT's own save of them, gives the run's bits;
#   - errors, each one line and exit 1: a config.json field that differs (or is absent
#     with another default), a missing tensor, an unexpected one, a wrong shape, GPT-2's
#     lm_head not its wte or an attention bias not zero, a symlinked DIR, a DIR that is a
#     file; a model with no Hugging Face form is refused with one line (exit 2) at option
#     parsing.
# Needs gcc, ninja, OpenBLAS; the checks through Python need transformers in
# $FSDPGEN_TORCH_PYTHON or /opt/fsdpgen/torch-2.11 (else they print SKIP).
# Ends with `N passed, N failed`.
set -u
cd "$(dirname "$0")/../.."
start=$SECONDS
pass=0
fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }

work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_hf.XXXXXX")
trap 'rm -rf "$work"' EXIT

py=${FSDPGEN_TORCH_PYTHON:-/opt/fsdpgen/torch-2.11/bin/python}
if ! [[ -x $py ]] || ! "$py" -c 'import transformers, safetensors, torch' >/dev/null 2>&1; then
  py=""
  echo "SKIP the checks in transformers (no python with transformers, safetensors and torch;" \
    "pip install transformers into /opt/fsdpgen/torch-2.11)"
fi
py_check() {  # py_check ARGS...: check_hf.py's PASS/FAIL lines, counted
  local out line
  out=$("$py" tests/hf/check_hf.py "$@" 2>"$work/py.err") || true
  if ! grep -q '^PASS\|^FAIL' <<<"$out"; then
    bad "check_hf.py $1 ran: $(tail -n 1 "$work/py.err")"
    return
  fi
  while IFS= read -r line; do
    case $line in PASS*) ok "${line#PASS }" ;; FAIL*) bad "${line#FAIL }" ;; esac
  done <<<"$out"
}

# one_line_exit CODE LABEL PATTERN COMMAND...: exits CODE with one stderr line matching PATTERN
one_line_exit() {
  local want=$1 label=$2 pat=$3 rc
  shift 3
  "$@" >"$work/out" 2>"$work/err"
  rc=$?
  local n
  n=$(wc -l <"$work/err")
  if [[ $rc -eq $want && $n -eq 1 ]] && grep -q -- "$pat" "$work/err"; then
    ok "$label: exit $rc, one line: $(cat "$work/err")"
  else
    bad "$label: exit $rc (want $want), $n lines: $(head -c 300 "$work/err")"
  fi
}

# The map's refusals, without a compiler (tests/hf/map.lua).
map_out=$(lua5.4 tests/hf/map.lua 2>&1)
map_rc=$?
while IFS= read -r line; do
  case $line in PASS*) ok "map: ${line#PASS }" ;; FAIL*) bad "map: ${line#FAIL }" ;; esac
done <<<"$map_out"
[[ $map_rc -eq 0 ]] || grep -q '^FAIL' <<<"$map_out" || bad "map.lua ran: $(tail -n 1 <<<"$map_out")"

built=()
for name in hf_llama hf_gpt2; do
  out=build/hf
  if ! ./fsdpgen build "tests/hf/$name.lua" -o "$out" >"$work/build.log" 2>&1; then
    cat "$work/build.log"
    bad "$name builds"
    continue
  fi
  bin=$out/$name
  w=$work/$name
  mkdir -p "$w"
  "$bin" --steps 2 --save "$w/a.safetensors" --save-hf "$w/hf" --logits "$w/logits.safetensors" \
    >"$w/a.log" 2>&1
  check '[[ $? -eq 0 && -s $w/hf/config.json && -s $w/hf/model.safetensors ]]' \
    "$name: 2 steps at world 2, --save-hf wrote config.json and model.safetensors"
  # round trip: the HF directory loads back to the same parameters
  "$bin" --steps 1 --load "$w/a.safetensors" --save "$w/b_load.safetensors" >"$w/b1.log" 2>&1
  "$bin" --steps 1 --load-hf "$w/hf" --save "$w/b_hf.safetensors" >"$w/b2.log" 2>&1
  check 'cmp -s "$w/b_load.safetensors" "$w/b_hf.safetensors" && [[ -s $w/b_hf.safetensors ]]' \
    "$name: --load-hf then a step saves the bits --load of the original --save then a step saves"
  # --save-hf of a --load-hf run equals the first --save-hf (the map is its own inverse)
  "$bin" --steps 1 --load-hf "$w/hf" --save-hf "$w/hf2" >/dev/null 2>&1
  "$bin" --steps 1 --load "$w/a.safetensors" --save-hf "$w/hf3" >/dev/null 2>&1
  check 'cmp -s "$w/hf2/model.safetensors" "$w/hf3/model.safetensors" &&
         cmp -s "$w/hf2/config.json" "$w/hf/config.json"' \
    "$name: --save-hf after --load-hf equals --save-hf after --load (bits), config.json the same"

  built+=("$name")
done

# LoRA (tests/hf/hf_llama_lora.lua: hf_llama's model, adapters on every linear): --load-hf
# of hf_llama's directory loads the base weights and leaves the adapters at their
# initialization (lora_b zeros), so the first step's loss is hf_llama's from the same
# directory, bit for bit; --save-hf after training merges the adapters (W + alpha/rank B A),
# which transformers' logits below check against the binary's with its adapters.
lora_args=()
w=$work/hf_llama_lora
mkdir -p "$w"
if [[ -d $work/hf_llama/hf ]] &&
   ./fsdpgen build tests/hf/hf_llama_lora.lua -o build/hf >"$work/build.log" 2>&1; then
  build/hf/hf_llama_lora --steps 3 --load-hf "$work/hf_llama/hf" --save-hf "$w/hf" \
    --save-peft "$w/peft" --logits "$w/logits.safetensors" --save "$w/a.safetensors" >"$w/a.log" 2>&1
  check '[[ $? -eq 0 && -s $w/hf/model.safetensors && -s $w/peft/adapter_model.safetensors &&
           -s $w/peft/adapter_config.json ]]' \
    "hf_llama_lora: 3 steps from hf_llama's directory; --save-hf wrote it merged, --save-peft the adapters"
  build/hf/hf_llama --steps 1 --load-hf "$work/hf_llama/hf" >"$w/base.log" 2>&1
  l1=$(sed -n 's/^step 1 loss \([^ ]*\).*/\1/p' "$w/a.log")
  l0=$(sed -n 's/^step 1 loss \([^ ]*\).*/\1/p' "$w/base.log")
  check '[[ -n $l1 && $l1 == "$l0" ]]' \
    "hf_llama_lora: after --load-hf its first loss is hf_llama's ($l1 and $l0): adapters at zero"
  check '! cmp -s "$w/hf/model.safetensors" "$work/hf_llama/hf/model.safetensors" &&
         cmp -s "$w/hf/config.json" "$work/hf_llama/hf/config.json"' \
    "hf_llama_lora: the merged weights differ from the loaded ones, config.json is the same"
  lora_args=(logits "$w/hf" "$w/logits.safetensors" peft "$work/hf_llama/hf" "$w/peft"
    "$w/logits.safetensors")
  one_line_exit 2 "hf_llama's --save-peft (no adapters)" "has no LoRA adapters" \
    build/hf/hf_llama --steps 1 --save-peft "$work/x"
else
  [[ -d $work/hf_llama/hf ]] && cat "$work/build.log"
  bad "hf_llama_lora builds (and hf_llama's directory is there)"
fi

# The checks in transformers, all models in one Python process.
if [[ -n $py && ${#built[@]} -gt 0 ]]; then
  args=()
  for name in "${built[@]}"; do args+=("$work/$name/hf" "$work/$name/logits.safetensors"); done
  py_check prepare "${args[@]}" "${lora_args[@]}"
fi

# --load-peft: the adapters of --save-peft, and of PEFT's own save of them, onto hf_llama's
# directory, then a step, save the bits of --load of the run's --save then a step.
w=$work/hf_llama_lora
if [[ -s $w/peft/adapter_model.safetensors ]]; then
  bin=build/hf/hf_llama_lora
  "$bin" --steps 1 --load "$w/a.safetensors" --save "$w/b_load.safetensors" >/dev/null 2>&1
  "$bin" --steps 1 --load-hf "$work/hf_llama/hf" --load-peft "$w/peft" \
    --save "$w/b_peft.safetensors" >"$w/b_peft.log" 2>&1
  check 'cmp -s "$w/b_load.safetensors" "$w/b_peft.safetensors" && [[ -s $w/b_peft.safetensors ]]' \
    "hf_llama_lora: --load-hf and --load-peft of its adapters, then a step, save --load's bits"
  if [[ -d $w/peft_peft ]]; then
    "$bin" --steps 1 --load-hf "$work/hf_llama/hf" --load-peft "$w/peft_peft" \
      --save "$w/b_peft2.safetensors" >"$w/b_peft2.log" 2>&1
    check 'cmp -s "$w/b_load.safetensors" "$w/b_peft2.safetensors"' \
      "hf_llama_lora: a directory PEFT's save_pretrained wrote loads to the same bits"
  fi
  one_line_exit 2 "hf_llama_lora: --load-peft without --load-hf" "needs --load-hf DIR" \
    "$bin" --steps 1 --load-peft "$w/peft"
  cp -r "$w/peft" "$w/peft_r"
  sed -i 's/"r": 4/"r": 8/' "$w/peft_r/adapter_config.json"
  one_line_exit 1 "hf_llama_lora: adapters of another rank" "adapter_config.json's r is 8" \
    "$bin" --steps 1 --load-hf "$work/hf_llama/hf" --load-peft "$w/peft_r"
fi

for name in "${built[@]}"; do
  bin=build/hf/$name
  w=$work/$name
  if [[ -n $py ]]; then
    for dt in bfloat16 float16; do
      "$bin" --steps 1 --load-hf "$w/hf_$dt" --save "$w/lp.safetensors" >"$w/lp.log" 2>&1
      r1=$?
      "$bin" --steps 1 --load-hf "$w/hf_$dt.f32" --save "$w/lp32.safetensors" >"$w/lp32.log" 2>&1
      check '[[ $r1 -eq 0 ]] && cmp -s "$w/lp.safetensors" "$w/lp32.safetensors"' \
        "$name: a $dt directory from transformers loads and trains as its values widened to F32"
    done
    "$bin" --steps 1 --load-hf "$w/hf_sharded" --save "$w/sh.safetensors" >"$w/sh.log" 2>&1
    check 'cmp -s "$w/sh.safetensors" "$w/b_hf.safetensors"' \
      "$name: a sharded directory (model.safetensors.index.json) loads as the single file does"
    if [[ -d $w/hf_hub ]]; then
      "$bin" --steps 1 --load-hf "$w/hf_hub" --save "$w/hub.safetensors" >"$w/hub.log" 2>&1
      check 'cmp -s "$w/hub.safetensors" "$w/b_hf.safetensors"' \
        "$name: the hub's naming (no 'transformer.', attn.bias buffers, lm_head beside wte) loads"
      one_line_exit 1 "$name: an lm_head.weight that is not wte's" "which it is tied to" \
        "$bin" --steps 1 --load-hf "$w/hf_untied"
      one_line_exit 1 "$name: an attention bias that is not zero" "is not all zeros" \
        "$bin" --steps 1 --load-hf "$w/hf_bias"
    fi
    one_line_exit 1 "$name: an unexpected tensor" "unexpected tensor 'model.extra.weight'" \
      "$bin" --steps 1 --load-hf "$w/hf_extra"
    one_line_exit 1 "$name: a missing tensor" "is missing" "$bin" --steps 1 --load-hf "$w/hf_missing"
    one_line_exit 1 "$name: a wrong shape" "has shape \[2, 16\], the spec's model needs \[32\]" \
      "$bin" --steps 1 --load-hf "$w/hf_shape"
  fi
  # config.json: the first field that differs is named
  cp -r "$w/hf" "$w/cfg"
  key=$([[ $name == hf_llama ]] && echo num_key_value_heads || echo n_head)
  sed -i "s/\"$key\": [0-9]*/\"$key\": 1/" "$w/cfg/config.json"
  one_line_exit 1 "$name: a config.json field that differs" "field '$key' is 1" \
    "$bin" --steps 1 --load-hf "$w/cfg"
  # an absent field is HF's default, which differs here
  cp -r "$w/hf" "$w/absent"
  key=$([[ $name == hf_llama ]] && echo rms_norm_eps || echo activation_function)
  sed -i "/\"$key\":/d" "$w/absent/config.json"
  one_line_exit 1 "$name: an absent config.json field whose default differs" \
    "field '$key' is absent (HF's default" "$bin" --steps 1 --load-hf "$w/absent"
  ln -s "$w/hf" "$w/link"
  one_line_exit 1 "$name: a symlinked --load-hf DIR" "symlink" "$bin" --steps 1 --load-hf "$w/link"
  one_line_exit 1 "$name: a symlinked --save-hf DIR" "symlink" "$bin" --steps 1 --save-hf "$w/link"
  one_line_exit 1 "$name: a --save-hf DIR that is a file" "not a directory" \
    "$bin" --steps 1 --save-hf "$w/a.safetensors"
done

# A model with no Hugging Face form: one line at option parsing (exit 2).
mlp=tests/specs/conformance/mlp_w2_sgd_prefetch.lua
if ./fsdpgen build "$mlp" -o build/hf >"$work/build.log" 2>&1; then
  one_line_exit 2 "a custom (MLP) model's --save-hf" "no Hugging Face form: only models.Llama" \
    build/hf/mlp_w2_sgd_prefetch --steps 1 --save-hf "$work/x"
else
  cat "$work/build.log"
  bad "$mlp builds"
fi

echo "hf: $((SECONDS - start)) s"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
