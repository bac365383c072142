package llama

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
)

// gemma3Text is the config.json of Gemma 3 1B (google/gemma-3-1b-it), as published.
const gemma3Text = `{
  "architectures": ["Gemma3ForCausalLM"], "attn_logit_softcapping": null, "bos_token_id": 2,
  "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
  "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
  "num_hidden_layers": 26, "num_key_value_heads": 1, "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null,
  "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16", "vocab_size": 262144}`

// gemma3Multimodal is the config.json of Gemma 3 4B (google/gemma-3-4b-it), its
// vision part shortened.
const gemma3Multimodal = `{
  "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
  "mm_tokens_per_image": 256,
  "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "sliding_window": 1024, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "query_pre_attn_scalar": 256, "rope_theta": 1000000, "rope_local_base_freq": 10000,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "vocab_size": 262208},
  "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}}`

// TestHFConfig reads config.json files of the families' published models, and
// refuses what the runtime does not implement with an error naming it.
func TestHFConfig(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		check      func(t *testing.T, c Config)
		err        string
	}{
		{"gemma 3 1b", gemma3Text, func(t *testing.T, c Config) {
			assert.Equal(t, "gemma3", c.Arch)
			assert.Equal(t, 512, c.SlidingWindow)
			assert.Equal(t, 10000.0, c.LocalRopeTheta)
			assert.Equal(t, backend.GELUTanh, c.Activation)
			assert.True(t, c.QKNorm && c.PostNorms && c.TiedEmbeddings)
			assert.InDelta(t, math.Sqrt(1152), c.EmbedScale, 1e-4)
			assert.InDelta(t, 1.0/16, c.AttnScale, 1e-9)
			for l := range c.Layers {
				assert.Equal(t, (l+1)%6 != 0, c.IsSliding(l), "layer %d", l)
			}
		}, ""},
		{"gemma 3 4b (multimodal)", gemma3Multimodal, func(t *testing.T, c Config) {
			assert.Equal(t, 2560, c.Dim)
			assert.Equal(t, 262208, c.Vocab)
			assert.Equal(t, 8.0, c.RopeLinear)
			assert.Equal(t, 1024, c.SlidingWindow)
			assert.True(t, c.TiedEmbeddings)
		}, ""},
		{"gemma 3 layer_types", `{"architectures": ["Gemma3ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
			"num_attention_heads": 2, "num_hidden_layers": 3, "head_dim": 32, "vocab_size": 50, "sliding_window": 8,
			"layer_types": ["full_attention", "sliding_attention", "full_attention"]}`, func(t *testing.T, c Config) {
			assert.Equal(t, []bool{false, true, false}, c.Sliding)
		}, ""},
		{"gemma 3 layer_types length", `{"architectures": ["Gemma3ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
			"num_attention_heads": 2, "num_hidden_layers": 3, "head_dim": 32, "vocab_size": 50, "sliding_window": 8,
			"layer_types": ["full_attention"]}`, nil, "1 layer_types for 3 layers"},
		{"gemma 3 negative pattern", `{"architectures": ["Gemma3ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
			"num_attention_heads": 2, "num_hidden_layers": 1, "head_dim": 32, "vocab_size": 50, "sliding_window": 8,
			"sliding_window_pattern": -1, "layer_types": ["sliding_attention"]}`, nil, "sliding_window_pattern -1"},
		{"gemma 3 soft-capping", `{"architectures": ["Gemma3ForCausalLM"], "final_logit_softcapping": 30}`, nil,
			"logit soft-capping (30) is not supported"},
		{"gemma 3 activation", `{"architectures": ["Gemma3ForCausalLM"], "hidden_activation": "gelu"}`, nil,
			`activation "gelu" is not supported for Gemma 3`},
		{"yarn", `{"architectures": ["Qwen3ForCausalLM"], "rope_scaling": {"rope_type": "yarn", "factor": 4}}`, nil,
			`rope_scaling of type "yarn" is not supported`},
		{"linear", `{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
			"num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": 50,
			"rope_scaling": {"type": "linear", "factor": 4}}`, func(t *testing.T, c Config) {
			assert.Equal(t, 4.0, c.RopeLinear)
			assert.InDelta(t, 1.0/4, c.InvFreqs()[0], 1e-12)
		}, ""},
		{"gemma 2", `{"architectures": ["Gemma2ForCausalLM"]}`, nil, `architecture "Gemma2ForCausalLM" is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.json), 0o644))
			c, err := ReadHFConfig(dir)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}
