// Command _gen writes specula's assembly kernels with avo, one file per instruction
// set, and the AVX2 vector helpers of internal/vecmath:
//
//	cd internal/kernels/_gen && GOWORK=off go run . -out ../dot_amd64.s -stubs ../dot_amd64_stubs.go -pkg kernels
//	cd internal/kernels/_gen && GOWORK=off go run . -set avx512 -out ../int512_amd64.s -stubs ../int512_amd64_stubs.go -pkg kernels
//	cd internal/kernels/_gen && GOWORK=off go run . -set avx512bw -out ../int512bw_amd64.s -stubs ../int512bw_amd64_stubs.go -pkg kernels
//	cd internal/kernels/_gen && GOWORK=off go run . -set vecmath -out ../../vecmath/vec_amd64.s -stubs ../../vecmath/vec_amd64_stubs.go -pkg vecmath
//
// (the go:generate lines in internal/kernels/dispatch_amd64.go and
// internal/vecmath/dispatch_amd64.go run exactly those; GOWORK=off because this
// generator is a module of its own, outside the repository's go.work):
// the AVX2 kernels; the AVX-512 ones (integer products with VNNI, float products,
// activation quantizers, attention); the AVX-512 integer products without VNNI; the
// vector helpers of a softmax (max, shifted exponentials, scaling). The pure-Go twins
// in each package define the arithmetic, and every kernel here reproduces it bit for
// bit.
package main

import (
	"flag"
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

func main() {
	set := flag.String("set", "avx2", "the kernels to write: avx2 (the AVX2 kernels), avx512 (the AVX-512 kernels), avx512bw (the AVX-512 integer kernels without VNNI) or vecmath (internal/vecmath's AVX2 vector helpers)")
	flag.Parse()
	ConstraintExpr("amd64,!purego")
	switch *set {
	case "avx512bw":
		int512Kernels(false)
		Generate()
		return
	case "vecmath":
		ec := newExpConsts()
		expShiftedKernel(ec)
		maxKernel()
		scaleKernel()
		Generate()
		return
	case "avx512":
		quant512Kernels()
		int512Kernels(true)
		float512Kernels()
		attnKernels512()
		Generate()
		return
	}
	int256Kernels()
	quant256Kernels()
	float256Kernels()
	attnKernels256()
	for h := 1; h <= 4; h++ {
		weightedSumKernel(h)
	}
	siluMulKernel(newExpConsts())
	Generate()
}

// countdown emits a loop that runs body while n is not zero, decrementing n after each
// pass: the loop starts at label name and exits to label done, emitted after it.
func countdown(name, done string, n Register, body func()) {
	Label(name)
	TESTQ(n, n)
	JZ(LabelRef(done))
	body()
	DECQ(n)
	JMP(LabelRef(name))
	Label(done)
}

// weightedSumKernel (weightedSig), for H heads at once: for each head h < H and each
// of the hd (a multiple of 16) columns d, out[h·hd+d] += Σ_j w[h·ldw+j] · v[j·hd+d]
// over j = 0 … cnt−1, added in order of j with one FMA each (goWeightedSum's
// arithmetic), in registers. The H heads share each load of a value row and give the
// FMA units 2·H independent chains. Attention uses it to add a block of values to the heads that
// share a kv head.
func weightedSumKernel(H int) {
	name := fmt.Sprintf("weightedSum%dAVX2", H)
	TEXT(name, NOSPLIT, weightedSig)
	Doc(fmt.Sprintf("%s adds, for each of %d heads, the weighted sum of cnt value rows to its output, in order.", name, H))
	ldw := Load(Param("ldw"), GP64())
	SHLQ(U8(2), ldw)
	wr := make([]Register, H) // head h's weights
	wr[0] = Load(Param("w"), GP64())
	for h := 1; h < H; h++ {
		r := GP64()
		LEAQ(Mem{Base: wr[h-1], Index: ldw, Scale: 1}, r)
		wr[h] = r
	}
	vBase := Load(Param("v"), GP64())
	cnt := Load(Param("cnt"), GP64())
	outBase := Load(Param("out"), GP64())
	hd := Load(Param("hd"), GP64()) // columns, a multiple of 16; in bytes below
	SHLQ(U8(2), hd)

	acc := make([][2]VecVirtual, H)
	for h := range acc {
		acc[h] = [2]VecVirtual{YMM(), YMM()}
	}
	col := GP64() // byte offset of the 16-column slice
	XORQ(col, col)
	Label(name + "_col")
	CMPQ(col, hd)
	JAE(LabelRef(name + "_done"))
	o := GP64()
	LEAQ(Mem{Base: outBase, Index: col, Scale: 1}, o)
	for h := range H {
		VMOVUPS(Mem{Base: o}, acc[h][0])
		VMOVUPS(Mem{Base: o, Disp: 32}, acc[h][1])
		if h+1 < H {
			ADDQ(hd, o)
		}
	}
	j := GP64()
	XORQ(j, j)
	vp := GP64()
	LEAQ(Mem{Base: vBase, Index: col, Scale: 1}, vp)
	Label(name + "_pos")
	CMPQ(j, cnt)
	JAE(LabelRef(name + "_store"))
	v0, v1 := YMM(), YMM()
	VMOVUPS(Mem{Base: vp}, v0)
	VMOVUPS(Mem{Base: vp, Disp: 32}, v1)
	for h := range H {
		wb := YMM()
		VBROADCASTSS(Mem{Base: wr[h], Index: j, Scale: 4}, wb)
		VFMADD231PS(v0, wb, acc[h][0])
		VFMADD231PS(v1, wb, acc[h][1])
	}
	ADDQ(hd, vp)
	INCQ(j)
	JMP(LabelRef(name + "_pos"))
	Label(name + "_store")
	LEAQ(Mem{Base: outBase, Index: col, Scale: 1}, o)
	for h := range H {
		VMOVUPS(acc[h][0], Mem{Base: o})
		VMOVUPS(acc[h][1], Mem{Base: o, Disp: 32})
		if h+1 < H {
			ADDQ(hd, o)
		}
	}
	ADDQ(U32(64), col)
	JMP(LabelRef(name + "_col"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// expConsts are the constants of the vector ExpNeg (vecmath.ExpNeg), each in 8 lanes,
// in read-only data: a table local to the assembly file that emits it, so each output
// whose kernels use expNeg (the kernels' SiLU, vecmath's exponentials) emits its own.
type expConsts struct{ tab Mem }

const (
	cSign = iota
	cLow
	cLog2e
	cHalf
	cLn2Hi
	cLn2Lo
	cPoly // 6 coefficients
	cOne  = cPoly + 6
	cBias = cOne + 1
)

func newExpConsts() expConsts {
	vals := []uint32{
		0x80000000, // sign bit
		math.Float32bits(-87.33654),
		math.Float32bits(float32(1.44269504088896341)), // log2 e
		math.Float32bits(0.5),
		math.Float32bits(0.693359375),    // ln 2, high part
		math.Float32bits(-2.12194440e-4), // ln 2, low part
		math.Float32bits(1.9875691500e-4),
		math.Float32bits(1.3981999507e-3),
		math.Float32bits(8.3334519073e-3),
		math.Float32bits(4.1665795894e-2),
		math.Float32bits(1.6666665459e-1),
		math.Float32bits(5.0000001201e-1),
		math.Float32bits(1),
		127,
	}
	tab := GLOBL("expconst", RODATA|NOPTR)
	for i, v := range vals {
		for l := range 8 {
			DATA(32*i+4*l, U32(v))
		}
	}
	return expConsts{tab}
}

func (c expConsts) at(i int) Mem { return c.tab.Offset(32 * i) }

const geOQ = 0x1d // VCMPPS predicate: greater or equal, ordered, quiet (false for NaN)

// expNeg sets e = vecmath.ExpNeg(x) for x ≤ 0 in 8 lanes, operation for operation as
// the Go function (no fused multiply-adds), so that the results are the same to the
// bit. It uses t as scratch.
func expNeg(c expConsts, x, e VecVirtual) {
	valid, t, ni, fn, r := YMM(), YMM(), YMM(), YMM(), YMM()
	// valid = x ≥ −87.33654 (ExpNeg is 0 below, and for NaN).
	VCMPPS(U8(geOQ), c.at(cLow), x, valid)
	// n = int32(x·log2e − 0.5), truncated; fn = float32(n).
	VMULPS(c.at(cLog2e), x, t)
	VSUBPS(c.at(cHalf), t, t)
	VCVTTPS2DQ(t, ni)
	VCVTDQ2PS(ni, fn)
	// r = (x − fn·c1) − fn·c2
	VMULPS(c.at(cLn2Hi), fn, t)
	VSUBPS(t, x, r)
	VMULPS(c.at(cLn2Lo), fn, t)
	VSUBPS(t, r, r)
	// y = ((((p0·r + p1)·r + p2)·r + p3)·r + p4)·r + p5
	y := e
	VMOVUPS(c.at(cPoly), y)
	for i := 1; i < 6; i++ {
		VMULPS(r, y, y)
		VADDPS(c.at(cPoly+i), y, y)
	}
	// y = ((y·r)·r + r) + 1
	VMULPS(r, y, y)
	VMULPS(r, y, y)
	VADDPS(r, y, y)
	VADDPS(c.at(cOne), y, y)
	// e = y · 2^n, or 0 where not valid.
	VPADDD(c.at(cBias), ni, ni)
	VPSLLD(U8(23), ni, ni)
	VMULPS(ni, y, e)
	VANDPS(valid, e, e)
}

// siluMulKernel: func(dst, gate, up []float32), dst = silu(gate)·up over the first
// len(gate)/8·8 values: SiLUMul's Go arithmetic, 8 lanes at a time and to the bit:
// e = ExpNeg(−|g|), s = (g ≥ 0 ? 1 : e) / (1 + e), dst = (g·s)·up.
func siluMulKernel(c expConsts) {
	TEXT("siluMulAVX2", NOSPLIT, "func(dst, gate, up []float32)")
	Doc("siluMulAVX2 sets dst = silu(gate)·up over the first len(gate) rounded down to 8 values, as SiLUMul does.")
	dst := Mem{Base: Load(Param("dst").Base(), GP64())}
	gate := Mem{Base: Load(Param("gate").Base(), GP64())}
	up := Mem{Base: Load(Param("up").Base(), GP64())}
	n := Load(Param("gate").Len(), GP64())
	SHRQ(U8(3), n)
	zero := YMM()
	VXORPS(zero, zero, zero)
	g, x, e, m, s := YMM(), YMM(), YMM(), YMM(), YMM()
	countdown("silu_loop", "silu_done", n, func() {
		VMOVUPS(gate, g)
		VORPS(c.at(cSign), g, x) // −|g|
		expNeg(c, x, e)
		// s = (g ≥ 0 ? 1 : e) / (1 + e)
		VCMPPS(U8(geOQ), zero, g, m)
		VBLENDVPS(m, c.at(cOne), e, s)
		VADDPS(c.at(cOne), e, e)
		VDIVPS(e, s, s)
		// dst = (g·s)·up
		VMULPS(s, g, g)
		VMULPS(up, g, g)
		VMOVUPS(g, dst)
		ADDQ(U32(32), gate.Base)
		ADDQ(U32(32), up.Base)
		ADDQ(U32(32), dst.Base)
	})
	VZEROUPPER()
	RET()
}

// expShiftedKernel: func(v []float32, mx, invT float32), v = ExpNeg((v − mx)·invT)
// over the first len(v)/8·8 values, to the bit as vecmath.ExpShifted's loop computes
// them (ExpShifted adds them up in order itself).
func expShiftedKernel(c expConsts) {
	TEXT("expShiftedAVX2", NOSPLIT, "func(v []float32, mx, invT float32)")
	Doc("expShiftedAVX2 replaces each x of the first len(v) rounded down to 8 values by ExpNeg((x−mx)·invT).")
	v := Mem{Base: Load(Param("v").Base(), GP64())}
	n := Load(Param("v").Len(), GP64())
	SHRQ(U8(3), n)
	mxs, its := Load(Param("mx"), XMM()), Load(Param("invT"), XMM())
	mx, it := YMM(), YMM()
	VBROADCASTSS(mxs, mx)
	VBROADCASTSS(its, it)
	x, e := YMM(), YMM()
	countdown("exps_loop", "exps_done", n, func() {
		VMOVUPS(v, x)
		VSUBPS(mx, x, x)
		VMULPS(it, x, x)
		expNeg(c, x, e)
		VMOVUPS(e, v)
		ADDQ(U32(32), v.Base)
	})
	VZEROUPPER()
	RET()
}

// maxKernel: func(v []float32) float32, len(v) a positive multiple of 8: the largest
// value, or NaN when v holds a NaN (as Go's max would give).
func maxKernel() {
	TEXT("maxAVX2", NOSPLIT, "func(v []float32) float32")
	Doc("maxAVX2 returns the largest of the first len(v) rounded down to 8 values, NaN if one is NaN.")
	v := Mem{Base: Load(Param("v").Base(), GP64())}
	n := Load(Param("v").Len(), GP64())
	SHRQ(U8(3), n)
	acc, nan := YMM(), YMM()
	VMOVUPS(v, acc)
	VCMPPS(U8(3), acc, acc, nan) // unordered: NaN lanes
	ADDQ(U32(32), v.Base)
	DECQ(n)
	x, t := YMM(), YMM()
	countdown("max_loop", "max_reduce", n, func() {
		VMOVUPS(v, x)
		VCMPPS(U8(3), x, x, t)
		VORPS(t, nan, nan)
		VMAXPS(x, acc, acc)
		ADDQ(U32(32), v.Base)
	})
	hi := XMM()
	VEXTRACTF128(U8(1), acc, hi)
	lo := acc.AsX()
	VMAXPS(hi, lo, lo)
	VMOVHLPS(lo, hi, hi)
	VMAXPS(hi, lo, lo)
	VMOVSHDUP(lo, hi)
	VMAXSS(hi, lo, lo)
	m := GP32()
	VMOVMSKPS(nan, m)
	TESTL(m, m)
	JZ(LabelRef("max_done"))
	r := GP32() // a NaN was seen: return the quiet NaN
	MOVL(U32(0x7fc00000), r)
	VMOVD(r, lo)
	Label("max_done")
	Store(lo, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// scaleKernel: func(v []float32, s float32): v[i] *= s for the first len(v) rounded
// down to 8 values, one rounding each, as the Go loop does.
func scaleKernel() {
	TEXT("scaleAVX2", NOSPLIT, "func(v []float32, s float32)")
	Doc("scaleAVX2 multiplies the first len(v) rounded down to 8 values by s.")
	v := Mem{Base: Load(Param("v").Base(), GP64())}
	n := Load(Param("v").Len(), GP64())
	SHRQ(U8(3), n)
	ss := Load(Param("s"), XMM())
	sv := YMM()
	VBROADCASTSS(ss, sv)
	x := YMM()
	countdown("scale_loop", "scale_done", n, func() {
		VMULPS(v, sv, x)
		VMOVUPS(x, v)
		ADDQ(U32(32), v.Base)
	})
	VZEROUPPER()
	RET()
}
