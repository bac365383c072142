package quantize

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/specula/specula/model/dtype"
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
	return "", fmt.Errorf("quantize: unknown mix %q (known: %s)", name, strings.Join(MixNames(), ", "))
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
	switch m {
	case F16:
		return 1
	case Q4_0:
		return 2
	case Q4_1:
		return 3
	case Q8_0:
		return 7
	case Q5_0:
		return 8
	case Q5_1:
		return 9
	case Q4_K_M:
		return 15
	case Q5_K_M:
		return 17
	case Q6_K:
		return 18
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
	case Q4_1:
		return dtype.Q4_1
	case Q5_0:
		return dtype.Q5_0
	case Q5_1:
		return dtype.Q5_1
	case Q4_K_M:
		return dtype.Q4_K
	case Q5_K_M:
		return dtype.Q5_K
	case Q6_K:
		return dtype.Q6_K
	}
	return dtype.F32
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
// embedding when tied (llama.cpp's llama_tensor_get_type for a dense model), or an
// error when no type fits its rows.
func (m Mix) Type(name string, cols int64, layers int, tied bool) (dtype.DType, error) {
	t := m.base()
	if !m.Quantized() {
		return t, nil
	}
	more := m == Q4_K_M || m == Q5_K_M
	output := name == "output.weight" || tied && name == "token_embd.weight"
	switch {
	case output && (cols%int64(t.BlockSize()) != 0 || t == dtype.Q8_0):
		t = dtype.Q8_0
	case output:
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
func fallback(t dtype.DType, cols int64) (dtype.DType, error) {
	if cols%int64(t.BlockSize()) == 0 {
		return t, nil
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
		return dtype.F16, nil
	}
	return t, nil
}
