package kernels

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/specula/specula/model/dtype"
)

// The float kernels: products of repacked F32, F16 and BF16 weights (a column of 16
// rows at a time, see repack.go) with float32 activations. For one group of 16 rows and
// n activation rows, each (weight row r, activation row t) pair keeps two sums, of the
// even and of the odd columns, each a chain of fused multiply-adds in column order,
// and ends with their sum: out[t·ldo + r] = Σ_even + Σ_odd. The assembly keeps the
// same chains per vector lane (two, so that a single activation row's multiply-adds do
// not all wait on each other), so it gives the same bits as this pure-Go twin, whose
// fused multiply-adds are fma32.

// floatGroupKernel computes, for the 16 rows of one repacked float group of cols
// columns and activation rows t = 0…n−1 (at x + t·xstride bytes),
// out[t·ldo + r] = W[r] · x[t].
type floatGroupKernel func(w *byte, cols int, x *float32, xstride int, out *float32, ldo int)

// floatTable holds the float kernels of one weight type by the number of activation
// rows they take; entries past the largest are nil.
type floatTable [Group + 1]floatGroupKernel

func (k *floatTable) rows() int {
	n := Group
	for k[n] == nil {
		n--
	}
	return n
}

// weightValue reads value r of column c of a repacked float group.
func weightValue(t dtype.DType, w []byte, c, r int) float32 {
	switch t {
	case dtype.F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(w[64*c+4*r:]))
	case dtype.F16:
		return F16ToF32(binary.LittleEndian.Uint16(w[32*c+2*r:]))
	}
	return BF16ToF32(binary.LittleEndian.Uint16(w[32*c+2*r:]))
}

// goFloatGroup makes the pure-Go kernel table of a float weight type.
func goFloatGroup(t dtype.DType) (k floatTable) {
	gb := groupBlockBytes(t)
	for n := 1; n <= Group; n++ {
		k[n] = func(w *byte, cols int, x *float32, xstride int, out *float32, ldo int) {
			ws := unsafe.Slice(w, cols*gb)
			for tt := range n {
				xs := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(x), tt*xstride)), cols)
				os := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(out), 4*tt*ldo)), rowGroup)
				for r := range rowGroup {
					var acc [2]float32
					for c, xv := range xs {
						acc[c%2] = fma32(weightValue(t, ws, c, r), xv, acc[c%2])
					}
					os[r] = acc[0] + acc[1]
				}
			}
		}
	}
	return k
}

// floatKernels returns the kernel table of a float type on this machine.
func floatKernels(t dtype.DType) *floatTable {
	switch t {
	case dtype.F32:
		return &floatF32
	case dtype.F16:
		return &floatF16
	}
	return &floatBF16
}
