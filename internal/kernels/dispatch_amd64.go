//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

//go:generate sh -c "cd _gen && go run . -out ../dot_amd64.s -stubs ../dot_amd64_stubs.go -pkg kernels"

// hasAVX2 reports whether the generated kernels can run: they use AVX2, FMA and F16C.
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasAVX && cpu.X86.HasF16C

// The kernel tables, indexed by the number of activation rows; chosen once, at start.
var (
	dotF32  = pick(goFloat(goDotF32), [Group + 1]floatKernel{1: dotF32x1, 2: dotF32x2, 3: dotF32x3, 4: dotF32x4, 5: dotF32x5, 6: dotF32x6, 7: dotF32x7, 8: dotF32x8})
	dotF16  = pick(goFloat(goDotF16), [Group + 1]floatKernel{1: dotF16x1, 2: dotF16x2, 3: dotF16x3, 4: dotF16x4, 5: dotF16x5, 6: dotF16x6, 7: dotF16x7, 8: dotF16x8})
	dotBF16 = pick(goFloat(goDotBF16), [Group + 1]floatKernel{1: dotBF16x1, 2: dotBF16x2, 3: dotBF16x3, 4: dotBF16x4, 5: dotBF16x5, 6: dotBF16x6, 7: dotBF16x7, 8: dotBF16x8})

	dotQ8_0f = pick(goFloat(goDotQ8_0f), [Group + 1]floatKernel{1: dotQ8_0fx1, 2: dotQ8_0fx2, 3: dotQ8_0fx3, 4: dotQ8_0fx4, 5: dotQ8_0fx5, 6: dotQ8_0fx6, 7: dotQ8_0fx7, 8: dotQ8_0fx8})
	dotQ4_0f = pick(goFloat(goDotQ4_0f), [Group + 1]floatKernel{1: dotQ4_0fx1, 2: dotQ4_0fx2, 3: dotQ4_0fx3, 4: dotQ4_0fx4, 5: dotQ4_0fx5, 6: dotQ4_0fx6, 7: dotQ4_0fx7, 8: dotQ4_0fx8})
	dotQ4_Kf = pick(goFloat(goDotQ4_Kf), [Group + 1]floatKernel{1: dotQ4_Kfx1, 2: dotQ4_Kfx2, 3: dotQ4_Kfx3, 4: dotQ4_Kfx4, 5: dotQ4_Kfx5, 6: dotQ4_Kfx6, 7: dotQ4_Kfx7, 8: dotQ4_Kfx8})
	dotQ6_Kf = pick(goFloat(goDotQ6_Kf), [Group + 1]floatKernel{1: dotQ6_Kfx1, 2: dotQ6_Kfx2, 3: dotQ6_Kfx3, 4: dotQ6_Kfx4, 5: dotQ6_Kfx5, 6: dotQ6_Kfx6, 7: dotQ6_Kfx7, 8: dotQ6_Kfx8})

	multiQ8_0 = pick(goMultiQ(dotQ8_0f), [Group + 1]floatKernel2{1: dotQ8_0fx1r4, 2: dotQ8_0fx2r4, 3: dotQ8_0fx3r2, 4: dotQ8_0fx4r2, 5: dotQ8_0fx5r2})
	multiQ4_0 = pick(goMultiQ(dotQ4_0f), [Group + 1]floatKernel2{1: dotQ4_0fx1r4, 2: dotQ4_0fx2r4, 3: dotQ4_0fx3r2, 4: dotQ4_0fx4r2, 5: dotQ4_0fx5r2})

	multiF32  = pick(goMulti(dotF32), [Group + 1]floatKernel2{1: dotF32x1r4, 2: dotF32x2r2, 3: dotF32x3r2, 4: dotF32x4r2, 5: dotF32x5r2, 6: dotF32x6r2})
	multiF16  = pick(goMulti(dotF16), [Group + 1]floatKernel2{1: dotF16x1r4, 2: dotF16x2r2, 3: dotF16x3r2, 4: dotF16x4r2, 5: dotF16x5r2, 6: dotF16x6r2})
	multiBF16 = pick(goMulti(dotBF16), [Group + 1]floatKernel2{1: dotBF16x1r4, 2: dotBF16x2r2, 3: dotBF16x3r2, 4: dotBF16x4r2, 5: dotBF16x5r2, 6: dotBF16x6r2})
)

// weightedSumAVX2[h] is the weighted-sum kernel for h heads at once.
var weightedSumAVX2 = [5]weightedSumKernel{1: weightedSum1AVX2, 2: weightedSum2AVX2, 3: weightedSum3AVX2, 4: weightedSum4AVX2}

func pick[T any](generic, asm T) T {
	if hasAVX2 {
		return asm
	}
	return generic
}

// Accelerated reports whether assembly kernels are in use.
func Accelerated() bool { return hasAVX2 }

// Name names the instruction set of the kernels in use.
func Name() string {
	if hasAVX2 {
		return "AVX2"
	}
	return "pure Go"
}
