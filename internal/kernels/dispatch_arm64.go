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
	hasNEON = os.Getenv("SPECULA_CPU") != "generic" // Go's arm64 port requires NEON
	hasDot  = hasNEON && cpu.ARM64.HasASIMDDP && os.Getenv("SPECULA_CPU") != "neon"
	hasI8MM = hasDot && cpu.ARM64.HasI8MM && os.Getenv("SPECULA_CPU") != "dotprod"
)

// pickInt returns the kernels of type t that this machine runs best: the int8 matrix
// multiply ones where it has i8mm (for two or more activation rows; one row is the
// dot-product kernel), else the dot-product ones where it has that extension, else
// the NEON ones (int{I8MM,Dot,NEON}Table, written with the kernels), else the pure-Go
// ones.
func pickInt(t dtype.DType) intTable {
	if k := intI8MMTable(t); hasI8MM && k[2] != nil {
		return k
	}
	if k := intDotTable(t); hasDot && k[1] != nil {
		return k
	}
	if k := intNEONTable(t); hasNEON && k[1] != nil {
		return k
	}
	return goInt(t)
}

// The kernel tables, indexed by the number of activation rows; chosen once, at start.
var (
	intQ8_0    = pickInt(dtype.Q8_0)
	intQ4_0    = pickInt(dtype.Q4_0)
	intQ4_1    = pickInt(dtype.Q4_1)
	intQ4_Z    = pickInt(dtype.Q4_Z)
	intQ4_Z128 = pickInt(dtype.Q4_Z128)
	intQ5_0    = pickInt(dtype.Q5_0)
	intQ5_1    = pickInt(dtype.Q5_1)
	intQ4_K    = pickInt(dtype.Q4_K)
	intQ5_K    = pickInt(dtype.Q5_K)
	intQ6_K    = pickInt(dtype.Q6_K)
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
