#!/usr/bin/env bash
# `fsdpgen show` in a real browser: Debian's headless chromium loads the SVG (and the HTML
# page) of Llama 1B's step at 8 GPUs with no XML or console errors, and its screenshot has
# boxes in every lane of the whole-step panel (each lane's row holds pixels of at least
# three colours that are neither the page's nor the lane's background).
# Needs chromium (apt-get install chromium); prints SKIP without it.
# Run from the repository root: tests/show/run.sh
set -u
passed=0 failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; [[ $failed = 0 ]]; exit $?; }

browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $browser ]]; then
  echo "SKIP chromium not installed (apt-get install chromium)"
  finish
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run_browser() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$tmp/profile" \
    --enable-logging=stderr --v=0 "$@" 2>>"$tmp/browser.log"
}

show() { ./fsdpgen show examples/llama_1b.lua --gpu h100 --gpus-per-node 8 -o "$1" >/dev/null; }
show "$tmp/step.svg" && show "$tmp/step.html" \
  || { bad "fsdpgen show wrote the SVG and the HTML page"; finish; }
height=$(grep -o 'height="[0-9]*"' "$tmp/step.svg" | head -1 | tr -dc 0-9)

for f in step.svg step.html; do
  run_browser --dump-dom "file://$tmp/$f" >"$tmp/$f.dom"
  if grep -q 'id="overview"' "$tmp/$f.dom" && ! grep -qi 'parsererror' "$tmp/$f.dom"; then
    ok "$f loads with no XML error"
  else
    bad "$f loads with no XML error (see the DOM: $(head -c 300 "$tmp/$f.dom"))"
  fi
done
if grep -q 'CONSOLE' "$tmp/browser.log"; then
  bad "no console messages: $(grep CONSOLE "$tmp/browser.log" | head -2)"
else
  ok "no console messages"
fi

run_browser --screenshot="$tmp/step.png" --window-size=1400,"$height" "file://$tmp/step.svg" \
  >/dev/null
# The lanes' rows from the SVG (overview panel), checked on the screenshot's pixels.
python3 - "$tmp/step.svg" "$tmp/step.png" >"$tmp/lanes.out" <<'PY'
import re, struct, sys, zlib
svg, png = open(sys.argv[1]).read(), open(sys.argv[2], "rb").read()
overview = svg[svg.index('<g id="overview"'):svg.index('</g>\n<g id="zoom')]
lanes = re.findall(r'data-lane="(\w+)"><rect x="(\d+)" y="(\d+)" width="(\d+)"', overview)
assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, chunks, w = 8, [], 0
while pos < len(png):
    n, kind = struct.unpack(">I4s", png[pos:pos + 8])
    data = png[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", data[:10])
    elif kind == b"IDAT":
        chunks.append(data)
    pos += 12 + n
bpp = {2: 3, 6: 4}[ctype]
raw, rows, prev, i = zlib.decompress(b"".join(chunks)), [], bytearray(w * bpp), 0
last = max(int(l[2]) for l in lanes) + 12 if lanes else 0
for _ in range(min(h, last + 1)):   # each row's filter needs the one above: decode to the last lane
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + w * bpp]); i += 1 + w * bpp
    for x in range(len(line)):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
failed = 0
for name, x0, y0, width in lanes:
    row = rows[int(y0) + 11]
    colours = set()
    for x in range(int(x0), int(x0) + int(width)):
        px = tuple(row[x * bpp:x * bpp + 3])
        if px not in ((255, 255, 255), (244, 244, 244)):
            colours.add(px)
    good = len(colours) >= 3
    failed += not good
    print(("PASS" if good else "FAIL")
          + " lane %s is drawn (%d colours in its row)" % (name, len(colours)))
sys.exit(1 if failed or len(lanes) < 3 else 0)
PY
rc=$?
cat "$tmp/lanes.out"
passed=$((passed + $(grep -c '^PASS' "$tmp/lanes.out")))
failed=$((failed + $(grep -c '^FAIL' "$tmp/lanes.out")))
[[ $rc = 0 ]] || [[ $(grep -c '^FAIL' "$tmp/lanes.out") -gt 0 ]] \
  || bad "the screenshot could be read (exit $rc)"
finish
