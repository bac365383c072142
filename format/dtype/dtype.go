// Package dtype names the element types of model weights — the ggml type ids that GGUF
// files use, which also cover the safetensors types specula reads — knows how they are
// laid out (how many values a block holds and how many bytes it takes) and encodes
// and decodes them: [Dequantize] to float32 and [Encode] from it, bit for bit as
// llama.cpp's reference routines do (testdata/quant_llamacpp.py), and [Requantize]
// for the conversion of float weights at load. The kernels that compute with the
// quantised types live with each backend; this is the format.
package dtype

import (
	"fmt"
	"slices"
)

// DType is a ggml tensor type id.
type DType uint32

// The types specula knows the layout of. Quantised types store values in blocks: Q8_0
// and Q4_0 hold 32 values with one float16 scale; the K-quants hold 256 values in
// super-blocks. All are ggml's but Q4_Z, Q4_Z128 and F8_E4M3_B128 (see
// [DType.Private]).
const (
	F32  DType = 0
	F16  DType = 1
	Q4_0 DType = 2
	Q4_1 DType = 3
	Q5_0 DType = 6
	Q5_1 DType = 7
	Q8_0 DType = 8
	Q8_1 DType = 9
	Q2_K DType = 10
	Q3_K DType = 11
	Q4_K DType = 12
	Q5_K DType = 13
	Q6_K DType = 14
	Q8_K DType = 15
	I8   DType = 24
	I16  DType = 25
	I32  DType = 26
	I64  DType = 27
	F64  DType = 28
	BF16 DType = 30

	// Q4_Z is specula's own 4-bit type, not a ggml one: per 32 values a float16
	// scale d and an integer zero z, value d·(q − z) (quant.go). It holds AWQ and
	// asymmetric GPTQ layers exactly, which no ggml 4-bit type does (Q4_1's float16
	// minimum cannot hold −d·z in general). Its id lies outside ggml's range, and
	// GGUF files neither take nor give it.
	Q4_Z DType = 1000

	// Q4_Z128 is Q4_Z with 128 values a block (quant.go): one scale and zero per 128
	// values, as AWQ and GPTQ layers of group size 128 have, at 4.25 bits a weight; its
	// kernels read the K-quants' activations and sum 128 products in integers before
	// one float multiply. Private too.
	Q4_Z128 DType = 1002
)

type layout struct {
	name        string
	block, size int // values per block, bytes per block
}

func (t DType) layout() (layout, bool) {
	switch t {
	case F32:
		return layout{"F32", 1, 4}, true
	case F16:
		return layout{"F16", 1, 2}, true
	case Q4_0:
		return layout{"Q4_0", 32, 18}, true
	case Q4_1:
		return layout{"Q4_1", 32, 20}, true
	case Q5_0:
		return layout{"Q5_0", 32, 22}, true
	case Q5_1:
		return layout{"Q5_1", 32, 24}, true
	case Q8_0:
		return layout{"Q8_0", 32, 34}, true
	case Q8_1:
		return layout{"Q8_1", 32, 36}, true
	case Q2_K:
		return layout{"Q2_K", 256, 84}, true
	case Q3_K:
		return layout{"Q3_K", 256, 110}, true
	case Q4_K:
		return layout{"Q4_K", 256, 144}, true
	case Q5_K:
		return layout{"Q5_K", 256, 176}, true
	case Q6_K:
		return layout{"Q6_K", 256, 210}, true
	case Q8_K:
		return layout{"Q8_K", 256, 292}, true
	case I8:
		return layout{"I8", 1, 1}, true
	case I16:
		return layout{"I16", 1, 2}, true
	case I32:
		return layout{"I32", 1, 4}, true
	case I64:
		return layout{"I64", 1, 8}, true
	case F64:
		return layout{"F64", 1, 8}, true
	case BF16:
		return layout{"BF16", 1, 2}, true
	case F8_E4M3_B128:
		return layout{"F8_E4M3_B128", f8Block, 4 + f8Block}, true
	case Q4_Z:
		return layout{"Q4_Z", 32, 20}, true
	case Q4_Z128:
		return layout{"Q4_Z128", 128, 68}, true
	}
	return layout{}, false
}

// Known reports whether specula knows the type's layout.
func (t DType) Known() bool {
	_, ok := t.layout()
	return ok
}

// Private reports whether t is one of specula's own types (Q4_Z, Q4_Z128,
// F8_E4M3_B128), which
// exist only in memory, as a loader's exact repacking of a quantized Hugging Face
// layer: GGUF files do not hold them.
func (t DType) Private() bool { return slices.Contains(privateTypes(), t) }

// GGML reports whether t is one of ggml's types that specula knows, which GGUF files
// hold.
func (t DType) GGML() bool { return t.Known() && !t.Private() }

// privateTypes are specula's own types, outside ggml's ids.
func privateTypes() []DType { return []DType{Q4_Z, F8_E4M3_B128, Q4_Z128} }

// String is the type's ggml name, such as "Q8_0".
func (t DType) String() string {
	if l, ok := t.layout(); ok {
		return l.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of values in one block (1 for plain types), 0 if unknown.
func (t DType) BlockSize() int {
	l, _ := t.layout()
	return l.block
}

// BlockBytes is the number of bytes one block takes, 0 if unknown.
func (t DType) BlockBytes() int {
	l, _ := t.layout()
	return l.size
}

// Bytes returns the size in bytes of n values, or an error when the type is unknown,
// n is negative, or n is not a whole number of blocks.
func (t DType) Bytes(n int64) (int64, error) {
	l, ok := t.layout()
	switch {
	case !ok:
		return 0, fmt.Errorf("dtype: unknown type %d", uint32(t))
	case n < 0:
		return 0, fmt.Errorf("dtype: negative count %d", n)
	case n%int64(l.block) != 0:
		return 0, fmt.Errorf("dtype: %d values of %s are not a whole number of %d-value blocks", n, l.name, l.block)
	case n/int64(l.block) > (1<<62)/int64(l.size):
		return 0, fmt.Errorf("dtype: %d values of %s overflow", n, l.name)
	}
	return n / int64(l.block) * int64(l.size), nil
}

// Parse returns the type with the given ggml name ("F16", "Q8_0", …).
func Parse(name string) (DType, error) {
	for t := DType(0); t <= BF16; t++ {
		if l, ok := t.layout(); ok && l.name == name {
			return t, nil
		}
	}
	for _, t := range privateTypes() {
		if l, _ := t.layout(); l.name == name {
			return t, nil
		}
	}
	return 0, fmt.Errorf("dtype: unknown type name %q", name)
}
