package hfquant

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
)

// Source is where a checkpoint's tensors are found: a *safetensors.Set.
type Source interface {
	Tensor(name string) (*safetensors.Tensor, bool)
}

// pather is a Source that knows the file of each tensor, for errors.
type pather interface {
	Path(name string) (string, bool)
}

// Matrix is a layer's dense weight matrix, Rows × Cols (out × in), row-major.
type Matrix struct {
	Rows, Cols int
	Data       []float32
	// Stored is the bytes of the stored tensors it was made from.
	Stored int64
}

// Quantized reports whether the linear layer prefix ("model.layers.0.self_attn.q_proj")
// is stored in the scheme's form: its packed weight is present (qweight,
// weight_packed, or an F8_E4M3 weight).
func (s *Scheme) Quantized(src Source, prefix string) bool {
	switch s.Method {
	case GPTQ, AWQ:
		_, ok := src.Tensor(prefix + ".qweight")
		return ok
	case CompressedTensors:
		_, ok := src.Tensor(prefix + ".weight_packed")
		return ok
	case FP8:
		t, ok := src.Tensor(prefix + ".weight")
		return ok && t.TypeName == "F8_E4M3"
	}
	return false
}

// Dense returns the dense weight matrix of the linear layer prefix, whose tensors
// are prefix.qweight, prefix.scales, … as the scheme stores them. Errors name the
// file, the tensor and the configuration key at fault.
func (s *Scheme) Dense(src Source, prefix string) (Matrix, error) {
	l, err := s.read(src, prefix)
	if err != nil {
		return Matrix{}, err
	}
	return l.dense(), nil
}

// integer reads an integer-coded layer (GPTQ, AWQ, compressed-tensors) as its codes
// minus zero points and its scales.
func (s *Scheme) integer(src Source, prefix string) (intLayer, error) {
	r := &reader{src: src, prefix: prefix}
	var l intLayer
	switch s.Method {
	case GPTQ:
		l = s.gptq(r)
	case AWQ:
		l = s.awq(r)
	case CompressedTensors:
		l = s.compressed(r)
	default:
		return intLayer{}, fmt.Errorf("hfquant: %s: quant_method %q is not supported", prefix, s.Method)
	}
	if r.err != nil {
		return intLayer{}, r.err
	}
	l.stored = r.stored
	return l, nil
}

// reader reads the tensors of one layer, keeping the first error.
type reader struct {
	src    Source
	prefix string
	err    error
	stored int64 // bytes of the tensors read
}

// failf records an error about the layer's tensor suffix, naming the file that
// holds it (or, for a missing one, the file of the layer's packed weight).
func (r *reader) failf(suffix, format string, args ...any) {
	if r.err != nil {
		return
	}
	name, file := r.prefix+suffix, ""
	if p, ok := r.src.(pather); ok {
		for _, n := range []string{name, r.prefix + ".qweight", r.prefix + ".weight_packed", r.prefix + ".weight"} {
			if f, found := p.Path(n); found && file == "" {
				file = f + ": "
			}
		}
	}
	r.err = fmt.Errorf("hfquant: %stensor %q: %w", file, name, fmt.Errorf(format, args...))
}

// tensor returns the layer's tensor suffix with one of the given types and dims
// dimensions; nil (and an error recorded) when it is missing or malformed.
func (r *reader) tensor(suffix string, dims int, types ...string) *safetensors.Tensor {
	if r.err != nil {
		return nil
	}
	t, ok := r.src.Tensor(r.prefix + suffix)
	if !ok {
		r.failf(suffix, "missing")
		return nil
	}
	if !slices.Contains(types, t.TypeName) {
		r.failf(suffix, "type %s, want %v", t.TypeName, types)
		return nil
	}
	if len(t.Shape) != dims {
		r.failf(suffix, "shape %v, want %d dimensions", t.Shape, dims)
		return nil
	}
	for _, d := range t.Shape {
		if d <= 0 || d > 1<<31 {
			r.failf(suffix, "shape %v has an empty or oversized dimension", t.Shape)
			return nil
		}
	}
	if bits, _ := safetensors.TypeBits(t.TypeName); int64(len(t.Data))*8 != t.Elements()*bits {
		r.failf(suffix, "%d bytes for shape %v of %s", len(t.Data), t.Shape, t.TypeName)
		return nil
	}
	r.stored += int64(len(t.Data))
	return t
}

// shape checks that tensor t (named by suffix) has the given shape.
func (r *reader) shape(t *safetensors.Tensor, suffix string, want ...int) bool {
	if r.err != nil || t == nil {
		return false
	}
	for i, w := range want {
		if t.Shape[i] != int64(w) {
			r.failf(suffix, "shape %v, want %v", t.Shape, want)
			return false
		}
	}
	return true
}

// words returns an I32 tensor's values as uint32.
func words(t *safetensors.Tensor) []uint32 {
	out := make([]uint32, len(t.Data)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(t.Data[4*i:])
	}
	return out
}

// ints returns an I32 or I64 tensor's values.
func ints(t *safetensors.Tensor) []int64 {
	if t.TypeName == "I64" {
		out := make([]int64, len(t.Data)/8)
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
		}
		return out
	}
	out := make([]int64, len(t.Data)/4)
	for i := range out {
		out[i] = int64(int32(binary.LittleEndian.Uint32(t.Data[4*i:])))
	}
	return out
}

// floats returns an F16, BF16 or F32 tensor's values as float32 (exactly).
func (r *reader) floats(t *safetensors.Tensor, suffix string) []float32 {
	if r.err != nil || t == nil {
		return nil
	}
	out := make([]float32, t.Elements())
	if err := dtype.Dequantize(t.DType, t.Data, out); err != nil {
		r.failf(suffix, "%w", err)
		return nil
	}
	return out
}

// code returns slot j of a word of codes bits wide.
func code(w uint32, bits, j int) int32 {
	return int32(w >> (uint(bits * j)) & (1<<bits - 1))
}

// groups returns the number of groups of size g (0: one) of n inputs, and records an
// error when g does not divide n.
func (r *reader) groups(n, g int, suffix, key string) int {
	if g == 0 {
		return 1
	}
	if n%g != 0 {
		r.failf(suffix, "%d inputs do not divide into groups of %s %d", n, key, g)
		return 0
	}
	return n / g
}
