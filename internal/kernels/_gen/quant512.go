package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The activation quantizers, AVX-512: quantizeBlock of act8.go for a run of blocks of
// 32, 128 or 256 values, to the bit. Per block the largest magnitude, d = max/127 and
// 127/max (0 for a block of zeros), codes rounded to nearest even and clamped to
// ±127, packed to bytes, then the exact integer sums of the side data.

type quantConsts struct {
	abs, plus127, minus127 Mem
	f127, fmax             Mem
}

func newQuantConsts() quantConsts {
	word := func(name string, v uint32) Mem {
		m := GLOBL(name, RODATA|NOPTR)
		DATA(0, U32(v))
		return m
	}
	return quantConsts{
		abs:      word("q512Abs", 0x7fffffff),
		plus127:  word("q512Plus127", 127),
		minus127: word("q512Minus127", 0xffffff81),
		f127:     word("q512F127", 0x42fe0000), // 127.0
		fmax:     word("q512FMax", 0x7f7fffff), // the largest float32
	}
}

// hmaxF reduces a ZMM of non-negative floats to its largest, in lane 0 of an XMM.
func hmaxF(v VecVirtual) VecVirtual {
	y := YMM()
	VEXTRACTF64X4(U8(1), v, y)
	VMAXPS(y, v.AsY(), y)
	x := XMM()
	VEXTRACTF128(U8(1), y, x)
	VMAXPS(x, y.AsX(), x)
	t := XMM()
	VPSHUFD(U8(0x4e), x, t)
	VMAXPS(t, x, x)
	VPSHUFD(U8(0xb1), x, t)
	VMAXPS(t, x, x)
	return x
}

// hsumD reduces a ZMM of int32 to their sum, in a general register.
func hsumD(v VecVirtual) GPVirtual {
	y := YMM()
	VEXTRACTI64X4(U8(1), v, y)
	VPADDD(y, v.AsY(), y)
	x := XMM()
	VEXTRACTI128(U8(1), y, x)
	VPADDD(x, y.AsX(), x)
	t := XMM()
	VPSHUFD(U8(0x4e), x, t)
	VPADDD(t, x, x)
	VPSHUFD(U8(0xb1), x, t)
	VPADDD(t, x, x)
	r := GP32()
	VMOVD(x, r)
	return r
}

// quantKernel emits the quantizer of blocks of size values:
// func(x *float32, blocks int, codes *int8, side *uint32).
func quantKernel(size int, c quantConsts) {
	fn := fmt.Sprintf("quantize%dAVX512", size)
	TEXT(fn, NOSPLIT, "func(x *float32, blocks int, codes *int8, side *uint32)")
	Doc(fmt.Sprintf("%s quantises blocks of %d activations to 8-bit codes and their side data, as quantizeBlock does.", fn, size))
	x := Mem{Base: Load(Param("x"), GP64())}
	blocks := Load(Param("blocks"), GP64())
	codes := Mem{Base: Load(Param("codes"), GP64())}
	side := Mem{Base: Load(Param("side"), GP64())}
	vecs := size / 16
	words := 8
	if size == 256 {
		words = 32
	}
	countdown(fn+"_loop", fn+"_done", blocks, func() {
		// The largest magnitude.
		m := ZMM()
		VMOVUPS(x, m)
		VANDPS_BCST(c.abs, m, m)
		for i := 1; i < vecs; i++ {
			a := ZMM()
			VMOVUPS(x.Offset(64*i), a)
			VANDPS_BCST(c.abs, a, a)
			VMAXPS(a, m, m)
		}
		amax := hmaxF(m)
		// d = max/127 and id = 127/max, both 0 when max is not positive.
		d, id := XMM(), XMM()
		zero := XMM()
		VXORPS(zero, zero, zero)
		VXORPS(d, d, d)
		VXORPS(id, id, id)
		VUCOMISS(zero, amax)
		JBE(LabelRef(fn + "_zero"))
		f127 := XMM()
		VMOVSS(c.f127, f127)
		VDIVSS(f127, amax, d)
		VDIVSS(amax, f127, id)
		VMINSS(c.fmax, id, id) // finite, as quantizeBlock caps it
		Label(fn + "_zero")
		idv := ZMM()
		VBROADCASTSS(id, idv)
		VMOVSS(d, side)
		used := 6
		if size == 256 {
			used = 29
		}
		for w := used; w < words; w++ {
			MOVL(U32(0), side.Offset(4*w))
		}
		// Codes 16 at a time, and the sums of the side data (act8.go) as they come: for
		// 32- and 128-value blocks the offsets and d·Σ of the block's sum, for
		// 256-value blocks Σ per 32 (16 bits each, two to a word), −32·Σ per 16 and −Σ
		// per 16 (16 bits each).
		var pair, tot GPVirtual
		for i := range vecs {
			q := ZMM()
			VMULPS(x.Offset(64*i), idv, q)
			VCVTPS2DQ(q, q)
			VPMINSD_BCST(c.plus127, q, q)
			VPMAXSD_BCST(c.minus127, q, q)
			VPMOVSDB(q, codes.Offset(16*i))
			s := hsumD(q)
			if size != 256 {
				if i == 0 {
					tot = GP32()
					MOVL(s, tot)
				} else {
					ADDL(s, tot)
				}
				continue
			}
			if i%2 == 0 {
				pair = GP32()
				MOVL(s, pair)
			} else {
				ADDL(s, pair)
			}
			NEGL(s)
			MOVW(s.As16(), side.Offset(negAt(i)))
			SHLL(U8(5), s)
			MOVL(s, side.Offset(4*(5+i)))
			if i%2 == 1 {
				MOVW(pair.As16(), side.Offset(sumAt(i/2)))
			}
		}
		if size != 256 {
			offsets(side, tot, d)
		}
		ADDQ(U32(4*size), x.Base)
		ADDQ(U32(size), codes.Base)
		ADDQ(U32(4*words), side.Base)
	})
	VZEROUPPER()
	RET()
}

// offsets writes the side data of a 32-value block from its code sum s and scale d:
// −8·s, −16·s, −128·s, d·s, −s.
func offsets(side Mem, s Register, d VecVirtual) {
	for i, sh := range []uint8{3, 4, 7} {
		t := GP32()
		MOVL(s, t)
		SHLL(U8(sh), t)
		NEGL(t)
		MOVL(t, side.Offset(4*(1+i)))
	}
	dsum(side.Offset(16), s, d)
	t := GP32()
	MOVL(s, t)
	NEGL(t)
	MOVL(t, side.Offset(20))
}

// dsum stores float32(d·float32(s)). (The conversion takes its upper lanes from d:
// taking them from f itself would read f, and make it live across the whole loop for
// the register allocator.)
func dsum(m Mem, s Register, d VecVirtual) {
	f := XMM()
	VCVTSI2SSL(s, d, f)
	VMULSS(d, f, f)
	VMOVSS(f, m)
}

// sumAt is the byte offset in a 256-value block's side data of the 16-bit Σ of
// sub-block j: the low half of word 1 + j/2 for even j, the high half for odd.
func sumAt(j int) int { return 4*(1+j/2) + 2*(j%2) }

// negAt is the byte offset of the 16-bit −Σ of group g of 16: the low half of word
// 21 + g/2 for even g, the high half for odd.
func negAt(g int) int { return 4*(21+g/2) + 2*(g%2) }

// quant512Kernels emits the AVX-512 quantizers.
func quant512Kernels() {
	c := newQuantConsts()
	quantKernel(32, c)
	quantKernel(128, c)
	quantKernel(256, c)
}

// The AVX2 quantizers: the same, 8 values a vector, packed to bytes 32 at a time.

type quant256Consts struct {
	abs, plus127, minus127, perm Mem
	f127, fmax                   Mem
}

func newQuant256Consts() quant256Consts {
	vec := func(name string, word func(i int) uint32) Mem {
		m := GLOBL(name, RODATA|NOPTR)
		for i := 0; i < 8; i++ {
			DATA(4*i, U32(word(i)))
		}
		return m
	}
	same := func(v uint32) func(int) uint32 { return func(int) uint32 { return v } }
	word := GLOBL("q256F127", RODATA|NOPTR)
	DATA(0, U32(0x42fe0000))
	fmax := GLOBL("q256FMax", RODATA|NOPTR)
	DATA(0, U32(0x7f7fffff))
	return quant256Consts{
		abs:      vec("q256Abs", same(0x7fffffff)),
		plus127:  vec("q256Plus127", same(127)),
		minus127: vec("q256Minus127", same(0xffffff81)),
		// After VPACKSSDW and VPACKSSWB of four vectors a, b, c, d, the dwords hold a0-3,
		// b0-3, c0-3, d0-3, a4-7, b4-7, c4-7, d4-7: this puts them in order.
		perm: vec("q256Perm", func(i int) uint32 { return [8]uint32{0, 4, 1, 5, 2, 6, 3, 7}[i] }),
		f127: word,
		fmax: fmax,
	}
}

// hmax256 reduces a YMM of non-negative floats to its largest, in lane 0 of an XMM.
func hmax256(v VecVirtual) VecVirtual {
	x := XMM()
	VEXTRACTF128(U8(1), v, x)
	VMAXPS(x, v.AsX(), x)
	t := XMM()
	VPSHUFD(U8(0x4e), x, t)
	VMAXPS(t, x, x)
	VPSHUFD(U8(0xb1), x, t)
	VMAXPS(t, x, x)
	return x
}

// hsum256 reduces a YMM of int32 to their sum, in a general register.
func hsum256(v VecVirtual) GPVirtual {
	x := XMM()
	VEXTRACTI128(U8(1), v, x)
	VPADDD(x, v.AsX(), x)
	t := XMM()
	VPSHUFD(U8(0x4e), x, t)
	VPADDD(t, x, x)
	VPSHUFD(U8(0xb1), x, t)
	VPADDD(t, x, x)
	r := GP32()
	VMOVD(x, r)
	return r
}

func quant256Kernel(size int, c quant256Consts) {
	fn := fmt.Sprintf("quantize%dAVX2", size)
	TEXT(fn, NOSPLIT, "func(x *float32, blocks int, codes *int8, side *uint32)")
	Doc(fmt.Sprintf("%s quantises blocks of %d activations to 8-bit codes and their side data, as quantizeBlock does.", fn, size))
	x := Mem{Base: Load(Param("x"), GP64())}
	blocks := Load(Param("blocks"), GP64())
	codes := Mem{Base: Load(Param("codes"), GP64())}
	side := Mem{Base: Load(Param("side"), GP64())}
	vecs := size / 8
	words, used := 8, 6
	if size == 256 {
		words, used = 32, 29
	}
	countdown(fn+"_loop", fn+"_done", blocks, func() {
		m := YMM()
		VMOVUPS(x, m)
		VANDPS(c.abs, m, m)
		for i := 1; i < vecs; i++ {
			a := YMM()
			VMOVUPS(x.Offset(32*i), a)
			VANDPS(c.abs, a, a)
			VMAXPS(a, m, m)
		}
		amax := hmax256(m)
		d, id, zero := XMM(), XMM(), XMM()
		VXORPS(zero, zero, zero)
		VXORPS(d, d, d)
		VXORPS(id, id, id)
		VUCOMISS(zero, amax)
		JBE(LabelRef(fn + "_zero"))
		f127 := XMM()
		VMOVSS(c.f127, f127)
		VDIVSS(f127, amax, d)
		VDIVSS(amax, f127, id)
		VMINSS(c.fmax, id, id) // finite, as quantizeBlock caps it
		Label(fn + "_zero")
		idv := YMM()
		VBROADCASTSS(id, idv)
		VMOVSS(d, side)
		for w := used; w < words; w++ {
			MOVL(U32(0), side.Offset(4*w))
		}
		// 32 values at a time: four vectors of codes, their sums, packed to bytes.
		var tot GPVirtual
		for q := 0; q < vecs; q += 4 {
			v := make([]VecVirtual, 4)
			for i := range v {
				v[i] = YMM()
				VMULPS(x.Offset(32*(q+i)), idv, v[i])
				VCVTPS2DQ(v[i], v[i])
				VPMINSD(c.plus127, v[i], v[i])
				VPMAXSD(c.minus127, v[i], v[i])
			}
			// Sums of 16 (groups g = q/2 and q/2+1), then of 32.
			lo, hi := YMM(), YMM()
			VPADDD(v[1], v[0], lo)
			VPADDD(v[3], v[2], hi)
			s0, s1 := hsum256(lo), hsum256(hi)
			pair := GP32()
			MOVL(s0, pair)
			ADDL(s1, pair)
			switch {
			case size != 256 && q == 0:
				tot = pair
			case size != 256:
				ADDL(pair, tot)
			default:
				MOVW(pair.As16(), side.Offset(sumAt(q/4)))
				for k, s := range []GPVirtual{s0, s1} {
					NEGL(s)
					MOVW(s.As16(), side.Offset(negAt(q/2+k)))
					SHLL(U8(5), s)
					MOVL(s, side.Offset(4*(5+q/2+k)))
				}
			}
			ab, cd := YMM(), YMM()
			VPACKSSDW(v[1], v[0], ab)
			VPACKSSDW(v[3], v[2], cd)
			VPACKSSWB(cd, ab, ab)
			perm := YMM()
			VMOVDQU(c.perm, perm)
			VPERMD(ab, perm, ab)
			VMOVDQU(ab, codes.Offset(8*q))
		}
		if size != 256 {
			offsets(side, tot, d)
		}
		ADDQ(U32(4*size), x.Base)
		ADDQ(U32(size), codes.Base)
		ADDQ(U32(4*words), side.Base)
	})
	VZEROUPPER()
	RET()
}

// quant256Kernels emits the AVX2 quantizers.
func quant256Kernels() {
	c := newQuant256Consts()
	quant256Kernel(32, c)
	quant256Kernel(128, c)
	quant256Kernel(256, c)
}
