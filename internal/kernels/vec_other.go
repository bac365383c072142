//go:build !amd64 || purego

package kernels

// Off amd64 the vector helpers of vec.go run their pure-Go definitions.
const hasAVX2 = false

func siluMulAVX2(dst, gate, up []float32)          { panic("unreachable") }
func expShiftedAVX2(v []float32, mx, invT float32) { panic("unreachable") }
func maxAVX2(v []float32) float32                  { panic("unreachable") }
func scaleAVX2(v []float32, s float32)             { panic("unreachable") }
