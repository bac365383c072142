package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The integer kernels, AVX2: the AVX-512 kernels' arithmetic with 8-lane vectors, for
// machines without AVX-512 (AMD Zen 3 and older, Intel desktop parts). A 16-row group
// is taken as two halves of 8 rows, one after the other, each block of each half with
// every activation row. Without VPDPBUSD, four codes of a row times four activation
// codes are summed by VPMADDUBSW (pairs to 16 bits; the codes are small enough never
// to saturate) and VPMADDWD by ones (pairs of pairs to 32 bits). Q8_0's codes are
// signed: their magnitudes meet the activations with the codes' signs (VPSIGNB), where
// the AVX-512 kernels bias the codes. Q4_K's high nibbles are shifted down, and the
// fifth bits of the Q5 types are expanded from their masks with shuffles. Every lane's
// sums and float32 arithmetic are those of the AVX-512 and the pure-Go kernels, so all
// three give the same bits.

// int256Rows is how many activation rows an AVX2 integer kernel takes at most (16
// vector registers).
const int256Rows = 4

type consts256 struct {
	low4, bits45, ones16, bytes16, maskShuf, maskBits Mem
}

func newConsts256() consts256 {
	vec := func(name string, word func(i int) uint32) Mem {
		m := GLOBL(name, RODATA|NOPTR)
		for i := 0; i < 32; i += 4 {
			DATA(i, U32(word(i)))
		}
		return m
	}
	same := func(v uint32) func(int) uint32 { return func(int) uint32 { return v } }
	bytes := func(f func(i int) byte) func(int) uint32 {
		return func(i int) uint32 {
			return uint32(f(i)) | uint32(f(i+1))<<8 | uint32(f(i+2))<<16 | uint32(f(i+3))<<24
		}
	}
	return consts256{
		low4:    vec("i256Low4", same(0x0f0f0f0f)),
		bits45:  vec("i256Bits45", same(0x30303030)),
		ones16:  vec("i256Ones16", same(0x00010001)),
		bytes16: vec("i256Bytes16", same(0x10101010)),
		// Byte i of a mask word's expansion: its byte i/8 (the word is broadcast to every
		// 4 bytes, so byte i/8 of either 128-bit lane is it), then bit i mod 8 of it.
		maskShuf: vec("i256MaskShuf", bytes(func(i int) byte { return byte(i / 8) })),
		maskBits: vec("i256MaskBits", bytes(func(i int) byte { return 1 << (i % 8) })),
	}
}

// frame256 is intFrame for the AVX2 kernels: the accumulators of both halves in a
// stack buffer (row t, half h at 64·t + 32·h).
type frame256 struct {
	*intFrame
	half int
}

// addAcc adds v to row t's accumulator of the current half.
func (f *frame256) addAcc(t int, v VecVirtual) {
	VADDPS(f.local.Offset(64*t+32*f.half), v, v)
	VMOVUPS(v, f.local.Offset(64*t+32*f.half))
}

func (f *frame256) clear(v VecVirtual) { VPXOR(f.z.AsY(), f.z.AsY(), v) }

// int256Prologue is intPrologue with 8-lane vectors and the accumulators in memory.
func int256Prologue(fn, doc string, n int) *frame256 {
	TEXT(fn, NOSPLIT, intSig)
	Doc(doc)
	f := &intFrame{fn: fn, n: n}
	f.w = Mem{Base: Load(Param("w"), GP64())}
	f.blocks = Load(Param("blocks"), GP64())
	f.x = newRows(Load(Param("x"), GP64()), Load(Param("xstride"), GP64()), n)
	ss := Load(Param("sstride"), GP64())
	SHLQ(U8(2), ss)
	f.s = newRows(Load(Param("side"), GP64()), ss, n)
	f.z = YMM()
	VPXOR(f.z, f.z, f.z)
	f.local = AllocLocal(64 * n)
	f.each(func(out Mem, t int) {
		for h := range 2 {
			v := YMM()
			VMOVUPS(out.Offset(32*h), v)
			VMOVUPS(v, f.local.Offset(64*t+32*h))
		}
	})
	return &frame256{intFrame: f}
}

func (f *frame256) store() {
	f.each(func(out Mem, t int) {
		for h := range 2 {
			v := YMM()
			VMOVUPS(f.local.Offset(64*t+32*h), v)
			VMOVUPS(v, out.Offset(32*h))
		}
	})
}

// int256Kernel emits the AVX2 kernel of type it for n activation rows.
func int256Kernel(it intType, n int, c consts256) {
	fn := fmt.Sprintf("int%sx%dAVX2", it.name, n)
	f := int256Prologue(fn, fmt.Sprintf("%s is the AVX2 kernel of %s weights for %d activation rows.", fn, it.name, n), n)
	f.loop(it, func() {
		for h := range 2 {
			f.half = h
			switch it.name {
			case "Q8_0", "Q4_0", "Q4_1", "Q4_Z", "Q4_Z128", "Q5_0", "Q5_1":
				block32AVX2(f, it.name, it.values, c)
			case "Q4_K", "Q5_K":
				blockKScaleMinAVX2(f, it.name == "Q5_K", c)
			case "Q6_K":
				blockQ6KAVX2(f, c)
			}
		}
	})
	f.store()
	VZEROUPPER()
	RET()
}

// dot adds, for every row, the products of the unsigned weight codes wv with the
// four activation codes at off (broadcast) to sums[t].
func (f *frame256) dot(sums []VecVirtual, wv VecVirtual, off int, c consts256) {
	for t := range f.n {
		b := YMM()
		VPBROADCASTD(f.x.at(t, off), b)
		VPMADDUBSW(b, wv, b)
		VPMADDWD(c.ones16, b, b)
		VPADDD(b, sums[t], sums[t])
	}
}

// nibbles unpacks the low (hi false) or high four bits of the half's 32 code bytes at
// the 64-byte step m (its offset within the block), with the fifth bits of the mask
// pair at mask when mask ≥ 0.
func (f *frame256) nibbles(m int, hi bool, mask int, c consts256) VecVirtual {
	v := YMM()
	VMOVDQU(f.weight(m+32*f.half), v)
	if hi {
		VPSRLD(U8(4), v, v)
	}
	VPAND(c.low4, v, v)
	if mask >= 0 {
		e := YMM()
		VPBROADCASTD(f.weight(mask+4*f.half), e)
		VPSHUFB(c.maskShuf, e, e)
		VPAND(c.maskBits, e, e)
		VPCMPEQB(c.maskBits, e, e)
		VPAND(c.bytes16, e, e)
		VPOR(e, v, v)
	}
	return v
}

// halves loads the half's 8 float16 values of the 16 at m as float32.
func (f *frame256) halves(m int) VecVirtual {
	v := YMM()
	VCVTPH2PS(f.weight(m+16*f.half), v)
	return v
}

func (f *frame256) newSums(init func(t int, v VecVirtual)) []VecVirtual {
	out := make([]VecVirtual, f.n)
	for t := range out {
		out[t] = YMM()
		if init != nil {
			init(t, out[t])
		} else {
			f.clear(out[t])
		}
	}
	return out
}

// block32AVX2 is block32AVX512 for one half.
func block32AVX2(f *frame256, name string, per int, c consts256) {
	codes, masks, mins, zeros, off := 32, -1, -1, -1, side32Off8
	switch name {
	case "Q4_Z", "Q4_Z128":
		codes, zeros, off = 48, 32, -1
	case "Q8_0":
		off = -1 // signed codes: no offset
	case "Q4_1":
		codes, mins, off = 64, 32, -1
	case "Q5_0":
		codes, masks, off = 96, 32, side32Off16
	case "Q5_1":
		codes, masks, mins, off = 128, 64, 32, -1
	}
	var init func(int, VecVirtual)
	switch {
	case off >= 0:
		init = func(t int, v VecVirtual) { VPBROADCASTD(f.s.at(t, 4*off), v) }
	case zeros >= 0:
		z := YMM() // the zeros of the half's 8 rows
		VPMOVZXBD(f.weight(zeros+8*f.half), z)
		init = func(t int, v VecVirtual) {
			VPBROADCASTD(f.s.at(t, 4*side32Neg), v)
			VPMADDWD(z, v, v)
		}
	}
	sums := f.newSums(init)
	if name == "Q8_0" {
		for p := range 8 {
			w, a := YMM(), YMM()
			VMOVDQU(f.weight(32+64*p+32*f.half), w)
			VPSIGNB(w, w, a) // |w|
			for t := range f.n {
				b := YMM()
				VPBROADCASTD(f.x.at(t, 4*p), b)
				VPSIGNB(w, b, b) // x with w's sign
				VPMADDUBSW(b, a, b)
				VPMADDWD(c.ones16, b, b)
				VPADDD(b, sums[t], sums[t])
			}
		}
	} else {
		for p := range per / 8 {
			lo := f.nibbles(codes+64*p, false, maskAt(masks, 16*p), c)
			f.dot(sums, lo, 4*p, c)
			hi := f.nibbles(codes+64*p, true, maskAt(masks, 16*p+8), c)
			f.dot(sums, hi, per/2+4*p, c)
		}
	}
	d := f.halves(0)
	var m VecVirtual
	if mins >= 0 {
		m = f.halves(mins)
	}
	for t := range f.n {
		s := YMM()
		VBROADCASTSS(f.s.at(t, 4*sideD), s)
		VMULPS(s, d, s)
		VCVTDQ2PS(sums[t], sums[t])
		VMULPS(s, sums[t], sums[t])
		if mins >= 0 {
			VBROADCASTSS(f.s.at(t, 4*side32DSum), s)
			VMULPS(s, m, s)
			VADDPS(s, sums[t], sums[t])
		}
		f.addAcc(t, sums[t])
	}
}

// scaleSum256 adds sc·isum (int32, isum overwritten) to each row's sum, or with
// first makes it the sum.
func scaleSum256(sum, isum []VecVirtual, sc VecVirtual, first bool) {
	for t := range isum {
		if first {
			sum[t] = YMM()
			VPMULLD(sc, isum[t], sum[t])
			continue
		}
		VPMULLD(sc, isum[t], isum[t])
		VPADDD(isum[t], sum[t], sum[t])
	}
}

// blockKScaleMinAVX2 is blockKScaleMinAVX512 for one half, the high nibbles shifted
// (S itself, not 16·S).
func blockKScaleMinAVX2(f *frame256, q5 bool, c consts256) {
	masks, codes := -1, 320
	if q5 {
		masks, codes = 320, 832
	}
	sum := make([]VecVirtual, f.n)
	for j := range 8 {
		i, hi := j/2, j%2 == 1
		sums := f.newSums(nil)
		for p := range 8 {
			wv := f.nibbles(codes+512*i+64*p, hi, maskAt(masks, 128*i+16*p+8*(j%2)), c)
			f.dot(sums, wv, 64*i+32*(j%2)+4*p, c)
		}
		sc := YMM()
		VPMOVZXBD(f.weight(64+16*j+8*f.half), sc)
		scaleSum256(sum, sums, sc, j == 0)
	}
	msum := make([]VecVirtual, f.n)
	for k := range 4 {
		mp := YMM()
		VPMOVZXBW(f.weight(192+32*k+16*f.half), mp)
		for t := range f.n {
			x := YMM()
			VPBROADCASTD(f.s.at(t, 4*(side256Sum+k)), x)
			VPMADDWD(mp, x, x)
			if k == 0 {
				msum[t] = x
			} else {
				VPADDD(x, msum[t], msum[t])
			}
		}
	}
	d, dmin := f.halves(0), f.halves(32)
	for t := range f.n {
		VCVTDQ2PS(sum[t], sum[t])
		VMULPS(d, sum[t], sum[t])
		VCVTDQ2PS(msum[t], msum[t])
		VMULPS(dmin, msum[t], msum[t])
		VSUBPS(msum[t], sum[t], sum[t])
		p := YMM()
		VBROADCASTSS(f.s.at(t, 4*sideD), p)
		VMULPS(p, sum[t], sum[t])
		f.addAcc(t, sum[t])
	}
}

// blockQ6KAVX2 is blockQ6KAVX512 for one half.
func blockQ6KAVX2(f *frame256, c consts256) {
	sum := make([]VecVirtual, f.n)
	for h := range 2 {
		for half := range 2 {
			for q := range 4 {
				g := 8*h + 2*q + half
				sums := f.newSums(func(t int, v VecVirtual) { VPBROADCASTD(f.s.at(t, 4*(side256Off+g)), v) })
				for p := 4 * half; p < 4*half+4; p++ {
					at := 288 + 1536*h + 192*p
					v := f.nibbles(at+64*(q%2), q >= 2, -1, c)
					hv := YMM()
					VMOVDQU(f.weight(at+128+32*f.half), hv)
					switch sh := 4 - 2*q; {
					case sh > 0:
						VPSLLD(U8(sh), hv, hv)
					case sh < 0:
						VPSRLD(U8(-sh), hv, hv)
					}
					VPAND(c.bits45, hv, hv)
					VPOR(hv, v, v)
					f.dot(sums, v, 128*h+32*q+4*p, c)
				}
				pr := YMM()
				VPMOVSXBW(f.weight(32+32*(g/2)+16*f.half), pr)
				scaleSum256(sum, sums, pairHalf(pr, half, YMM), h == 0 && half == 0 && q == 0)
			}
		}
	}
	d := f.halves(0)
	for t := range f.n {
		VCVTDQ2PS(sum[t], sum[t])
		VMULPS(d, sum[t], sum[t])
		p := YMM()
		VBROADCASTSS(f.s.at(t, 4*sideD), p)
		VMULPS(p, sum[t], sum[t])
		f.addAcc(t, sum[t])
	}
}

// int256Kernels emits every AVX2 integer kernel.
func int256Kernels() {
	c := newConsts256()
	for _, it := range intTypes {
		for n := 1; n <= int256Rows; n++ {
			int256Kernel(it, n, c)
		}
	}
}
