package synth

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/internal/sharedtest"
)

// TestWriteEAGLE3 writes a head for gocoder-m's shape and holds it against the
// trained EAGLE-3 head of ../shared (the layout vLLM and SGLang load): the same
// tensors, types and shapes, the same config values; the draft vocabulary is
// sorted, inside the target's, and d2t and t2d agree; the weight count is
// EAGLE3Params'.
func TestWriteEAGLE3(t *testing.T) {
	ref := sharedtest.Path(t, "models", "gocoder-m-eagle3")
	s := Shape{Name: "gocoder-m", Of: "gocoder-m", Config: llamaShape(512, 8, 8, 2, 1408, 8192, 2048, 10000, false)}
	dir := t.TempDir()
	require.NoError(t, WriteEAGLE3(dir, s, 4096, 7))

	want, err := safetensors.OpenDir(ref)
	require.NoError(t, err)
	defer want.Close()
	got, err := safetensors.OpenDir(dir)
	require.NoError(t, err)
	defer got.Close()
	assert.ElementsMatch(t, want.Names(), got.Names())
	var params int64
	for _, name := range want.Names() {
		w, _ := want.Tensor(name)
		g, ok := got.Tensor(name)
		require.True(t, ok, name)
		assert.Equal(t, w.TypeName, g.TypeName, name)
		assert.Equal(t, w.Shape, g.Shape, name)
		if g.TypeName == "BF16" {
			params += int64(len(g.Data) / 2)
		}
	}
	assert.Equal(t, EAGLE3Params(s, 4096), params)

	var wantCfg, gotCfg map[string]any
	readJSON(t, filepath.Join(ref, "config.json"), &wantCfg)
	readJSON(t, filepath.Join(dir, "config.json"), &gotCfg)
	for _, k := range []string{"architectures", "model_type", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
		"num_hidden_layers", "rms_norm_eps", "rope_theta", "max_position_embeddings", "vocab_size", "draft_vocab_size", "hidden_act",
		"attention_bias", "tie_word_embeddings", "torch_dtype"} {
		assert.Equal(t, wantCfg[k], gotCfg[k], k)
	}

	d2t, _ := got.Tensor("d2t")
	t2d, _ := got.Tensor("t2d")
	prev := int64(-1)
	for i := range 4096 {
		id := int64(i) + int64(binary.LittleEndian.Uint64(d2t.Data[8*i:]))
		require.True(t, id > prev && id < 8192, "draft id %d maps to %d after %d", i, id, prev)
		assert.Equal(t, byte(1), t2d.Data[id], "t2d of %d", id)
		prev = id
	}
	ones := 0
	for _, b := range t2d.Data {
		ones += int(b)
	}
	assert.Equal(t, 4096, ones)

	assert.Error(t, WriteEAGLE3(t.TempDir(), s, 9000, 1), "a draft vocabulary larger than the target's")
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v))
}
