package hfquant

import (
	"errors"
	"fmt"
	"strings"

	"github.com/specula/specula/format/dtype"
)

// ErrNotExact is wrapped by the error of [Scheme.PackedAs] when none of the allowed
// types holds a layer's values exactly.
var ErrNotExact = errors.New("no exact repacking")

// PackedAs returns the linear layer prefix repacked into the first of the allowed
// types (dtype.Q4_0, dtype.Q8_0, in the order given) that holds its values exactly —
// the same codes, the same float16 scale per run of 32 inputs, as [Scheme.Packed]
// explains — for writers of files whose readers know only those types: GGUF, whose
// Q4_0 and Q8_0 are llama.cpp's. Unlike Packed, which may choose any block type the
// runtime has, it never returns a type not allowed. When no allowed type holds the
// layer, the error wraps ErrNotExact and says why: FP8 values, an act-order
// permutation that splits a block of 32 inputs over groups, scales that are not
// float16 values, codes beyond every allowed type's range.
func (s *Scheme) PackedAs(src Source, prefix string, allowed ...dtype.DType) (Packing, error) {
	if s.Method == FP8 {
		return Packing{}, fmt.Errorf("hfquant: %s: %w: FP8 e4m3 values times a float32 block scale share no integer grid", prefix, ErrNotExact)
	}
	l, err := s.integer(src, prefix)
	if err != nil {
		return Packing{}, err
	}
	blockGroups, ok := l.blockGroups(32)
	if !ok {
		why := fmt.Sprintf("%d inputs are not whole blocks of 32", l.cols)
		if l.cols%32 == 0 {
			why = "act-order (g_idx): the 32 inputs of a block lie in different groups, and no block type holds an input permutation"
		}
		return Packing{}, fmt.Errorf("hfquant: %s: %w: %s", prefix, ErrNotExact, why)
	}
	half, ok := l.halfScales()
	if !ok {
		return Packing{}, fmt.Errorf("hfquant: %s: %w: a scale is not a float16 value", prefix, ErrNotExact)
	}
	lo, hi := l.codeRange()
	var names []string
	for _, t := range allowed {
		names = append(names, t.String())
		switch {
		case t == dtype.Q4_0 && lo >= -8 && hi <= 7:
			return Packing{Type: t, Data: l.encode(blockGroups, half, 18, putQ4), Rows: l.rows, Cols: l.cols, Stored: l.stored}, nil
		case t == dtype.Q8_0 && lo >= -128 && hi <= 127:
			return Packing{Type: t, Data: l.encode(blockGroups, half, 34, putQ8), Rows: l.rows, Cols: l.cols, Stored: l.stored}, nil
		}
	}
	return Packing{}, fmt.Errorf("hfquant: %s: %w: codes q − z span [%d, %d], beyond what %s hold (Q4_0: [−8, 7], Q8_0: [−128, 127])",
		prefix, ErrNotExact, lo, hi, strings.Join(names, " and "))
}

// LayerOf reports whether the tensor name is one of the stored tensors of a
// quantized linear layer of the scheme (in src), and returns the layer's prefix and
// whether name is its packed weight (qweight, weight_packed, the F8_E4M3 weight),
// the tensor that stands for the layer; the others (zero points, scales, g_idx,
// weight_shape, FP8's input_scale) are read with it. A converter walking a
// checkpoint's tensors uses it to write each layer once.
func (s *Scheme) LayerOf(src Source, name string) (prefix string, packed, ok bool) {
	var main string
	var others []string
	switch s.Method {
	case GPTQ, AWQ:
		main, others = ".qweight", []string{".qzeros", ".scales", ".g_idx"}
	case CompressedTensors:
		main, others = ".weight_packed", []string{".weight_scale", ".weight_shape", ".weight_zero_point", ".weight_g_idx"}
	case FP8:
		main, others = ".weight", []string{".weight_scale_inv", ".weight_scale", ".input_scale"}
	default:
		return "", false, false
	}
	for i, suffix := range append([]string{main}, others...) {
		if p, cut := strings.CutSuffix(name, suffix); cut && s.Quantized(src, p) {
			return p, i == 0, true
		}
	}
	return "", false, false
}
