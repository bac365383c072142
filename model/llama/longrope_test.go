package llama

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// phi3Config is a Phi3ForCausalLM config.json of Phi-4-mini's layout (partial rotary
// 0.75 of heads of 128: 48 factors a set), with longrope scaling set by edit.
func phi3Config(t *testing.T, edit func(map[string]any)) string {
	t.Helper()
	long, short := make([]float64, 48), make([]float64, 48)
	for i := range long {
		long[i], short[i] = 1+float64(i), 1
	}
	cfg := map[string]any{
		"architectures": []string{"Phi3ForCausalLM"}, "hidden_size": 3072, "intermediate_size": 8192,
		"num_attention_heads": 24, "num_key_value_heads": 8, "num_hidden_layers": 32, "rms_norm_eps": 1e-5,
		"rope_theta": 10000.0, "vocab_size": 200064, "max_position_embeddings": 131072,
		"original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75, "tie_word_embeddings": true,
		"sliding_window": 262144, "hidden_act": "silu",
		"rope_scaling": map[string]any{"type": "longrope", "long_factor": long, "short_factor": short},
	}
	edit(cfg)
	dir := t.TempDir()
	js, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644))
	return dir
}

// rs returns the rope_scaling of a config made by phi3Config.
func rs(cfg map[string]any) map[string]any { return cfg["rope_scaling"].(map[string]any) }

// TestLongRopeHFConfig: a config.json with longrope (or its old name, su) scaling gives
// both factor sets, the original context and the attention factor, computed as Hugging
// Face and llama.cpp's converter compute it unless given; incomplete or unknown
// scaling is refused with an error naming what is wrong.
func TestLongRopeHFConfig(t *testing.T) {
	phi4Scale := float32(math.Sqrt(1 + math.Log(32)/math.Log(4096))) // 1.190238…
	for _, tc := range []struct {
		name   string
		edit   func(map[string]any)
		scale  float32
		orig   int
		errMsg string
	}{
		{"phi-4-mini", func(map[string]any) {}, phi4Scale, 4096, ""},
		{"su", func(c map[string]any) { rs(c)["type"] = "su" }, phi4Scale, 4096, ""},
		{"rope_type", func(c map[string]any) { delete(rs(c), "type"); rs(c)["rope_type"] = "longrope" }, phi4Scale, 4096, ""},
		{"attention factor given", func(c map[string]any) { rs(c)["attention_factor"] = 1.5 }, 1.5, 4096, ""},
		{"no stretch", func(c map[string]any) { c["max_position_embeddings"] = 4096 }, 1, 4096, ""},
		{"original inside rope_scaling", func(c map[string]any) {
			delete(c, "original_max_position_embeddings")
			rs(c)["original_max_position_embeddings"] = 8192
			rs(c)["factor"] = 4.0
		}, float32(math.Sqrt(1 + math.Log(4)/math.Log(8192))), 8192, ""},
		{"no original context", func(c map[string]any) { delete(c, "original_max_position_embeddings") }, 0, 0,
			"rope_scaling longrope needs original_max_position_embeddings"},
		{"no short factors", func(c map[string]any) { delete(rs(c), "short_factor") }, 0, 0,
			"rope_scaling longrope needs long_factor and short_factor (48 long, 0 short)"},
		{"long factors too short", func(c map[string]any) { rs(c)["long_factor"] = make([]float64, 64) }, 0, 0,
			"64 longrope long factors for 96 rotary dimensions (want 48)"},
		{"factors for the whole head", func(c map[string]any) { c["partial_rotary_factor"] = 1.0 }, 0, 0,
			"48 longrope long factors for 128 rotary dimensions (want 64)"},
		{"zero factor", func(c map[string]any) { rs(c)["short_factor"].([]float64)[3] = 0 }, 0, 0,
			"rope frequency factors must be positive and finite"},
		{"yarn", func(c map[string]any) { rs(c)["type"] = "yarn" }, 0, 0,
			`rope_scaling of type "yarn" is not supported (linear, llama3 and longrope are)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ReadHFConfig(phi3Config(t, tc.edit))
			if tc.errMsg != "" {
				require.ErrorContains(t, err, tc.errMsg)
				assert.ErrorContains(t, err, "config.json")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 96, c.RopeDim)
			assert.Equal(t, tc.scale, c.RopeScale)
			assert.Equal(t, tc.orig, c.RopeOriginalContext)
			require.Len(t, c.RopeLongFactors, 48)
			require.Len(t, c.RopeShortFactors, 48)
			assert.Equal(t, float32(48), c.RopeLongFactors[47])
			assert.Nil(t, c.RopeFreqFactors)
		})
	}
}

// TestLongRopeFactorChoice: a longrope model rotates by its long factors when its
// context (as the options may lower it) exceeds the original context, by its short
// ones otherwise — one set for the model's life, whatever a sequence's length.
func TestLongRopeFactorChoice(t *testing.T) {
	c, err := ReadHFConfig(phi3Config(t, func(map[string]any) {}))
	require.NoError(t, err)
	for _, tc := range []struct {
		limit int // Options.ContextLength
		long  bool
	}{
		{0, true}, {131072, true}, {4097, true}, {4096, false}, {512, false},
	} {
		cc := c
		cc.limitContext(tc.limit)
		want := map[bool][]float32{true: c.RopeLongFactors, false: c.RopeShortFactors}[tc.long]
		assert.Equal(t, want, cc.RopeFactors(), "context limited to %d", tc.limit)
		inv := cc.InvFreqs()
		for i, f := range inv {
			assert.InDelta(t, math.Pow(c.RopeTheta, -float64(2*i)/96)/float64(want[i]), f, 1e-15, "frequency %d", i)
		}
	}
	// A context that is not stated takes the long factors (it may exceed the original).
	c.ContextLength = 0
	assert.Equal(t, c.RopeLongFactors, c.RopeFactors())
}
