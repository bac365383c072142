// Package synth makes models of random weights in the exact shapes of real ones —
// SmolLM2 135M and 360M, Qwen2.5 0.5B, 1.5B and 7B, Qwen3 0.6B, 1.7B and 8B, Phi-3
// mini (4k), Phi-4 mini (longrope), Gemma 3 1B and 4B, Mistral 7B, Llama 3.2 1B,
// Llama 3.1 8B, TinyLlama 1.1B —
// written as GGUF files in the weight-type mixes that llama.cpp's quantizer makes
// (quantize.Mix: F16, BF16, Q8_0, Q4_0, Q4_K_M, Q5_K_M, Q6_K, …), with a real
// tokenizer's vocabulary padded to the real size. Speed is
// measured at the sizes users run, with nothing to download: a small model fits in the
// CPU cache and flatters every runtime, a 1.5B one does not. llama.cpp loads the same
// files, so both engines can be timed on the same bytes.
//
// The weights are random: the files are for timing, and their output is nonsense.
package synth

import (
	"fmt"
	"strings"

	"github.com/specula/specula/model/llama"
)

// Shape is the architecture of a real model, with its name.
type Shape struct {
	// Name is how the shape is asked for, as "qwen2.5-1.5b".
	Name string
	// Of names the model it copies, as its makers publish it.
	Of string
	// Config is its shape: dimensions, heads, vocabulary, rotary embeddings, biases.
	Config llama.Config
	// Params is the model's published parameter count, which the shape reproduces.
	Params int64
}

// qwen25 is a Qwen2.5 shape: qwen2 architecture, biases on Q, K and V, rotate-half
// rotary embeddings of base 10⁶, context 32 768.
func qwen25(dim, layers, heads, kvHeads, ffn, vocab int, tied bool) llama.Config {
	return llama.Config{
		Arch: "qwen2", Dim: dim, Layers: layers, Heads: heads, KVHeads: kvHeads, HeadDim: dim / heads,
		FFN: ffn, Vocab: vocab, ContextLength: 32768, NormEps: 1e-6, RopeTheta: 1e6, RopeDim: dim / heads,
		RopeStyle: llama.RopeHalf, QKVBias: true, TiedEmbeddings: tied,
	}
}

// qwen3 is a Qwen3 (dense) shape: qwen3 architecture, no biases, RMSNorm of each query
// and key head, head dimension 128 whatever the width, rotate-half rotary embeddings
// of base 10⁶, context 40 960.
func qwen3(dim, layers, heads, kvHeads, ffn int, tied bool) llama.Config {
	return llama.Config{
		Arch: "qwen3", Dim: dim, Layers: layers, Heads: heads, KVHeads: kvHeads, HeadDim: 128,
		FFN: ffn, Vocab: 151936, ContextLength: 40960, NormEps: 1e-6, RopeTheta: 1e6, RopeDim: 128,
		RopeStyle: llama.RopeHalf, QKNorm: true, TiedEmbeddings: tied,
	}
}

// phi3 is a Phi-3 shape: phi3 architecture, Q, K, V and gate, up fused, no biases,
// rotate-half rotary embeddings of base 10⁴ over the whole head.
func phi3(dim, layers, heads, kvHeads, ffn, vocab, ctx int) llama.Config {
	return llama.Config{
		Arch: "phi3", Dim: dim, Layers: layers, Heads: heads, KVHeads: kvHeads, HeadDim: dim / heads,
		FFN: ffn, Vocab: vocab, ContextLength: ctx, NormEps: 1e-5, RopeTheta: 10000, RopeDim: dim / heads,
		RopeStyle: llama.RopeHalf, Fused: true,
	}
}

// phi4MiniLong are the longrope long factors of Phi-4-mini-instruct's config.json
// (its short factors are all 1).
var phi4MiniLong = [48]float32{
	1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649,
	2.446418898, 2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845, 5.351743533,
	5.984965424, 6.693110555, 7.485043894, 8.370679318, 9.36110372, 10.4687158, 11.70738129, 13.09260651,
	14.64173252, 16.37415215, 18.31155283, 20.47818807, 22.90118105, 25.61086418, 28.64115884, 32.03,
	32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7,
	32.71, 32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77,
}

// phi4Mini is Phi-4-mini's shape: Phi-3's architecture with grouped-query attention
// (24 heads, 8 key/value heads of 128), rotary embeddings over three quarters of each
// head, a tied embedding, a 200 064-token vocabulary, and longrope scaling from 4096
// to 131 072 positions with the factors of its config.json and the attention factor
// llama.cpp's converter computes from them.
func phi4Mini() llama.Config {
	c := phi3(3072, 32, 24, 8, 8192, 200064, 131072)
	c.RopeDim = 96
	c.TiedEmbeddings = true
	c.RopeLongFactors = phi4MiniLong[:]
	c.RopeShortFactors = make([]float32, len(phi4MiniLong))
	for i := range c.RopeShortFactors {
		c.RopeShortFactors[i] = 1
	}
	c.RopeOriginalContext = 4096
	c.RopeScale = llama.LongRopeScale(float64(c.ContextLength)/float64(c.RopeOriginalContext), c.RopeOriginalContext)
	return c
}

// gemma3 is a Gemma 3 shape: gemma3 architecture, head dimension 256, GELU gates,
// per-head norms of Q and K, norms after attention and the feed-forward unit,
// embeddings scaled by √dim and tied; five sliding layers (window w, rotary base 10⁴)
// to each global one (base 10⁶, scaled linearly by ropeScale), the vocabulary of
// 262 144 tokens (the multimodal models' text part: 262 208).
func gemma3(dim, layers, heads, kvHeads, ffn, vocab, w int, ropeScale float64, ctx int) llama.Config {
	c := llama.Config{
		Arch: "gemma3", Dim: dim, Layers: layers, Heads: heads, KVHeads: kvHeads, HeadDim: 256,
		FFN: ffn, Vocab: vocab, ContextLength: ctx, NormEps: 1e-6, RopeTheta: 1e6, RopeDim: 256,
		RopeStyle: llama.RopeHalf, TiedEmbeddings: true, SlidingWindow: w, RopeLinear: ropeScale,
	}
	c.SetGemma3()
	return c
}

// mistral7b is Mistral 7B v0.1's shape: the llama architecture with grouped-query
// attention (32 heads, 8 key/value heads) and a sliding window of 4096 positions in
// every layer, rotary base 10⁴, context 32 768 (llama.cpp does not apply the window
// to llama files: the two agree within 4096 positions).
func mistral7b() llama.Config {
	c := llamaShape(4096, 32, 32, 8, 14336, 32000, 32768, 10000, false)
	c.SlidingWindow = 4096
	return c
}

// llamaShape is a Llama shape: llama architecture, no biases, interleaved rotary pairs
// (llama.cpp's converter permutes Q and K for them).
func llamaShape(dim, layers, heads, kvHeads, ffn, vocab, ctx int, theta float64, tied bool) llama.Config {
	return llama.Config{
		Arch: "llama", Dim: dim, Layers: layers, Heads: heads, KVHeads: kvHeads, HeadDim: dim / heads,
		FFN: ffn, Vocab: vocab, ContextLength: ctx, NormEps: 1e-5, RopeTheta: theta, RopeDim: dim / heads,
		RopeStyle: llama.RopeInterleaved, TiedEmbeddings: tied,
	}
}

// Shapes returns the known shapes, smallest first.
func Shapes() []Shape {
	l32 := llamaShape(2048, 16, 32, 8, 8192, 128256, 131072, 500000, true)
	// Llama 3.2's rope scaling, as llama.cpp stores it: per-frequency divisors.
	l32.RopeFreqFactors = llama.Llama3Scaling{Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}.
		FreqFactors(l32.RopeTheta, l32.RopeDim)
	l31 := llamaShape(4096, 32, 32, 8, 14336, 128256, 131072, 500000, false)
	l31.RopeFreqFactors = llama.Llama3Scaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}.
		FreqFactors(l31.RopeTheta, l31.RopeDim)
	return []Shape{
		{"smollm2-135m", "SmolLM2-135M", llamaShape(576, 30, 9, 3, 1536, 49152, 8192, 100000, true), 134_515_008},
		{"smollm2-360m", "SmolLM2-360M", llamaShape(960, 32, 15, 5, 2560, 49152, 8192, 100000, true), 361_821_120},
		{"qwen2.5-0.5b", "Qwen2.5-0.5B", qwen25(896, 24, 14, 2, 4864, 151936, true), 494_032_768},
		{"qwen2.5-1.5b", "Qwen2.5-1.5B", qwen25(1536, 28, 12, 2, 8960, 151936, true), 1_543_714_304},
		{"tinyllama-1.1b", "TinyLlama-1.1B", llamaShape(2048, 22, 32, 4, 5632, 32000, 2048, 10000, false), 1_100_048_384},
		{"llama-3.2-1b", "Llama-3.2-1B", l32, 1_235_814_400},
		{"qwen3-0.6b", "Qwen3-0.6B", qwen3(1024, 28, 16, 8, 3072, true), 596_049_920},
		{"qwen3-1.7b", "Qwen3-1.7B", qwen3(2048, 28, 16, 8, 6144, true), 1_720_574_976},
		// Named without "phi-3" or "phi3": llama.cpp sets token attributes by the model
		// name, and for those names looks up Phi's own special tokens, which the
		// vocabularies the files get do not have.
		{"phi-3-mini", "Phi 3 mini 4k", phi3(3072, 32, 32, 32, 8192, 32064, 4096), 3_821_079_552},
		{"phi-4-mini", "Phi 4 mini", phi4Mini(), 3_836_021_760},
		{"gemma-3-1b", "Gemma-3-1B", gemma3(1152, 26, 4, 1, 6912, 262144, 512, 0, 32768), 999_885_952},
		// The language model of the multimodal 4B (its vision tower left out).
		{"gemma-3-4b", "Gemma-3-4B text", gemma3(2560, 34, 8, 4, 10240, 262208, 1024, 8, 131072), 3_880_263_168},
		{"mistral-7b", "Mistral-7B-v0.1", mistral7b(), 7_241_732_096},
		{"qwen2.5-7b", "Qwen2.5-7B", qwen25(3584, 28, 28, 4, 18944, 152064, false), 7_615_616_512},
		{"llama-3.1-8b", "Llama-3.1-8B", l31, 8_030_261_248},
		{"qwen3-8b", "Qwen3-8B", qwen3(4096, 36, 32, 8, 12288, false), 8_190_735_360},
	}
}

// Find returns the shape of the given name.
func Find(name string) (Shape, error) {
	for _, s := range Shapes() {
		if s.Name == strings.ToLower(name) {
			return s, nil
		}
	}
	return Shape{}, fmt.Errorf("synth: unknown shape %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Names lists the known shapes.
func Names() []string {
	var out []string
	for _, s := range Shapes() {
		out = append(out, s.Name)
	}
	return out
}

// Count returns the number of weights of a model of shape c: matrices, norms and
// biases, the embedding once when the output layer shares it.
func Count(c llama.Config) int64 {
	qd, kvd := int64(c.Heads*c.HeadDim), int64(c.KVHeads*c.HeadDim)
	d, f := int64(c.Dim), int64(c.FFN)
	layer := d*(qd+2*kvd) + qd*d + 3*d*f + 2*d
	if c.QKVBias {
		layer += qd + 2*kvd
	}
	if c.QKNorm {
		layer += 2 * int64(c.HeadDim)
	}
	if c.PostNorms {
		layer += 2 * d
	}
	n := int64(c.Layers)*layer + int64(c.Vocab)*d + d
	if !c.TiedEmbeddings {
		n += int64(c.Vocab) * d
	}
	return n
}
