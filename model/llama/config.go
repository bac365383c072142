// Package llama is the Llama-family architecture — Llama 2 and 3, TinyLlama, SmolLM,
// Mistral (with its sliding window), Qwen2, Qwen2.5, Qwen3 (dense), Phi-3 and Phi-4-mini
// (longrope scaling included: Phi-3-mini-128k, Phi-3.5-mini), Gemma 3 — and its
// weight binding, loaded
// from GGUF files or Hugging Face safetensors directories (memory-mapped while the
// backend takes the weights in). The forward pass is written once, against the
// operations of package backend, and runs on the backend the caller gives [Open]: the
// CPU's (backend/cpu) or a GPU's (package gpu). The package imports neither.
//
// A [Model] implements [model.Model]: it is read-only after loading and shared by its
// sequences, each of which keeps its keys and values in a paged cache with a memory
// budget. A forward pass takes many tokens at once (a prompt, or a draft to verify,
// chain or tree), of one sequence or many, reads every weight once for all of them, and
// computes logits only for the positions asked.
package llama

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/kvcache"
)

// RopeStyle says which dimensions rotary embeddings rotate together.
type RopeStyle = backend.RopeStyle

// The rotary layouts (see [backend.RopeStyle]).
const (
	RopeInterleaved = backend.RopeInterleaved
	RopeHalf        = backend.RopeHalf
)

// Config is the shape of a model.
type Config struct {
	Arch          string // "llama", "qwen2", "qwen3", "phi3" or "gemma3"
	Dim           int    // hidden size
	Layers        int
	Heads         int
	KVHeads       int
	HeadDim       int
	FFN           int // intermediate size
	Vocab         int
	ContextLength int
	NormEps       float32
	RopeTheta     float64
	RopeDim       int // dimensions rotated per head (HeadDim unless partial)
	RopeStyle     RopeStyle
	// RopeFreqFactors, when set, divide each rotary frequency (llama3 scaling as
	// llama.cpp stores it, or computed from Hugging Face's rope_scaling).
	RopeFreqFactors []float32
	// RopeLongFactors and RopeShortFactors, when set, are longrope scaling (formerly
	// "su": Phi-3-mini-128k, Phi-3.5-mini, Phi-4-mini): two sets of RopeDim/2 divisors
	// of the rotary frequencies, the long set for a context longer than
	// RopeOriginalContext, the short one otherwise. One set is chosen per loaded model
	// by its context length (see [Config.RopeFactors]), as llama.cpp chooses per
	// context, never per sequence length as Hugging Face's eager code does: a key must
	// keep its rotation as its sequence grows, or verifying a draft would not score
	// what decoding alone would.
	RopeLongFactors, RopeShortFactors []float32
	// RopeOriginalContext is the context the model was pretrained at, before
	// long-context scaling (Hugging Face's original_max_position_embeddings,
	// llama.cpp's rope.scaling.original_context_length).
	RopeOriginalContext int
	// RopeScale multiplies the rotary cosines and sines, so the rotated part of each
	// query and key (longrope's attention factor, llama.cpp's rope.scaling.attn_factor:
	// √(1 + ln s / ln n) for a context stretched s times from n). 0 means 1.
	RopeScale float32
	QKVBias   bool
	// QKNorm: each query and key head is RMS-normalised (weights of HeadDim values,
	// per layer) after the projection and before the rotation (Qwen3).
	QKNorm bool
	// Fused: Q, K and V are one tensor, and gate and up another (Phi-3), in the order
	// the separate tensors are put side by side.
	Fused          bool
	TiedEmbeddings bool
	// RopeLinear, when above 1, divides every rotary frequency of the global layers
	// (linear scaling, "position interpolation": Gemma 3 4B and up use 8).
	RopeLinear float64
	// SlidingWindow, when positive, is the attention window W of the sliding layers:
	// a row at position pos attends only to the positions (pos−W, pos] (llama.cpp's
	// standard sliding window: key p0 is masked when pos − p0 >= W), as Mistral 7B
	// v0.1 was trained. 0 means no window: every layer attends to every earlier
	// position. When every layer slides, a sequence gives back the key/value blocks
	// that no row will see again (see [WindowReserve]), so that a long generation
	// holds about a window of positions.
	SlidingWindow int
	// Sliding says, per layer, whether the layer's attention slides (interleaved
	// models such as Gemma 3 mix sliding and full layers); nil means that every layer
	// slides when SlidingWindow > 0.
	Sliding []bool
	// LocalRopeTheta, when positive, is the rotary base of the sliding layers,
	// unscaled (Gemma 3: 10⁴, its global layers 10⁶).
	LocalRopeTheta float64
	// EmbedScale, when non-zero, multiplies the token embeddings (Gemma: √Dim).
	EmbedScale float32
	// PostNorms: the attention and feed-forward outputs are RMS-normalised before
	// they join the residual stream (Gemma 2 and 3).
	PostNorms bool
	// Activation is the gate's function in the feed-forward unit (SiLU, or Gemma's
	// GELU in its tanh form).
	Activation backend.Activation
	// AttnScale, when non-zero, scales the attention scores instead of 1/√HeadDim
	// (Gemma's query_pre_attn_scalar^−½).
	AttnScale float32
}

// SetGemma3 sets, on a config of Dim, Layers and SlidingWindow, what every Gemma 3
// shares: embeddings scaled by √Dim, GELU (tanh) gates, per-head norms of Q and K,
// norms after attention and the feed-forward unit, and, when there is a window, every
// sixth layer global and the others sliding with a rotary base of 10⁴ — as llama.cpp
// runs gemma3 files.
func (c *Config) SetGemma3() { c.setGemma3(6) }

// setGemma3 is SetGemma3 with every pattern-th layer global.
func (c *Config) setGemma3(pattern int) {
	c.EmbedScale = float32(math.Sqrt(float64(c.Dim)))
	c.Activation, c.QKNorm, c.PostNorms = backend.GELUTanh, true, true
	if c.SlidingWindow <= 0 || pattern <= 0 {
		return
	}
	c.LocalRopeTheta = 10000
	c.Sliding = make([]bool, c.Layers)
	for l := range c.Sliding {
		c.Sliding[l] = (l+1)%pattern != 0
	}
}

// IsSliding reports whether layer l attends within a sliding window.
func (c *Config) IsSliding(l int) bool {
	return c.SlidingWindow > 0 && (c.Sliding == nil || c.Sliding[l])
}

// attn is what layer l's attention needs besides its weights.
func (c *Config) attn(l int, bias backend.Vector) backend.Attn {
	a := backend.Attn{Bias: bias, Scale: c.AttnScale}
	if c.IsSliding(l) {
		a.Window, a.Local = c.SlidingWindow, c.LocalRopeTheta > 0
	}
	return a
}

// Llama3Scaling is Hugging Face's rope_scaling of type "llama3".
type Llama3Scaling struct {
	Factor, LowFreqFactor, HighFreqFactor float64
	OriginalContext                       int
}

// FreqFactors returns the per-frequency divisors that llama3 scaling applies to the
// rotary frequencies of a head of ropeDim dimensions with the given theta.
func (s Llama3Scaling) FreqFactors(theta float64, ropeDim int) []float32 {
	lowWavelen := float64(s.OriginalContext) / s.LowFreqFactor
	highWavelen := float64(s.OriginalContext) / s.HighFreqFactor
	out := make([]float32, ropeDim/2)
	for i := range out {
		freq := math.Pow(theta, -float64(2*i)/float64(ropeDim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(s.Factor)
		default:
			smooth := (float64(s.OriginalContext)/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			scaled := (1-smooth)*freq/s.Factor + smooth*freq
			out[i] = float32(freq / scaled)
		}
	}
	return out
}

// limitContext lowers the context length to n when n is positive and lower.
func (c *Config) limitContext(n int) {
	if n > 0 && (c.ContextLength == 0 || n < c.ContextLength) {
		c.ContextLength = n
	}
}

// Shape is what a backend needs to know of the model's shape.
func (c *Config) Shape() backend.Shape {
	return backend.Shape{Layers: c.Layers, Dim: c.Dim, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		FFN: c.FFN, Vocab: c.Vocab, RopeDim: c.RopeDim, Style: c.RopeStyle, NormEps: c.NormEps}
}

// KVBytesPerPosition is the key/value memory one position of a sequence takes
// (float32 keys and values), all layers together: what attention reads per position
// at every decoding step.
func (c *Config) KVBytesPerPosition() int64 {
	return int64(c.Layers) * 2 * int64(c.KVHeads*c.HeadDim) * 4
}

// The bounds of the default key/value budget (see [Config.KVBudget]).
const (
	minKVBudget = 64 << 20
	maxKVBudget = 4 << 30
)

// KVBudget is the default key/value memory of a model of this shape, the one rule
// every default budget follows (a model's [Options], package specula's engine): room
// for sequences sequences at full context (4096 positions when the model states
// none), at least 64 MiB and at most 4 GiB. sequences 0 (or less) means 4 ×
// GOMAXPROCS, the requests an engine on this machine serves at once by default. The
// lower bound keeps small models' short tests and demos from running out; the upper
// one keeps a GPU, which allocates the budget at load, from giving all its memory to
// a long-context model.
func (c *Config) KVBudget(sequences int) int64 {
	if sequences <= 0 {
		sequences = DefaultSequences()
	}
	ctx := int64(c.ContextLength)
	if ctx <= 0 {
		ctx = 4096
	}
	return min(max(int64(sequences)*ctx*c.KVBytesPerPosition(), minKVBudget), maxKVBudget)
}

// DefaultSequences is how many requests an engine on this machine serves at once by
// default, and what a default key/value budget is sized for: 4 × GOMAXPROCS.
func DefaultSequences() int { return 4 * runtime.GOMAXPROCS(0) }

func (c *Config) validate() error {
	switch {
	case c.Dim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.FFN <= 0 || c.Vocab <= 0:
		return fmt.Errorf("dimensions must be positive: dim %d, layers %d, heads %d, kv heads %d, ffn %d, vocab %d",
			c.Dim, c.Layers, c.Heads, c.KVHeads, c.FFN, c.Vocab)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("%d heads are not a multiple of %d kv heads", c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0:
		return fmt.Errorf("head dimension %d must be positive and even", c.HeadDim)
	case c.RopeDim <= 0 || c.RopeDim > c.HeadDim || c.RopeDim%2 != 0:
		return fmt.Errorf("rotary dimension %d must be even and within the head dimension %d", c.RopeDim, c.HeadDim)
	case !(c.RopeTheta > 0):
		return fmt.Errorf("rope theta %v must be positive", c.RopeTheta)
	case !(c.NormEps > 0):
		return fmt.Errorf("norm epsilon %v must be positive", c.NormEps)
	case c.RopeFreqFactors != nil && len(c.RopeFreqFactors) != c.RopeDim/2:
		return fmt.Errorf("%d rope frequency factors for %d rotary dimensions", len(c.RopeFreqFactors), c.RopeDim)
	case (c.RopeLongFactors == nil) != (c.RopeShortFactors == nil):
		return fmt.Errorf("longrope needs both long and short factors (%d long, %d short)", len(c.RopeLongFactors), len(c.RopeShortFactors))
	case c.RopeLongFactors != nil && c.RopeFreqFactors != nil:
		return errors.New("both rope frequency factors and longrope factors")
	case c.RopeLongFactors != nil && len(c.RopeLongFactors) != c.RopeDim/2:
		return fmt.Errorf("%d longrope long factors for %d rotary dimensions (want %d)", len(c.RopeLongFactors), c.RopeDim, c.RopeDim/2)
	case c.RopeShortFactors != nil && len(c.RopeShortFactors) != c.RopeDim/2:
		return fmt.Errorf("%d longrope short factors for %d rotary dimensions (want %d)", len(c.RopeShortFactors), c.RopeDim, c.RopeDim/2)
	case c.RopeLongFactors != nil && c.RopeOriginalContext <= 0:
		return fmt.Errorf("longrope original context %d must be positive", c.RopeOriginalContext)
	case !positive(c.RopeFreqFactors) || !positive(c.RopeLongFactors) || !positive(c.RopeShortFactors):
		return errors.New("rope frequency factors must be positive and finite")
	case !(c.RopeScale >= 0) || math.IsInf(float64(c.RopeScale), 0):
		return fmt.Errorf("rope scale %v must be positive (or 0: none)", c.RopeScale)
	case c.ContextLength < 0:
		return fmt.Errorf("context length %d", c.ContextLength)
	case c.SlidingWindow < 0:
		return fmt.Errorf("sliding window %d", c.SlidingWindow)
	case c.Sliding != nil && len(c.Sliding) != c.Layers:
		return fmt.Errorf("%d sliding-layer flags for %d layers", len(c.Sliding), c.Layers)
	case c.RopeLinear < 0 || c.LocalRopeTheta < 0 || math.IsNaN(c.RopeLinear) || math.IsNaN(c.LocalRopeTheta):
		return fmt.Errorf("linear rope scale %v, local rope theta %v", c.RopeLinear, c.LocalRopeTheta)
	case c.Activation != backend.SiLU && c.Activation != backend.GELUTanh:
		return fmt.Errorf("activation %v", c.Activation)
	}
	return nil
}

// positive says whether every value is positive and finite.
func positive(v []float32) bool {
	for _, x := range v {
		if !(x > 0) || math.IsInf(float64(x), 1) {
			return false
		}
	}
	return true
}

// RopeFactors returns the divisors of the rotary frequencies in use: RopeFreqFactors,
// or, for longrope, the long factors when the context length exceeds the original
// context (or is not stated) and the short ones otherwise — llama.cpp's choice for a
// context of that size; nil when there are none. [Options.ContextLength] lowers the
// context before the choice, so it can pick the short factors of a long-context model.
func (c *Config) RopeFactors() []float32 {
	switch {
	case c.RopeLongFactors == nil:
		return c.RopeFreqFactors
	case c.ContextLength == 0 || c.ContextLength > c.RopeOriginalContext:
		return c.RopeLongFactors
	}
	return c.RopeShortFactors
}

// kvLayers says how a key/value budget of budget bytes is split: when sliding
// layers sit beside global ones, the global layers, the sliding ones, and the share
// of the budget the global ones get — what a sequence of L positions needs of each
// (all L of the global layers; of the sliding ones, at most the window, the reserve,
// a chunk of a long prompt and a block), L being the context length or, when the
// budget holds less, as many positions as it would hold without a window. nil
// sliding layers (one pool for all) otherwise.
func (c *Config) kvLayers(budget int64) (global, sliding []int, share float64) {
	if c.SlidingWindow <= 0 {
		return nil, nil, 1
	}
	for l := range c.Layers {
		if c.IsSliding(l) {
			sliding = append(sliding, l)
		} else {
			global = append(global, l)
		}
	}
	if global == nil {
		return nil, nil, 1 // every layer slides: one pool, which gives back its blocks
	}
	n := float64(c.ContextLength)
	if n <= 0 {
		n = 4096
	}
	n = min(n, float64(budget)/float64(c.KVBytesPerPosition()))
	held := min(n, float64(c.slidingHeld()))
	g, s := n*float64(len(global)), held*float64(len(sliding))
	return global, sliding, g / (g + s)
}

// slidingHeld is the most positions the sliding layers' books of one sequence hold
// beside global layers: the window, the reserve, a chunk of a long prompt and a
// block.
func (c *Config) slidingHeld() int {
	return c.SlidingWindow + WindowReserve + windowChunk + kvcache.DefaultBlockSize
}

// splitKV is how startCache splits a key/value budget: the layers of the first pool
// and of the sliding one (both nil: one pool of every layer, which gets the whole
// budget) and the first pool's bytes.
func (c *Config) splitKV(budget int64) (global, sliding []int, first int64) {
	global, sliding, share := c.kvLayers(budget)
	if sliding == nil {
		return global, nil, budget
	}
	return global, sliding, int64(float64(budget) * share)
}

// PassBytes is the host memory of the buffers one forward pass of rows rows, outputs
// of them giving logits, holds on the CPU backend: its activations (every buffer of
// backend.Act, and a product's) and the output rows' normalised states and logits. A
// pass keeps them for the next (they are collected when the model idles); the
// largest pass bounds the scratch a memory plan counts.
func (c *Config) PassBytes(rows, outputs int) int64 {
	sh := c.Shape()
	width := sh.Dim // MulAdd's product before it is added
	for a := range backend.Act(6) {
		width += sh.Width(a)
	}
	return 4 * (int64(rows)*int64(width) + int64(outputs)*int64(c.Dim+c.Vocab))
}

// WindowReserve is how many positions beyond the sliding window a sequence of a
// model whose every layer slides keeps when it gives back the key/value blocks no row
// sees: what speculative decoding rolls back (a rejected draft, chain or tree, is
// truncated away) must still find the window of its new last position. A sequence can
// always be truncated (or a tree draft retained) back by this many positions from the
// longest it was; further back it returns an error wrapping [kvcache.ErrReleased].
const WindowReserve = 256

// releaseBehind is how many positions behind a sequence's end the books of its
// sliding layers keep: the window and [WindowReserve]; 0 without a window.
func (c *Config) releaseBehind() int {
	if c.SlidingWindow <= 0 {
		return 0
	}
	return c.SlidingWindow + WindowReserve
}

// InvFreqs returns the rotary frequency of each dimension pair: θ^(−2i/d), divided by
// the scaling factors in use when there are any ([Config.RopeFactors]) and by the
// linear scale.
func (c *Config) InvFreqs() []float64 {
	factors := c.RopeFactors()
	out := make([]float64, c.RopeDim/2)
	for i := range out {
		out[i] = math.Pow(c.RopeTheta, -float64(2*i)/float64(c.RopeDim))
		if factors != nil {
			out[i] /= float64(factors[i])
		}
		if c.RopeLinear > 1 {
			out[i] /= c.RopeLinear
		}
	}
	return out
}

// LocalInvFreqs returns the rotary frequencies of the sliding layers when they have
// a base of their own (LocalRopeTheta), unscaled; nil otherwise.
func (c *Config) LocalInvFreqs() []float64 {
	if c.LocalRopeTheta <= 0 || c.SlidingWindow <= 0 {
		return nil
	}
	out := make([]float64, c.RopeDim/2)
	for i := range out {
		out[i] = math.Pow(c.LocalRopeTheta, -float64(2*i)/float64(c.RopeDim))
	}
	return out
}

// LongRopeScale is the attention factor of longrope scaling for a model whose context
// was stretched factor times from original positions, as Hugging Face and llama.cpp's
// converter compute it when the configuration gives none: √(1 + ln factor / ln
// original) for a factor above 1, else 1.
func LongRopeScale(factor float64, original int) float32 {
	if original <= 1 || !(factor > 1) {
		return 1
	}
	return float32(math.Sqrt(1 + math.Log(factor)/math.Log(float64(original))))
}
