#!/usr/bin/env bash
# test_interrupts.sh — the training binary when the world goes wrong under it:
#  - kill -9 at random points of a run that saves a checkpoint after every step: --resume
#    always finds the newest complete checkpoint (the last announced one, or the one after
#    it when the kill came between its publication and the line) and continues
#    bit-identically to an uninterrupted run;
#  - a full disk during a save (a small tmpfs in a private mount namespace; where none can
#    be made, a file size limit): the save fails with one line, the previous checkpoint
#    is intact and resumes bit-identically, nothing of the failed save is left;
#  - data files that are not regular (a FIFO with no writer, a directory), truncated or
#    rewritten with out-of-range tokens during the run: one line, exit 1, no hang, no
#    SIGBUS or abort().
# Prints PASS/FAIL lines and `N passed, N failed`.
#
# usage: test_interrupts.sh TINY_TRAIN WORKDIR
#   FSDPGEN_SLOW=1: 40 kill iterations instead of 4; FSDPGEN_SEED=S: their seed (default 1).
set -u
bin=$(realpath "$1")
work=$(realpath "$2")
passed=0
failed=0
check() {  # check OK MESSAGE
    if [ "$1" = 1 ]; then echo "PASS $2"; passed=$((passed + 1)); else echo "FAIL $2"; failed=$((failed + 1)); fi
}
lines() { [ -s "$1" ] && wc -l <"$1" || echo 0; }

# ---- full disk (runs inside the mount namespace, or under a file size limit) -----------

# disk_full DIR MODE: DIR is a small tmpfs (MODE tmpfs) or a plain directory with a file
# size limit applied to the failing run (MODE fsize).
disk_full() {
    local d=$1 mode=$2
    TINY_MODEL=tok "$bin" --steps 4 --save "$work/df_ref.st" >/dev/null 2>&1
    TINY_MODEL=tok "$bin" --steps 2 --checkpoint "$d/ck" >/dev/null 2>&1
    cp -r "$d/ck/step_00000002" "$work/df_step2"
    local cases="full"
    [ "$mode" = tmpfs ] && cases="full one_page"
    local c
    for c in $cases; do
        if [ "$mode" = tmpfs ]; then
            # Fill the tmpfs, leaving nothing ("full") or one page: one rank file fits, the
            # other fails partway through the save.
            [ "$c" = one_page ] && head -c 4096 /dev/zero >"$d/pad"
            dd if=/dev/zero of="$d/fill" bs=4096 >/dev/null 2>&1
            [ "$c" = one_page ] && rm -f "$d/pad"
            TINY_MODEL=tok "$bin" --resume "$d/ck" --steps 2 --checkpoint "$d/ck" \
                >"$work/df.out" 2>"$work/df.err"
        else
            (trap '' XFSZ; ulimit -f 1; TINY_MODEL=tok exec "$bin" --resume "$d/ck" --steps 2 \
                --checkpoint "$d/ck" >"$work/df.out" 2>"$work/df.err")
        fi
        local rc=$?
        local msg
        msg=$(head -n 1 "$work/df.err")
        check "$([ $rc = 1 ] && [ "$(lines "$work/df.err")" = 1 ] && grep -q "fsdpgen: --checkpoint $d/ck" "$work/df.err" &&
                 grep -qE "No space left on device|File too large" "$work/df.err" && echo 1 || echo 0)" \
              "disk full ($mode, $c): the save of step 4 fails, exit $rc, one line: $msg"
        check "$([ -f "$d/ck/step_00000002/COMPLETE" ] && diff -r "$d/ck/step_00000002" "$work/df_step2" >/dev/null &&
                 [ ! -e "$d/ck/step_00000004" ] && [ ! -e "$d/ck/step_00000004.tmp" ] && echo 1 || echo 0)" \
              "disk full ($mode, $c): step 2's checkpoint is intact, nothing of the failed save is left ($(ls "$d/ck" | tr '\n' ' '))"
        rm -f "$d/fill"
    done
    TINY_MODEL=tok "$bin" --resume "$d/ck" --steps 2 --save "$work/df_resumed.st" >"$work/df.out" 2>&1
    check "$([ $? = 0 ] && grep -q "steps 3..4" "$work/df.out" && cmp -s "$work/df_ref.st" "$work/df_resumed.st" && echo 1 || echo 0)" \
          "disk full ($mode): with space again, --resume continues from step 2 bit-identically to an uninterrupted run"
}

if [ "${3:-}" = --disk-full-in-namespace ]; then
    mkdir -p "$work/tmpfs"
    if ! mount -t tmpfs -o size=256k tmpfs "$work/tmpfs" 2>/dev/null; then
        echo "cannot mount a tmpfs in the namespace"
        exit 3
    fi
    disk_full "$work/tmpfs" tmpfs
    echo "$passed passed, $failed failed"
    exit 0
fi

# ---- kill -9 during checkpoint saves ---------------------------------------------------

total=2000  # longer than any kill delay: the run is always killed partway
TINY_MODEL=tiny "$bin" --steps "$total" --log-every "$total" --save "$work/kill_ref.st" >/dev/null 2>&1
iters=4
[ "${FSDPGEN_SLOW:-0}" = 1 ] && iters=40
RANDOM=${FSDPGEN_SEED:-1}
for i in $(seq "$iters"); do
    ms=$((20 + RANDOM % 980))
    rm -rf "$work/kck"
    TINY_MODEL=tiny "$bin" --steps "$total" --log-every "$total" --checkpoint "$work/kck" \
        --checkpoint-every 1 >"$work/kill.out" 2>&1 &
    pid=$!
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    last=$(grep -o 'checkpoint: step [0-9]*' "$work/kill.out" | tail -n 1 | grep -o '[0-9]*$')
    last=${last:-0}
    TINY_MODEL=tiny "$bin" --resume "$work/kck" --steps 1 --log-every 1 >"$work/resume.out" 2>&1
    rc=$?
    start=$(grep -o 'steps [0-9]*\.\.' "$work/resume.out" | grep -o '[0-9]*' | head -n 1)
    if [ $rc != 0 ] && [ "$last" = 0 ] && grep -q "no complete checkpoint" "$work/resume.out"; then
        check 1 "kill -9 after ${ms} ms, before any save finished: --resume says there is no complete checkpoint"
        continue
    fi
    found=$(( ${start:-0} - 1 ))
    left=$(ls "$work/kck" 2>&1 | tr '\n' ' ')
    check "$([ $rc = 0 ] && { [ "$found" = "$last" ] || [ "$found" = $((last + 1)) ]; } && echo 1 || echo 0)" \
          "kill -9 after ${ms} ms (last announced step $last): --resume finds step $found (left: $left; resume exit $rc: $(grep -v '^step ' "$work/resume.out" | head -n 1))"
    TINY_MODEL=tiny "$bin" --resume "$work/kck" --steps $((total - found)) --log-every "$total" \
        --save "$work/kill_resumed.st" >/dev/null 2>&1
    check "$([ $? = 0 ] && cmp -s "$work/kill_ref.st" "$work/kill_resumed.st" && echo 1 || echo 0)" \
          "... and continuing to step $total gives the uninterrupted run's parameters, bit for bit"
done

# ---- full disk ---------------------------------------------------------------------------

ns=""
if command -v unshare >/dev/null 2>&1; then
    for opt in -m -rm; do  # as root; else in a user namespace
        if unshare $opt true 2>/dev/null; then ns=$opt; break; fi
    done
fi
done_ns=0
if [ -n "$ns" ]; then
    unshare $ns bash "$0" "$bin" "$work" --disk-full-in-namespace >"$work/ns.log" 2>&1
    if [ $? = 0 ]; then
        grep -E '^(PASS|FAIL) ' "$work/ns.log"
        line=$(tail -n 1 "$work/ns.log")
        p=${line%% passed*}
        f=${line#*passed, }
        f=${f%% failed}
        passed=$((passed + p))
        failed=$((failed + f))
        done_ns=1
    fi
fi
if [ $done_ns = 0 ]; then
    echo "note: no tmpfs in a private mount namespace here; a file size limit (ulimit -f) stands for the full disk"
    mkdir -p "$work/fsize"
    disk_full "$work/fsize" fsize
fi

# ---- data files ------------------------------------------------------------------------

for i in $(seq 0 999); do printf "\\$(printf %03o $(((i * 7 + i / 13) % 16)))"; done >"$work/tok.bin"
mkfifo "$work/tok_fifo.bin"
mkdir -p "$work/tok_dir.bin"
# (--val-data opens its file the same way, rt_data_open; tests/io/test_data.c covers it.)
for what in "--data $work/tok_fifo.bin" "--data $work/tok_dir.bin"; do
    TINY_MODEL=tok timeout 30 "$bin" $what --steps 1 >"$work/data.out" 2>"$work/data.err"
    rc=$?
    check "$([ $rc = 1 ] && [ "$(lines "$work/data.err")" = 1 ] && grep -q "not a regular file" "$work/data.err" && echo 1 || echo 0)" \
          "${what//$work\//}: exit $rc (want 1, at once), one line: $(head -n 1 "$work/data.err")"
done

# change_during_run NAME CMD EXPECT...: starts a long run on tok.bin, runs CMD once its
# first step is done, and expects exit 1 with one line holding every EXPECT.
change_during_run() {
    local name=$1 cmd=$2
    shift 2
    cp "$work/tok.bin" "$work/live.bin"
    rm -rf "$work/live_ck"
    TINY_MODEL=tok timeout 120 "$bin" --data "$work/live.bin" --steps 1000000 --log-every 1000000 \
        --checkpoint "$work/live_ck" >"$work/live.out" 2>"$work/live.err" &
    local pid=$! k
    for k in $(seq 600); do grep -q "step 1 loss" "$work/live.out" && break; sleep 0.05; done
    eval "$cmd"
    wait "$pid"
    local rc=$? ok=1 e
    [ $rc = 1 ] && [ "$(lines "$work/live.err")" = 1 ] && [ ! -e "$work/live_ck" ] || ok=0
    for e in "$@"; do grep -qF -- "$e" "$work/live.err" || ok=0; done
    check $ok "$name during the run: exit $rc (want 1, not a signal), one line, no checkpoint: $(head -n 1 "$work/live.err")"
}
change_during_run "--data truncated to 0 bytes" 'truncate -s 0 "$work/live.bin"' \
    "fsdpgen: --data: token file" "live.bin" "truncated during the run"
change_during_run "--data rewritten with token 200 (vocab 16)" \
    'head -c 1000 /dev/zero | tr "\0" "\310" | dd of="$work/live.bin" conv=notrunc status=none' \
    "fsdpgen: --data: token file" "live.bin" "token 200 at token offset" "vocab size 16"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
