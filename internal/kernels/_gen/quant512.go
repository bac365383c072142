package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The activation quantizers, AVX-512: quantizeBlock of act8.go for a run of blocks of
// 32 or 256 values, to the bit. Per block the largest magnitude, d = max/127 and
// 127/max (0 for a block of zeros), codes rounded to nearest even and clamped to
// ±127, packed to bytes, then the exact integer sums of the side data.

type quantConsts struct {
	abs, plus127, minus127 Mem
	f127                   Mem
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
func hsumD(v VecVirtual) Register {
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
		Label(fn + "_zero")
		idv := ZMM()
		VBROADCASTSS(id, idv)
		VMOVSS(d, side)
		used := 5
		if size == 256 {
			used = 25
		}
		for w := used; w < words; w++ {
			MOVL(U32(0), side.Offset(4*w))
		}
		// Codes 16 at a time, and the sums of the side data (act8.go) as they come:
		// per 32 values d·Σ, and for 256-value blocks −32·Σ per 16.
		var pair Register
		for i := range vecs {
			q := ZMM()
			VMULPS(x.Offset(64*i), idv, q)
			VCVTPS2DQ(q, q)
			VPMINSD_BCST(c.plus127, q, q)
			VPMAXSD_BCST(c.minus127, q, q)
			VPMOVSDB(q, codes.Offset(16*i))
			s := hsumD(q)
			if i%2 == 0 {
				pair = GP32()
				MOVL(s, pair)
			} else {
				ADDL(s, pair)
			}
			if size == 256 {
				SHLL(U8(5), s)
				NEGL(s)
				MOVL(s, side.Offset(4*(9+i)))
			}
			if i%2 == 1 {
				if size == 32 {
					offsets(side, pair, d)
				} else {
					dsum(side.Offset(4*(1+i/2)), pair, d)
				}
			}
		}
		ADDQ(U32(4*size), x.Base)
		ADDQ(U32(size), codes.Base)
		ADDQ(U32(4*words), side.Base)
	})
	VZEROUPPER()
	RET()
}

// offsets writes the side data of a 32-value block from its code sum s and scale d:
// −8·s, −16·s, −128·s, d·s.
func offsets(side Mem, s Register, d VecVirtual) {
	for i, sh := range []uint8{3, 4, 7} {
		t := GP32()
		MOVL(s, t)
		SHLL(U8(sh), t)
		NEGL(t)
		MOVL(t, side.Offset(4*(1+i)))
	}
	dsum(side.Offset(16), s, d)
}

// dsum stores float32(d·float32(s)).
func dsum(m Mem, s Register, d VecVirtual) {
	f := XMM()
	VCVTSI2SSL(s, f, f)
	VMULSS(d, f, f)
	VMOVSS(f, m)
}

// quant512Kernels emits the AVX-512 quantizers.
func quant512Kernels() {
	c := newQuantConsts()
	quantKernel(32, c)
	quantKernel(256, c)
}
