package llama

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
)

// hfConfig is the part of a Hugging Face config.json the runtime reads.
type hfConfig struct {
	Architectures    []string         `json:"architectures"`
	ModelType        string           `json:"model_type"`
	HiddenSize       int              `json:"hidden_size"`
	Intermediate     int              `json:"intermediate_size"`
	Heads            int              `json:"num_attention_heads"`
	KVHeads          int              `json:"num_key_value_heads"`
	HeadDim          int              `json:"head_dim"`
	Layers           int              `json:"num_hidden_layers"`
	RMSNormEps       float64          `json:"rms_norm_eps"`
	RopeTheta        float64          `json:"rope_theta"`
	Vocab            int              `json:"vocab_size"`
	MaxPositions     int              `json:"max_position_embeddings"`
	TieEmbeddings    *bool            `json:"tie_word_embeddings"`
	AttentionBias    *bool            `json:"attention_bias"`
	HiddenAct        string           `json:"hidden_act"`
	RopeScaling      *json.RawMessage `json:"rope_scaling"`
	SlidingWindow    *int             `json:"sliding_window"`
	UseSlidingWindow *bool            `json:"use_sliding_window"`
	PartialRotary    *float64         `json:"partial_rotary_factor"`
}

type hfRopeScaling struct {
	Type            string  `json:"type"`
	RopeType        string  `json:"rope_type"`
	Factor          float64 `json:"factor"`
	LowFreqFactor   float64 `json:"low_freq_factor"`
	HighFreqFactor  float64 `json:"high_freq_factor"`
	OriginalContext int     `json:"original_max_position_embeddings"`
}

// hfConfigToConfig checks a config.json and turns it into a Config.
func hfConfigToConfig(h hfConfig) (Config, error) {
	arch := ""
	if len(h.Architectures) > 0 {
		arch = h.Architectures[0]
	}
	c := Config{Dim: h.HiddenSize, Layers: h.Layers, Heads: h.Heads, KVHeads: h.KVHeads, FFN: h.Intermediate,
		Vocab: h.Vocab, ContextLength: h.MaxPositions, NormEps: float32(h.RMSNormEps), RopeTheta: h.RopeTheta,
		RopeStyle: RopeHalf}
	tied := false
	switch arch {
	case "LlamaForCausalLM", "MistralForCausalLM":
		c.Arch = "llama"
		c.QKVBias = h.AttentionBias != nil && *h.AttentionBias
	case "Qwen2ForCausalLM":
		c.Arch = "qwen2"
		c.QKVBias = true
	case "Qwen3ForCausalLM":
		c.Arch = "qwen3"
		c.QKVBias = h.AttentionBias != nil && *h.AttentionBias
		c.QKNorm = true
	case "Phi3ForCausalLM":
		c.Arch = "phi3"
		c.Fused = true
	default:
		return c, fmt.Errorf("architecture %q is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and Phi3ForCausalLM are)", arch)
	}
	if h.TieEmbeddings != nil {
		tied = *h.TieEmbeddings
	}
	c.TiedEmbeddings = tied
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return c, fmt.Errorf("activation %q is not supported (silu is)", h.HiddenAct)
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-6
	}
	c.HeadDim = h.HeadDim
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	c.RopeDim = c.HeadDim
	if h.PartialRotary != nil {
		c.RopeDim = int(float64(c.HeadDim)**h.PartialRotary) / 2 * 2
	}
	if h.SlidingWindow != nil && *h.SlidingWindow > 0 && (h.UseSlidingWindow == nil || *h.UseSlidingWindow) {
		if arch == "MistralForCausalLM" {
			c.SlidingWindow = *h.SlidingWindow // every layer slides
		} else {
			// Sliding-window attention equals full attention within the window:
			// the context is capped there.
			c.limitContext(*h.SlidingWindow)
		}
	}
	if h.RopeScaling != nil && string(*h.RopeScaling) != "null" {
		var rs hfRopeScaling
		if err := json.Unmarshal(*h.RopeScaling, &rs); err != nil {
			return c, fmt.Errorf("rope_scaling: %w", err)
		}
		kind := rs.RopeType
		if kind == "" {
			kind = rs.Type
		}
		switch kind {
		case "default", "":
		case "llama3":
			if rs.Factor <= 0 || rs.LowFreqFactor <= 0 || rs.HighFreqFactor <= rs.LowFreqFactor || rs.OriginalContext <= 0 {
				return c, fmt.Errorf("rope_scaling llama3 has invalid parameters %+v", rs)
			}
			c.RopeFreqFactors = Llama3Scaling{Factor: rs.Factor, LowFreqFactor: rs.LowFreqFactor,
				HighFreqFactor: rs.HighFreqFactor, OriginalContext: rs.OriginalContext}.FreqFactors(c.RopeTheta, c.RopeDim)
		default:
			return c, fmt.Errorf("rope_scaling of type %q is not supported (llama3 is)", kind)
		}
	}
	return c, nil
}

type hfSource struct{ s *safetensors.Set }

func (h hfSource) lookup(name string) (dtype.DType, []int64, []byte, bool) {
	t, ok := h.s.Tensor(name)
	if !ok {
		return 0, nil, nil, false
	}
	if !t.Supported() {
		return dtype.DType(1 << 30), t.Shape, t.Data, true // NewMatrix reports the type
	}
	return t.DType, t.Shape, t.Data, true
}

func (h hfSource) mapped() bool { return h.s.Mapped() }

func (h hfSource) size() int64 {
	var n int64
	for _, name := range h.s.Names() {
		t, _ := h.s.Tensor(name)
		n += int64(len(t.Data))
	}
	return n
}

// ReadHFConfig reads and checks the config.json of a Hugging Face model directory.
func ReadHFConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("llama: %w", err)
	}
	var h hfConfig
	if err := json.Unmarshal(raw, &h); err != nil {
		return Config{}, fmt.Errorf("llama: %s: %w", path, err)
	}
	c, err := hfConfigToConfig(h)
	if err == nil {
		err = c.validate()
	}
	if err != nil {
		return Config{}, fmt.Errorf("llama: %s: %w", path, err)
	}
	return c, nil
}

// hfTensors opens a Hugging Face model directory.
func hfTensors(dir string) (*Tensors, error) {
	c, err := ReadHFConfig(dir)
	if err != nil {
		return nil, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	name := filepath.Base(dir)
	return &Tensors{Config: c, Name: name, Names: hfNames(), src: hfSource{set}, file: name, closer: set}, nil
}

// hfNames returns the tensor names of Hugging Face's Llama, Qwen2, Qwen3 and Phi-3
// checkpoints.
func hfNames() TensorNames {
	parts := map[string]string{
		"attn_norm": "input_layernorm.weight", "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight",
		"v": "self_attn.v_proj.weight", "o": "self_attn.o_proj.weight", "q_bias": "self_attn.q_proj.bias",
		"k_bias": "self_attn.k_proj.bias", "v_bias": "self_attn.v_proj.bias", "ffn_norm": "post_attention_layernorm.weight",
		"q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
		"qkv": "self_attn.qkv_proj.weight", "gate_up": "mlp.gate_up_proj.weight",
		"gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight", "down": "mlp.down_proj.weight",
	}
	return TensorNames{
		Embed: "model.embed_tokens.weight", OutNorm: "model.norm.weight", Output: "lm_head.weight",
		Layer: func(i int, part string) string { return fmt.Sprintf("model.layers.%d.%s", i, parts[part]) },
	}
}
