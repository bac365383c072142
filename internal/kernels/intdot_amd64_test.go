//go:build amd64 && !purego

package kernels

import "github.com/specula/specula/format/dtype"

// asmIntTables are the assembly integer kernels of each family, by type.
func asmIntTables() map[string]map[dtype.DType]intTable {
	return map[string]map[dtype.DType]intTable{
		"AVX-512 VNNI": {dtype.Q8_0: int512Q8_0, dtype.Q4_0: int512Q4_0, dtype.Q4_1: int512Q4_1, dtype.Q4_Z: int512Q4_Z, dtype.Q4_Z128: int512Q4_Z128, dtype.Q5_0: int512Q5_0,
			dtype.Q5_1: int512Q5_1, dtype.Q4_K: int512Q4_K, dtype.Q5_K: int512Q5_K, dtype.Q6_K: int512Q6_K},
		"AVX-512 BW": {dtype.Q8_0: int512bwQ8_0, dtype.Q4_0: int512bwQ4_0, dtype.Q4_1: int512bwQ4_1, dtype.Q4_Z: int512bwQ4_Z, dtype.Q4_Z128: int512bwQ4_Z128, dtype.Q5_0: int512bwQ5_0,
			dtype.Q5_1: int512bwQ5_1, dtype.Q4_K: int512bwQ4_K, dtype.Q5_K: int512bwQ5_K, dtype.Q6_K: int512bwQ6_K},
		"AVX2": {dtype.Q8_0: int256Q8_0, dtype.Q4_0: int256Q4_0, dtype.Q4_1: int256Q4_1, dtype.Q4_Z: int256Q4_Z, dtype.Q4_Z128: int256Q4_Z128, dtype.Q5_0: int256Q5_0,
			dtype.Q5_1: int256Q5_1, dtype.Q4_K: int256Q4_K, dtype.Q5_K: int256Q5_K, dtype.Q6_K: int256Q6_K},
	}
}

// familyRuns reports whether this machine can run a kernel family, and if not why.
func familyRuns(name string) (bool, string) {
	switch name {
	case "AVX-512 VNNI":
		return hasVNNI, "the CPU lacks AVX-512 F, BW, DQ, VL or VNNI"
	case "AVX-512", "AVX-512 BW":
		return hasAVX512, "the CPU lacks AVX-512 F, BW, DQ or VL"
	}
	return hasAVX2, "the CPU lacks AVX2, FMA or F16C"
}

// asmQuantizers are the assembly activation quantizers, by family and block size.
func asmQuantizers() map[string]func(x *float32, blocks int, codes *int8, side *uint32) {
	return map[string]func(x *float32, blocks int, codes *int8, side *uint32){
		"AVX-512/32": quantize32AVX512, "AVX-512/128": quantize128AVX512, "AVX-512/256": quantize256AVX512,
		"AVX2/32": quantize32AVX2, "AVX2/128": quantize128AVX2, "AVX2/256": quantize256AVX2,
	}
}

// asmFloatTables are the assembly float kernels of each family, by type.
func asmFloatTables() map[string]map[dtype.DType]floatTable {
	return map[string]map[dtype.DType]floatTable{
		"AVX-512": {dtype.F32: float512F32, dtype.F16: float512F16, dtype.BF16: float512BF16, dtype.F8_E4M3_B128: float512F8},
		"AVX2":    {dtype.F32: float256F32, dtype.F16: float256F16, dtype.BF16: float256BF16, dtype.F8_E4M3_B128: float256F8},
	}
}

// asmScoreKernels are the assembly attention score kernels of each family, by the
// number of heads they take (entry 0 unused).
func asmScoreKernels() map[string][]scoreKernel {
	return map[string][]scoreKernel{"AVX-512": score512[:], "AVX2": score256[:]}
}
