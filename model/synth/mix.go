package synth

import (
	"fmt"
	"strings"

	"github.com/specula/specula/model/dtype"
)

// Mix is a choice of weight type for every tensor of a model: what llama.cpp's
// llama-quantize writes for one of its file types, with no importance matrix.
type Mix string

// The mixes. The K-quant mixes give the output layer (or the embedding it shares)
// Q6_K, and attn_v and ffn_down Q6_K on a third of the layers (llama.cpp's
// use_more_bits); a tensor whose rows are not whole 256-value super-blocks falls back
// to Q5_0 (for Q4_K), Q5_1 (Q5_K) or Q8_0 (Q6_K), as in every 896-wide tensor of
// Qwen2.5-0.5B.
const (
	F32    Mix = "F32"
	F16    Mix = "F16"
	BF16   Mix = "BF16"
	Q8_0   Mix = "Q8_0"
	Q4_0   Mix = "Q4_0"
	Q4_K_M Mix = "Q4_K_M"
	Q5_K_M Mix = "Q5_K_M"
)

// Mixes lists the mixes.
func Mixes() []Mix { return []Mix{F32, F16, BF16, Q8_0, Q4_0, Q4_K_M, Q5_K_M} }

// ParseMix returns the mix of the given name, in any case.
func ParseMix(name string) (Mix, error) {
	for _, m := range Mixes() {
		if strings.EqualFold(string(m), name) {
			return m, nil
		}
	}
	var names []string
	for _, m := range Mixes() {
		names = append(names, string(m))
	}
	return "", fmt.Errorf("synth: unknown mix %q (known: %s)", name, strings.Join(names, ", "))
}

// FileType is the value of general.file_type that llama.cpp writes for the mix (its
// llama_ftype).
func (m Mix) FileType() uint32 {
	switch m {
	case F16:
		return 1
	case Q4_0:
		return 2
	case Q8_0:
		return 7
	case Q4_K_M:
		return 15
	case Q5_K_M:
		return 17
	case BF16:
		return 32
	}
	return 0
}

// base is the mix's default weight type.
func (m Mix) base() dtype.DType {
	switch m {
	case F16:
		return dtype.F16
	case BF16:
		return dtype.BF16
	case Q8_0:
		return dtype.Q8_0
	case Q4_0:
		return dtype.Q4_0
	case Q4_K_M:
		return dtype.Q4_K
	case Q5_K_M:
		return dtype.Q5_K
	}
	return dtype.F32
}

// quantized reports whether the mix quantizes (the float mixes store every matrix in
// their one type and nothing else applies).
func (m Mix) quantized() bool {
	b := m.base()
	return b != dtype.F32 && b != dtype.F16 && b != dtype.BF16
}

// role is what a matrix does, as far as the mixes care.
type role int

const (
	roleOther  role = iota
	roleOutput      // output.weight, or token_embd.weight when the output layer shares it
	roleEmbed       // token_embd.weight of an untied model
	roleAttnV
	roleFFNDown
)

// typeOf returns the type the mix gives a matrix of the given role and row length in
// layer l of n (llama.cpp's llama_tensor_get_type for a dense model), or an error when
// no type fits its rows.
func (m Mix) typeOf(r role, cols, l, n int) (dtype.DType, error) {
	t := m.base()
	if !m.quantized() {
		return t, nil
	}
	k := m == Q4_K_M || m == Q5_K_M
	switch {
	case r == roleOutput && (cols%t.BlockSize() != 0 || t == dtype.Q8_0):
		t = dtype.Q8_0
	case r == roleOutput:
		t = dtype.Q6_K
	case k && (r == roleAttnV || r == roleFFNDown) && moreBits(l, n):
		t = dtype.Q6_K
	}
	return fallback(t, cols)
}

// moreBits is llama.cpp's use_more_bits: the first and last eighth of the layers and
// every third one between them.
func moreBits(l, n int) bool { return l < n/8 || l >= 7*n/8 || (l-n/8)%3 == 2 }

// fallback replaces a K-quant by the 32-value type llama.cpp uses when rows are not a
// whole number of super-blocks.
func fallback(t dtype.DType, cols int) (dtype.DType, error) {
	if cols%t.BlockSize() == 0 {
		return t, nil
	}
	switch t {
	case dtype.Q4_K:
		t = dtype.Q5_0
	case dtype.Q5_K:
		t = dtype.Q5_1
	case dtype.Q6_K:
		t = dtype.Q8_0
	default:
		return 0, fmt.Errorf("synth: rows of %d values are not whole %s blocks", cols, t)
	}
	if cols%t.BlockSize() != 0 {
		return dtype.F16, nil
	}
	return t, nil
}
