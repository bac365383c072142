package llama

import (
	"fmt"

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
// rotary keys, and the sliding window when there is one. (Llama 3 rope scaling goes in
// the rope_freqs.weight tensor, not here.)
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
	if c.HeadDim != c.Dim/c.Heads {
		kv = append(kv, gguf.KeyValue{Key: a + ".attention.key_length", Value: u32(c.HeadDim)},
			gguf.KeyValue{Key: a + ".attention.value_length", Value: u32(c.HeadDim)})
	}
	if c.SlidingWindow > 0 {
		kv = append(kv, gguf.KeyValue{Key: a + ".attention.sliding_window", Value: u32(c.SlidingWindow)})
	}
	return kv
}

// ggufTensors opens a GGUF file of architecture llama, qwen2, qwen3 or phi3.
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
	if arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "phi3" {
		return nil, fmt.Errorf("llama: %s: architecture %q is not supported (llama, qwen2, qwen3 and phi3 are)", file, arch)
	}
	key := func(k string) string { return arch + "." + k }
	req := func(k string) int {
		v, e := f.Uint(key(k))
		if e != nil && err == nil {
			err = fmt.Errorf("llama: %w", e)
		}
		return int(v)
	}
	opt := func(k string, def int) int {
		if !f.Has(key(k)) {
			return def
		}
		return req(k)
	}
	c := Config{Arch: arch, QKVBias: arch == "qwen2", QKNorm: arch == "qwen3", Fused: arch == "phi3"}
	c.Dim = req("embedding_length")
	c.Layers = req("block_count")
	c.FFN = req("feed_forward_length")
	c.Heads = req("attention.head_count")
	c.KVHeads = opt("attention.head_count_kv", c.Heads)
	c.ContextLength = opt("context_length", 0)
	if err != nil {
		return nil, err
	}
	if c.Heads > 0 {
		c.HeadDim = opt("attention.key_length", c.Dim/c.Heads)
	}
	c.RopeDim = opt("rope.dimension_count", c.HeadDim)
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
		if st != "none" && st != "" {
			return nil, fmt.Errorf("llama: %s: rope scaling %q is not supported", file, st)
		}
	}
	// Phi-3's long-context rotary scaling (su/longrope: per-frequency factors chosen by
	// the context length, and a magnitude factor) is not implemented.
	if _, ok := f.Tensor("rope_factors_long.weight"); ok {
		return nil, fmt.Errorf("llama: %s: longrope rotary scaling (rope_factors_long.weight) is not supported", file)
	}
	// A llama file's window (Mistral's) slides in every layer. Elsewhere (Phi-3)
	// sliding-window attention equals full attention within the window: the context
	// is capped there, as for Hugging Face directories.
	if w := opt("attention.sliding_window", 0); w > 0 {
		if arch == "llama" {
			c.SlidingWindow = w
		} else {
			c.limitContext(w)
		}
	}
	// llama.cpp keeps llama3 rope scaling as per-frequency divisors in a tensor.
	if t, ok := f.Tensor("rope_freqs.weight"); ok {
		if t.Type != dtype.F32 || len(t.Dims) != 1 {
			return nil, fmt.Errorf("llama: %s: tensor \"rope_freqs.weight\" must be a 1-D F32 vector", file)
		}
		c.RopeFreqFactors = f32bytes(f.Data(t))
	}
	// qwen2, qwen3 and phi3 files keep Hugging Face's rotary layout; llama files have
	// their Q and K rows permuted for interleaved pairs.
	c.RopeStyle = RopeInterleaved
	if arch != "llama" {
		c.RopeStyle = RopeHalf
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

// GGUFNames returns the tensor names of llama.cpp's GGUF files.
func GGUFNames() TensorNames {
	parts := map[string]string{
		"attn_norm": "attn_norm.weight", "q": "attn_q.weight", "k": "attn_k.weight", "v": "attn_v.weight",
		"o": "attn_output.weight", "q_bias": "attn_q.bias", "k_bias": "attn_k.bias", "v_bias": "attn_v.bias",
		"q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
		"qkv": "attn_qkv.weight", "gate_up": "ffn_up.weight",
		"ffn_norm": "ffn_norm.weight", "gate": "ffn_gate.weight", "up": "ffn_up.weight", "down": "ffn_down.weight",
	}
	return TensorNames{
		Embed: "token_embd.weight", OutNorm: "output_norm.weight", Output: "output.weight",
		Layer: func(i int, part string) string { return fmt.Sprintf("blk.%d.%s", i, parts[part]) },
	}
}
