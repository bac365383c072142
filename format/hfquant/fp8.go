package hfquant

import (
	"encoding/binary"
	"math"

	"github.com/specula/specula/format/dtype"
)

// fp8Weights is an FP8 layer as stored: weight [out, in] float8_e4m3fn codes and, with
// a weight_block_size [bn, bk], weight_scale_inv [⌈out/bn⌉, ⌈in/bk⌉] — which, despite
// its name, multiplies: W[o][i] = e4m3(w[o][i]) · s[o/bn][i/bk] (DeepSeek-V3's
// weight_dequant), the product rounded once to float32; without a block size, one
// weight_scale for the matrix (bn = out, bk = in).
type fp8Weights struct {
	out, in, bn, bk, kb int
	codes               []byte
	scales              []float32 // ⌈out/bn⌉ × kb
	stored              int64     // bytes of the stored tensors
}

// scale is the scale of value [o][i].
func (l fp8Weights) scale(o, i int) float32 { return l.scales[(o/l.bn)*l.kb+i/l.bk] }

// fp8 reads an FP8 layer. A NaN code is an error naming the tensor and the value.
func (s *Scheme) fp8(r *reader) fp8Weights {
	wt := r.tensor(".weight", 2, "F8_E4M3")
	if r.err != nil {
		return fp8Weights{}
	}
	out, in := int(wt.Shape[0]), int(wt.Shape[1])
	bn, bk, suffix := s.Block[0], s.Block[1], ".weight_scale_inv"
	if bn == 0 {
		bn, bk, suffix = out, in, ".weight_scale"
	}
	nb, kb := (out+bn-1)/bn, (in+bk-1)/bk
	sc := r.fp8Scale(suffix, nb, kb)
	if r.err != nil {
		return fp8Weights{}
	}
	for j, b := range wt.Data {
		if b&0x7f == 0x7f {
			r.failf(".weight", "NaN at [%d][%d]", j/in, j%in)
			return fp8Weights{}
		}
	}
	return fp8Weights{out: out, in: in, bn: bn, bk: bk, kb: kb, codes: wt.Data, scales: sc, stored: r.stored}
}

// dense expands the layer to float32: E4M3(code) · scale, rounded once.
func (l fp8Weights) dense() Matrix {
	w := make([]float32, l.out*l.in)
	for o := range l.out {
		for i := range l.in {
			w[o*l.in+i] = dtype.E4M3(l.codes[o*l.in+i]) * l.scale(o, i)
		}
	}
	return Matrix{Rows: l.out, Cols: l.in, Data: w, Stored: l.stored}
}

// packing is the layer as F8_E4M3_B128 where that holds it (see pack).
func (l fp8Weights) packing() (Packing, bool) {
	data, ok := l.pack()
	return Packing{Type: dtype.F8_E4M3_B128, Data: data, Rows: l.out, Cols: l.in, Stored: l.stored}, ok
}

// pack lays the layer out as dtype.F8_E4M3_B128 — each row's 128-value runs with the
// scale of the block they lie in — when that type holds it exactly: every run of 128
// inputs lies in one scale block (in a multiple of 128 and bk a multiple of 128, or
// one scale for the matrix) and the scales are within the products' range
// (dtype.CheckF8). Then dtype.Dequantize of the bytes is Dense's values, bit for bit.
func (l fp8Weights) pack() ([]byte, bool) {
	const block, bb = 128, 132
	if l.in%block != 0 || (l.bk%block != 0 && l.kb != 1) {
		return nil, false
	}
	for _, s := range l.scales {
		if a := math.Abs(float64(s)); a >= dtype.F8MaxScale && !math.IsInf(a, 1) {
			return nil, false
		}
	}
	runs := l.in / block
	data := make([]byte, l.out*runs*bb)
	for o := range l.out {
		for j := range runs {
			blk := data[(o*runs+j)*bb : (o*runs+j+1)*bb]
			binary.LittleEndian.PutUint32(blk, math.Float32bits(l.scale(o, j*block)))
			copy(blk[4:], l.codes[o*l.in+j*block:o*l.in+(j+1)*block])
		}
	}
	return data, true
}

// fp8Scale reads the nb × kb block scales (a scalar or [1] for one block).
func (r *reader) fp8Scale(suffix string, nb, kb int) []float32 {
	t, ok := r.src.Tensor(r.prefix + suffix)
	if !ok {
		r.failf(suffix, "missing")
		return nil
	}
	if nb*kb == 1 && len(t.Shape) < 2 {
		t = r.tensor(suffix, len(t.Shape), "F32", "BF16", "F16")
		if r.err == nil && t.Elements() != 1 {
			r.failf(suffix, "shape %v, want one scale", t.Shape)
		}
		return r.floats(t, suffix)
	}
	t = r.tensor(suffix, 2, "F32", "BF16", "F16")
	r.shape(t, suffix, nb, kb)
	return r.floats(t, suffix)
}
