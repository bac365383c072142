package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The K-quant formats of llama.cpp (ggml's block_q4_K, block_q5_K and block_q6_K)
// store 256 values in a super-block.
//
// Q4_K, 144 bytes: float16 d at 0, float16 dmin at 2, 12 bytes of packed 6-bit scales
// and mins at 4, 128 bytes of 4-bit codes at 16. The super-block holds 8 sub-blocks of
// 32 values; value v of sub-block j is d·sc[j]·q − dmin·m[j]. Sub-blocks 2i and 2i+1
// share the 32 code bytes at 16+32i: 2i in the low nibbles, 2i+1 in the high ones.
// The scales: for j < 4, sc[j] and m[j] are the low 6 bits of bytes j and j+4; for
// j ≥ 4, byte j+4 holds the low 4 bits of sc[j] (low nibble) and m[j] (high nibble),
// and their top 2 bits are the top 2 bits of bytes j−4 (sc) and j (m).
//
// Q6_K, 210 bytes: 128 bytes ql (low 4 bits of the codes) at 0, 64 bytes qh (high 2
// bits) at 128, 16 int8 scales at 192, float16 d at 208. Value v is
// d·scale[v/16]·(q − 32) with a 6-bit code q. Each half h of 128 values uses ql[64h:],
// qh[32h:]: for l < 32, value 128h+l has ql[l]&15, 128h+32+l has ql[l+32]&15,
// 128h+64+l has ql[l]>>4, 128h+96+l has ql[l+32]>>4, and their high bits are bits
// 0–1, 2–3, 4–5, 6–7 of qh[l].
//
// Q5_K, 176 bytes: float16 d at 0, float16 dmin at 2, the 12 bytes of scales and mins
// of Q4_K at 4, 32 bytes qh at 16, 128 bytes of low nibbles at 48, laid out as Q4_K's
// codes. Value v of sub-block j is d·sc[j]·q − dmin·m[j] with a 5-bit code q whose
// fifth bit is bit j of qh[v mod 32].
const (
	kBlock        = 256 // values per K-quant super-block
	q4KBlockBytes = 144
	q5KBlockBytes = 176
	q6KBlockBytes = 210
)

// KScaleMin returns the 6-bit scale and min of sub-block j of a Q4_K or Q5_K
// super-block from its 12 packed scale bytes.
func KScaleMin(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | s[j-4]>>6<<4, s[j+4]>>4 | s[j]>>6<<4
}

// PackKScaleMin packs eight 6-bit scales and mins into the 12 scale bytes of a Q4_K or
// Q5_K super-block: the inverse of [KScaleMin].
func PackKScaleMin(dst []byte, sc, m [8]uint8) {
	clear(dst[:12])
	for j := range 8 {
		if j < 4 {
			dst[j] = sc[j]
			dst[j+4] = m[j]
		} else {
			dst[j+4] = sc[j]&0xf | m[j]&0xf<<4
			dst[j-4] |= sc[j] >> 4 << 6
			dst[j] |= m[j] >> 4 << 6
		}
	}
}

// kSubScales returns the scales and minimums of sub-blocks 2i and 2i+1 of a Q4_K or
// Q5_K super-block: d·scale and dmin·min, each rounded as the reference rounds them.
func kSubScales(blk []byte, i int) (d0, mn0, d1, mn1 float32) {
	d := F16ToF32(binary.LittleEndian.Uint16(blk))
	dmin := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
	sc0, m0 := KScaleMin(2*i, blk[4:16])
	sc1, m1 := KScaleMin(2*i+1, blk[4:16])
	return d * float32(sc0), dmin * float32(m0), d * float32(sc1), dmin * float32(m1)
}

// dequantQ4KBlock decodes one Q4_K super-block into dst[:256].
func dequantQ4KBlock(blk []byte, dst []float32) {
	for i := range 4 {
		d0, mn0, d1, mn1 := kSubScales(blk, i)
		q := blk[16+32*i : 16+32*i+32]
		y := dst[64*i : 64*i+64]
		for l, b := range q {
			// Explicit conversions keep the product rounded before the subtraction,
			// as the reference computes it.
			y[l] = float32(d0*float32(b&0xf)) - mn0
			y[32+l] = float32(d1*float32(b>>4)) - mn1
		}
	}
}

// dequantQ5KBlock decodes one Q5_K super-block into dst[:256].
func dequantQ5KBlock(blk []byte, dst []float32) {
	qh := blk[16:48]
	for i := range 4 {
		d0, mn0, d1, mn1 := kSubScales(blk, i)
		q := blk[48+32*i : 48+32*i+32]
		y := dst[64*i : 64*i+64]
		for l, b := range q {
			lo := b&0xf | qh[l]>>(2*i)&1<<4
			hi := b>>4 | qh[l]>>(2*i+1)&1<<4
			y[l] = float32(d0*float32(lo)) - mn0
			y[32+l] = float32(d1*float32(hi)) - mn1
		}
	}
}

// dequantQ6KBlock decodes one Q6_K super-block into dst[:256].
func dequantQ6KBlock(blk []byte, dst []float32) {
	d := F16ToF32(binary.LittleEndian.Uint16(blk[208:]))
	for h := range 2 {
		ql := blk[64*h : 64*h+64]
		qh := blk[128+32*h : 128+32*h+32]
		sc := blk[192+8*h : 192+8*h+8]
		y := dst[128*h : 128*h+128]
		for l := range 32 {
			is := l / 16
			q1 := int32(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
			q2 := int32(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
			q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			y[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
			y[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
			y[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
			y[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
		}
	}
}

// dequantizeK decodes the K-quant types.
func dequantizeK(t DType, src []byte, dst []float32) error {
	var size int
	var dec func(blk []byte, dst []float32)
	switch t {
	case Q4_K:
		size, dec = q4KBlockBytes, dequantQ4KBlock
	case Q5_K:
		size, dec = q5KBlockBytes, dequantQ5KBlock
	case Q6_K:
		size, dec = q6KBlockBytes, dequantQ6KBlock
	default:
		return fmt.Errorf("dtype: type %s is not supported", t)
	}
	for b := 0; b < len(dst)/kBlock; b++ {
		dec(src[b*size:(b+1)*size], dst[b*kBlock:(b+1)*kBlock])
	}
	return nil
}

// nearestInt rounds to the nearest integer, halves to even, as ggml's nearest_int.
func nearestInt(x float32) int {
	if !(math.Abs(float64(x)) < 1<<30) { // NaN, Inf or huge: callers clamp
		if x < 0 {
			return -1 << 30
		}
		return 1 << 30
	}
	return int(math.RoundToEven(float64(x)))
}

func clampInt(v, lo, hi int) int { return max(lo, min(hi, v)) }

// QuantizeQ4_K encodes src (a multiple of 256 values) into dst as Q4_K super-blocks,
// following llama.cpp's reference quantizer: per 32-value sub-block a weighted
// least-squares search for the scale and min of 4-bit codes, then the scales and mins
// quantised to 6 bits against the super-block's float16 d and dmin, and the codes
// recomputed with the quantised scales. Every product is rounded before it is added
// (explicit conversions forbid fused multiply-adds, which Go may use on some
// platforms), as in the reference's compiled C, so that the blocks are byte-identical
// to llama.cpp's quantize_row_q4_K_ref (testdata/quant_llamacpp.bin checks it).
func QuantizeQ4_K(src []float32, dst []byte) {
	quantizeScaleMin(src, dst, q4KBlockBytes, 15, -1, 20, func(codes []uint8, out []byte) {
		for i := range 4 {
			q := out[16+32*i : 16+32*i+32]
			for l := range q {
				q[l] = codes[64*i+l] | codes[64*i+32+l]<<4
			}
		}
	})
}

// QuantizeQ5_K encodes src (a multiple of 256 values) into dst as Q5_K super-blocks,
// as QuantizeQ4_K does Q4_K (llama.cpp's quantize_row_q5_K_ref: 5-bit codes, a search
// of 16 step counts from −0.5).
func QuantizeQ5_K(src []float32, dst []byte) {
	quantizeScaleMin(src, dst, q5KBlockBytes, 31, -0.5, 15, func(codes []uint8, out []byte) {
		qh := out[16:48]
		clear(qh)
		for i := range 4 {
			q := out[48+32*i : 48+32*i+32]
			for l := range q {
				lo, hi := codes[64*i+l], codes[64*i+32+l]
				q[l] = lo&0xf | hi&0xf<<4
				qh[l] |= lo>>4<<(2*i) | hi>>4<<(2*i+1)
			}
		}
	})
}

// quantizeScaleMin is the reference quantizer of the K-quants with a scale and a min
// per 32-value sub-block (Q4_K, Q5_K): codes in [0, nmax], fitted with fitScaleMin's
// search of nstep+1 step counts from rmin, then pack stores the codes of a super-block.
func quantizeScaleMin(src []float32, dst []byte, size, nmax int, rmin float32, nstep int, pack func(codes []uint8, out []byte)) {
	var (
		codes   [kBlock]uint8
		scales  [8]float32
		mins    [8]float32
		weights [32]float32
	)
	for b := 0; b < len(src)/kBlock; b++ {
		x := src[b*kBlock : (b+1)*kBlock]
		out := dst[b*size : (b+1)*size]
		var maxScale, maxMin float32
		for j := range 8 {
			xs := x[32*j : 32*j+32]
			var sum2 float32
			for _, v := range xs {
				sum2 += float32(v * v)
			}
			av := float32(math.Sqrt(float64(sum2 / 32)))
			for l, v := range xs {
				weights[l] = av + float32(math.Abs(float64(v)))
			}
			scales[j], mins[j] = fitScaleMin(xs, weights[:], codes[32*j:32*j+32], nmax, rmin, 0.1, nstep)
			maxScale = max(maxScale, scales[j])
			maxMin = max(maxMin, mins[j])
		}
		var invScale, invMin float32
		if maxScale > 0 {
			invScale = 63 / maxScale
		}
		if maxMin > 0 {
			invMin = 63 / maxMin
		}
		var ls, lm [8]uint8
		for j := range 8 {
			ls[j] = uint8(clampInt(nearestInt(invScale*scales[j]), 0, 63))
			lm[j] = uint8(clampInt(nearestInt(invMin*mins[j]), 0, 63))
		}
		packed := out[4:16]
		PackKScaleMin(packed, ls, lm)
		binary.LittleEndian.PutUint16(out, F32ToF16(maxScale/63))
		binary.LittleEndian.PutUint16(out[2:], F32ToF16(maxMin/63))
		d := F16ToF32(binary.LittleEndian.Uint16(out))
		dmin := F16ToF32(binary.LittleEndian.Uint16(out[2:]))
		for j := range 8 {
			sc, m := KScaleMin(j, packed)
			ds := d * float32(sc)
			if ds == 0 {
				continue
			}
			dm := dmin * float32(m)
			for l := range 32 {
				codes[32*j+l] = uint8(clampInt(nearestInt((x[32*j+l]+dm)/ds), 0, nmax))
			}
		}
		pack(codes[:], out)
	}
}

// fitScaleMin finds scale ≥ 0 and min ≥ 0 such that x ≈ scale·L − min with integer
// codes L in [0, nmax], minimising the weighted squared error: the codes of the range
// [min(x, 0), max(x)] in nmax steps, then nstep+1 other step counts, each refined by a
// weighted least-squares fit of scale and min to its codes, keeping the best (ggml's
// make_qkx2_quants). As in the reference, each improvement also moves the offset the
// later candidates' codes are computed from. It writes the codes to L.
func fitScaleMin(x, w []float32, L []uint8, nmax int, rmin, rdelta float32, nstep int) (scale, theMin float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW, sumX := w[0], w[0]*x[0]
	for i := 1; i < n; i++ {
		lo = min(lo, x[i])
		hi = max(hi, x[i])
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	lo = min(lo, 0)
	if hi == lo {
		clear(L)
		return 0, -lo
	}
	iscale := float32(nmax) / (hi - lo)
	scale = 1 / iscale
	var best float32
	for i := range n {
		l := clampInt(nearestInt(iscale*(x[i]-lo)), 0, nmax)
		L[i] = uint8(l)
		diff := float32(scale*float32(l)) + lo - x[i]
		best += float32(w[i] * diff * diff)
	}
	var aux [32]uint8
	for is := 0; is <= nstep; is++ {
		iscale := (rmin + float32(rdelta*float32(is)) + float32(nmax)) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := range n {
			l := clampInt(nearestInt(iscale*(x[i]-lo)), 0, nmax)
			aux[i] = uint8(l)
			fl := float32(l)
			sumL += float32(w[i] * fl)
			sumL2 += float32(w[i] * fl * fl)
			sumXL += float32(w[i] * fl * x[i])
		}
		det := float32(sumW*sumL2) - float32(sumL*sumL)
		if det <= 0 {
			continue
		}
		s := (float32(sumW*sumXL) - float32(sumX*sumL)) / det
		m := (float32(sumL2*sumX) - float32(sumL*sumXL)) / det
		if m > 0 {
			m = 0
			s = sumXL / sumL2
		}
		var e float32
		for i := range n {
			diff := float32(s*float32(aux[i])) + m - x[i]
			e += float32(w[i] * diff * diff)
		}
		if e < best {
			copy(L, aux[:n])
			best, scale, lo = e, s, m
		}
	}
	return scale, -lo
}

// QuantizeQ6_K encodes src (a multiple of 256 values) into dst as Q6_K super-blocks,
// following llama.cpp's reference quantizer: per 16-value group a scale for codes in
// [−32, 31] chosen by a search that maximises the x²-weighted fit, the group scales
// quantised to int8 against the super-block's float16 d, and the codes recomputed
// with the quantised scales. As for QuantizeQ4_K, the blocks are byte-identical to
// llama.cpp's quantize_row_q6_K_ref.
func QuantizeQ6_K(src []float32, dst []byte) {
	var (
		codes  [kBlock]int8
		scales [16]float32
	)
	for b := 0; b < len(src)/kBlock; b++ {
		x := src[b*kBlock : (b+1)*kBlock]
		out := dst[b*q6KBlockBytes : (b+1)*q6KBlockBytes]
		var maxScale, maxAbs float32
		for g := range 16 {
			s := fitSymmetric(x[16*g:16*g+16], codes[16*g:16*g+16], 32)
			scales[g] = s
			if a := float32(math.Abs(float64(s))); a > maxAbs {
				maxAbs, maxScale = a, s
			}
		}
		clear(out)
		if maxAbs < 1e-15 {
			continue // all zero
		}
		iscale := -128 / maxScale
		binary.LittleEndian.PutUint16(out[208:], F32ToF16(1/iscale))
		for g := range 16 {
			out[192+g] = byte(int8(clampInt(nearestInt(iscale*scales[g]), -128, 127)))
		}
		d := F16ToF32(binary.LittleEndian.Uint16(out[208:]))
		for g := range 16 {
			ds := d * float32(int8(out[192+g]))
			if ds == 0 {
				continue // keep the first pass's codes, as the reference does: they decode to 0
			}
			for l := range 16 {
				codes[16*g+l] = int8(clampInt(nearestInt(x[16*g+l]/ds), -32, 31))
			}
		}
		for h := range 2 {
			ql := out[64*h : 64*h+64]
			qh := out[128+32*h : 128+32*h+32]
			c := codes[128*h : 128*h+128]
			for l := range 32 {
				q1 := uint8(c[l] + 32)
				q2 := uint8(c[l+32] + 32)
				q3 := uint8(c[l+64] + 32)
				q4 := uint8(c[l+96] + 32)
				ql[l] = q1&0xf | q3&0xf<<4
				ql[l+32] = q2&0xf | q4&0xf<<4
				qh[l] = q1>>4 | q2>>4<<2 | q3>>4<<4 | q4>>4<<6
			}
		}
	}
}

// fitSymmetric finds a scale (signed: the value of largest magnitude maps to −nmax)
// for codes in [−nmax, nmax−1], trying 19 step sizes around max/nmax and keeping the
// one whose x²-weighted least-squares scale fits best (ggml's make_qx_quants with
// rmse_type 1). It writes the codes to L.
func fitSymmetric(x []float32, L []int8, nmax int) float32 {
	mx := largest(x)
	if amax := float32(math.Abs(float64(mx))); amax < 1e-15 {
		for i := range L {
			L[i] = int8(-nmax) // code 0, as the reference writes
		}
		return 0
	}
	codes := func(iscale float32, store bool) (sumLX, sumL2 float32) {
		for i, v := range x {
			l := clampInt(nearestInt(iscale*v), -nmax, nmax-1)
			if store {
				L[i] = int8(l)
			}
			w := v * v
			sumLX += float32(w * v * float32(l))
			sumL2 += float32(w * float32(l) * float32(l))
		}
		return sumLX, sumL2
	}
	sumLX, sumL2 := codes(-float32(nmax)/mx, true)
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := scale * sumLX
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale := -(float32(nmax) + float32(0.1*float32(is))) / mx
		lx, l2 := codes(iscale, false)
		if l2 > 0 && float32(lx*lx) > float32(best*l2) {
			codes(iscale, true)
			scale = lx / l2
			best = scale * lx
		}
	}
	return scale
}
