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
// weight rows (see repack.go in the package) and n = 1…8 activation rows, 16 dot
// products per activation row, one per vector lane: the weights' codes are unpacked to
// unsigned bytes, four consecutive codes of each row to a 32-bit lane, and VPDPBUSD
// multiplies them by four activation codes broadcast to every lane and adds the four
// products to the lane. Every weight vector unpacked serves all n activation rows, in
// one pass over the weights. The arithmetic is the pure-Go kernels'
// (intdot_generic.go), lane for lane: exact integer sums (for the K-quants, the
// products of the sub-block sums with their integer scales and minimums too, summed
// over the super-block in int32: on these machines VPDPBUSD shares its two pipes with
// every multiply, float or integer, so each multiply saved is a VPDPBUSD slot, and an
// exact sum may be taken in any order), then float32 multiplies and adds, never fused,
// in their order.
//
// The BW kernels are the same for AVX-512 machines without VNNI (Skylake-SP/X): each
// VPDPBUSD becomes VPMADDUBSW (pairs of byte products to 16 bits), VPMADDWD by ones (to
// 32 bits) and VPADDD. The 16-bit pair sums must not saturate, so the codes stay
// small: Q8_0 multiplies |w| by the activations with w's sign (not w + 128 by them),
// and Q4_K's high nibbles are shifted down. They take at most intRowsBW activation
// rows: with four instructions to VNNI's one, more rows would make a pass wait on the
// arithmetic, not on memory.

// intSig is the signature of every integer kernel.
const intSig = "func(w *byte, blocks int, x *int8, xstride int, side *uint32, sstride int, out *float32, ldo int)"

// intType describes a repacked weight type for the generators.
type intType struct {
	name       string
	groupBytes int // bytes of one block of a group
	values     int // values per block
	sideWords  int // side data per activation block
	kquant     bool
}

var intTypes = []intType{
	{"Q8_0", 544, 32, 8, false},
	{"Q4_0", 288, 32, 8, false},
	{"Q4_1", 320, 32, 8, false},
	{"Q4_Z", 304, 32, 8, false},
	{"Q4_Z128", 1072, 128, 8, false},
	{"Q5_0", 352, 32, 8, false},
	{"Q5_1", 384, 32, 8, false},
	{"Q4_K", 2368, 256, 32, true},
	{"Q5_K", 2880, 256, 32, true},
	{"Q6_K", 3360, 256, 32, true},
}

// intRows is how many activation rows an integer kernel takes at most: a
// verification pass of up to 8 positions reads every weight once.
const intRows = 8

// intRowsBW is intRows for the BW kernels.
const intRowsBW = 4

// Side data word offsets (act8.go).
const (
	sideD        = 0
	side32Off8   = 1
	side32Off16  = 2
	side32Off128 = 3
	side32DSum   = 4
	side32Neg    = 5
	side256Sum   = 1
	side256Off   = 5
	side256Neg   = 21
)

// consts512 are the constants of the AVX-512 kernels, in read-only data: 4 bytes
// each, broadcast by the instructions that read them, but bytes16, read whole.
type consts512 struct {
	low4, sign, bits45, sixteenth, ones16 Mem
	bytes16                               Mem // 0x10 in every byte of 64
}

// newConsts512 declares the constants, their names beginning with prefix (one per
// assembly file); ones16 only for the BW kernels.
func newConsts512(prefix string, bw bool) consts512 {
	word := func(name string, v uint32) Mem {
		m := GLOBL(prefix+name, RODATA|NOPTR)
		DATA(0, U32(v))
		return m
	}
	b16 := GLOBL(prefix+"Bytes16", RODATA|NOPTR)
	for i := 0; i < 64; i += 4 {
		DATA(i, U32(0x10101010))
	}
	var ones16 Mem
	if bw {
		ones16 = word("Ones16", 0x00010001)
	}
	return consts512{
		low4:      word("Low4", 0x0f0f0f0f),
		sign:      word("Sign", 0x80808080),
		bits45:    word("Bits45", 0x30303030),
		sixteenth: word("Sixteenth", math.Float32bits(1.0/16)),
		ones16:    ones16,
		bytes16:   b16,
	}
}

// rows addresses the n activation rows' codes or side data: rows 0…3 from one base,
// 4…7 from a second, with the stride and three times it as index registers, so that 8
// rows take 4 general registers.
type rows struct {
	base, base4, stride, stride3 Register
}

func newRows(base, stride Register, n int) rows {
	r := rows{base: base, stride: stride}
	if n > 3 {
		r.stride3 = GP64()
		LEAQ(Mem{Base: stride, Index: stride, Scale: 2}, r.stride3)
	}
	if n > 4 {
		r.base4 = GP64()
		LEAQ(Mem{Base: base, Index: stride, Scale: 4}, r.base4)
	}
	return r
}

// at is row t's address plus off.
func (r rows) at(t, off int) Mem {
	b := r.base
	if t >= 4 {
		b, t = r.base4, t-4
	}
	switch t {
	case 0:
		return Mem{Base: b, Disp: off}
	case 3:
		return Mem{Base: b, Index: r.stride3, Scale: 1, Disp: off}
	}
	return Mem{Base: b, Index: r.stride, Scale: uint8(t), Disp: off}
}

// advance moves the rows on by n bytes.
func (r rows) advance(n int) {
	ADDQ(U32(n), r.base)
	if r.base4 != nil {
		ADDQ(U32(n), r.base4)
	}
}

// intFrame is what every integer kernel sets up: the weights, the block counter, the
// activation rows' codes and side data, a zero register, and a float accumulator per
// activation row — in registers for the 32-value types, in a stack buffer for the
// K-quants, whose per-row state is larger.
type intFrame struct {
	fn     string
	n      int
	vnni   bool       // VPDPBUSD; else the BW sequence
	ones   VecVirtual // 1 in every 16-bit lane, for the BW sequence
	w      Mem
	blocks Register
	x, s   rows
	acc    []VecVirtual // nil when the accumulators are in local
	local  Mem
	z      VecVirtual
	asked  map[int]bool // the cache lines of the block ahead asked for so far
}

// weight returns the weights at off and, the first time a block reads that cache
// line, asks for the line intPrefetch bytes ahead: one request per line read, spread
// over the block as it is read, rather than a burst that would wait for the memory
// system's few miss buffers.
func (f *intFrame) weight(off int) Mem {
	if line := off &^ 63; !f.asked[line] {
		f.asked[line] = true
		PREFETCHT0(f.w.Offset(intPrefetch + line))
	}
	return f.w.Offset(off)
}

// clear sets v to zero inside the loop. (VPXORD z, z, v is a zeroing idiom too;
// clearing v with itself would read it, and make it live across the whole loop for
// the register allocator.)
func (f *intFrame) clear(v VecVirtual) { VPXORD(f.z, f.z, v) }

// intPrologue declares a kernel and loads its arguments. The accumulators start from
// out, where an earlier call over the blocks before may have left them.
func intPrologue(fn, doc string, n int, inMemory, vnni bool, c consts512) *intFrame {
	TEXT(fn, NOSPLIT, intSig)
	Doc(doc)
	f := &intFrame{fn: fn, n: n, vnni: vnni}
	f.w = Mem{Base: Load(Param("w"), GP64())}
	f.blocks = Load(Param("blocks"), GP64())
	f.x = newRows(Load(Param("x"), GP64()), Load(Param("xstride"), GP64()), n)
	ss := Load(Param("sstride"), GP64())
	SHLQ(U8(2), ss)
	f.s = newRows(Load(Param("side"), GP64()), ss, n)
	f.z = ZMM()
	VPXORD(f.z, f.z, f.z)
	if !vnni {
		f.ones = ZMM()
		VPBROADCASTD(c.ones16, f.ones)
	}
	if inMemory {
		f.local = AllocLocal(64 * n)
	} else {
		for range n {
			f.acc = append(f.acc, ZMM())
		}
	}
	f.each(func(out Mem, t int) {
		if f.acc != nil {
			VMOVUPS(out, f.acc[t])
			return
		}
		v := ZMM()
		VMOVUPS(out, v)
		VMOVUPS(v, f.local.Offset(64*t))
	})
	return f
}

// each calls body with row t's 16 floats of out, for every row.
func (f *intFrame) each(body func(out Mem, t int)) {
	out := Mem{Base: Load(Param("out"), GP64())}
	ldo := Load(Param("ldo"), GP64())
	SHLQ(U8(2), ldo)
	for t := range f.n {
		body(out, t)
		if t+1 < f.n {
			ADDQ(ldo, out.Base)
		}
	}
}

// addAcc adds v to row t's accumulator.
func (f *intFrame) addAcc(t int, v VecVirtual) {
	if f.acc != nil {
		VADDPS(v, f.acc[t], f.acc[t])
		return
	}
	VADDPS(f.local.Offset(64*t), v, v)
	VMOVUPS(v, f.local.Offset(64*t))
}

// intPrefetch is how far ahead of the block being multiplied the integer kernels ask
// for the weights, in bytes: a decoding pass waits on memory, and the hardware
// prefetcher alone left a single thread at half the machine's streaming bandwidth.
var intPrefetch = envInt("INT_PREFETCH", 12288)

// loop runs body once per block, then advances the pointers by a block. Each block
// first asks for the cache lines intPrefetch bytes ahead.
func (f *intFrame) loop(it intType, body func()) {
	countdown(f.fn+"_loop", f.fn+"_done", f.blocks, func() {
		f.asked = map[int]bool{}
		body()
		for off := 0; off < it.groupBytes; off += 64 {
			f.weight(off) // the lines the block did not read (there are none)
		}
		ADDQ(U32(it.groupBytes), f.w.Base)
		f.x.advance(it.values)
		f.s.advance(4 * it.sideWords)
	})
}

// store writes the accumulators to out + t·ldo floats.
func (f *intFrame) store() {
	f.each(func(out Mem, t int) {
		if f.acc != nil {
			VMOVUPS(f.acc[t], out)
			return
		}
		v := ZMM()
		VMOVUPS(f.local.Offset(64*t), v)
		VMOVUPS(v, out)
	})
}

// int512Kernel emits the AVX-512 kernel of type it for n activation rows, with VNNI or
// (vnni false) the BW sequence.
func int512Kernel(it intType, n int, vnni bool, c consts512) {
	fn, doc := fmt.Sprintf("int%sx%dAVX512", it.name, n), "AVX-512 VNNI"
	if !vnni {
		fn, doc = fn+"BW", "AVX-512 BW (no VNNI)"
	}
	f := intPrologue(fn, fmt.Sprintf("%s is the %s kernel of %s weights for %d activation rows.", fn, doc, it.name, n), n, it.kquant, vnni, c)
	switch it.name {
	case "Q8_0", "Q4_0", "Q4_1", "Q4_Z", "Q4_Z128", "Q5_0", "Q5_1":
		f.loop(it, func() { block32AVX512(f, it.name, it.values, c) })
	case "Q4_K", "Q5_K":
		f.loop(it, func() { blockKScaleMinAVX512(f, it.name == "Q5_K", c) })
	case "Q6_K":
		f.loop(it, func() { blockQ6KAVX512(f, c) })
	}
	f.store()
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

// isums is n rows × splits(n) integer accumulators.
type isums [][]VecVirtual

// newISums makes the accumulators, the first of each row set by init (nil: cleared),
// the others cleared.
func newISums(f *intFrame, init func(t int, v VecVirtual)) isums {
	out := make(isums, f.n)
	for t := range f.n {
		for k := range splits(f.n) {
			v := ZMM()
			if k == 0 && init != nil {
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
func (s isums) total() []VecVirtual {
	out := make([]VecVirtual, len(s))
	for t, parts := range s {
		for _, p := range parts[1:] {
			VPADDD(p, parts[0], parts[0])
		}
		out[t] = parts[0]
	}
	return out
}

// dot adds, for every row, the products of weight vector wv (unsigned codes) with the
// four activation codes at off (broadcast) to the row's accumulator for step p.
func (f *intFrame) dot(s isums, wv VecVirtual, off, p int) {
	for t := range f.n {
		if f.vnni {
			VPDPBUSD_BCST(f.x.at(t, off), wv, s.at(t, p))
			continue
		}
		x := ZMM()
		VPBROADCASTD(f.x.at(t, off), x)
		f.madd(wv, x, s.at(t, p))
	}
}

// dotSigned is dot for the BW kernels' signed weights: wv holds |w|, and neg the
// lanes where w < 0, where the activation codes are negated.
func (f *intFrame) dotSigned(s isums, wv VecVirtual, neg OpmaskVirtual, off, p int) {
	for t := range f.n {
		x := ZMM()
		VPBROADCASTD(f.x.at(t, off), x)
		VPSUBB(x, f.z, neg, x)
		f.madd(wv, x, s.at(t, p))
	}
}

// madd is the BW sequence: acc + Σ of each four products of w's unsigned and x's
// signed bytes (x is overwritten).
func (f *intFrame) madd(w, x, acc VecVirtual) {
	VPMADDUBSW(x, w, x)
	VPMADDWD(f.ones, x, x)
	VPADDD(x, acc, acc)
}

// halves loads 16 float16 values at m as float32.
func halves(m Mem) VecVirtual {
	v := ZMM()
	VCVTPH2PS(m, v)
	return v
}

// nibbles unpacks the low (hi false) or high four bits of the 64 code bytes at m; with
// mask ≥ 0 it adds the fifth bits of the 8-byte mask at that offset of the block.
func nibbles(f *intFrame, m Mem, hi bool, mask int, c consts512) VecVirtual {
	v := ZMM()
	switch {
	case !hi:
		VMOVDQU32(m, v)
		VPANDD_BCST(c.low4, v, v)
	default:
		VMOVDQU32(m, v)
		VPSRLD(U8(4), v, v)
		VPANDD_BCST(c.low4, v, v)
	}
	if mask >= 0 {
		k := K()
		KMOVQ(f.weight(mask), k)
		VPADDB(c.bytes16, v, k, v)
	}
	return v
}

// maskAt is the offset off into the masks at base, or −1 when there are none (base < 0).
func maskAt(base, off int) int {
	if base < 0 {
		return -1
	}
	return base + off
}

// block32AVX512 is one block of the 32-value types (and of Q4_Z128, Q4_Z's
// arithmetic for blocks of per = 128 values, the code bytes in 16 steps): the codes
// of 16 rows against each activation row's per codes, the integer sum beginning at the offset of the side data
// (or 0; for Q4_Z and Q4_Z128 at z·(−Σx), each row's zero widened to its lane times
// the side data's −Σx by a 16-bit multiply-add — |Σx| ≤ 128·127 fits —, with VNNI one
// VPDPWSSD of the word broadcast);
// v = isum·(d·dx) [+ m·(dx·Σx)]; acc + v. Q4_Z128's VNNI kernels sum the high
// nibbles unshifted (16 times the code) apart and shift the exact totals down by 4
// once a block: the same integer sum, in fewer instructions.
func block32AVX512(f *intFrame, name string, per int, c consts512) {
	codes, masks, mins, zeros, off := 32, -1, -1, -1, side32Off8
	switch name {
	case "Q4_Z", "Q4_Z128":
		codes, zeros, off = 48, 32, -1
	case "Q8_0":
		if off = side32Off128; !f.vnni {
			off = -1 // |w| and the sign: no bias to undo
		}
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
		z := ZMM()
		VPMOVZXBD(f.weight(zeros), z)
		init = func(t int, v VecVirtual) {
			if f.vnni {
				f.clear(v)
				VPDPWSSD_BCST(f.s.at(t, 4*side32Neg), z, v)
				return
			}
			VPBROADCASTD(f.s.at(t, 4*side32Neg), v)
			VPMADDWD(z, v, v)
		}
	}
	sums := newISums(f, init)
	if name == "Q8_0" && !f.vnni {
		for p := range 8 {
			w := f.weight(32 + 64*p)
			neg, wv := K(), ZMM()
			VMOVDQU32(w, wv)
			VPMOVB2M(wv, neg)
			VPABSB(wv, wv)
			f.dotSigned(sums, wv, neg, 4*p, p)
		}
	} else if name == "Q8_0" {
		sign := ZMM()
		VPBROADCASTD(c.sign, sign)
		for p := range 8 {
			// The codes biased to unsigned (w + 128); the side data's −128·Σx undoes it.
			wv := ZMM()
			VPXORD(f.weight(32+64*p), sign, wv)
			f.dot(sums, wv, 4*p, p)
		}
	} else if name == "Q4_Z128" && f.vnni {
		// The high nibbles stay in place (16 times the code) in sums of their own,
		// whose totals, exactly 16 times the sums of the codes, are shifted down once
		// a block: two instructions a step unpack both nibbles, from the one load.
		low4 := ZMM()
		VPBROADCASTD(c.low4, low4)
		his := newISums(f, nil)
		for p := range per / 8 {
			m := f.weight(codes + 64*p)
			lo, hi := ZMM(), ZMM()
			VPANDD(m, low4, lo)
			f.dot(sums, lo, 4*p, p)
			VPANDND(m, low4, hi) // ¬low4 ∧ m
			f.dot(his, hi, per/2+4*p, p)
		}
		isum, hsum := sums.total(), his.total()
		for t := range f.n {
			VPSRAD(U8(4), hsum[t], hsum[t])
			VPADDD(hsum[t], isum[t], isum[t])
		}
		finish32AVX512(f, isum, mins)
		return
	} else {
		for p := range per / 8 {
			m := f.weight(codes + 64*p)
			lo := nibbles(f, m, false, maskAt(masks, 16*p), c)
			f.dot(sums, lo, 4*p, 2*p)
			hi := nibbles(f, m, true, maskAt(masks, 16*p+8), c)
			f.dot(sums, hi, per/2+4*p, 2*p+1)
		}
	}
	finish32AVX512(f, sums.total(), mins)
}

// finish32AVX512 ends a block of block32AVX512 from each row's integer sum:
// v = isum·(d·dx) [+ m·(dx·Σx)]; acc + v.
func finish32AVX512(f *intFrame, isum []VecVirtual, mins int) {
	d := halves(f.weight(0))
	var m VecVirtual
	if mins >= 0 {
		m = halves(f.weight(mins))
	}
	for t := range f.n {
		s := ZMM()
		VMULPS_BCST(f.s.at(t, 4*sideD), d, s)
		VCVTDQ2PS(isum[t], isum[t])
		VMULPS(s, isum[t], isum[t])
		if mins >= 0 {
			VMULPS_BCST(f.s.at(t, 4*side32DSum), m, s)
			VADDPS(s, isum[t], isum[t])
		}
		f.addAcc(t, isum[t])
	}
}

// kRegs are the constants a K-quant kernel keeps in registers through a block: a
// broadcast memory operand would cost a load per use, and loads are as scarce as the
// multiply pipes VPDPBUSD runs on.
type kRegs struct {
	low4, bytes16, bits45 VecVirtual
}

// kNibbles unpacks the low (hi false) or high four bits of the 64 code bytes m (in
// memory or a register), as nibbles does, the constants from registers; with scaled16
// the high nibbles stay in place (16 times the code).
func kNibbles(f *intFrame, m Op, hi bool, mask int, scaled16 bool, k kRegs) VecVirtual {
	v := ZMM()
	switch {
	case !hi:
		VPANDD(m, k.low4, v)
	case scaled16:
		VPANDND(m, k.low4, v) // ¬low4 ∧ m
	default:
		VPSRLD(U8(4), m, v)
		VPANDD(k.low4, v, v)
	}
	if mask >= 0 {
		km := K()
		KMOVQ(f.weight(mask), km)
		VPADDB(k.bytes16, v, km, v)
	}
	return v
}

// scaleSum adds sc·isum (int32, isum overwritten) to each row's sum, or with first
// makes it the sum.
func scaleSum(sum, isum []VecVirtual, sc VecVirtual, first bool) {
	for t := range isum {
		if first {
			VPMULLD(sc, isum[t], sum[t])
			continue
		}
		VPMULLD(sc, isum[t], isum[t])
		VPADDD(isum[t], sum[t], sum[t])
	}
}

// blockKScaleMinAVX512 is one super-block of Q4_K or Q5_K: per sub-block j (the low
// nibbles of code bytes 32i… for j = 2i, the high ones for j = 2i+1) an integer sum
// isum_j; in int32, S = Σ_j scale_j·isum_j and M = Σ_j min_j·Σx_j (the minimums
// widened to 16-bit pairs against the side data's pairs of sums, two sub-blocks a
// multiply-add); v = S·d − M·dmin; acc + v·dx. The VNNI Q4_K kernels keep the high
// nibbles masked, not shifted (16 times the code), and multiply the low ones' sums by
// 16·scale: they compute 16·S, exactly, in fewer instructions, and take d/16 for d
// (16·S converted is 16 times S converted, and the product is the same).
func blockKScaleMinAVX512(f *intFrame, q5 bool, c consts512) {
	masks, codes := -1, 320
	if q5 {
		masks, codes = 320, 832
	}
	by16 := !q5 && f.vnni
	var k kRegs
	k.low4 = ZMM()
	VPBROADCASTD(c.low4, k.low4)
	if q5 {
		k.bytes16 = ZMM()
		VMOVDQU32(c.bytes16, k.bytes16)
	}
	sum := make([]VecVirtual, f.n)
	for t := range sum {
		sum[t] = ZMM()
	}
	// The two sub-blocks of each 32 code bytes at once: each load of the codes serves
	// both, and twice the independent VPDPBUSD chains hide their latency.
	for i := range 4 {
		lo, hi := newISums(f, nil), newISums(f, nil)
		for p := range 8 {
			w := ZMM()
			VMOVDQU32(f.weight(codes+512*i+64*p), w)
			lv := kNibbles(f, w, false, maskAt(masks, 128*i+16*p), by16, k)
			f.dot(lo, lv, 64*i+4*p, p)
			hv := kNibbles(f, w, true, maskAt(masks, 128*i+16*p+8), by16, k)
			f.dot(hi, hv, 64*i+32+4*p, p)
		}
		for e, sums := range []isums{lo, hi} {
			j := 2*i + e
			sc := ZMM()
			VPMOVZXBD(f.weight(64+16*j), sc)
			if by16 && e == 0 {
				VPSLLD(U8(4), sc, sc)
			}
			scaleSum(sum, sums.total(), sc, j == 0)
		}
	}
	// M: the minimums of sub-blocks 2k and 2k+1 of each row, widened to a 16-bit pair
	// per lane, against the activation rows' pairs of sums.
	msum := make([]VecVirtual, f.n)
	for kk := range 4 {
		mp := ZMM()
		VPMOVZXBW(f.weight(192+32*kk), mp)
		for t := range f.n {
			if f.vnni {
				if kk == 0 {
					msum[t] = ZMM()
					f.clear(msum[t])
				}
				VPDPWSSD_BCST(f.s.at(t, 4*(side256Sum+kk)), mp, msum[t])
				continue
			}
			x := ZMM()
			VPBROADCASTD(f.s.at(t, 4*(side256Sum+kk)), x)
			VPMADDWD(mp, x, x)
			if kk == 0 {
				msum[t] = x
			} else {
				VPADDD(x, msum[t], msum[t])
			}
		}
	}
	d, dmin := halves(f.weight(0)), halves(f.weight(32))
	if by16 {
		VMULPS_BCST(c.sixteenth, d, d)
	}
	for t := range f.n {
		VCVTDQ2PS(sum[t], sum[t])
		VMULPS(d, sum[t], sum[t])
		VCVTDQ2PS(msum[t], msum[t])
		VMULPS(dmin, msum[t], msum[t])
		VSUBPS(msum[t], sum[t], sum[t])
		VMULPS_BCST(f.s.at(t, 4*sideD), sum[t], sum[t])
		f.addAcc(t, sum[t])
	}
}

// q6Codes unpacks the 6-bit codes of quarter q from ql (the low nibbles for q < 2,
// else the high ones) and qh (its two high bits, bits 2q and 2q+1), both registers.
func q6Codes(f *intFrame, ql, qh VecVirtual, q int, k kRegs) VecVirtual {
	v := kNibbles(f, ql, q >= 2, -1, false, k)
	// Bits 2q, 2q+1 of qh to bits 4, 5.
	hv := qh
	switch sh := 4 - 2*q; {
	case sh > 0:
		hv = ZMM()
		VPSLLD(U8(sh), qh, hv)
	case sh < 0:
		hv = ZMM()
		VPSRLD(U8(-sh), qh, hv)
	}
	VPTERNLOGD(U8(0xf8), k.bits45, hv, v) // v | hv&bits45
	return v
}

// pairHalf returns the 32-bit lanes of the low (e = 0) or high 16-bit halves of the
// pairs in p, sign-extended.
func pairHalf(p VecVirtual, e int, mk func() VecVirtual) VecVirtual {
	v := mk()
	if e == 0 {
		VPSLLD(U8(16), p, v)
		VPSRAD(U8(16), v, v)
	} else {
		VPSRAD(U8(16), p, v)
	}
	return v
}

// blockQ6KAVX512 is one super-block of Q6_K: for each 16-value group g, the 6-bit codes
// against the activations, an integer sum isum_g; in int32, S = Σ_g scale_g·(isum_g −
// 32·Σx_g); acc + (S·d)·dx. Quarters q and q+2 of a half, which share their ql and qh
// bytes, go together (all four for up to 4 activation rows): one load of each serves
// them, and more independent VPDPBUSD chains hide their latency. (In every other
// block of a row the codes lie 32 bytes off a cache line, 3360 being 52.5 lines, and
// each load of them takes two.) The BW kernels begin each sum at −32·Σx_g of the
// side data; the VNNI ones add the offsets of two groups with one VPDPWSSD of their
// scales times 32 against the side data's pair of −Σx, half the loads.
func blockQ6KAVX512(f *intFrame, c consts512) {
	var k kRegs
	k.low4, k.bits45 = ZMM(), ZMM()
	VPBROADCASTD(c.low4, k.low4)
	VPBROADCASTD(c.bits45, k.bits45)
	sum := make([]VecVirtual, f.n)
	for t := range sum {
		sum[t] = ZMM()
	}
	// The quarters taken together: all four for up to 4 activation rows (one load of
	// qh serves them), else q and q+2.
	sets := [][]int{{0, 2}, {1, 3}}
	if f.n <= 4 {
		sets = [][]int{{0, 1, 2, 3}}
	}
	first := true
	for h := range 2 {
		for _, qs := range sets {
			for half := range 2 {
				sums := make([]isums, len(qs))
				for e, q := range qs {
					g := 8*h + 2*q + half
					var init func(t int, v VecVirtual)
					if !f.vnni {
						init = func(t int, v VecVirtual) { VPBROADCASTD(f.s.at(t, 4*(side256Off+g)), v) }
					}
					sums[e] = newISums(f, init)
				}
				for p := 4 * half; p < 4*half+4; p++ {
					at := 288 + 1536*h + 192*p
					var ql [2]VecVirtual
					for _, q := range qs[:2] {
						ql[q%2] = ZMM()
						VMOVDQU32(f.weight(at+64*(q%2)), ql[q%2])
					}
					qh := ZMM()
					VMOVDQU32(f.weight(at+128), qh)
					for e, q := range qs {
						v := q6Codes(f, ql[q%2], qh, q, k)
						f.dot(sums[e], v, 128*h+32*q+4*p, p)
					}
				}
				for e, q := range qs {
					g := 8*h + 2*q + half
					pr := ZMM()
					VPMOVSXBW(f.weight(32+32*(g/2)), pr)
					scaleSum(sum, sums[e].total(), pairHalf(pr, half, ZMM), first)
					first = false
					if f.vnni && half == 0 {
						VPSLLW(U8(5), pr, pr)
						for t := range f.n {
							VPDPWSSD_BCST(f.s.at(t, 4*(side256Neg+g/2)), pr, sum[t])
						}
					}
				}
			}
		}
	}
	d := halves(f.weight(0))
	for t := range f.n {
		VCVTDQ2PS(sum[t], sum[t])
		VMULPS(d, sum[t], sum[t])
		VMULPS_BCST(f.s.at(t, 4*sideD), sum[t], sum[t])
		f.addAcc(t, sum[t])
	}
}

// envInt reads a tuning knob of the generator from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// int512Kernels emits every AVX-512 integer kernel, with VNNI or without.
func int512Kernels(vnni bool) {
	prefix, rows := "i512", intRows
	if !vnni {
		prefix, rows = "i512bw", intRowsBW
	}
	c := newConsts512(prefix, !vnni)
	for _, it := range intTypes {
		for n := 1; n <= rows; n++ {
			if only := os.Getenv("ONLY"); only != "" && only != fmt.Sprintf("%s/%d", it.name, n) {
				continue
			}
			int512Kernel(it, n, vnni, c)
		}
	}
}
