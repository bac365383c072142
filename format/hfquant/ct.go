package hfquant

import "cmp"

// compressed dequantizes a compressed-tensors pack-quantized layer: weight_packed
// [out, ⌈in/p⌉] holds inputs p·c + j of output row o in slot j of word [o][c], each as
// the unsigned code q + 2^(bits−1); weight_shape [2] = [out, in]; weight_scale
// [out, ⌈in/g⌉] (group strategy) or [out, 1] (channel); weight_zero_point, when the
// group is not symmetric, [⌈out/p⌉, groups] packed along the output rows, offset as
// the codes; weight_g_idx [in], when present (actorder), the group of each input.
// W[o][i] = (q[o][i] − zp[o][g]) · s[o][g], g = g_idx[i] or i/g.
func (s *Scheme) compressed(r *reader) intLayer {
	module := r.prefix
	grp, ok := s.group(module)
	if !ok {
		r.failf(".weight_packed", "no config_groups entry targets module %q", module)
		return intLayer{}
	}
	per, offset := 32/grp.Bits, int32(1)<<(grp.Bits-1)
	out, in := r.ctShape()
	if r.err != nil {
		return intLayer{}
	}
	qw := r.tensor(".weight_packed", 2, "I32")
	r.shape(qw, ".weight_packed", out, (in+per-1)/per)
	g := cmp.Or(grp.GroupSize, in)
	ng := (in + g - 1) / g
	sc := r.tensor(".weight_scale", 2, "F16", "BF16", "F32")
	r.shape(sc, ".weight_scale", out, ng)
	gidx := r.ctGroups(in, g, ng)
	scales := r.floats(sc, ".weight_scale")
	if r.err != nil {
		return intLayer{}
	}
	zeros := make([]int32, out*ng)
	if !grp.Symmetric {
		zeros = r.ctZeros(grp.Bits, out, ng, offset)
	}
	if r.err != nil {
		return intLayer{}
	}
	l := intLayer{rows: out, cols: in, groups: ng, scales: scales, gidx: gidx, codes: make([]int32, out*in)}
	q, wc := words(qw), (in+per-1)/per
	for o := range out {
		for i := range in {
			l.codes[o*in+i] = code(q[o*wc+i/per], grp.Bits, i%per) - offset - zeros[o*ng+int(gidx[i])]
		}
	}
	return l
}

// ctShape reads weight_shape.
func (r *reader) ctShape() (out, in int) {
	t := r.tensor(".weight_shape", 1, "I64", "I32")
	if !r.shape(t, ".weight_shape", 2) {
		return 0, 0
	}
	v := ints(t)
	if v[0] <= 0 || v[1] <= 0 || v[0] > 1<<31 || v[1] > 1<<31 {
		r.failf(".weight_shape", "shape %v is not a matrix's", v)
		return 0, 0
	}
	return int(v[0]), int(v[1])
}

// ctGroups returns the group of every input: weight_g_idx, checked, when present,
// else i / g.
func (r *reader) ctGroups(in, g, ng int) []int64 {
	if r.err != nil {
		return nil
	}
	if _, ok := r.src.Tensor(r.prefix + ".weight_g_idx"); ok {
		t := r.tensor(".weight_g_idx", 1, "I32", "I64")
		if !r.shape(t, ".weight_g_idx", in) {
			return nil
		}
		return r.checkGroups(ints(t), ng, ".weight_g_idx")
	}
	return runGroups(in, g)
}

// ctZeros reads weight_zero_point, packed along the output rows, as signed values.
func (r *reader) ctZeros(bits, out, ng int, offset int32) []int32 {
	per := 32 / bits
	t := r.tensor(".weight_zero_point", 2, "I32")
	if !r.shape(t, ".weight_zero_point", (out+per-1)/per, ng) {
		return nil
	}
	z := unpackRows(words(t), bits, out, ng)
	for i := range z {
		z[i] -= offset
	}
	return z
}
