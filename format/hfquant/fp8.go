package hfquant

import "github.com/specula/specula/format/dtype"

// fp8 dequantizes an FP8 layer: weight [out, in] float8_e4m3fn and, with a
// weight_block_size [bn, bk], weight_scale_inv [⌈out/bn⌉, ⌈in/bk⌉] — which, despite
// its name, multiplies: W[o][i] = e4m3(w[o][i]) · s[o/bn][i/bk] (DeepSeek-V3's
// weight_dequant), the product rounded once to float32; without a block size, one
// weight_scale for the matrix. A NaN code is an error.
func (s *Scheme) fp8(r *reader) Matrix {
	wt := r.tensor(".weight", 2, "F8_E4M3")
	if r.err != nil {
		return Matrix{}
	}
	out, in := int(wt.Shape[0]), int(wt.Shape[1])
	bn, bk, suffix := s.Block[0], s.Block[1], ".weight_scale_inv"
	if bn == 0 {
		bn, bk, suffix = out, in, ".weight_scale"
	}
	nb, kb := (out+bn-1)/bn, (in+bk-1)/bk
	sc := r.fp8Scale(suffix, nb, kb)
	if r.err != nil {
		return Matrix{}
	}
	w := make([]float32, out*in)
	for o := range out {
		for i := range in {
			b := wt.Data[o*in+i]
			if b&0x7f == 0x7f {
				r.failf(".weight", "NaN at [%d][%d]", o, i)
				return Matrix{}
			}
			w[o*in+i] = dtype.E4M3(b) * sc[(o/bn)*kb+i/bk]
		}
	}
	return Matrix{Rows: out, Cols: in, Data: w}
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
