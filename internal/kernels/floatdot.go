package kernels

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/specula/specula/format/dtype"
)

// The float kernels: products of repacked F32, F16, BF16 and F8_E4M3_B128 weights (a column of 16
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

// f8Block and f8GroupBytes are the values of an F8_E4M3_B128 block and the bytes of a
// repacked group's block (see repack.go).
const (
	f8Block      = 128
	f8GroupBytes = 2112
)

// weightColumn decodes column c of a repacked float group: the 16 rows' values.
func weightColumn(t dtype.DType, w []byte, c int, dst *[rowGroup]float32) {
	switch t {
	case dtype.F32:
		for r := range dst {
			dst[r] = math.Float32frombits(binary.LittleEndian.Uint32(w[64*c+4*r:]))
		}
	case dtype.F16:
		for r := range dst {
			h := binary.LittleEndian.Uint16(w[32*c+2*r:])
			if e := h >> 10 & 0x1f; e != 0 && e != 0x1f { // normal: dtype.F16ToF32, inlined
				dst[r] = math.Float32frombits(uint32(h&0x8000)<<16 | (uint32(h&0x7fff)+(112<<10))<<13)
			} else {
				dst[r] = dtype.F16ToF32(h)
			}
		}
	case dtype.F8_E4M3_B128:
		blk := w[c/f8Block*f8GroupBytes:]
		at := 64 + rowGroup*(c%f8Block)
		for r := range dst {
			s := math.Float32frombits(binary.LittleEndian.Uint32(blk[4*r:]))
			dst[r] = float32(dtype.F16ToF32(dtype.E4M3Half(blk[at+r])) * s)
		}
	default:
		for r := range dst {
			dst[r] = dtype.BF16ToF32(binary.LittleEndian.Uint16(w[32*c+2*r:]))
		}
	}
}

// goFloatGroup makes the pure-Go kernel table of a float weight type. Each column of
// weights is decoded once and serves every activation row.
func goFloatGroup(t dtype.DType) (k floatTable) {
	gb, per := groupBlockBytes(t), t.BlockSize()
	for n := 1; n <= Group; n++ {
		k[n] = func(w *byte, cols int, x *float32, xstride int, out *float32, ldo int) {
			ws := unsafe.Slice(w, cols/per*gb)
			var xs [Group][]float32
			for tt := range n {
				xs[tt] = unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(x), tt*xstride)), cols)
			}
			var acc [Group][2][rowGroup]float32 // by row, column parity, weight row
			var col [rowGroup]float32
			for c := range cols {
				weightColumn(t, ws, c, &col)
				for tt := range n {
					a, xv := &acc[tt][c%2], xs[tt][c]
					for r, wv := range col {
						// fma32, its fast path inlined.
						s := float64(wv)*float64(xv) + float64(a[r])
						if !safeToRound(s) {
							s = float64(fma32Slow(wv, xv, a[r]))
						}
						a[r] = float32(s)
					}
				}
			}
			for tt := range n {
				o := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(out), 4*tt*ldo)), rowGroup)
				for r := range o {
					o[r] = acc[tt][0][r] + acc[tt][1][r]
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
	case dtype.F8_E4M3_B128:
		return &floatF8
	}
	return &floatBF16
}
