#!/usr/bin/env bash
# Times the arm64 kernels on a real arm64 machine (Apple silicon, Graviton, Ampere…),
# each level the CPU has against the next one down: the kernel benchmarks, then the
# real-scale decode, verification and prefill of Qwen2.5-0.5B (Q8_0, Q4_K_M) and
# Qwen2.5-7B (Q4_K_M). Run from the repository root:
#
#	examples/realscale/arm64-bench.sh [OUT]    # results in OUT (default arm64-bench/)
#
# The model files are generated (random weights, real shapes, about 5 GB for 7B) in
# OUT and reused on a second run. Nothing here runs on other architectures.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-arm64-bench}
mkdir -p "$out"
if [ "$(go env GOARCH)" != arm64 ]; then
	echo "arm64-bench: this is $(go env GOARCH), not arm64" >&2
	exit 1
fi

{
	uname -a
	(sysctl -n machdep.cpu.brand_string hw.optional.arm.FEAT_DotProd hw.optional.arm.FEAT_I8MM 2>/dev/null || lscpu) | head -30
	uptime
} >"$out/machine.txt"

# The kernel benchmarks at each level: the best the CPU has, then capped.
for level in best dotprod neon; do
	cap=$level
	[ "$level" = best ] && cap=
	SPECULA_CPU=$cap go test ./internal/kernels -run XXX -bench 'IntKernel|Mul$|MulDRAM' -benchtime 2s |
		tee "$out/kernels-$level.txt"
done

for spec in qwen2.5-0.5b:Q8_0 qwen2.5-0.5b:Q4_K_M qwen2.5-7b:Q4_K_M; do
	shape=${spec%:*} mix=${spec#*:}
	file="$out/$shape-$mix.gguf"
	[ -e "$file" ] || go run ./examples/realscale gen -shape "$shape" -mix "$mix" -out "$file"
	for level in best dotprod; do
		cap=$level
		[ "$level" = best ] && cap=
		uptime >>"$out/load.txt"
		SPECULA_CPU=$cap go run ./examples/realscale bench -model "$file" -json "$out/bench-$shape-$mix-$level.json" |
			tee "$out/bench-$shape-$mix-$level.txt"
	done
done
echo "arm64-bench: results in $out/"
