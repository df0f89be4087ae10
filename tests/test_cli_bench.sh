#!/bin/bash
# tests/test_cli_bench.sh: `mnemo bench` on cpu and sim:0 (and a SIM peer pair)
# in table, --json, --csv and --plot modes, with small sweeps (2 sizes, 2 reps,
# no minimum time): the JSON parses, every percent of ceiling is <= 100, the
# convention string is in every format, the CSV has its header and one row per
# case (primitives included) and size, the SVG parses as XML with one case
# polyline per case, no progress bar text reaches captured output; bad input
# exits 2 naming the value, a device that does not exist exits 1 with mnemo's
# message. No timing assertion. Usage: test_cli_bench.sh MNEMO_CLI
set -u
cli=$1
py=/usr/bin/python3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0
conv='GB/s = (bytes read + bytes written) / seconds, 1 GB = 1e9 bytes'
small=(--sizes 64K,256K --reps 2 --min-time 0)

ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# run NAME ARGS...: exit 0, stdout in $d/NAME.out, stderr in $d/NAME.err
run() {
  local name=$1
  shift
  if timeout 120 "$cli" bench "$@" >"$d/$name.out" 2>"$d/$name.err"; then
    ok "$name"
  else
    bad "$name: exit $?: $(head -c 400 "$d/$name.err")"
  fi
  if grep -q 'mnemo bench \[' "$d/$name.out" "$d/$name.err"; then bad "$name: a progress bar in captured output"; fi
}

# check_json FILE NCASES: parses; every pct <= 100; the convention; NCASES cases x 2 sizes
check_json() {
  "$py" - "$1" "$2" "$conv" <<'EOF' || fail=1
import json, sys
path, ncases, conv = sys.argv[1], int(sys.argv[2]), sys.argv[3]
d = json.load(open(path))
res = d["results"]
assert d["convention"] == conv, d["convention"]
assert d["sizes"] == [65536, 262144], d["sizes"]
cases = {r["case"] for r in res if r["kind"] == "case"}
assert len(cases) == ncases, (len(cases), sorted(cases))
for r in res:
    assert 0 < r["pct_of_ceiling"] <= 100.0, r
    assert r["best_gbps"] <= r["ceiling_gbps"], r
    assert r["median_gbps"] <= r["best_gbps"] * (1 + 1e-9), r
    assert r["reps"] >= 2, r
    assert r["moved_bytes"] > 0 and r["best_s"] > 0, r
    assert r["ceiling_set_by"], r
# one primitive per domain, and each (case, domain) at each size once
prims = {(r["domain"], r["case"]) for r in res if r["kind"] == "primitive"}
assert len(prims) == len(d["domains"]), (prims, d["domains"])
keys = [(r["domain"], r["case"], r["size_bytes"]) for r in res]
assert len(keys) == len(set(keys)) == (ncases + len(prims)) * 2, len(keys)
print("ok   json:", path, len(res), "results,", ncases, "cases,", len(prims), "domains")
EOF
}

# check_csv FILE NCASES NDOMAINS: header, the convention, one row per case/primitive and size
check_csv() {
  "$py" - "$1" "$2" "$3" "$conv" <<'EOF' || fail=1
import csv, sys
path, ncases, ndoms, conv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = list(csv.DictReader(open(path)))
head = open(path).readline().strip()
assert head.startswith("device,domain,case,kind,size_bytes,moved_bytes,reps,best_s,median_s,best_gbps,"), head
assert len(rows) == (ncases + ndoms) * 2, len(rows)
assert len({(r["domain"], r["case"], r["size_bytes"]) for r in rows}) == len(rows)
for r in rows:
    assert r["convention"] == conv, r
    assert float(r["pct_of_ceiling"]) <= 100.0, r
print("ok   csv:", path, len(rows), "rows")
EOF
}

# check_svg FILE NCASES: XML, one case polyline per case, one dashed ceiling per domain
check_svg() {
  "$py" - "$1" "$2" "$3" <<'EOF' || fail=1
import sys
import xml.etree.ElementTree as ET
path, ncases, ndoms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
root = ET.parse(path).getroot()
ns = "{http://www.w3.org/2000/svg}"
assert root.tag == ns + "svg", root.tag
cases = [p for p in root.iter(ns + "polyline") if p.get("class") == "case"]
ceil = [p for p in root.iter(ns + "polyline") if p.get("class") == "ceiling"]
assert len(cases) == ncases, len(cases)
assert len({p.get("data-case") for p in cases}) == ncases
assert len(ceil) == ndoms and all(p.get("stroke-dasharray") for p in ceil), len(ceil)
for p in cases + ceil:
    assert len(p.get("points").split()) == 2, p.get("points")
text = open(path).read()
assert "GB/s = (bytes read + bytes written) / seconds" in text
assert "<script" not in text and "href" not in text, "not self-contained"
print("ok   svg:", path, len(cases), "case lines,", len(ceil), "ceilings")
EOF
}

# CPU: 10 cases (layout 4, cast 4, fill 2) in 2 domains (host, host fill)
run cpu_table --device cpu "${small[@]}" --plot "$d/cpu.svg"
grep -qF "$conv" "$d/cpu_table.out" || bad "cpu table: no convention line"
grep -q "cast_f32_bf16" "$d/cpu_table.out" || bad "cpu table: no cast_f32_bf16 row"
grep -q "plot: $d/cpu.svg" "$d/cpu_table.out" || bad "cpu table: the plot is not named"
check_svg "$d/cpu.svg" 10 2
run cpu_json --device cpu "${small[@]}" --json
check_json "$d/cpu_json.out" 10
run cpu_csv --device cpu "${small[@]}" --csv
check_csv "$d/cpu_csv.out" 10 2

# SIM: 19 cases (8 h2d/d2h, d2d, 10 on the device) in 4 domains; the note that
# SIM figures are host memcpy speeds in every format
run sim_table --device sim:0 "${small[@]}"
grep -qF "$conv" "$d/sim_table.out" || bad "sim table: no convention line"
grep -q "host memcpy speeds, not a GPU's" "$d/sim_table.out" || bad "sim table: no SIM note"
for c in h2d_pinned_nb h2d_pageable_blocking d2h_pinned_blocking d2h_pageable_nb d2d nchw_to_nhwc fill_u8; do
  grep -q "^$c " "$d/sim_table.out" || bad "sim table: no $c row"
done
run sim_json --device sim:0 "${small[@]}" --json --plot "$d/sim.svg"
check_json "$d/sim_json.out" 19
grep -q "host memcpy speeds" "$d/sim_json.out" || bad "sim json: no SIM note"
check_svg "$d/sim.svg" 19 4
run sim_csv --device sim:0 "${small[@]}" --csv
check_csv "$d/sim_csv.out" 19 4

# a peer pair of SIM devices, and groups
run sim_peer --sim-devices 2 --device sim:0 --to sim:1 --cases peer,d2d "${small[@]}" --json
check_json "$d/sim_peer.out" 3
run cpu_to_sim --device cpu --to sim:0 --cases h2d,copy "${small[@]}" --csv
check_csv "$d/cpu_to_sim.out" 5 2

# --progress forces the bar (here into a file): it is on stderr only
"$cli" bench --device cpu --cases fill_u8 "${small[@]}" --json --progress >"$d/p.out" 2>"$d/p.err"
if grep -q 'mnemo bench \[' "$d/p.err" && ! grep -q 'mnemo bench \[' "$d/p.out" && "$py" -c "import json,sys; json.load(open(sys.argv[1]))" "$d/p.out"; then
  ok "--progress: the bar on stderr, stdout still JSON"
else
  bad "--progress: $(head -c 300 "$d/p.err")"
fi

# expect NAME CODE TEXT ARGS...: exit CODE, TEXT on stderr, nothing on stdout
expect() {
  local name=$1 code=$2 want=$3
  shift 3
  timeout 60 "$cli" bench "$@" >"$d/x.out" 2>"$d/x.err"
  local rc=$?
  if [ "$rc" != "$code" ] || ! grep -qF -- "$want" "$d/x.err" || [ -s "$d/x.out" ]; then
    bad "$name: exit $rc (want $code), stderr: $(head -c 300 "$d/x.err")"
  else
    ok "$name: $(head -c 160 "$d/x.err")"
  fi
}
expect "unknown case" 2 '"nosuch"' --cases copy,nosuch
expect "case that needs a device" 2 '"h2d_pinned_nb" needs a non-CPU device' --device cpu --cases h2d_pinned_nb
expect "bad size" 2 '"64Q"' --sizes 64K,64Q
expect "size under 4K" 2 '"1K"' --sizes 1K
expect "range going down" 2 '"64M..64K"' --sizes 64M..64K
expect "unknown device" 2 '"gpu:0"' --device gpu:0
expect "--reps 0" 2 '"0"' --reps 0
expect "--min-time -1" 2 '"-1"' --min-time -1
expect "--json and --csv" 2 'choose one' --json --csv
expect "unknown option" 2 '"--bogus"' --bogus
expect "--to the same device" 2 'is --device itself' --device sim:0 --to sim:0
expect "device that does not exist" 1 'no device sim:7' --device sim:7
expect "--to that does not exist" 1 'no device sim:1' --device sim:0 --to sim:1
expect "--plot into a missing folder" 1 'does not exist' --plot "$d/no/such/dir/x.svg"
mkfifo "$d/fifo"
expect "--plot into a FIFO" 1 'not a regular file' --plot "$d/fifo"
if "$cli" --help | grep -q "^  bench  " && "$cli" bench --help | grep -qF -- "--device D" &&
  "$cli" bench --help | grep -qF "$conv"; then
  ok "help lists bench and its convention"
else
  bad "help"
fi

# Optional: on a terminal (script(1) gives one) the bar appears on stderr.
if command -v script >/dev/null 2>&1; then
  script -qc "'$cli' bench --device cpu --cases fill_u8 --sizes 64K --reps 1 --min-time 0 >/dev/null" "$d/tty.log" >/dev/null 2>&1
  if grep -q 'mnemo bench \[' "$d/tty.log"; then ok "progress bar on a terminal"; else bad "no progress bar on a terminal"; fi
fi
exit $fail
