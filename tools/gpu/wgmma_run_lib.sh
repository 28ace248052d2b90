# Steps shared by the one-call device scripts of the wgmma kernels (run_decode_gemms.sh, run_moe_wgmma.sh): source it
# from the repo root with $out set. Each step logs under $out and prints a one-line status.
# shellcheck shell=bash

wg_start=$(date +%s)
wg_stamp() { echo "[+$(( $(date +%s) - wg_start ))s] $*"; }

# wg_build LOG TARGETS...: tools/gpu/build.sh, the errors on failure (exit status of the build).
wg_build() {
  local log=$1
  shift
  if bash tools/gpu/build.sh "$@" >>"$log" 2>&1; then wg_stamp "built $*"; return 0; fi
  grep -E "error|Error" "$log" | head -30
  wg_stamp "build of $* failed"
  return 1
}

# wg_sass BINARY PATTERN FILE: warpgroup MMAs (QGMMA for fp8, HGMMA for bf16) per kernel whose name
# matches PATTERN, one "count name" line each.
wg_sass() {
  cuobjdump --dump-sass "$1" 2>/dev/null |
    awk '/Function :/ {f=$3} /QGMMA|HGMMA/ {n[f]++} END {for (k in n) print n[k], k}' | sort -rn |
    grep -i "$2" >"$3"
  wg_stamp "sass: $(wc -l <"$3") kernels matching $2 hold (Q|H)GMMA"
}

# wg_gtest BINARY FILTER LOG TIMEOUT [memcheck]: one gtest run (under compute-sanitizer memcheck when
# asked and present), its summary line and its failures.
wg_gtest() {
  local bin=$1 filter=$2 log=$3 limit=$4 tool=${5:-}
  local sanitizer=""
  [ "$tool" = memcheck ] && sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -n "$sanitizer" ]; then
    timeout "$limit" "$sanitizer" --tool memcheck "$bin" --gtest_filter="$filter" >"$log" 2>&1
  else
    timeout "$limit" "$bin" --gtest_filter="$filter" >"$log" 2>&1
  fi
  local status=$?
  wg_stamp "$filter${sanitizer:+ (memcheck)}: exit $status, $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]|Failure|relative error|Which is|output column|worst|ERROR SUMMARY|Invalid" "$log" | head -30
  return $status
}
