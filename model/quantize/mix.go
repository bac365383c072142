package quantize

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/specula/specula/format/dtype"
)

// Mix is a choice of weight type for every tensor of a model: what llama.cpp's
// llama-quantize writes for one of its file types, with no importance matrix. A file
// quantised here and one quantised by llama.cpp from the same weights have the same
// tensor types.
type Mix string

// The mixes. Every quantised mix but Q8_0 gives the output layer (or the embedding it
// shares) Q6_K; the K-quant mixes also give attn_v and ffn_down Q6_K on a third of the
// layers (llama.cpp's use_more_bits). A tensor whose rows are not whole 256-value
// super-blocks falls back to Q5_0 (for Q4_K), Q5_1 (Q5_K) or Q8_0 (Q6_K), as every
// 896-wide tensor of Qwen2.5-0.5B does, and one whose rows are not whole 32-value
// blocks to F16.
const (
	F32    Mix = "F32"
	F16    Mix = "F16"
	BF16   Mix = "BF16"
	Q8_0   Mix = "Q8_0"
	Q4_0   Mix = "Q4_0"
	Q4_1   Mix = "Q4_1"
	Q5_0   Mix = "Q5_0"
	Q5_1   Mix = "Q5_1"
	Q4_K_M Mix = "Q4_K_M"
	Q5_K_M Mix = "Q5_K_M"
	Q6_K   Mix = "Q6_K"
)

// Mixes lists the mixes.
func Mixes() []Mix {
	return []Mix{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K_M, Q5_K_M, Q6_K}
}

// ParseMix returns the mix of the given name, in any case.
func ParseMix(name string) (Mix, error) {
	for _, m := range Mixes() {
		if strings.EqualFold(string(m), name) {
			return m, nil
		}
	}
	return "", unknownMix(name)
}

// Check returns an error unless m is one of the mixes, spelled as Mixes spells it.
func (m Mix) Check() error {
	if _, _, ok := m.info(); !ok {
		return unknownMix(string(m))
	}
	return nil
}

func unknownMix(name string) error {
	return fmt.Errorf("quantize: unknown mix %q (known: %s)", name, strings.Join(MixNames(), ", "))
}

// MixNames lists the mixes' names.
func MixNames() []string {
	var names []string
	for _, m := range Mixes() {
		names = append(names, string(m))
	}
	return names
}

// FileType is the value of general.file_type that llama.cpp writes for the mix (its
// llama_ftype).
func (m Mix) FileType() uint32 {
	_, ft, _ := m.info()
	return ft
}

// base is the mix's default weight type.
func (m Mix) base() dtype.DType {
	t, _, _ := m.info()
	return t
}

// info is what the mix is: its default weight type and llama.cpp's file type, and
// whether it is one of the mixes.
func (m Mix) info() (base dtype.DType, fileType uint32, ok bool) {
	switch m {
	case F32:
		return dtype.F32, 0, true
	case F16:
		return dtype.F16, 1, true
	case BF16:
		return dtype.BF16, 32, true
	case Q8_0:
		return dtype.Q8_0, 7, true
	case Q4_0:
		return dtype.Q4_0, 2, true
	case Q4_1:
		return dtype.Q4_1, 3, true
	case Q5_0:
		return dtype.Q5_0, 8, true
	case Q5_1:
		return dtype.Q5_1, 9, true
	case Q4_K_M:
		return dtype.Q4_K, 15, true
	case Q5_K_M:
		return dtype.Q5_K, 17, true
	case Q6_K:
		return dtype.Q6_K, 18, true
	}
	return dtype.F32, 0, false
}

// Quantized reports whether the mix quantises (the float mixes store every matrix in
// their one type, and nothing else about them applies).
func (m Mix) Quantized() bool {
	b := m.base()
	return b != dtype.F32 && b != dtype.F16 && b != dtype.BF16
}

// Matrix reports whether a tensor of this name and shape (row length first) is a
// weight matrix, whose type the mix chooses; every other tensor (norms, biases, rotary
// factors) keeps its float type.
func Matrix(name string, dims []int64) bool {
	return len(dims) == 2 && strings.HasSuffix(name, ".weight") && name != "rope_freqs.weight"
}

// Type returns the type the mix gives the weight matrix of this GGUF name and row
// length in a model of the given number of layers, whose output layer is the
// embedding when tied (llama.cpp's llama_tensor_get_type for a dense model).
func (m Mix) Type(name string, cols int64, layers int, tied bool) dtype.DType {
	t := m.base()
	if !m.Quantized() {
		return t
	}
	more := m == Q4_K_M || m == Q5_K_M
	output := name == "output.weight" || tied && name == "token_embd.weight"
	switch {
	case output && t != dtype.Q8_0:
		t = dtype.Q6_K
	case more && (strings.HasSuffix(name, ".attn_v.weight") || strings.HasSuffix(name, ".ffn_down.weight")) &&
		moreBits(layerOf(name), layers):
		t = dtype.Q6_K
	}
	return fallback(t, cols)
}

// layerOf returns the layer of a tensor named blk.N.…, or -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '.'), 0)])
	if err != nil {
		return -1
	}
	return n
}

// moreBits is llama.cpp's use_more_bits: the first and last eighth of the layers and
// every third one between them.
func moreBits(l, n int) bool {
	return l >= 0 && (l < n/8 || l >= 7*n/8 || (l-n/8)%3 == 2)
}

// fallback replaces a type whose blocks do not tile the rows by the one llama.cpp
// uses: the 32-value type for a K-quant, F16 when even 32-value blocks do not fit.
func fallback(t dtype.DType, cols int64) dtype.DType {
	if cols%int64(t.BlockSize()) == 0 {
		return t
	}
	switch t {
	case dtype.Q4_K:
		t = dtype.Q5_0
	case dtype.Q5_K:
		t = dtype.Q5_1
	case dtype.Q6_K:
		t = dtype.Q8_0
	}
	if cols%int64(t.BlockSize()) != 0 {
		return dtype.F16
	}
	return t
}
