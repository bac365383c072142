//go:build amd64 && !purego

package vecmath

import (
	"os"

	"golang.org/x/sys/cpu"
)

//go:generate sh -c "cd ../kernels/_gen && GOWORK=off go run . -set vecmath -out ../../vecmath/vec_amd64.s -stubs ../../vecmath/vec_amd64_stubs.go -pkg vecmath"

// hasAVX2 reports whether the assembly helpers can run: they use AVX and AVX2 (and no
// fused multiply-add, repeating the Go twins' roundings one by one). SPECULA_CPU=generic
// holds them to the Go twins, as it holds the CPU kernels.
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasAVX && os.Getenv("SPECULA_CPU") != "generic"
