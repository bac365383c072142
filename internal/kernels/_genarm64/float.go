package main

import "fmt"

// The float kernels: repacked F32, F16 and BF16 weights (a column of 16 rows at a
// time) against float32 activations, as floatdot.go in the package defines them. Per
// column the 16 rows' weights as four vectors of float32, and per activation row a
// fused multiply-add of each by the row's value of that column (a lane of a vector of
// four columns' values, FMLA by element); the even and the odd columns go to two sums
// per lane, added at the end. The score kernels (attn.go) are the same product with
// the keys for weights and the query heads for activation rows.

const floatSig = "(w *byte, cols int, x *float32, xstride int, out *float32, ldo int)"

// floatRows is how many activation rows a float kernel takes at most: eight
// accumulators per row (two sums of four vectors) make 24 registers for three rows,
// beside four of weights and one of activations per row.
const floatRows = 3

// floatType is a float weight type for the generator: its name and bytes per value.
type floatType struct {
	name string
	size int
}

var floatTypes = []floatType{{"F32", 4}, {"F16", 2}, {"BF16", 2}}

// The registers of a group product: V0–V3 one column of 16 weights as float32, V4+t
// four activation values of row t, acc(p, t, v) the sums; R0 the weights, R1 the
// columns left, rowPtr[t] row t's activations.
var rowPtr = [floatRows]string{"R2", "R4", "R5"}

// acc is the accumulator of column parity p, activation row t and lanes 4v…4v+3. A
// row's even sums are four consecutive registers, to be stored by one VST1.
func acc(p, t, v int) V { return V(8 + 8*t + 4*p + v) }

// xv is the register of activation row t's values.
func xv(t int) V { return V(4 + t) }

// load emits the load of one column of 16 weights at R0, advancing R0, as float32 in
// V0–V3: F16 widened exactly by FCVTL (subnormals, infinities and NaNs included),
// BF16 by a shift into the high half of each 32-bit lane.
func (ft floatType) load(g *fn) {
	if ft.name == "F32" {
		g.op("VLD1.P 64(R0), [V0.S4, V1.S4, V2.S4, V3.S4]")
		return
	}
	g.op("VLD1.P 32(R0), [V2.H8, V3.H8]")
	// V2 is read twice before it is written, V3 last, in place.
	for v, src := range []V{2, 2, 3, 3} {
		if ft.name == "F16" {
			g.i(fcvtl(V(v), src, v%2 == 1))
		} else {
			g.i(shll(V(v), src, v%2 == 1))
		}
	}
}

// groupProduct emits the product of a 16-row group of cols (R1) columns at R0 with n
// activation rows at rowPtr, leaving each row's 16 sums, even plus odd columns, in
// acc(0, t, 0…3). Four columns a step, one 16-byte load of activations per row, then
// the last one to three columns one at a time (even, odd, even: the steps leave the
// parity as it began); every sum is a chain of FMLAs in column order, as the twin's.
// Its labels are quad, tail and sum.
func groupProduct(g *fn, ft floatType, n int) {
	for t := range n {
		for p := range 2 {
			for v := range 4 {
				g.i(eor(acc(p, t, v), acc(p, t, v), acc(p, t, v)))
			}
		}
	}
	g.label("quad")
	g.op("CMP $4, R1")
	g.op("BLT tail")
	for t := range n {
		g.op("VLD1.P 16(%s), [V%d.S4]", rowPtr[t], xv(t))
	}
	for k := range 4 {
		columnFMA(g, ft, n, k%2, k)
	}
	g.op("SUB $4, R1")
	g.op("B quad")
	g.label("tail")
	for k := range 3 {
		g.op("CBZ R1, sum")
		for t := range n {
			g.op("FMOVS %d(%s), F%d", 4*k, rowPtr[t], xv(t))
		}
		columnFMA(g, ft, n, k%2, 0)
		g.op("SUB $1, R1")
	}
	g.label("sum")
	for t := range n {
		for v := range 4 {
			g.i(fadd(acc(0, t, v), acc(0, t, v), acc(1, t, v)))
		}
	}
}

// columnFMA emits the load of one column's weights and their multiply-adds into the
// sums of parity p, by lane lane of each row's activation register.
func columnFMA(g *fn, ft floatType, n, p, lane int) {
	ft.load(g)
	for t := range n {
		for v := range 4 {
			g.i(fmlaElem(acc(p, t, v), V(v), xv(t), lane))
		}
	}
}

// rowPointers emits row t's activation pointer for t = 1…n−1: row 0's (R2) plus t
// strides (R3 bytes).
func rowPointers(g *fn, n int) {
	for t := 1; t < n; t++ {
		g.op("ADD R3, %s, %s", rowPtr[t-1], rowPtr[t])
	}
}

// floatKernel emits the kernel of type ft for n activation rows: the group product,
// then each row's 16 sums stored at out + t·ldo.
func floatKernel(f *file, ft floatType, n int) {
	name := fmt.Sprintf("float%sx%dNEON", ft.name, n)
	g := f.newFn(name, floatSig, 48, fmt.Sprintf("%s is the NEON kernel of repacked %s weights for %d activation rows.", name, ft.name, n))
	g.per, g.wbytes = 4, 4*16*ft.size
	g.op("MOVD w+0(FP), R0")
	g.op("MOVD cols+8(FP), R1")
	g.op("MOVD x+16(FP), R2")
	g.op("MOVD xstride+24(FP), R3")
	rowPointers(g, n)
	groupProduct(g, ft, n)
	g.op("MOVD out+32(FP), R6")
	g.op("MOVD ldo+40(FP), R7")
	g.op("LSL $2, R7")
	for t := range n {
		g.op("VST1 [V%d.S4, V%d.S4, V%d.S4, V%d.S4], (R6)", acc(0, t, 0), acc(0, t, 1), acc(0, t, 2), acc(0, t, 3))
		if t+1 < n {
			g.op("ADD R7, R6")
		}
	}
}

// floatKernels writes the float kernels: each type for 1…floatRows activation rows.
func floatKernels(f *file) {
	for _, ft := range floatTypes {
		for n := 1; n <= floatRows; n++ {
			floatKernel(f, ft, n)
		}
	}
}
