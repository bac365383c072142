package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The float kernels: repacked F32, F16 and BF16 weights (a column of 16 rows at a
// time) against float32 activations, as floatdot.go in the package defines them. Per
// column one vector of the 16 rows' weights, converted to float32, and per activation
// row one fused multiply-add with the row's value of that column broadcast; the even
// and the odd columns go to two sums per lane, added at the end.

const floatSig = "func(w *byte, cols int, x *float32, xstride int, out *float32, ldo int)"

// floatType is a float weight type for the generators: its bytes per value and how a
// vector of values is loaded as float32.
type floatType struct {
	name string
	size int // bytes per value
}

var floatTypes = []floatType{{"F32", 4}, {"F16", 2}, {"BF16", 2}}

// load loads the values at m as float32: as many as v holds (16 in a ZMM, 8 in a YMM).
func (ft floatType) load(m Mem, v VecVirtual) {
	switch ft.name {
	case "F32":
		VMOVUPS(m, v)
	case "F16":
		VCVTPH2PS(m, v)
	default:
		VPMOVZXWD(m, v)
		VPSLLD(U8(16), v, v)
	}
}

// floatKernel512 emits the AVX-512 float kernel of type ft for n activation rows.
func floatKernel512(ft floatType, n int) {
	fn := fmt.Sprintf("float%sx%dAVX512", ft.name, n)
	TEXT(fn, NOSPLIT, floatSig)
	Doc(fmt.Sprintf("%s is the AVX-512 kernel of repacked %s weights for %d activation rows.", fn, ft.name, n))
	w := Mem{Base: Load(Param("w"), GP64())}
	cols := Load(Param("cols"), GP64())
	x := newRows(Load(Param("x"), GP64()), Load(Param("xstride"), GP64()), n)
	col := 16 * ft.size // bytes of a column
	acc := [2][]VecVirtual{}
	for k := range 2 {
		for range n {
			a := ZMM()
			VPXORD(a, a, a)
			acc[k] = append(acc[k], a)
		}
	}
	Label(fn + "_pairs")
	CMPQ(cols, U32(2))
	JL(LabelRef(fn + "_tail"))
	for off := 0; off < 2*col; off += 64 {
		PREFETCHT0(w.Offset(intPrefetch + off))
	}
	for k := range 2 {
		v := ZMM()
		ft.load(w.Offset(k*col), v)
		for t := range n {
			VFMADD231PS_BCST(x.at(t, 4*k), v, acc[k][t])
		}
	}
	ADDQ(U32(2*col), w.Base)
	x.advance(8)
	SUBQ(U32(2), cols)
	JMP(LabelRef(fn + "_pairs"))
	Label(fn + "_tail")
	TESTQ(cols, cols)
	JZ(LabelRef(fn + "_done"))
	v := ZMM()
	ft.load(w, v)
	for t := range n {
		VFMADD231PS_BCST(x.at(t, 0), v, acc[0][t])
	}
	Label(fn + "_done")
	out := Mem{Base: Load(Param("out"), GP64())}
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	for t := range n {
		VADDPS(acc[1][t], acc[0][t], acc[0][t])
		VMOVUPS(acc[0][t], out)
		if t+1 < n {
			ADDQ(ldo, out.Base)
		}
	}
	VZEROUPPER()
	RET()
}

// floatRows512 is how many activation rows an AVX-512 float kernel takes at most: a
// verification pass of up to 8 positions reads every weight once.
const floatRows512 = 8

// floatRows256 is how many activation rows an AVX2 float kernel takes at most: two sums
// of two halves per row in 16 registers.
const floatRows256 = 3

// floatKernel256 emits the AVX2 float kernel of type ft for n activation rows: the 16
// rows as two halves of 8, the same sums per lane.
func floatKernel256(ft floatType, n int) {
	fn := fmt.Sprintf("float%sx%dAVX2", ft.name, n)
	TEXT(fn, NOSPLIT, floatSig)
	Doc(fmt.Sprintf("%s is the AVX2 kernel of repacked %s weights for %d activation rows.", fn, ft.name, n))
	w := Mem{Base: Load(Param("w"), GP64())}
	cols := Load(Param("cols"), GP64())
	x := newRows(Load(Param("x"), GP64()), Load(Param("xstride"), GP64()), n)
	col := 16 * ft.size
	var acc [2][2][]VecVirtual // [column parity][half][row]
	for k := range 2 {
		for h := range 2 {
			for range n {
				a := YMM()
				VXORPS(a, a, a)
				acc[k][h] = append(acc[k][h], a)
			}
		}
	}
	column := func(k int, m Mem) {
		lo, hi := YMM(), YMM()
		ft.load(m, lo)
		ft.load(m.Offset(col/2), hi)
		for t := range n {
			b := YMM()
			VBROADCASTSS(x.at(t, 4*k), b)
			VFMADD231PS(b, lo, acc[k][0][t])
			VFMADD231PS(b, hi, acc[k][1][t])
		}
	}
	Label(fn + "_pairs")
	CMPQ(cols, U32(2))
	JL(LabelRef(fn + "_tail"))
	for off := 0; off < 2*col; off += 64 {
		PREFETCHT0(w.Offset(intPrefetch + off))
	}
	column(0, w)
	column(1, w.Offset(col))
	ADDQ(U32(2*col), w.Base)
	x.advance(8)
	SUBQ(U32(2), cols)
	JMP(LabelRef(fn + "_pairs"))
	Label(fn + "_tail")
	TESTQ(cols, cols)
	JZ(LabelRef(fn + "_done"))
	column(0, w)
	Label(fn + "_done")
	storeSums256(acc, n)
}

func float512Kernels() {
	for _, ft := range floatTypes {
		for n := 1; n <= floatRows512; n++ {
			floatKernel512(ft, n)
		}
	}
	for n := 1; n <= floatRows512; n++ {
		f8Kernel512(n)
	}
}

func float256Kernels() {
	for _, ft := range floatTypes {
		for n := 1; n <= floatRows256; n++ {
			floatKernel256(ft, n)
		}
	}
	for n := 1; n <= floatRows256; n++ {
		f8Kernel256(n)
	}
}

// The F8_E4M3_B128 kernels: per 128-column block of the 16 rows, a vector of the rows'
// scales times 2⁸, then per column the 16 rows' e4m3 codes, each sign-extended to 16
// bits, shifted left by 7 and masked to s0eeeemmm0000000 — the float16 of value
// e4m3 · 2⁻⁸ (dtype.E4M3Half) — converted to float32 and multiplied by the scales:
// the weight E4M3(code) · scale, rounded once, as dtype.Dequantize gives it. From there
// on the F32 kernels' sums, even and odd columns apart.

// f8Mask is the float16 bits E4M3Half keeps of a code sign-extended and shifted left
// by 7, twice, for a 32-bit broadcast.
const f8Mask = 0xbf80bf80

// f8Kernel512 emits the AVX-512 F8_E4M3_B128 kernel for n activation rows.
func f8Kernel512(n int) {
	fn := fmt.Sprintf("floatF8x%dAVX512", n)
	TEXT(fn, NOSPLIT, floatSig)
	Doc(fmt.Sprintf("%s is the AVX-512 kernel of repacked F8_E4M3_B128 weights for %d activation rows.", fn, n))
	w := Mem{Base: Load(Param("w"), GP64())}
	cols := Load(Param("cols"), GP64())
	x := newRows(Load(Param("x"), GP64()), Load(Param("xstride"), GP64()), n)
	mask := YMM()
	m32 := GP32()
	MOVL(U32(f8Mask), m32)
	VPBROADCASTD(m32, mask)
	acc := [2][]VecVirtual{}
	for k := range 2 {
		for range n {
			a := ZMM()
			VPXORD(a, a, a)
			acc[k] = append(acc[k], a)
		}
	}
	scale := ZMM()
	pairs := GP64()
	Label(fn + "_block")
	TESTQ(cols, cols)
	JZ(LabelRef(fn + "_done"))
	VMOVUPS(w, scale)
	ADDQ(U32(64), w.Base)
	MOVQ(U32(64), pairs)
	Label(fn + "_pairs")
	PREFETCHT0(w.Offset(intPrefetch))
	for k := range 2 {
		h, v := YMM(), ZMM()
		VPMOVSXBW(w.Offset(16*k), h)
		VPSLLW(U8(7), h, h)
		VPANDD(mask, h, h)
		VCVTPH2PS(h, v)
		VMULPS(scale, v, v)
		for t := range n {
			VFMADD231PS_BCST(x.at(t, 4*k), v, acc[k][t])
		}
	}
	ADDQ(U32(32), w.Base)
	x.advance(8)
	DECQ(pairs)
	JNZ(LabelRef(fn + "_pairs"))
	SUBQ(U32(128), cols)
	JMP(LabelRef(fn + "_block"))
	Label(fn + "_done")
	out := Mem{Base: Load(Param("out"), GP64())}
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	for t := range n {
		VADDPS(acc[1][t], acc[0][t], acc[0][t])
		VMOVUPS(acc[0][t], out)
		if t+1 < n {
			ADDQ(ldo, out.Base)
		}
	}
	VZEROUPPER()
	RET()
}

// f8Kernel256 emits the AVX2 F8_E4M3_B128 kernel for n activation rows: the 16 rows
// as two halves of 8, the scales read from memory so that three rows' sums, the mask
// and a column fit the 16 registers.
func f8Kernel256(n int) {
	fn := fmt.Sprintf("floatF8x%dAVX2", n)
	TEXT(fn, NOSPLIT, floatSig)
	Doc(fmt.Sprintf("%s is the AVX2 kernel of repacked F8_E4M3_B128 weights for %d activation rows.", fn, n))
	w := Mem{Base: Load(Param("w"), GP64())}
	cols := Load(Param("cols"), GP64())
	x := newRows(Load(Param("x"), GP64()), Load(Param("xstride"), GP64()), n)
	mask := XMM()
	m32 := GP32()
	MOVL(U32(f8Mask), m32)
	MOVD(m32, mask)
	VPBROADCASTD(mask, mask)
	var acc [2][2][]VecVirtual // [column parity][half][row]
	for k := range 2 {
		for h := range 2 {
			for range n {
				a := YMM()
				VXORPS(a, a, a)
				acc[k][h] = append(acc[k][h], a)
			}
		}
	}
	scales := Mem{Base: GP64()}
	pairs := GP64()
	column := func(k int) {
		var half [2]VecVirtual
		for h := range 2 {
			c, v := XMM(), YMM()
			VPMOVSXBW(w.Offset(16*k+8*h), c)
			VPSLLW(U8(7), c, c)
			VPAND(mask, c, c)
			VCVTPH2PS(c, v)
			VMULPS(scales.Offset(32*h), v, v)
			half[h] = v
		}
		for t := range n {
			b := YMM()
			VBROADCASTSS(x.at(t, 4*k), b)
			VFMADD231PS(b, half[0], acc[k][0][t])
			VFMADD231PS(b, half[1], acc[k][1][t])
		}
	}
	Label(fn + "_block")
	TESTQ(cols, cols)
	JZ(LabelRef(fn + "_done"))
	MOVQ(w.Base, scales.Base)
	ADDQ(U32(64), w.Base)
	MOVQ(U32(64), pairs)
	Label(fn + "_pairs")
	PREFETCHT0(w.Offset(intPrefetch))
	column(0)
	column(1)
	ADDQ(U32(32), w.Base)
	x.advance(8)
	DECQ(pairs)
	JNZ(LabelRef(fn + "_pairs"))
	SUBQ(U32(128), cols)
	JMP(LabelRef(fn + "_block"))
	Label(fn + "_done")
	storeSums256(acc, n)
}

// storeSums256 ends an AVX2 float kernel: each row's two column-parity sums of its
// two 8-lane halves added and stored to out, rows ldo floats apart.
func storeSums256(acc [2][2][]VecVirtual, n int) {
	out := Mem{Base: Load(Param("out"), GP64())}
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	for t := range n {
		for h := range 2 {
			VADDPS(acc[1][h][t], acc[0][h][t], acc[0][h][t])
			VMOVUPS(acc[0][h][t], out.Offset(32*h))
		}
		if t+1 < n {
			ADDQ(ldo, out.Base)
		}
	}
	VZEROUPPER()
	RET()
}
