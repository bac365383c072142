package llama

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/internal/sharedtest"
)

// gocoderEagle3Config is the shared head's config.json (../shared/models/gocoder-m-eagle3).
const gocoderEagle3Config = `{"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 512,
 "intermediate_size": 1408, "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 1,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 2048, "vocab_size": 8192,
 "draft_vocab_size": 4096, "hidden_act": "silu", "attention_bias": false, "tie_word_embeddings": false,
 "bos_token_id": 8191, "eos_token_id": 8191, "torch_dtype": "bfloat16"}`

// speculatorsEagle3Config is the same head as the speculators library writes it
// (speculators_model_type eagle3, the layer under transformer_layer_config).
const speculatorsEagle3Config = `{"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
 "speculators_version": "0.1.0", "draft_vocab_size": 4096, "norm_before_residual": true, "target_hidden_size": 512,
 "eagle_aux_hidden_state_layer_ids": [2, 4, 5], "has_no_defaults_at_init": false, "torch_dtype": "bfloat16",
 "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
  "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 5}],
  "verifier": {"name_or_path": "gocoder-m", "architectures": ["LlamaForCausalLM"]}},
 "transformer_layer_config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
  "intermediate_size": 1408, "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 1,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 2048, "vocab_size": 8192,
  "hidden_act": "silu", "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": false}}`

// TestParseEAGLE3Config reads both layouts and refuses, by name, every key and value
// the loader does not implement.
func TestParseEAGLE3Config(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		want      EAGLE3Config
	}{
		{"eagle3 llama", gocoderEagle3Config, EAGLE3Config{DraftVocab: 4096}},
		{"speculators", speculatorsEagle3Config, EAGLE3Config{DraftVocab: 4096, TargetHidden: 512, AuxLayerIDs: []int{2, 4, 5},
			NormBeforeResidual: true, Speculators: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.True(t, IsEAGLE3Config([]byte(c.raw)))
			got, err := ParseEAGLE3Config([]byte(c.raw))
			require.NoError(t, err)
			assert.Equal(t, 512, got.Layer.Dim)
			assert.Equal(t, 8192, got.Layer.Vocab)
			assert.Equal(t, 1, got.Layer.Layers)
			got.Layer = Config{}
			assert.Equal(t, c.want, got)
		})
	}
	assert.False(t, IsEAGLE3Config([]byte(`{"architectures": ["LlamaForCausalLM"]}`)))
	replace := func(raw, old, new string) string {
		require.Contains(t, raw, old)
		return strings.Replace(raw, old, new, 1)
	}
	for _, c := range []struct{ raw, err string }{
		{replace(gocoderEagle3Config, `"torch_dtype"`, `"eagle_fc_bias": true, "torch_dtype"`), `config key "eagle_fc_bias" is not one the EAGLE-3 loader understands`},
		{replace(speculatorsEagle3Config, `"mlp_bias"`, `"sliding_window": 4, "mlp_bias"`), `config key "transformer_layer_config.sliding_window"`},
		{replace(speculatorsEagle3Config, `"default_proposal_method"`, `"tree_choices": [], "default_proposal_method"`), `config key "speculators_config.tree_choices"`},
		{replace(speculatorsEagle3Config, `"speculators_version"`, `"embed_requires_grad": false, "speculators_version"`), `config key "embed_requires_grad"`},
		{replace(gocoderEagle3Config, `"num_hidden_layers": 1`, `"num_hidden_layers": 2`), "num_hidden_layers 2"},
		{replace(gocoderEagle3Config, `"attention_bias": false`, `"attention_bias": true`), "attention_bias true"},
		{replace(gocoderEagle3Config, `"tie_word_embeddings": false`, `"tie_word_embeddings": true`), "tie_word_embeddings true"},
		{replace(gocoderEagle3Config, `"draft_vocab_size": 4096`, `"draft_vocab_size": 9000`), "draft_vocab_size 9000"},
		{replace(gocoderEagle3Config, `"draft_vocab_size": 4096`, `"draft_vocab_size": 4096, "eagle_aux_hidden_state_layer_ids": [0, 4, 5]`), "entering layer 0 is the embedding"},
		{replace(gocoderEagle3Config, `"draft_vocab_size": 4096`, `"draft_vocab_size": 4096, "eagle_aux_hidden_state_layer_ids": [4, 2, 5]`), "must ascend"},
		{replace(gocoderEagle3Config, `"hidden_act": "silu"`, `"hidden_act": "gelu"`), `hidden_act "gelu"`},
		{replace(speculatorsEagle3Config, `"speculators_model_type": "eagle3"`, `"speculators_model_type": "eagle"`), `speculators_model_type "eagle"`},
		{replace(speculatorsEagle3Config, `"algorithm": "eagle3"`, `"algorithm": "medusa"`), `algorithm "medusa"`},
		{`[1, 2]`, "cannot unmarshal"},
		{`null`, "not a JSON object"},
	} {
		_, err := ParseEAGLE3Config([]byte(c.raw))
		assert.ErrorContains(t, err, c.err)
	}
}

// TestEAGLE3DefaultAux checks vLLM's default auxiliary layers and their checks
// against the target's depth.
func TestEAGLE3DefaultAux(t *testing.T) {
	assert.Equal(t, []int{2, 4, 5}, DefaultAuxLayerIDs(8))
	assert.Equal(t, []int{2, 14, 25}, DefaultAuxLayerIDs(28)) // Qwen2.5-7B
	assert.Equal(t, []int{2, 16, 29}, DefaultAuxLayerIDs(32)) // Llama-3.1-8B
	assert.NoError(t, checkAuxIDs(DefaultAuxLayerIDs(8), 8))
	assert.ErrorContains(t, checkAuxIDs(DefaultAuxLayerIDs(4), 4), "must ascend") // (2, 2, 1)
	assert.ErrorContains(t, checkAuxIDs([]int{2, 4, 8}, 8), "outside the target's [1, 8)")
}

// FuzzEAGLE3Config feeds ParseEAGLE3Config arbitrary config.json bytes: it must return
// a config that holds its own checks, or an error, and never panic. The seed corpus
// is in testdata/fuzz/FuzzEAGLE3Config (both layouts and broken variants).
func FuzzEAGLE3Config(f *testing.F) {
	f.Add([]byte(gocoderEagle3Config))
	f.Add([]byte(speculatorsEagle3Config))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseEAGLE3Config(raw)
		if err != nil {
			return
		}
		switch {
		case c.Layer.Layers != 1 || c.Layer.Dim <= 0 || c.Layer.Vocab <= 0:
			t.Fatalf("accepted layer %+v", c.Layer)
		case c.DraftVocab <= 0 || c.DraftVocab > c.Layer.Vocab:
			t.Fatalf("accepted draft vocabulary %d of %d", c.DraftVocab, c.Layer.Vocab)
		case c.TargetHidden < 0:
			t.Fatalf("accepted target_hidden_size %d", c.TargetHidden)
		}
		if c.AuxLayerIDs != nil {
			if err := checkAuxIDs(c.AuxLayerIDs, 1<<20); err != nil {
				t.Fatalf("accepted aux ids: %v", err)
			}
		}
	})
}

// TestEAGLE3SharedConfig reads the shared head's own config.json when ../shared is
// there.
func TestEAGLE3SharedConfig(t *testing.T) {
	raw, err := os.ReadFile(sharedtest.Path(t, "models", "gocoder-m-eagle3", "config.json"))
	require.NoError(t, err)
	c, err := ParseEAGLE3Config(raw)
	require.NoError(t, err)
	assert.Equal(t, 4096, c.DraftVocab)
	assert.Nil(t, c.AuxLayerIDs, "the config names none: the target's default")
}
