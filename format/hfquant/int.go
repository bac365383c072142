package hfquant

import "cmp"

// gptq dequantizes a GPTQ layer: qweight [in/p, out] packs input rows p·r + j of
// output column o in slot j of word [r][o] (p = 32/bits codes a word, low bits first);
// qzeros [in/g, out/p] packs output columns p·c + j in slot j; scales [in/g, out].
// W[o][i] = s[g][o] · (q[i][o] − z[g][o]) with g = g_idx[i] under act-order (desc_act)
// and i/g otherwise (vLLM ignores g_idx without desc_act, as here). The original
// checkpoint format stores z − 1: z = stored + 1, without wrapping (as vLLM's
// kernels read it; AutoGPTQ masks the sum to the code width, which differs only
// for a stored 2^bits − 1, which its packer cannot write correctly).
func (s *Scheme) gptq(r *reader) intLayer {
	per := 32 / s.Bits
	qw := r.tensor(".qweight", 2, "I32")
	if r.err != nil {
		return intLayer{}
	}
	in, out := int(qw.Shape[0])*per, int(qw.Shape[1])
	if out%per != 0 {
		r.failf(".qweight", "%d output columns do not divide into words of %d codes (bits %d)", out, per, s.Bits)
	}
	ng := r.groups(in, cmp.Or(s.GroupSize, in), ".qweight", "group_size")
	qz := r.tensor(".qzeros", 2, "I32")
	r.shape(qz, ".qzeros", ng, out/per)
	sc := r.tensor(".scales", 2, "F16", "BF16", "F32")
	r.shape(sc, ".scales", ng, out)
	gidx := s.gptqGroups(r, in, ng)
	scales := r.floats(sc, ".scales")
	if r.err != nil {
		return intLayer{}
	}
	zeros := unpackCols(words(qz), s.Bits, ng, out)
	if s.ZeroMinusOne {
		for i := range zeros {
			zeros[i]++
		}
	}
	// Scales and zeros by output, then group: the groups of one output lie together.
	l := intLayer{rows: out, cols: in, groups: ng, scales: transpose(scales, ng, out), gidx: gidx}
	zeros, q := transpose(zeros, ng, out), words(qw)
	l.codes = make([]int32, out*in)
	for r := range in / per { // a word holds per consecutive inputs of one output
		for o := range out {
			word, dst := q[r*out+o], l.codes[o*in+r*per:o*in+r*per+per]
			for j := range dst {
				dst[j] = code(word, s.Bits, j) - zeros[o*ng+int(gidx[r*per+j])]
			}
		}
	}
	return l
}

// gptqGroups returns the group of every input: g_idx, checked, under act-order;
// i / group_size otherwise.
func (s *Scheme) gptqGroups(r *reader, in, ng int) []int64 {
	if !s.ActOrder {
		return runGroups(in, in/max(ng, 1))
	}
	t := r.tensor(".g_idx", 1, "I32", "I64")
	if !r.shape(t, ".g_idx", in) {
		return nil
	}
	return r.checkGroups(ints(t), ng, ".g_idx")
}

// checkGroups checks that every group index is in [0, ng).
func (r *reader) checkGroups(g []int64, ng int, suffix string) []int64 {
	for i, v := range g {
		if v < 0 || v >= int64(ng) {
			r.failf(suffix, "input %d is in group %d, out of range [0, %d)", i, v, ng)
			return nil
		}
	}
	return g
}

// unpackCols unpacks rows × cols codes packed along the columns, slot j of word
// [r][c] holding column per·c + j.
func unpackCols(w []uint32, bits, rows, cols int) []int32 {
	per, wc := 32/bits, (cols+32/bits-1)/(32/bits)
	out := make([]int32, rows*cols)
	for r := range rows {
		for c := range cols {
			out[r*cols+c] = code(w[r*wc+c/per], bits, c%per)
		}
	}
	return out
}

// unpackRows unpacks rows × cols codes packed along the rows, slot j of word
// [r][c] holding row per·r + j.
func unpackRows(w []uint32, bits, rows, cols int) []int32 {
	per := 32 / bits
	out := make([]int32, rows*cols)
	for r := range rows {
		for c := range cols {
			out[r*cols+c] = code(w[(r/per)*cols+c], bits, r%per)
		}
	}
	return out
}

// transpose returns the cols × rows transpose of a rows × cols matrix.
func transpose[T any](v []T, rows, cols int) []T {
	out := make([]T, len(v))
	for r := range rows {
		for c := range cols {
			out[c*rows+r] = v[r*cols+c]
		}
	}
	return out
}

// awqReverse is AutoAWQ's AWQ_REVERSE_ORDER: column 8c + k of a GEMM word is in
// slot awqReverse(k).
func awqReverse(k int) int { return [8]int{0, 4, 1, 5, 2, 6, 3, 7}[k] }

// awq dequantizes an AutoAWQ GEMM layer: qweight [in, out/8] holds output columns
// 8c … 8c+7 of input row i in word [i][c], column 8c + k in slot [0 4 1 5 2 6 3 7][k]
// (AWQ_ORDER [0 2 4 6 1 3 5 7] packed); qzeros [in/g, out/8] in the same order;
// scales [in/g, out]. W[o][i] = (q[i][o] − z[i/g][o]) · s[i/g][o].
func (s *Scheme) awq(r *reader) intLayer {
	qw := r.tensor(".qweight", 2, "I32")
	if r.err != nil {
		return intLayer{}
	}
	in, out := int(qw.Shape[0]), int(qw.Shape[1])*8
	g := cmp.Or(s.GroupSize, in)
	ng := r.groups(in, g, ".qweight", "group_size")
	qz := r.tensor(".qzeros", 2, "I32")
	r.shape(qz, ".qzeros", ng, out/8)
	sc := r.tensor(".scales", 2, "F16", "BF16", "F32")
	r.shape(sc, ".scales", ng, out)
	scales := r.floats(sc, ".scales")
	if r.err != nil {
		return intLayer{}
	}
	l := intLayer{rows: out, cols: in, groups: ng, scales: transpose(scales, ng, out), gidx: runGroups(in, g)}
	q, z, wc := words(qw), words(qz), out/8
	l.codes = make([]int32, out*in)
	for c := range wc { // a word holds 8 outputs of one input: fill 8 rows along the inputs
		for i := range in {
			word, zw := q[i*wc+c], z[(i/g)*wc+c]
			for k := range 8 {
				slot := awqReverse(k)
				l.codes[(8*c+k)*in+i] = code(word, 4, slot) - code(zw, 4, slot)
			}
		}
	}
	return l
}
