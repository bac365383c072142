package heads

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseHeadConfig checks vLLM's defaults and its names for the original Medusa
// repository's keys, and the errors.
func TestParseHeadConfig(t *testing.T) {
	c, err := parseHeadConfig([]byte(`{"model_type": "medusa", "medusa_num_heads": 5, "medusa_num_layers": 2}`))
	require.NoError(t, err)
	assert.Equal(t, 5, c.NumHeads)
	assert.Equal(t, 2, *c.NumLayers)
	assert.Zero(t, c.HiddenSize, "sizes come from the target then")
	c, err = parseHeadConfig([]byte(`{"model_type": "medusa", "hidden_size": 512, "vocab_size": 8192, "num_heads": 4}`))
	require.NoError(t, err)
	assert.Equal(t, 1, *c.NumLayers, "vLLM's default layer count")
	for raw, want := range map[string]string{
		`{"model_type": "medusa", "num_heads": 0}`:                       "num_heads 0",
		`{"model_type": "medusa", "num_heads": 2, "hidden_size": -3}`:    "must not be negative",
		`{"model_type": "mlp_speculator", "emb_dim": 4, "inner_dim": 4}`: "vocab_size 0",
		`{"model_type": "gpt2"}`:                                         `model_type "gpt2"`,
		`{"model_type": `:                                                "unexpected end",
	} {
		_, err := parseHeadConfig([]byte(raw))
		assert.ErrorContains(t, err, want, raw)
	}
}
