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
// (intdot_generic.go), lane for lane: exact integer sums, then float32 multiplies and
// adds, never fused, in their order.
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
	side256Min   = 1
	side256Off   = 9
)

// consts512 are the constants of the AVX-512 kernels, in read-only data: 4 bytes
// each, broadcast by the instructions that read them, but bytes16, read whole.
type consts512 struct {
	low4, high4, sign, bits45, sixteenth, ones16 Mem
	bytes16                                      Mem // 0x10 in every byte of 64
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
		high4:     word("High4", 0xf0f0f0f0),
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
	case "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1":
		f.loop(it, func() { block32AVX512(f, it.name, c) })
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

// scaleInto adds float32(isum)·s to acc (isum converted in place).
func scaleInto(acc, isum, s VecVirtual) {
	VCVTDQ2PS(isum, isum)
	VMULPS(s, isum, isum)
	VADDPS(isum, acc, acc)
}

// nibbles unpacks the low (hi false) or high four bits of the 64 code bytes at m; with
// mask ≥ 0 it adds the fifth bits of the 8-byte mask at that offset of the block;
// with scaled16 the high nibbles stay in place (16 times the code).
func nibbles(f *intFrame, m Mem, hi bool, mask int, scaled16 bool, c consts512) VecVirtual {
	v := ZMM()
	switch {
	case !hi:
		VMOVDQU32(m, v)
		VPANDD_BCST(c.low4, v, v)
	case scaled16:
		VMOVDQU32(m, v)
		VPANDD_BCST(c.high4, v, v)
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

// block32AVX512 is one block of the 32-value types: the codes of 16 rows against each
// activation row's 32 codes, the integer sum beginning at the offset of the side data
// (or 0); v = isum·(d·dx) [+ m·(dx·Σx)]; acc + v.
func block32AVX512(f *intFrame, name string, c consts512) {
	codes, masks, mins, off := 32, -1, -1, side32Off8
	switch name {
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
	if off >= 0 {
		init = func(t int, v VecVirtual) { VPBROADCASTD(f.s.at(t, 4*off), v) }
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
	} else {
		for p := range 4 {
			m := f.weight(codes + 64*p)
			lo := nibbles(f, m, false, maskAt(masks, 16*p), false, c)
			f.dot(sums, lo, 4*p, 2*p)
			hi := nibbles(f, m, true, maskAt(masks, 16*p+8), false, c)
			f.dot(sums, hi, 16+4*p, 2*p+1)
		}
	}
	isum := sums.total()
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

// subScale returns d·scale of the 16 rows, the scales a byte each at m (signed when
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

// newTmp makes and clears a float vector per row.
func newTmp(f *intFrame) []VecVirtual {
	tmp := make([]VecVirtual, f.n)
	for t := range tmp {
		tmp[t] = ZMM()
		f.clear(tmp[t])
	}
	return tmp
}

// blockKScaleMinAVX512 is one super-block of Q4_K or Q5_K: per sub-block j (the low
// nibbles of code bytes 32i… for j = 2i, the high ones for j = 2i+1) an integer sum,
// added to tmp with its scale in order of j; corr = Σ_j (dmin·min_j)·(dx·Σx_j); acc +
// (tmp·dx − corr). Q4_K's high nibbles are masked, not shifted (16 times the code),
// with the scale divided by 16: the same products, exactly, in fewer instructions.
func blockKScaleMinAVX512(f *intFrame, q5 bool, c consts512) {
	masks, codes := -1, 320
	if q5 {
		masks, codes = 320, 832
	}
	tmp := newTmp(f)
	d := halves(f.weight(0))
	for j := range 8 {
		i, hi := j/2, j%2 == 1
		sums := newISums(f, nil)
		for p := range 8 {
			wv := nibbles(f, f.weight(codes+512*i+64*p), hi, maskAt(masks, 128*i+16*p+8*(j%2)), !q5 && f.vnni, c)
			f.dot(sums, wv, 64*i+32*(j%2)+4*p, p)
		}
		isum := sums.total()
		s := subScale(d, f.weight(64+16*j), false, hi && !q5 && f.vnni, c)
		for t := range f.n {
			scaleInto(tmp[t], isum[t], s)
		}
	}
	corr := newTmp(f)
	dmin := halves(f.weight(32))
	for j := range 8 {
		mm := subScale(dmin, f.weight(192+16*j), false, false, c)
		for t := range f.n {
			p := ZMM()
			VMULPS_BCST(f.s.at(t, 4*(side256Min+j)), mm, p)
			VADDPS(p, corr[t], corr[t])
		}
	}
	for t := range f.n {
		VMULPS_BCST(f.s.at(t, 4*sideD), tmp[t], tmp[t])
		VSUBPS(corr[t], tmp[t], tmp[t])
		f.addAcc(t, tmp[t])
	}
}

// blockQ6KAVX512 is one super-block of Q6_K: for each half h and each half of its
// 4-byte steps, the four quarters' 6-bit codes (low or high nibbles of ql with their two
// high bits from qh) against the activations, each integer sum beginning at −32·Σx of
// its group and going into tmp with its scale as it is done, in the order of q6KOrder;
// acc + tmp·dx.
func blockQ6KAVX512(f *intFrame, c consts512) {
	tmp := newTmp(f)
	d := halves(f.weight(0))
	for h := range 2 {
		for half := range 2 {
			for q := range 4 {
				g := 8*h + 2*q + half
				sums := newISums(f, func(t int, v VecVirtual) { VPBROADCASTD(f.s.at(t, 4*(side256Off+g)), v) })
				for p := 4 * half; p < 4*half+4; p++ {
					at := 288 + 1536*h + 192*p
					ql := f.weight(at + 64*(q%2))
					v := nibbles(f, ql, q >= 2, -1, false, c)
					// The two high bits of quarter q are bits 2q, 2q+1 of qh: to bits 4, 5.
					hv := ZMM()
					VMOVDQU32(f.weight(at+128), hv)
					switch sh := 4 - 2*q; {
					case sh > 0:
						VPSLLD(U8(sh), hv, hv)
					case sh < 0:
						VPSRLD(U8(-sh), hv, hv)
					}
					VPANDD_BCST(c.bits45, hv, hv)
					VPORD(hv, v, v)
					f.dot(sums, v, 128*h+32*q+4*p, p)
				}
				isum := sums.total()
				s := subScale(d, f.weight(32+16*g), true, false, c)
				for t := range f.n {
					scaleInto(tmp[t], isum[t], s)
				}
			}
		}
	}
	for t := range f.n {
		VMULPS_BCST(f.s.at(t, 4*sideD), tmp[t], tmp[t])
		f.addAcc(t, tmp[t])
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
