#!/usr/bin/env bash
# The one script to run on a machine with an NVIDIA GPU, from a copy of the working
# tree with bin/ built by gpu/build-device.sh (the machine needs no Go toolchain):
#
#   OUT=/some/dir gpu/device-check.sh
#
# It finds cuBLAS and NVRTC (Python wheels of a PyTorch environment included) and
# exports SPECULA_CUDA_LIB_PATH, records nvidia-smi, runs gpu's tests (the
# device, its kernels, the device Backend against the host device and the CPU backend)
# and model/llama's device tests, TestHost… and TestGPU… (logits against the CPU
# backend on the gocoder models, random-weight models against the host device, batch
# invariance, greedy speculative output identical to plain, the paged key/value cache
# on the device), and draft/heads' TestHeadsOnDevice (the trained heads computing on
# the device backend against the CPU's, when ../shared is there), then benchmarks
# random-weight models shaped like Qwen2.5-0.5B and Qwen2.5-7B (F16, BF16, Q8_0): decode tokens/s at a 512-token context, the
# verify(5)/verify(1) cost ratio and achieved memory bandwidth against the card's
# peak. Everything goes to $OUT (default ./device-out): device-check.log (all of it),
# nvidia-smi.txt, libs.txt, gpu-test.log, llama-test.log, heads-test.log, gpubench-*.txt/json,
# summary.txt.
#
# Without a GPU (no nvidia-smi, or DRY=1) it still runs the tests — the GPU tests then
# skip with the reason — and replaces the benchmarks by a smoke run of gpubench -host.
# The whole run is kept under BUDGET seconds (default 470) with timeout.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/device-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/device-check.log") 2>&1
START=$(date +%s)
BUDGET=${BUDGET:-470}
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

say() { printf '\n=== %s (%ss)\n' "$*" "$(($(date +%s) - START))"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# cap N: the smaller of N and the time left (at least 10 s).
cap() {
	local l
	l=$(left)
	((l < $1)) && set -- "$l"
	((${1} < 10)) && set -- 10
	echo "$1"
}
record() { printf '%-28s %s\n' "$1" "$2" | tee -a "$SUMMARY"; }

say "specula device check, $(date -u +%FT%TZ), $(uname -srm), in $ROOT"
[ -f bin/BUILD-INFO ] && cat bin/BUILD-INFO

# --- the GPU ------------------------------------------------------------------------
GPU=1
[ "${DRY:-0}" = 1 ] && GPU=0 && echo "DRY=1: host mode, the GPU parts are skipped"
if command -v nvidia-smi >/dev/null 2>&1; then
	say "nvidia-smi"
	timeout 30 nvidia-smi 2>&1 | tee "$OUT/nvidia-smi.txt"
	timeout 30 nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,driver_version,compute_cap --format=csv \
		>>"$OUT/nvidia-smi.txt" 2>&1
	record nvidia-smi "exit $?"
else
	echo "no nvidia-smi on PATH: no NVIDIA GPU here; the GPU tests will skip and gpubench runs on the host device" |
		tee "$OUT/nvidia-smi.txt"
	record nvidia-smi "absent"
	GPU=0
fi

# --- the CUDA libraries ---------------------------------------------------------------
# Directories of libcublas / libnvrtc: from the Python packages `nvidia` (wheels
# nvidia-cublas*, nvidia-cuda-nvrtc*: nvidia/<pkg>/lib or nvidia/cu13/lib) of every
# Python found, then a bounded search of the usual prefixes.
say "locating cuBLAS and NVRTC"
dirs=()
if [ -n "${SPECULA_CUDA_LIB_PATH:-}" ]; then
	echo "SPECULA_CUDA_LIB_PATH is set: $SPECULA_CUDA_LIB_PATH"
else
	pys=()
	for p in python3 python /opt/conda/bin/python3 /opt/*/bin/python3 /opt/*/.venv/bin/python3 /opt/*/venv/bin/python3 \
		/usr/local/bin/python3 /root/.pyenv/shims/python3; do
		command -v "$p" >/dev/null 2>&1 && pys+=("$(command -v "$p")")
	done
	for py in $(printf '%s\n' "${pys[@]}" | awk '!seen[$0]++'); do
		found=$(timeout 20 "$py" - <<'EOF' 2>/dev/null
import glob, os
out = []
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
try:
    import torch
    roots.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
except Exception:
    pass
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "*", "lib*"))) + [r]:
        if glob.glob(os.path.join(d, "libcublas.so*")) or glob.glob(os.path.join(d, "libnvrtc.so*")):
            out.append(os.path.realpath(d))
print("\n".join(dict.fromkeys(out)))
EOF
		)
		[ -n "$found" ] && echo "$py: $found" | head -20 && mapfile -t -O "${#dirs[@]}" dirs <<<"$found"
	done
	if [ ${#dirs[@]} -eq 0 ]; then
		echo "no Python package nvidia/torch found them; searching /usr /opt /root /home /workspace (max 60 s)"
		found=$(timeout 60 find /usr /opt /root /home /workspace -xdev -maxdepth 9 \
			\( -name 'libcublas.so*' -o -name 'libnvrtc.so*' \) -not -path '*/stubs/*' 2>/dev/null |
			xargs -r -n1 dirname | awk '!seen[$0]++')
		[ -n "$found" ] && mapfile -t -O "${#dirs[@]}" dirs <<<"$found"
	fi
	if [ ${#dirs[@]} -gt 0 ]; then
		SPECULA_CUDA_LIB_PATH=$(printf '%s\n' "${dirs[@]}" | awk 'NF && !seen[$0]++' | paste -sd:)
		export SPECULA_CUDA_LIB_PATH
		echo "export SPECULA_CUDA_LIB_PATH=$SPECULA_CUDA_LIB_PATH"
	else
		echo "cuBLAS / NVRTC not found outside the loader's path; gpu.Available will say what is missing"
	fi
fi
{
	echo "SPECULA_CUDA_LIB_PATH=${SPECULA_CUDA_LIB_PATH:-}"
	echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
	for d in $(echo "${SPECULA_CUDA_LIB_PATH:-}" | tr ':' ' '); do ls -l "$d" 2>&1 | grep -E 'cublas|nvrtc|cudart' ; done
	ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libcublas|libnvrtc'
} >"$OUT/libs.txt" 2>&1
record "libraries" "${SPECULA_CUDA_LIB_PATH:-not found (see libs.txt)}"

# --- the binaries ---------------------------------------------------------------------
missing=0
for b in bin/gpu.test bin/llama.test bin/gpubench; do
	[ -x "$b" ] || { echo "$b is missing: run gpu/build-device.sh on a machine with Go first"; missing=1; }
done
if [ $missing = 1 ]; then
	record "binaries" "missing"
	say "done (nothing run)"
	exit 1
fi

# Shared data (the F16 and safetensors gocoder files, the Qwen2 fixture) when present;
# otherwise the tests use the demo models in models/ and skip the others.
if [ -z "${SPECULA_SHARED:-}" ]; then
	for d in "$ROOT/../shared" "$ROOT/shared"; do
		[ -d "$d/models" ] && export SPECULA_SHARED=$(cd "$d" && pwd) && break
	done
fi
echo "shared data: ${SPECULA_SHARED:-none (repository demo models only)}"

# --- the tests ------------------------------------------------------------------------
# runtests NAME DIR BINARY CAP [ARGS…]: runs a test binary in its package's directory
# (the tests find models/ and ../shared from there), logs to $OUT/NAME-test.log and
# records the counts.
runtests() {
	local name=$1 dir=$2 bin=$3 t rc log=$OUT/$1-test.log
	t=$(cap "$4")
	shift 4
	(cd "$dir" && timeout --kill-after=10 "$t" "$ROOT/$bin" -test.v -test.count=1 -test.timeout "$((t - 5))s" "$@") \
		>"$log" 2>&1
	rc=$?
	grep -E '^(--- |ok|PASS|FAIL|panic)|^\s+--- (FAIL|SKIP)|max \||^GPU:' "$log" | head -120
	record "$name tests" "exit $rc$([ $rc = 124 ] && echo ' (timed out)') ($(grep -c -- '--- PASS' "$log") passed, $(grep -c -- '--- FAIL' "$log") failed, $(grep -c -- '--- SKIP' "$log") skipped)"
	grep -q 'no GPU' "$log" && record "$name GPU tests skipped" "$(grep -m1 -o 'no GPU: .*' "$log" | cut -c1-300)"
	return 0
}

say "gpu tests"
runtests gpu gpu bin/gpu.test 90

# model/llama's device tests only (its CPU tests need no GPU and run with go test).
say "model/llama device tests (TestHost*, TestGPU*)"
runtests llama model/llama bin/llama.test 200 -test.run '^Test(Host|GPU)'

# The trained heads on the device backend (a binary of older builds may lack them).
if [ -x bin/heads.test ]; then
	say "draft/heads device test (TestHeadsOnDevice)"
	runtests heads draft/heads bin/heads.test 45 -test.run '^TestHeadsOnDevice$'
fi

# --- the benchmarks -------------------------------------------------------------------
if [ $GPU = 1 ]; then
	for shape in qwen2.5-0.5b qwen2.5-7b; do
		say "gpubench $shape"
		t=$(cap $([ $shape = qwen2.5-7b ] && echo 150 || echo 90))
		timeout --kill-after=10 "$t" bin/gpubench -shapes "$shape" -types F16,BF16,Q8_0 -ctx 512 -steps 32 -repeats 10 -k 5 \
			-timeout "$((t - 10))s" -out "$OUT/gpubench-$shape.json" 2>&1 | tee "$OUT/gpubench-$shape.txt"
		rc=${PIPESTATUS[0]}
		record "gpubench $shape" "exit $rc$([ "$rc" = 124 ] && echo ' (timed out)')"
	done
else
	say "gpubench -host (smoke test; no GPU)"
	timeout 60 bin/gpubench -host -out "$OUT/gpubench-host.json" 2>&1 | tee "$OUT/gpubench-host.txt"
	record "gpubench -host" "exit ${PIPESTATUS[0]}"
fi

say "done"
cat "$SUMMARY"
