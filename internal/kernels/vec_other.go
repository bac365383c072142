//go:build !amd64 || purego

package kernels

// Off amd64, and under -tags purego, SiLUMul runs its pure-Go definition.
const hasAVX2 = false

func siluMulAVX2(dst, gate, up []float32) { panic("unreachable") }
