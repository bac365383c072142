package llama

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/hfquant"
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
	OriginalContext  int              `json:"original_max_position_embeddings"`

	// Gemma 3's.
	HiddenActivation     string           `json:"hidden_activation"`
	QueryPreAttnScalar   float64          `json:"query_pre_attn_scalar"`
	RopeLocalBase        float64          `json:"rope_local_base_freq"`
	SlidingWindowPattern int              `json:"sliding_window_pattern"`
	LayerTypes           []string         `json:"layer_types"`
	FinalSoftcap         *float64         `json:"final_logit_softcapping"`
	AttnSoftcap          *float64         `json:"attn_logit_softcapping"`
	TextConfig           *json.RawMessage `json:"text_config"` // a multimodal model's language model
}

type hfRopeScaling struct {
	Type            string  `json:"type"`
	RopeType        string  `json:"rope_type"`
	Factor          float64 `json:"factor"`
	LowFreqFactor   float64 `json:"low_freq_factor"`
	HighFreqFactor  float64 `json:"high_freq_factor"`
	OriginalContext int     `json:"original_max_position_embeddings"`
	// longrope
	LongFactor      []float64 `json:"long_factor"`
	ShortFactor     []float64 `json:"short_factor"`
	AttentionFactor *float64  `json:"attention_factor"`
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
	case "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration":
		c.Arch = "gemma3"
		tied = true
	default:
		return c, fmt.Errorf("architecture %q is not supported (%s are)", arch, strings.Join(hfArchs(), ", "))
	}
	if h.TieEmbeddings != nil {
		tied = *h.TieEmbeddings
	}
	c.TiedEmbeddings = tied
	if c.Arch != "gemma3" && h.HiddenAct != "" && h.HiddenAct != "silu" {
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
	if c.Arch == "gemma3" {
		if err := gemma3HF(h, &c); err != nil {
			return c, err
		}
	} else if h.SlidingWindow != nil && *h.SlidingWindow > 0 && (h.UseSlidingWindow == nil || *h.UseSlidingWindow) {
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
		case "linear":
			if !(rs.Factor >= 1) {
				return c, fmt.Errorf("rope_scaling linear has factor %v, want at least 1", rs.Factor)
			}
			c.RopeLinear = rs.Factor
		case "llama3":
			if rs.Factor <= 0 || rs.LowFreqFactor <= 0 || rs.HighFreqFactor <= rs.LowFreqFactor || rs.OriginalContext <= 0 {
				return c, fmt.Errorf("rope_scaling llama3 has invalid parameters %+v", rs)
			}
			c.RopeFreqFactors = Llama3Scaling{Factor: rs.Factor, LowFreqFactor: rs.LowFreqFactor,
				HighFreqFactor: rs.HighFreqFactor, OriginalContext: rs.OriginalContext}.FreqFactors(c.RopeTheta, c.RopeDim)
		case "longrope", "su":
			if err := h.longRope(&c, rs); err != nil {
				return c, err
			}
		default:
			return c, fmt.Errorf("rope_scaling of type %q is not supported (linear, llama3 and longrope are)", kind)
		}
	}
	return c, nil
}

// longRope sets c's longrope scaling from rope_scaling rs: the long and short factors,
// the original context (original_max_position_embeddings beside max_position_embeddings,
// as Phi-3 has it, else inside rope_scaling), and the attention factor, given or
// computed as Hugging Face computes it — from max_position_embeddings over the
// original context when the original is beside it, else from rope_scaling's factor.
func (h hfConfig) longRope(c *Config, rs hfRopeScaling) error {
	if rs.LongFactor == nil || rs.ShortFactor == nil {
		return fmt.Errorf("rope_scaling longrope needs long_factor and short_factor (%d long, %d short)", len(rs.LongFactor), len(rs.ShortFactor))
	}
	f32 := func(v []float64) []float32 {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return out
	}
	c.RopeLongFactors, c.RopeShortFactors = f32(rs.LongFactor), f32(rs.ShortFactor)
	factor := rs.Factor
	switch {
	case h.OriginalContext > 0:
		c.RopeOriginalContext = h.OriginalContext
		factor = float64(h.MaxPositions) / float64(h.OriginalContext)
	case rs.OriginalContext > 0:
		c.RopeOriginalContext = rs.OriginalContext
		if factor == 0 {
			factor = float64(h.MaxPositions) / float64(rs.OriginalContext)
		}
	default:
		return errors.New("rope_scaling longrope needs original_max_position_embeddings")
	}
	c.RopeScale = LongRopeScale(factor, c.RopeOriginalContext)
	if rs.AttentionFactor != nil {
		c.RopeScale = float32(*rs.AttentionFactor)
	}
	return nil
}

// hfSource is a Hugging Face directory's tensors; a quantized linear layer's weight
// (scheme q) is served as its exact Q4_0, Q4_Z128, Q4_Z, Q8_0 or F8_E4M3_B128 (FP8) repacking, else
// its dense F32 matrix.
type hfSource struct {
	s *safetensors.Set
	q *hfquant.Scheme // nil: not quantized
}

// lookup returns a tensor with its columns in input order: an act-order layer's
// dense F32 matrix rather than its permuted repacking.
func (h hfSource) lookup(name string) (dtype.DType, []int64, []byte, bool) {
	f, err := h.lookupChecked(name)
	if err != nil {
		return 0, nil, nil, false
	}
	if f.perm != nil {
		m, err := h.q.Dense(h.s, strings.TrimSuffix(name, ".weight"))
		if err != nil {
			return 0, nil, nil, false
		}
		data, err := dtype.Encode(dtype.F32, m.Data)
		if err != nil {
			return 0, nil, nil, false
		}
		return dtype.F32, f.shape, data, true
	}
	return f.t, f.shape, f.data, f.ok
}

// lookupChecked implements checkedSource: a tensor as stored, or the dense weight
// of a quantized layer.
func (h hfSource) lookupChecked(name string) (found, error) {
	t, ok := h.s.Tensor(name)
	if ok && t.Supported() {
		return found{t: t.DType, shape: t.Shape, data: t.Data, ok: true, stored: int64(len(t.Data))}, nil
	}
	if prefix, cut := strings.CutSuffix(name, ".weight"); cut && h.q != nil && h.q.Quantized(h.s, prefix) {
		return h.quantized(prefix)
	}
	if !ok {
		return found{}, nil
	}
	return found{t: dtype.DType(1 << 30), shape: t.Shape, data: t.Data, ok: true, stored: int64(len(t.Data))}, nil // NewMatrix reports the type
}

// quantized returns a quantized layer's weight: its Q4_0, Q4_Z128, Q4_Z, Q8_0 or F8_E4M3_B128
// repacking where that is exact (hfquant.Scheme.Packed; an act-order layer's with its
// inputs sorted by group, and the permutation), for the integer or FP8 kernels, else
// its dense F32 matrix.
func (h hfSource) quantized(prefix string) (found, error) {
	p, err := h.q.Load(h.s, prefix)
	if err != nil {
		return found{}, err
	}
	return found{t: p.Type, shape: []int64{int64(p.Rows), int64(p.Cols)}, data: p.Data, ok: true,
		computed: true, stored: p.Stored, perm: p.Perm}, nil
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

// hfArchs returns the architectures a config.json may name.
func hfArchs() []string {
	return []string{"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
		"Phi3ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}
}

// gemma3HF reads what is Gemma 3's own in a config.json: the activation, the score
// scale query_pre_attn_scalar^−½, the layers that slide (layer_types, or every
// sliding_window_pattern-th layer global) and their rotary base.
func gemma3HF(h hfConfig, c *Config) error {
	act := cmp.Or(h.HiddenActivation, h.HiddenAct, "gelu_pytorch_tanh")
	if act != "gelu_pytorch_tanh" {
		return fmt.Errorf("activation %q is not supported for Gemma 3 (gelu_pytorch_tanh is)", act)
	}
	for _, v := range []*float64{h.FinalSoftcap, h.AttnSoftcap} {
		if v != nil && *v != 0 {
			return fmt.Errorf("logit soft-capping (%v) is not supported", *v)
		}
	}
	if h.SlidingWindow != nil {
		c.SlidingWindow = *h.SlidingWindow
	}
	if h.SlidingWindowPattern < 0 {
		return fmt.Errorf("sliding_window_pattern %d", h.SlidingWindowPattern)
	}
	c.setGemma3(cmp.Or(h.SlidingWindowPattern, 6))
	if h.LayerTypes != nil && c.SlidingWindow > 0 {
		if len(h.LayerTypes) != c.Layers {
			return fmt.Errorf("%d layer_types for %d layers", len(h.LayerTypes), c.Layers)
		}
		c.Sliding = make([]bool, c.Layers)
		for l, t := range h.LayerTypes {
			c.Sliding[l] = t == "sliding_attention"
		}
	}
	if h.RopeLocalBase > 0 && c.LocalRopeTheta > 0 {
		c.LocalRopeTheta = h.RopeLocalBase
	}
	if h.QueryPreAttnScalar > 0 {
		c.AttnScale = float32(1 / math.Sqrt(h.QueryPreAttnScalar))
	}
	return nil
}

// ReadHFConfig reads and checks the config.json of a Hugging Face model directory.
func ReadHFConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("llama: %w", err)
	}
	h, err := parseHFConfig(raw)
	if err != nil {
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

// parseHFConfig parses a config.json; a multimodal model's is its language model's
// (text_config) under the outer architecture.
func parseHFConfig(raw []byte) (hfConfig, error) {
	var h hfConfig
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, err
	}
	if h.TextConfig == nil || string(*h.TextConfig) == "null" {
		return h, nil
	}
	var text hfConfig
	if err := json.Unmarshal(*h.TextConfig, &text); err != nil {
		return h, fmt.Errorf("text_config: %w", err)
	}
	text.Architectures = h.Architectures
	if text.TieEmbeddings == nil {
		text.TieEmbeddings = h.TieEmbeddings
	}
	return text, nil
}

// hfTensors opens a Hugging Face model directory.
func hfTensors(dir string) (*Tensors, error) {
	c, err := ReadHFConfig(dir)
	if err != nil {
		return nil, err
	}
	q, err := hfquant.ReadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	name := filepath.Base(dir)
	names := hfNames()
	if c.Arch == "gemma3" {
		names = gemma3Names(set)
	}
	return &Tensors{Config: c, Name: name, Names: names, src: hfSource{set, q}, file: name, closer: set}, nil
}

// LanguageModelPrefixes returns where a multimodal checkpoint (Gemma 3 4B and up)
// keeps its language model's tensors, which a text model keeps under "model.":
// "language_model.model." as the published checkpoints have it, "model.language_model."
// as newer transformers save it.
func LanguageModelPrefixes() []string {
	return []string{"language_model.model.", "model.language_model."}
}

// gemma3Names returns the tensor names of a Hugging Face Gemma 3 checkpoint: a text
// model's (model.…), or a multimodal one's language model (language_model.model.…,
// or model.language_model.… as newer transformers save it). Its norms hold w of
// (1 + w).
func gemma3Names(set *safetensors.Set) TensorNames {
	n := hfNames()
	prefix := "model."
	for _, p := range LanguageModelPrefixes() {
		if _, ok := set.Tensor(p + "embed_tokens.weight"); ok {
			prefix = p
		}
	}
	n.Embed, n.OutNorm = prefix+"embed_tokens.weight", prefix+"norm.weight"
	parts := map[string]string{
		"ffn_norm": "pre_feedforward_layernorm.weight", "post_attn_norm": "post_attention_layernorm.weight",
		"post_ffn_norm": "post_feedforward_layernorm.weight",
	}
	layer := n.Layer
	n.Layer = func(i int, part string) string {
		if p, ok := parts[part]; ok {
			return fmt.Sprintf("%slayers.%d.%s", prefix, i, p)
		}
		return prefix + strings.TrimPrefix(layer(i, part), "model.")
	}
	n.NormShift = 1
	return n
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
