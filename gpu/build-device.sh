#!/usr/bin/env bash
# Builds, on a machine with Go, the binaries gpu/device-check.sh runs on a GPU machine
# that has no Go toolchain: into bin/ at the repository root (git-ignored), for
# linux/amd64, without cgo.
#
#   gpu/build-device.sh   # bin/gpu.test, bin/llama.test, bin/heads.test, bin/gpubench, bin/gpubench.test
#
# bin/gpu.test is package gpu's own tests (library discovery, the kernels, the device
# Backend against the CPU backend); bin/llama.test is model/llama's, of which
# device-check.sh runs the device ones (TestHost…, TestGPU…: models on the host device
# and on the GPU against the CPU backend, the paged key/value cache, random weights,
# greedy speculative decoding); bin/heads.test is draft/heads', of which it runs
# TestHeadsOnDevice (the trained heads computing on the device backend against the
# CPU's; it needs ../shared).
#
# The binaries are not fully static: purego loads libcuda, cuBLAS and NVRTC with the
# system's dynamic loader, so they need glibc's ld.so on the target (any Linux with an
# NVIDIA driver has it). Nothing else is copied: the tests read the demo models from
# models/ in the working tree, and ../shared when it is there.
set -euo pipefail
cd "$(dirname "$0")/.."
NICE=${NICE:-nice -n 19}
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
mkdir -p bin
echo "building into $PWD/bin (CGO_ENABLED=0 GOOS=linux GOARCH=amd64, $(go version | cut -d' ' -f3))"
$NICE go test -c -o bin/gpu.test ./gpu
$NICE go test -c -o bin/llama.test ./model/llama
$NICE go test -c -o bin/heads.test ./draft/heads
$NICE go test -c -o bin/gpubench.test ./examples/gpubench
$NICE go build -trimpath -o bin/gpubench ./examples/gpubench
git rev-parse --short HEAD 2>/dev/null >bin/BUILD-INFO || echo unknown >bin/BUILD-INFO
{
	echo "built $(date -u +%FT%TZ) with $(go version)"
	git status --short -- model/llama backend gpu draft 2>/dev/null | head -50 | sed 's/^/  /'
} >>bin/BUILD-INFO
ls -l bin/gpu.test bin/llama.test bin/heads.test bin/gpubench bin/gpubench.test
du -ch bin/gpu.test bin/llama.test bin/heads.test bin/gpubench bin/gpubench.test | tail -1
