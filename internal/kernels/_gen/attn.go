package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Attention's kernels (attn.go in the package): scores of up to 8 query heads against
// a block of 16 keys stored dimension-major, one key per vector lane, each score two
// chains of fused multiply-adds over the even and the odd dimensions; and the
// weighted sum of value rows into up to 8 heads' outputs, one fused multiply-add per
// term in order of the rows.

const scoreSig = "func(kT *float32, hd int, q *float32, out *float32, ldo int, cnt int)"

// scoreKernel512 emits the AVX-512 score kernel for g heads.
func scoreKernel512(g int) {
	fn := fmt.Sprintf("score%dAVX512", g)
	TEXT(fn, NOSPLIT, scoreSig)
	Doc(fmt.Sprintf("%s scores %d query heads against a block of 16 keys stored dimension-major.", fn, g))
	k := Mem{Base: Load(Param("kT"), GP64())}
	hd := Load(Param("hd"), GP64())
	stride := GP64()
	MOVQ(hd, stride)
	SHLQ(U8(2), stride)
	q := newRows(Load(Param("q"), GP64()), stride, g)
	var acc [2][]VecVirtual
	for p := range 2 {
		for range g {
			a := ZMM()
			VPXORD(a, a, a)
			acc[p] = append(acc[p], a)
		}
	}
	SHRQ(U8(1), hd) // pairs of dimensions
	countdown(fn+"_loop", fn+"_done", hd, func() {
		for p := range 2 {
			kv := ZMM()
			VMOVUPS(k.Offset(64*p), kv)
			for h := range g {
				VFMADD231PS_BCST(q.at(h, 4*p), kv, acc[p][h])
			}
		}
		ADDQ(U32(128), k.Base)
		q.advance(8)
	})
	mask := K()
	cnt := Load(Param("cnt"), GP64())
	m := GP64()
	MOVQ(U32(1), m)
	SHLXQ(cnt, m, m)
	DECQ(m)
	KMOVW(m.As32(), mask)
	out := Mem{Base: Load(Param("out"), GP64())}
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	for h := range g {
		VADDPS(acc[1][h], acc[0][h], acc[0][h])
		VMOVUPS(acc[0][h], mask, out)
		if h+1 < g {
			ADDQ(ldo, out.Base)
		}
	}
	VZEROUPPER()
	RET()
}

// scoreRows256 is how many heads an AVX2 score kernel takes: two chains of two halves
// per head in 16 registers.
const scoreRows256 = 3

// scoreKernel256 emits the AVX2 score kernel for g heads: the 16 keys as two halves of
// 8 lanes, the same chains per lane.
func scoreKernel256(g int, idx Mem) {
	fn := fmt.Sprintf("score%dAVX2", g)
	TEXT(fn, NOSPLIT, scoreSig)
	Doc(fmt.Sprintf("%s scores %d query heads against a block of 16 keys stored dimension-major.", fn, g))
	k := Mem{Base: Load(Param("kT"), GP64())}
	hd := Load(Param("hd"), GP64())
	stride := GP64()
	MOVQ(hd, stride)
	SHLQ(U8(2), stride)
	q := newRows(Load(Param("q"), GP64()), stride, g)
	var acc [2][2][]VecVirtual // [parity][half][head]
	for p := range 2 {
		for hh := range 2 {
			for range g {
				a := YMM()
				VXORPS(a, a, a)
				acc[p][hh] = append(acc[p][hh], a)
			}
		}
	}
	SHRQ(U8(1), hd)
	countdown(fn+"_loop", fn+"_done", hd, func() {
		for p := range 2 {
			lo, hi := YMM(), YMM()
			VMOVUPS(k.Offset(64*p), lo)
			VMOVUPS(k.Offset(64*p+32), hi)
			for h := range g {
				b := YMM()
				VBROADCASTSS(q.at(h, 4*p), b)
				VFMADD231PS(b, lo, acc[p][0][h])
				VFMADD231PS(b, hi, acc[p][1][h])
			}
		}
		ADDQ(U32(128), k.Base)
		q.advance(8)
	})
	// Lanes below cnt: the lane index (0…15) less than cnt.
	cnt := Load(Param("cnt"), GP64())
	cx := XMM()
	VMOVQ(cnt, cx)
	cv := YMM()
	VPBROADCASTD(cx, cv)
	masks := [2]VecVirtual{YMM(), YMM()}
	for hh := range 2 {
		VPCMPGTD(idx.Offset(32*hh), cv, masks[hh])
	}
	out := Mem{Base: Load(Param("out"), GP64())}
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	for h := range g {
		for hh := range 2 {
			VADDPS(acc[1][hh][h], acc[0][hh][h], acc[0][hh][h])
			VMASKMOVPS(acc[0][hh][h], masks[hh], out.Offset(32*hh))
		}
		if h+1 < g {
			ADDQ(ldo, out.Base)
		}
	}
	VZEROUPPER()
	RET()
}

const weightedSig = "func(w *float32, ldw int, v *float32, cnt int, out *float32, hd int)"

// weightedSumKernel512 emits the AVX-512 weighted sum for H heads: 32 columns of every
// head at a time (hd a multiple of 32), the heads' weights of a value row broadcast.
func weightedSumKernel512(H int) {
	fn := fmt.Sprintf("weightedSum%dAVX512", H)
	TEXT(fn, NOSPLIT, weightedSig)
	Doc(fmt.Sprintf("%s adds, for each of %d heads, the weighted sum of cnt value rows to its output, in order.", fn, H))
	ldw := Load(Param("ldw"), GP64())
	SHLQ(U8(2), ldw)
	w := newRows(Load(Param("w"), GP64()), ldw, H)
	vBase := Load(Param("v"), GP64())
	cnt := Load(Param("cnt"), GP64())
	outBase := Load(Param("out"), GP64())
	hd := Load(Param("hd"), GP64())
	SHLQ(U8(2), hd) // bytes
	col := GP64()
	XORQ(col, col)
	acc := make([][2]VecVirtual, H)
	for h := range acc {
		acc[h] = [2]VecVirtual{ZMM(), ZMM()}
	}
	Label(fn + "_col")
	CMPQ(col, hd)
	JAE(LabelRef(fn + "_done"))
	o := GP64()
	LEAQ(Mem{Base: outBase, Index: col, Scale: 1}, o)
	for h := range H {
		VMOVUPS(Mem{Base: o}, acc[h][0])
		VMOVUPS(Mem{Base: o, Disp: 64}, acc[h][1])
		if h+1 < H {
			ADDQ(hd, o)
		}
	}
	j := GP64()
	XORQ(j, j)
	vp := GP64()
	LEAQ(Mem{Base: vBase, Index: col, Scale: 1}, vp)
	Label(fn + "_pos")
	CMPQ(j, cnt)
	JAE(LabelRef(fn + "_store"))
	v0, v1 := ZMM(), ZMM()
	VMOVUPS(Mem{Base: vp}, v0)
	VMOVUPS(Mem{Base: vp, Disp: 64}, v1)
	for h := range H {
		VFMADD231PS_BCST(w.at(h, 0), v0, acc[h][0])
		VFMADD231PS_BCST(w.at(h, 0), v1, acc[h][1])
	}
	ADDQ(hd, vp)
	w.advance(4)
	INCQ(j)
	JMP(LabelRef(fn + "_pos"))
	Label(fn + "_store")
	// Back to the heads' first weights for the next columns.
	back := GP64()
	MOVQ(cnt, back)
	SHLQ(U8(2), back)
	SUBQ(back, w.base)
	if w.base4 != nil {
		SUBQ(back, w.base4)
	}
	LEAQ(Mem{Base: outBase, Index: col, Scale: 1}, o)
	for h := range H {
		VMOVUPS(acc[h][0], Mem{Base: o})
		VMOVUPS(acc[h][1], Mem{Base: o, Disp: 64})
		if h+1 < H {
			ADDQ(hd, o)
		}
	}
	ADDQ(U32(128), col)
	JMP(LabelRef(fn + "_col"))
	Label(fn + "_done")
	VZEROUPPER()
	RET()
}

func attnKernels512() {
	streamKernel("streamAVX512", ZMM, 64)
	for g := 1; g <= 8; g++ {
		scoreKernel512(g)
	}
	for h := 1; h <= 8; h++ {
		weightedSumKernel512(h)
	}
}

func attnKernels256() {
	streamKernel("streamAVX2", YMM, 32)
	idx := GLOBL("scoreLanes", RODATA|NOPTR)
	for i := range 16 {
		DATA(4*i, U32(uint32(i)))
	}
	for g := 1; g <= scoreRows256; g++ {
		scoreKernel256(g, idx)
	}
}

// streamKernel emits a streaming read of n bytes (a multiple of 256) at p, the way the
// product kernels read their weights — vector loads, each line asked for intPrefetch
// bytes ahead — returning a sum of what it read: it measures the memory bandwidth the
// kernels can reach.
func streamKernel(name string, vec func() VecVirtual, width int) {
	TEXT(name, NOSPLIT, "func(p *byte, n int) uint64")
	Doc(name + " reads n bytes (a multiple of 256) at p as the product kernels read weights, and returns a checksum of them.")
	p := Mem{Base: Load(Param("p"), GP64())}
	n := Load(Param("n"), GP64())
	SHRQ(U8(8), n)
	acc := make([]VecVirtual, 4)
	for i := range acc {
		acc[i] = vec()
		if width == 64 {
			VPXORQ(acc[i], acc[i], acc[i])
		} else {
			VPXOR(acc[i], acc[i], acc[i])
		}
	}
	countdown(name+"_loop", name+"_done", n, func() {
		for off := 0; off < 256; off += 64 {
			PREFETCHT0(p.Offset(intPrefetch + off))
		}
		for i := 0; i < 256/width; i++ {
			VPADDQ(p.Offset(width*i), acc[i%4], acc[i%4])
		}
		ADDQ(U32(256), p.Base)
	})
	for i := 1; i < 4; i++ {
		VPADDQ(acc[i], acc[0], acc[0])
	}
	// The sum of the lanes: the sum of the 8-byte words read, as goStreamRead sums them.
	y := acc[0]
	if width == 64 {
		y = YMM()
		VEXTRACTI64X4(U8(1), acc[0], y)
		VPADDQ(y, acc[0].AsY(), y)
	}
	x := XMM()
	VEXTRACTI128(U8(1), y, x)
	VPADDQ(x, y.AsX(), x)
	t := XMM()
	VPSHUFD(U8(0x4e), x, t)
	VPADDQ(t, x, x)
	r := GP64()
	VMOVQ(x, r)
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}
