package llama

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
)

type ggufSource struct{ f *gguf.File }

// lookup returns a GGUF tensor with its shape reversed to [rows, cols] order.
func (s ggufSource) lookup(name string) (dtype.DType, []int64, []byte, bool) {
	t, ok := s.f.Tensor(name)
	if !ok {
		return 0, nil, nil, false
	}
	shape := make([]int64, len(t.Dims))
	for i, d := range t.Dims {
		shape[len(t.Dims)-1-i] = d
	}
	return t.Type, shape, s.f.Data(t), true
}

func (s ggufSource) mapped() bool { return s.f.Mapped() }

func (s ggufSource) size() int64 {
	var n int64
	for i := range s.f.Tensors {
		n += int64(len(s.f.Data(&s.f.Tensors[i])))
	}
	return n
}

// GGUFMetadata is the architecture metadata of a GGUF file for a model of shape c
// named name, as llama.cpp's converter writes it and ggufTensors reads it back:
// general.architecture and general.name, then the <arch>.* dimensions, heads, norm and
// rotary keys, longrope's original context and attention factor, the sliding window
// and linear rope scaling when there are. (Llama 3 rope scaling goes in the
// rope_freqs.weight tensor, longrope's factors in rope_factors_long.weight and
// rope_factors_short.weight: see [Config.RopeTensors].)
func (c Config) GGUFMetadata(name string) []gguf.KeyValue {
	a := c.Arch
	u32 := func(v int) gguf.Value { return gguf.Uint32(uint32(v)) }
	kv := []gguf.KeyValue{
		{Key: "general.architecture", Value: gguf.String(a)},
		{Key: "general.name", Value: gguf.String(name)},
		{Key: a + ".context_length", Value: u32(c.ContextLength)},
		{Key: a + ".embedding_length", Value: u32(c.Dim)},
		{Key: a + ".block_count", Value: u32(c.Layers)},
		{Key: a + ".feed_forward_length", Value: u32(c.FFN)},
		{Key: a + ".attention.head_count", Value: u32(c.Heads)},
		{Key: a + ".attention.head_count_kv", Value: u32(c.KVHeads)},
		{Key: a + ".attention.layer_norm_rms_epsilon", Value: gguf.Float32(c.NormEps)},
		{Key: a + ".rope.freq_base", Value: gguf.Float32(float32(c.RopeTheta))},
		{Key: a + ".rope.dimension_count", Value: u32(c.RopeDim)},
		{Key: a + ".vocab_size", Value: u32(c.Vocab)},
	}
	if c.RopeLongFactors != nil {
		kv = append(kv, gguf.KeyValue{Key: a + ".rope.scaling.original_context_length", Value: u32(c.RopeOriginalContext)})
	}
	if c.RopeScale != 0 {
		kv = append(kv, gguf.KeyValue{Key: a + ".rope.scaling.attn_factor", Value: gguf.Float32(c.RopeScale)})
	}
	if c.HeadDim != c.Dim/c.Heads {
		kv = append(kv, gguf.KeyValue{Key: a + ".attention.key_length", Value: u32(c.HeadDim)},
			gguf.KeyValue{Key: a + ".attention.value_length", Value: u32(c.HeadDim)})
	}
	if c.SlidingWindow > 0 {
		kv = append(kv, gguf.KeyValue{Key: a + ".attention.sliding_window", Value: u32(c.SlidingWindow)})
	}
	if c.RopeLinear > 1 {
		kv = append(kv, gguf.KeyValue{Key: a + ".rope.scaling.type", Value: gguf.String("linear")},
			gguf.KeyValue{Key: a + ".rope.scaling.factor", Value: gguf.Float32(float32(c.RopeLinear))})
	}
	return kv
}

// RopeTensors are the rotary scaling tensors of a GGUF file for a model of shape c,
// as llama.cpp's converter writes them: rope_freqs.weight for llama3 scaling,
// rope_factors_long.weight and rope_factors_short.weight for longrope, each RopeDim/2
// F32 values; none without scaling.
func (c Config) RopeTensors() []gguf.TensorData {
	var out []gguf.TensorData
	add := func(name string, v []float32) {
		if v != nil {
			data, _ := dtype.Encode(dtype.F32, v)
			out = append(out, gguf.TensorData{Name: name, Type: dtype.F32, Dims: []int64{int64(len(v))}, Data: data})
		}
	}
	add("rope_freqs.weight", c.RopeFreqFactors)
	add("rope_factors_long.weight", c.RopeLongFactors)
	add("rope_factors_short.weight", c.RopeShortFactors)
	return out
}

// ggufArchs returns the architectures a GGUF file may name.
func ggufArchs() []string { return []string{"llama", "qwen2", "qwen3", "phi3", "gemma3"} }

// ggufTensors opens a GGUF file of architecture llama, qwen2, qwen3, phi3 or gemma3.
func ggufTensors(path string) (_ *Tensors, err error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	file := baseName(path)
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	if !slices.Contains(ggufArchs(), arch) {
		return nil, fmt.Errorf("llama: %s: architecture %q is not supported (%s are)", file, arch, strings.Join(ggufArchs(), ", "))
	}
	key := func(k string) string { return arch + "." + k }
	var keyErr error // the first key req or opt could not read
	req := func(k string) int {
		v, e := f.Uint(key(k))
		if e != nil && keyErr == nil {
			keyErr = fmt.Errorf("llama: %s: %w", file, e)
		}
		return int(v)
	}
	opt := func(k string, def int) int {
		if !f.Has(key(k)) {
			return def
		}
		return req(k)
	}
	c := Config{Arch: arch, QKVBias: arch == "qwen2", QKNorm: arch == "qwen3" || arch == "gemma3", Fused: arch == "phi3"}
	c.Dim = req("embedding_length")
	c.Layers = req("block_count")
	c.FFN = req("feed_forward_length")
	c.Heads = req("attention.head_count")
	c.KVHeads = opt("attention.head_count_kv", c.Heads)
	c.ContextLength = opt("context_length", 0)
	if keyErr != nil {
		return nil, keyErr
	}
	if c.Heads > 0 {
		c.HeadDim = opt("attention.key_length", c.Dim/c.Heads)
	}
	c.RopeDim = opt("rope.dimension_count", c.HeadDim)
	if keyErr != nil {
		return nil, keyErr
	}
	eps, e := f.Float(key("attention.layer_norm_rms_epsilon"))
	if e != nil {
		return nil, fmt.Errorf("llama: %w", e)
	}
	c.NormEps = float32(eps)
	c.RopeTheta = 10000
	if f.Has(key("rope.freq_base")) {
		if c.RopeTheta, err = f.Float(key("rope.freq_base")); err != nil {
			return nil, fmt.Errorf("llama: %w", err)
		}
	}
	if f.Has(key("rope.scaling.type")) {
		st, _ := f.String(key("rope.scaling.type"))
		_, longrope := f.Tensor("rope_factors_long.weight")
		switch {
		case st == "none" || st == "" || longrope && (st == "longrope" || st == "su"):
		case st == "linear":
			if c.RopeLinear, err = f.Float(key("rope.scaling.factor")); err != nil || !(c.RopeLinear >= 1) {
				return nil, fmt.Errorf("llama: %s: linear rope scaling needs a factor of at least 1 (%v, %v)", file, c.RopeLinear, err)
			}
		default:
			return nil, fmt.Errorf("llama: %s: rope scaling %q is not supported (linear, and longrope with its factors, are)", file, st)
		}
	}
	// Longrope (Phi-3 128k, Phi-3.5, Phi-4-mini): long and short per-frequency factors
	// as tensors, chosen per model by its context length against the original one
	// (rope.scaling.original_context_length, else the context length, as llama.cpp
	// reads them).
	long, err := f32Vector(f, file, "rope_factors_long.weight")
	if err != nil {
		return nil, err
	}
	short, err := f32Vector(f, file, "rope_factors_short.weight")
	if err != nil {
		return nil, err
	}
	if (long == nil) != (short == nil) {
		return nil, fmt.Errorf("llama: %s: longrope needs both rope_factors_long.weight and rope_factors_short.weight", file)
	}
	c.RopeLongFactors, c.RopeShortFactors = long, short
	if long != nil {
		c.RopeOriginalContext = opt("rope.scaling.original_context_length", c.ContextLength)
	}
	// The factor on the rotary cosines and sines (longrope's attention factor), which
	// llama.cpp takes as 1 when the key is missing.
	if f.Has(key("rope.scaling.attn_factor")) {
		a, e := f.Float(key("rope.scaling.attn_factor"))
		if e != nil {
			return nil, fmt.Errorf("llama: %w", e)
		}
		c.RopeScale = float32(a)
	}
	// A gemma3 file's window slides in five layers of six; a llama file's (Mistral's)
	// in every layer. Elsewhere (Phi-3) sliding-window attention equals full
	// attention within the window: the context is capped there, as for Hugging Face
	// directories.
	if arch == "gemma3" {
		if err := gemma3GGUF(f, &c, file); err != nil {
			return nil, err
		}
	} else if w := opt("attention.sliding_window", 0); w > 0 {
		if arch == "llama" {
			c.SlidingWindow = w
		} else {
			c.limitContext(w)
		}
	}
	// llama.cpp keeps llama3 rope scaling as per-frequency divisors in a tensor.
	if c.RopeFreqFactors, err = f32Vector(f, file, "rope_freqs.weight"); err != nil {
		return nil, err
	}
	// qwen2, qwen3 and phi3 files keep Hugging Face's rotary layout; llama files have
	// their Q and K rows permuted for interleaved pairs.
	c.RopeStyle = RopeInterleaved
	if arch != "llama" { // gemma3 too: llama.cpp rotates it in NeoX (rotate-half) pairs
		c.RopeStyle = RopeHalf
	}
	if keyErr != nil {
		return nil, keyErr
	}
	src := ggufSource{f}
	_, shape, _, ok := src.lookup("token_embd.weight")
	if !ok || len(shape) != 2 {
		return nil, fmt.Errorf("llama: %s: tensor \"token_embd.weight\" missing or not 2-D", file)
	}
	c.Vocab = int(shape[0])
	t := &Tensors{Config: c, Name: file, Names: GGUFNames(), src: src, file: file, closer: f}
	if name, e := f.String("general.name"); e == nil && name != "" {
		t.Name = name
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("llama: %s: %w", file, err)
	}
	if c.Layers > 1<<12 || c.Heads > 1<<12 {
		return nil, fmt.Errorf("llama: %s: implausible shape: %d layers, %d heads", file, c.Layers, c.Heads)
	}
	return t, nil
}

// f32Vector reads a 1-D F32 tensor of the file; nil when there is none.
func f32Vector(f *gguf.File, file, name string) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, nil
	}
	if t.Type != dtype.F32 || len(t.Dims) != 1 {
		return nil, fmt.Errorf("llama: %s: tensor %q must be a 1-D F32 vector", file, name)
	}
	return f32bytes(f.Data(t)), nil
}

// GGUFNames returns the tensor names of llama.cpp's GGUF files.
func GGUFNames() TensorNames {
	parts := map[string]string{
		"attn_norm": "attn_norm.weight", "q": "attn_q.weight", "k": "attn_k.weight", "v": "attn_v.weight",
		"o": "attn_output.weight", "q_bias": "attn_q.bias", "k_bias": "attn_k.bias", "v_bias": "attn_v.bias",
		"q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
		"qkv": "attn_qkv.weight", "gate_up": "ffn_up.weight",
		"post_attn_norm": "post_attention_norm.weight", "post_ffn_norm": "post_ffw_norm.weight",
		"ffn_norm": "ffn_norm.weight", "gate": "ffn_gate.weight", "up": "ffn_up.weight", "down": "ffn_down.weight",
	}
	return TensorNames{
		Embed: "token_embd.weight", OutNorm: "output_norm.weight", Output: "output.weight",
		Layer: func(i int, part string) string { return fmt.Sprintf("blk.%d.%s", i, parts[part]) },
	}
}

// gemma3GGUF reads what is Gemma 3's own in a gemma3 file, as llama.cpp does: every
// sixth layer global, the rest sliding (when the file gives a window) with a rotary
// base of 10⁴, unscaled; embeddings scaled by √Dim; GELU; norms before and after
// attention and the feed-forward unit (their weights stored as 1 + w, the converter's
// doing). The score scale is 1/√HeadDim, or for the 27B model (62 layers)
// 1/√(Dim/Heads), as llama.cpp decides it.
func gemma3GGUF(f *gguf.File, c *Config, file string) error {
	key := "gemma3.final_logit_softcapping"
	if f.Has(key) {
		v, err := f.Float(key)
		if err != nil {
			return fmt.Errorf("llama: %s: %w", file, err)
		}
		if v != 0 {
			return fmt.Errorf("llama: %s: final logit soft-capping (%v) is not supported", file, v)
		}
	}
	if f.Has("gemma3.attention.sliding_window") {
		w, err := f.Uint("gemma3.attention.sliding_window")
		if err != nil {
			return fmt.Errorf("llama: %s: %w", file, err)
		}
		c.SlidingWindow = int(w)
	}
	c.setGemma3(6)
	if c.Layers == 62 && c.Heads > 0 {
		c.AttnScale = float32(1 / math.Sqrt(float64(c.Dim/c.Heads)))
	}
	return nil
}
