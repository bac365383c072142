//go:build !amd64 || purego

package vecmath

// Off amd64, and under -tags purego, the helpers run their pure-Go definitions.
const hasAVX2 = false

func expShiftedAVX2(v []float32, mx, invT float32) { panic("unreachable") }
func maxAVX2(v []float32) float32                  { panic("unreachable") }
func scaleAVX2(v []float32, s float32)             { panic("unreachable") }
