//go:build !amd64 || purego

package kernels

// Without assembly every product runs the pure-Go kernels.
var (
	dotF32  = goFloat(goDotF32)
	dotF16  = goFloat(goDotF16)
	dotBF16 = goFloat(goDotBF16)

	dotQ8_0f = goFloat(goDotQ8_0f)
	dotQ4_0f = goFloat(goDotQ4_0f)
	dotQ4_Kf = goFloat(goDotQ4_Kf)
	dotQ6_Kf = goFloat(goDotQ6_Kf)

	multiQ8_0 = goMultiQ(dotQ8_0f)
	multiQ4_0 = goMultiQ(dotQ4_0f)

	multiF32  = goMulti(dotF32)
	multiF16  = goMulti(dotF16)
	multiBF16 = goMulti(dotBF16)
)

// Accelerated reports whether assembly kernels are in use.
func Accelerated() bool { return false }

// Name names the instruction set of the kernels in use.
func Name() string { return "pure Go" }

const hasAVX2 = false

func dotAVX2(a, b []float32) float32         { panic("unreachable") }
func axpyAVX2(alpha float32, x, y []float32) { panic("unreachable") }

// weightedSumAVX2 is empty: WeightedSum never reaches it without assembly.
var weightedSumAVX2 [5]weightedSumKernel

func siluMulAVX2(dst, gate, up []float32)          { panic("unreachable") }
func expShiftedAVX2(v []float32, mx, invT float32) { panic("unreachable") }
func maxAVX2(v []float32) float32                  { panic("unreachable") }
func scaleAVX2(v []float32, s float32)             { panic("unreachable") }
