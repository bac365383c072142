//go:build arm64 && !purego

package kernels

import "github.com/specula/specula/format/dtype"

// asmFloatTables are the assembly float kernels of each family, by type.
func asmFloatTables() map[string]map[dtype.DType]floatTable {
	return map[string]map[dtype.DType]floatTable{
		"NEON": {dtype.F32: floatNEONF32, dtype.F16: floatNEONF16, dtype.BF16: floatNEONBF16},
	}
}

// asmScoreKernels are the assembly attention score kernels of each family, by the
// number of heads they take (entry 0 unused).
func asmScoreKernels() map[string][]scoreKernel { return map[string][]scoreKernel{} }
