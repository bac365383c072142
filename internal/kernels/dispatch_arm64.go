//go:build arm64 && !purego

package kernels

import (
	"os"

	"golang.org/x/sys/cpu"

	"github.com/specula/specula/format/dtype"
)

//go:generate go run ./_genarm64 -out int_arm64.s -stubs int_arm64_stubs.go

// The arm64 kernel levels. Every arm64 CPU has NEON (Advanced SIMD), the floor; the
// dot-product extension (SDOT, ARMv8.2, in every Apple M-series, Graviton 2 and later,
// Ampere Altra, Cortex-A76 and later) and the int8 matrix multiply (SMMLA, ARMv8.6:
// Apple M2 and later, Graviton 3 and later) add faster integer products.
// SPECULA_CPU caps them, as on amd64: dotprod holds an i8mm machine to the dot-product
// kernels, neon to the plain NEON ones, generic to the pure-Go ones.
var (
	hasNEON = cpu.ARM64.HasASIMD && os.Getenv("SPECULA_CPU") != "generic"
	hasDot  = hasNEON && cpu.ARM64.HasASIMDDP && os.Getenv("SPECULA_CPU") != "neon"
	hasI8MM = hasDot && cpu.ARM64.HasI8MM && os.Getenv("SPECULA_CPU") != "dotprod"
)

// pickInt returns the kernels of type t that this machine runs best.
func pickInt(t dtype.DType, i8mm, dot, neon intTable) intTable {
	switch {
	case hasI8MM && i8mm[1] != nil:
		return i8mm
	case hasDot && dot[1] != nil:
		return dot
	case hasNEON && neon[1] != nil:
		return neon
	}
	return goInt(t)
}

// The kernel tables, indexed by the number of activation rows; chosen once, at start.
var (
	intQ8_0 = pickInt(dtype.Q8_0, intTable{}, intTable{}, intTable{})
	intQ4_0 = pickInt(dtype.Q4_0, intTable{}, intTable{}, intTable{})
	intQ4_1 = pickInt(dtype.Q4_1, intTable{}, intTable{}, intTable{})
	intQ5_0 = pickInt(dtype.Q5_0, intTable{}, intTable{}, intTable{})
	intQ5_1 = pickInt(dtype.Q5_1, intTable{}, intTable{}, intTable{})
	intQ4_K = pickInt(dtype.Q4_K, intTable{}, intTable{}, intTable{})
	intQ5_K = pickInt(dtype.Q5_K, intTable{}, intTable{}, intTable{})
	intQ6_K = pickInt(dtype.Q6_K, intTable{}, intTable{}, intTable{})
)

// Name names the instruction set of the kernels in use.
func Name() string {
	switch {
	case hasI8MM:
		return "NEON i8mm"
	case hasDot:
		return "NEON dotprod"
	case hasNEON:
		return "NEON"
	}
	return "pure Go"
}
