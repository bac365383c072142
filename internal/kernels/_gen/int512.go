package main

import (
	"fmt"
	"math"
	"os"
	"strconv"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The integer kernels, AVX-512 with VNNI. Each computes, for one repacked group of 16
// weight rows (see repack.go in the package) and n activation rows, 16 dot products per
// activation row, one per vector lane: the weights' codes are unpacked to unsigned
// bytes, four consecutive codes of each row to a 32-bit lane, and VPDPBUSD multiplies
// them by four activation codes broadcast to every lane and adds the four products to
// the lane. The arithmetic is the pure-Go kernels' (intdot_generic.go), lane for lane:
// exact integer sums, then float32 multiplies and adds, never fused, in their order.

// intSig is the signature of every integer kernel.
const intSig = "func(w *byte, blocks int, x *int8, xstride int, side *uint32, sstride int, out *float32, ldo int)"

// intType describes a repacked weight type for the generators.
type intType struct {
	name       string
	groupBytes int // bytes of one block of a group
	values     int // values per block
	sideWords  int // side data per activation block
	maxN512    int // activation rows an AVX-512 kernel takes at most
	maxN256    int // the same for AVX2
}

var intTypes = []intType{
	{"Q8_0", 544, 32, 8, 4, 2},
	{"Q4_0", 288, 32, 8, 4, 2},
	{"Q4_1", 320, 32, 8, 4, 2},
	{"Q5_0", 352, 32, 8, 4, 2},
	{"Q5_1", 384, 32, 8, 4, 2},
	{"Q4_K", 2368, 256, 32, 4, 2},
	{"Q5_K", 2880, 256, 32, 4, 2},
	{"Q6_K", 3360, 256, 32, 3, 1},
}

// Side data word offsets (act8.go).
const (
	sideD        = 0
	side32Off8   = 1
	side32Off16  = 2
	side32Off128 = 3
	side32DSum   = 4
	side256Min   = 1
	side256Off   = 9
)

// consts512 are the constants of the AVX-512 kernels, in read-only data: 4 bytes
// each, broadcast by the instructions that read them, but bytes16, read whole.
type consts512 struct {
	low4, high4, sign, bits45, sixteenth Mem
	bytes16                              Mem // 0x10 in every byte of 64
}

func newConsts512() consts512 {
	word := func(name string, v uint32) Mem {
		m := GLOBL(name, RODATA|NOPTR)
		DATA(0, U32(v))
		return m
	}
	b16 := GLOBL("i512Bytes16", RODATA|NOPTR)
	for i := 0; i < 64; i += 4 {
		DATA(i, U32(0x10101010))
	}
	return consts512{
		low4:      word("i512Low4", 0x0f0f0f0f),
		high4:     word("i512High4", 0xf0f0f0f0),
		sign:      word("i512Sign", 0x80808080),
		bits45:    word("i512Bits45", 0x30303030),
		sixteenth: word("i512Sixteenth", math.Float32bits(1.0/16)),
		bytes16:   b16,
	}
}

// intFrame is what every integer kernel sets up: the weights, the block counter, a
// code pointer and a side-data pointer per activation row, and a float accumulator
// per activation row.
type intFrame struct {
	fn     string
	w      Mem
	blocks Register
	x, s   []Mem
	acc    []VecVirtual
	z      VecVirtual // zero
}

// clear sets v to zero inside the loop.
func (f *intFrame) clear(v VecVirtual) { VPXORD(f.z, f.z, v) }

// intPrologue declares a kernel and loads its arguments; vec makes the vector
// registers (ZMM or YMM) and zero clears one.
func intPrologue(fn, doc string, n int, vec func() VecVirtual, zero func(VecVirtual)) *intFrame {
	TEXT(fn, NOSPLIT, intSig)
	Doc(doc)
	f := &intFrame{fn: fn}
	f.w = Mem{Base: Load(Param("w"), GP64())}
	f.blocks = Load(Param("blocks"), GP64())
	x := Load(Param("x"), GP64())
	xs := Load(Param("xstride"), GP64())
	s := Load(Param("side"), GP64())
	ss := Load(Param("sstride"), GP64())
	SHLQ(U8(2), ss)
	for t := range n {
		xt, st := x, s
		if t > 0 {
			xt, st = GP64(), GP64()
			LEAQ(f.x[t-1].Idx(xs, 1), xt)
			LEAQ(f.s[t-1].Idx(ss, 1), st)
		}
		f.x = append(f.x, Mem{Base: xt})
		f.s = append(f.s, Mem{Base: st})
	}
	for range n {
		a := vec()
		zero(a)
		f.acc = append(f.acc, a)
	}
	f.z = vec()
	zero(f.z)
	return f
}

// intPrefetch is how far ahead of the block being multiplied the integer kernels ask
// for the weights, in bytes: a decoding pass waits on memory, and the hardware
// prefetcher alone left a single thread at half the machine's streaming bandwidth.
var intPrefetch = envInt("INT_PREFETCH", 12288)

// loop runs body once per block, then advances the pointers by a block. Each block
// first asks for the cache lines intPrefetch bytes ahead.
func (f *intFrame) loop(it intType, body func()) {
	countdown(f.fn+"_loop", f.fn+"_done", f.blocks, func() {
		for off := 0; off < it.groupBytes; off += 64 {
			PREFETCHT0(f.w.Offset(intPrefetch + off))
		}
		body()
		ADDQ(U32(it.groupBytes), f.w.Base)
		for t := range f.x {
			ADDQ(U32(it.values), f.x[t].Base)
			ADDQ(U32(4*it.sideWords), f.s[t].Base)
		}
	})
}

// store writes the accumulators: 16 floats (or 8, for halves) to out + t·ldo floats.
func (f *intFrame) store(offset int) {
	out := Mem{Base: Load(Param("out"), GP64())}
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	for t, a := range f.acc {
		VMOVUPS(a, out.Offset(offset))
		if t+1 < len(f.acc) {
			ADDQ(ldo, out.Base)
		}
	}
}

// zeroZ clears v before the loop. Inside the loop a register is cleared from z, a
// register cleared once (VPXORD z, z, v is a zeroing idiom too): clearing v with
// itself would read it, and make it live across the whole loop for the register
// allocator.
func zeroZ(v VecVirtual) { VPXORD(v, v, v) }

// int512Kernel emits the AVX-512 kernel of type it for n activation rows.
func int512Kernel(it intType, n int, c consts512) {
	fn := fmt.Sprintf("int%sx%dAVX512", it.name, n)
	f := intPrologue(fn, fmt.Sprintf("%s is the AVX-512 VNNI kernel of %s weights for %d activation rows.", fn, it.name, n), n, ZMM, zeroZ)
	switch it.name {
	case "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1":
		f.loop(it, func() { block32AVX512(f, it.name, c) })
	case "Q4_K", "Q5_K":
		f.loop(it, func() { blockKScaleMinAVX512(f, it.name == "Q5_K", c) })
	case "Q6_K":
		f.loop(it, func() { blockQ6KAVX512(f, c) })
	}
	f.store(0)
	VZEROUPPER()
	RET()
}

// splits is how many partial integer sums a kernel for n activation rows keeps per
// row and sum, added together at the end (integer sums: the order does not matter):
// enough independent VPDPBUSD chains to hide their latency.
func splits(n int) int {
	switch n {
	case 1:
		return 4
	case 2:
		return 2
	}
	return 1
}

// isums is n rows × splits(n) integer accumulators, the first of each row set by
// init, the others cleared.
type isums [][]VecVirtual

func newISums(f *intFrame, vec func() VecVirtual, init func(t int, v VecVirtual)) isums {
	n := len(f.acc)
	out := make(isums, n)
	for t := range n {
		for k := range splits(n) {
			v := vec()
			if k == 0 {
				init(t, v)
			} else {
				f.clear(v)
			}
			out[t] = append(out[t], v)
		}
	}
	return out
}

// at is the accumulator of row t for 4-byte step p.
func (s isums) at(t, p int) VecVirtual { return s[t][p%len(s[t])] }

// total adds each row's partial sums into its first, and returns the firsts.
func (s isums) total(add func(a, b VecVirtual)) []VecVirtual {
	out := make([]VecVirtual, len(s))
	for t, parts := range s {
		for _, p := range parts[1:] {
			add(p, parts[0])
		}
		out[t] = parts[0]
	}
	return out
}

func addD512(a, b VecVirtual) { VPADDD(a, b, b) }

// halves loads 16 float16 values at m as float32.
func halves(m Mem) VecVirtual {
	v := ZMM()
	VCVTPH2PS(m, v)
	return v
}

// scaleInto adds float32(isum)·s to acc (isum converted in place).
func scaleInto(acc, isum, s VecVirtual) {
	VCVTDQ2PS(isum, isum)
	VMULPS(s, isum, isum)
	VADDPS(isum, acc, acc)
}

// block32AVX512 is one block of the 32-value types: the codes of 16 rows against each
// activation row's 32 codes, the integer sum beginning at the offset of the side data
// (or 0), then acc + isum·(d·dx) and, with a minimum, + m·(dx·Σx).
func block32AVX512(f *intFrame, name string, c consts512) {
	n := len(f.acc)
	codes, masks, mins, off := 32, -1, -1, side32Off8
	switch name {
	case "Q8_0":
		off = side32Off128
	case "Q4_1":
		codes, mins, off = 64, 32, -1
	case "Q5_0":
		codes, masks, off = 96, 32, side32Off16
	case "Q5_1":
		codes, masks, mins, off = 128, 64, 32, -1
	}
	sums := newISums(f, ZMM, func(t int, v VecVirtual) {
		if off >= 0 {
			VPBROADCASTD(f.s[t].Offset(4*off), v)
		} else {
			f.clear(v)
		}
	})
	if name == "Q8_0" {
		sign := ZMM()
		VPBROADCASTD(c.sign, sign)
		for p := range 8 {
			// The codes biased to unsigned (w + 128); the side data's −128·Σx undoes it.
			wv := ZMM()
			VPXORD(f.w.Offset(32+64*p), sign, wv)
			for t := range n {
				VPDPBUSD_BCST(f.x[t].Offset(4*p), wv, sums.at(t, p))
			}
		}
	} else {
		for p := range 4 {
			raw, lo, hi := ZMM(), ZMM(), ZMM()
			VMOVDQU32(f.w.Offset(codes+64*p), raw)
			VPANDD_BCST(c.low4, raw, lo)
			VPSRLD(U8(4), raw, hi)
			VPANDD_BCST(c.low4, hi, hi)
			if masks >= 0 {
				k1, k2 := K(), K()
				KMOVQ(f.w.Offset(masks+16*p), k1)
				KMOVQ(f.w.Offset(masks+16*p+8), k2)
				VPADDB(c.bytes16, lo, k1, lo)
				VPADDB(c.bytes16, hi, k2, hi)
			}
			for t := range n {
				VPDPBUSD_BCST(f.x[t].Offset(4*p), lo, sums.at(t, 2*p))
				VPDPBUSD_BCST(f.x[t].Offset(16+4*p), hi, sums.at(t, 2*p+1))
			}
		}
	}
	isum := sums.total(addD512)
	d := halves(f.w)
	var m VecVirtual
	if mins >= 0 {
		m = halves(f.w.Offset(mins))
	}
	for t := range n {
		// v = isum·(d·dx) [+ m·(dx·Σx)]; acc + v.
		s := ZMM()
		VMULPS_BCST(f.s[t].Offset(4*sideD), d, s)
		VCVTDQ2PS(isum[t], isum[t])
		VMULPS(s, isum[t], isum[t])
		if mins >= 0 {
			VMULPS_BCST(f.s[t].Offset(4*side32DSum), m, s)
			VADDPS(s, isum[t], isum[t])
		}
		VADDPS(isum[t], f.acc[t], f.acc[t])
	}
}

// subScale returns d·scale_j of the 16 rows, the scales a byte each at m (signed when
// signed), times 1/16 when sixteenth is set.
func subScale(d VecVirtual, m Mem, signed, sixteenth bool, c consts512) VecVirtual {
	s := ZMM()
	if signed {
		VPMOVSXBD(m, s)
	} else {
		VPMOVZXBD(m, s)
	}
	VCVTDQ2PS(s, s)
	VMULPS(d, s, s)
	if sixteenth {
		VMULPS_BCST(c.sixteenth, s, s)
	}
	return s
}

// blockKScaleMinAVX512 is one super-block of Q4_K or Q5_K: per pair of sub-blocks 2i,
// 2i+1 (the low and the high nibbles of the same code bytes) two integer sums, added to
// tmp with their scales in order; acc + tmp·dx; then acc − (dmin·min_j)·(dx·Σx_j).
// Q4_K's high nibbles are masked, not shifted (16 times the code), with the scale
// divided by 16: the same products, exactly, in fewer instructions.
func blockKScaleMinAVX512(f *intFrame, q5 bool, c consts512) {
	n := len(f.acc)
	masks, codes := -1, 320
	if q5 {
		masks, codes = 320, 832
	}
	tmp := make([]VecVirtual, n)
	for t := range n {
		tmp[t] = ZMM()
		f.clear(tmp[t])
	}
	for i := range 4 {
		clr := func(_ int, v VecVirtual) { f.clear(v) }
		los, his := newISums(f, ZMM, clr), newISums(f, ZMM, clr)
		for p := range 8 {
			raw, wl, wh := ZMM(), ZMM(), ZMM()
			VMOVDQU32(f.w.Offset(codes+512*i+64*p), raw)
			VPANDD_BCST(c.low4, raw, wl)
			if q5 {
				VPSRLD(U8(4), raw, wh)
				VPANDD_BCST(c.low4, wh, wh)
				k1, k2 := K(), K()
				KMOVQ(f.w.Offset(masks+128*i+16*p), k1)
				KMOVQ(f.w.Offset(masks+128*i+16*p+8), k2)
				VPADDB(c.bytes16, wl, k1, wl)
				VPADDB(c.bytes16, wh, k2, wh)
			} else {
				VPANDD_BCST(c.high4, raw, wh)
			}
			for t := range n {
				VPDPBUSD_BCST(f.x[t].Offset(64*i+4*p), wl, los.at(t, p))
				VPDPBUSD_BCST(f.x[t].Offset(64*i+32+4*p), wh, his.at(t, p))
			}
		}
		lo, hi := los.total(addD512), his.total(addD512)
		d := halves(f.w)
		sl := subScale(d, f.w.Offset(64+16*(2*i)), false, false, c)
		sh := subScale(d, f.w.Offset(64+16*(2*i+1)), false, !q5, c)
		for t := range n {
			scaleInto(tmp[t], lo[t], sl)
			scaleInto(tmp[t], hi[t], sh)
		}
	}
	// corr = Σ_j (dmin·min_j)·(dx·Σx_j); acc + (tmp·dx − corr).
	corr := make([]VecVirtual, n)
	for t := range n {
		corr[t] = ZMM()
		f.clear(corr[t])
	}
	dmin := halves(f.w.Offset(32))
	for j := range 8 {
		mm := subScale(dmin, f.w.Offset(192+16*j), false, false, c)
		for t := range n {
			p := ZMM()
			VMULPS_BCST(f.s[t].Offset(4*(side256Min+j)), mm, p)
			VADDPS(p, corr[t], corr[t])
		}
	}
	for t := range n {
		VMULPS_BCST(f.s[t].Offset(4*sideD), tmp[t], tmp[t])
		VSUBPS(corr[t], tmp[t], tmp[t])
		VADDPS(tmp[t], f.acc[t], f.acc[t])
	}
}

// blockQ6KAVX512 is one super-block of Q6_K: for each half and each half of its 4-byte
// steps, the four quarters' 6-bit codes (low nibbles of ql with their two high bits
// from qh) against the activations, each integer sum beginning at −32·Σx of its group;
// the four groups finished go into tmp with their scales, in the order of q6KOrder;
// acc + tmp·dx.
func blockQ6KAVX512(f *intFrame, c consts512) {
	n := len(f.acc)
	tmp := make([]VecVirtual, n)
	for t := range n {
		tmp[t] = ZMM()
		f.clear(tmp[t])
	}
	for h := range 2 {
		for half := range 2 {
			isum := make([][4]VecVirtual, n)
			for t := range n {
				for q := range 4 {
					g := 8*h + 2*q + half
					isum[t][q] = ZMM()
					VPBROADCASTD(f.s[t].Offset(4*(side256Off+g)), isum[t][q])
				}
			}
			for p := 4 * half; p < 4*half+4; p++ {
				at := 288 + 1536*h + 192*p
				a, b, hb := ZMM(), ZMM(), ZMM()
				VMOVDQU32(f.w.Offset(at), a)
				VMOVDQU32(f.w.Offset(at+64), b)
				VMOVDQU32(f.w.Offset(at+128), hb)
				for q := range 4 {
					v, hv := ZMM(), ZMM()
					src := a
					if q%2 == 1 {
						src = b
					}
					if q < 2 {
						VPANDD_BCST(c.low4, src, v)
					} else {
						VPSRLD(U8(4), src, v)
						VPANDD_BCST(c.low4, v, v)
					}
					// The two high bits of quarter q are bits 2q, 2q+1 of qh: to bits 4, 5.
					switch sh := 4 - 2*q; {
					case sh > 0:
						VPSLLD(U8(sh), hb, hv)
						VPANDD_BCST(c.bits45, hv, hv)
					case sh == 0:
						VPANDD_BCST(c.bits45, hb, hv)
					default:
						VPSRLD(U8(-sh), hb, hv)
						VPANDD_BCST(c.bits45, hv, hv)
					}
					VPORD(hv, v, v)
					for t := range n {
						VPDPBUSD_BCST(f.x[t].Offset(128*h+32*q+4*p), v, isum[t][q])
					}
				}
			}
			d := halves(f.w)
			for q := range 4 {
				g := 8*h + 2*q + half
				s := subScale(d, f.w.Offset(32+16*g), true, false, c)
				for t := range n {
					scaleInto(tmp[t], isum[t][q], s)
				}
			}
		}
	}
	for t := range n {
		VMULPS_BCST(f.s[t].Offset(4*sideD), tmp[t], tmp[t])
		VADDPS(tmp[t], f.acc[t], f.acc[t])
	}
}

// envInt reads a tuning knob of the generator from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// int512Kernels emits every AVX-512 kernel.
func int512Kernels() {
	c := newConsts512()
	for _, it := range intTypes {
		for n := 1; n <= it.maxN512; n++ {
			if only := os.Getenv("ONLY"); only != "" && only != fmt.Sprintf("%s/%d", it.name, n) {
				continue
			}
			int512Kernel(it, n, c)
		}
	}
}
