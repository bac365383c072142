package vecmath

import "math"

// ranAssembly reports whether Max took the assembly: the one place where it and its
// Go loop may differ is the sign of a zero. VMAXPS returns its second operand when
// both are zeros, so the assembly's Max of eight +0 then eight −0 is −0, where Go's
// max, which orders −0 below +0, gives +0.
func ranAssembly() bool {
	v := make([]float32, 16)
	for i := 8; i < len(v); i++ {
		v[i] = float32(math.Copysign(0, -1))
	}
	return math.Signbit(float64(Max(v)))
}
