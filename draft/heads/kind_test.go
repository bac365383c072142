package heads_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/internal/headtest"
	"github.com/specula/specula/internal/sharedtest"
)

// drafterPaths writes one path of every kind into a temporary directory: a GGUF file
// (its magic is all Detect reads), a Llama model's directory, an EAGLE layer's, Medusa
// heads', an MLPSpeculator's, and paths that are none of them.
func drafterPaths(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	p := map[string]string{}
	for _, name := range []string{"llama", "eagle", "eagle3", "medusa", "mlp", "empty", "badjson", "weird"} {
		p[name] = filepath.Join(dir, name)
	}
	p["gguf"] = filepath.Join(dir, "m.gguf")
	p["text"] = filepath.Join(dir, "notes.txt")
	p["gguf-named"] = filepath.Join(dir, "fake.gguf")
	p["colon"] = filepath.Join(dir, "c:drive.gguf")
	s := headtest.LlamaShape{Dim: 8, Heads: 2, KVHeads: 1, HeadDim: 4, FFN: 16, Vocab: 16, Layers: 1}
	require.NoError(t, headtest.Llama(p["llama"], s, 1))
	require.NoError(t, headtest.EAGLE(p["eagle"], s, 2))
	require.NoError(t, headtest.EAGLE3(p["eagle3"], s, []int32{0, 3, 5}, []int{1, 2, 3}, nil, 5))
	require.NoError(t, headtest.Medusa(p["medusa"], 8, 16, 2, 1, 3))
	require.NoError(t, headtest.MLPSpeculator(p["mlp"], 8, 8, 16, 2, 4))
	require.NoError(t, os.Mkdir(p["empty"], 0o755))
	require.NoError(t, headtest.Write(p["badjson"], map[string]any{}, nil))
	require.NoError(t, os.WriteFile(filepath.Join(p["badjson"], "config.json"), []byte(`{"model_type": `), 0o644))
	require.NoError(t, headtest.Write(p["weird"], map[string]any{"model_type": "eagle"}, nil))
	for _, f := range []string{p["gguf"], p["colon"]} {
		require.NoError(t, os.WriteFile(f, []byte("GGUF\x03\x00\x00\x00"), 0o644))
	}
	require.NoError(t, os.WriteFile(p["text"], []byte("hello"), 0o644))
	require.NoError(t, os.WriteFile(p["gguf-named"], []byte("GGML"), 0o644))
	return p
}

// TestResolve reads every kind of prefix, detects bare paths where that is
// unambiguous, and refuses a kind that the path does not hold, saying what it holds.
func TestResolve(t *testing.T) {
	p := drafterPaths(t)
	tests := []struct {
		name, spec string
		kind       heads.Kind
		path       string
		err        string
	}{
		{"model: GGUF", "model:" + p["gguf"], heads.KindModel, p["gguf"], ""},
		{"model: Llama directory", "model:" + p["llama"], heads.KindModel, p["llama"], ""},
		{"eagle:", "eagle:" + p["eagle"], heads.KindEAGLE, p["eagle"], ""},
		{"eagle: by model_type", "eagle:" + p["weird"], heads.KindEAGLE, p["weird"], ""},
		{"medusa:", "medusa:" + p["medusa"], heads.KindMedusa, p["medusa"], ""},
		{"mlp:", "mlp:" + p["mlp"], heads.KindMLP, p["mlp"], ""},

		{"bare GGUF", p["gguf"], heads.KindModel, p["gguf"], ""},
		{"bare Llama directory: a draft model", p["llama"], heads.KindModel, p["llama"], ""},
		{"bare EAGLE layer: fc.weight", p["eagle"], heads.KindEAGLE, p["eagle"], ""},
		{"bare EAGLE-3 head: its architectures", p["eagle3"], heads.KindEAGLE3, p["eagle3"], ""},
		{"eagle3:", "eagle3:" + p["eagle3"], heads.KindEAGLE3, p["eagle3"], ""},
		{"eagle: takes an EAGLE-3 head", "eagle:" + p["eagle3"], heads.KindEAGLE3, p["eagle3"], ""},
		{"eagle3: on an EAGLE layer", "eagle3:" + p["eagle"], "", "", p["eagle"] + " is an EAGLE layer, not an EAGLE-3 head: did you mean eagle:" + p["eagle"] + "?"},
		{"model: on an EAGLE-3 head", "model:" + p["eagle3"], "", "", p["eagle3"] + " is an EAGLE-3 head, not a full model: did you mean eagle3:" + p["eagle3"] + "?"},
		{"bare Medusa", p["medusa"], heads.KindMedusa, p["medusa"], ""},
		{"bare MLPSpeculator", p["mlp"], heads.KindMLP, p["mlp"], ""},
		{"a colon that names no kind", p["colon"], heads.KindModel, p["colon"], ""},

		{"eagle: on a full model", "eagle:" + p["llama"], "", "", p["llama"] + " is a full model, not an EAGLE layer: did you mean model:" + p["llama"] + "?"},
		{"medusa: on a GGUF file", "medusa:" + p["gguf"], "", "", p["gguf"] + " is a full model, not a Medusa head: did you mean model:" + p["gguf"] + "?"},
		{"mlp: on a full model", "mlp:" + p["llama"], "", "", "is a full model, not an MLPSpeculator head: did you mean model:"},
		{"model: on an EAGLE layer", "model:" + p["eagle"], "", "", p["eagle"] + " is an EAGLE layer, not a full model: did you mean eagle:" + p["eagle"] + "?"},
		{"model: on Medusa heads", "model:" + p["medusa"], "", "", "is a Medusa head, not a full model: did you mean medusa:"},
		{"medusa: on an MLPSpeculator", "medusa:" + p["mlp"], "", "", "is an MLPSpeculator head, not a Medusa head: did you mean mlp:"},
		{"eagle: on Medusa heads", "eagle:" + p["medusa"], "", "", "is a Medusa head, not an EAGLE layer: did you mean medusa:"},
		{"a file that is no model", p["text"], "", "", p["text"] + " is a file but not a GGUF model"},
		{"a .gguf name on another file", "model:" + p["gguf-named"], "", "", "is a file but not a GGUF model"},
		{"a directory without config.json", p["empty"], "", "", p["empty"] + " is a directory without a readable config.json"},
		{"a config.json that is not JSON", "eagle:" + p["badjson"], "", "", "config.json: unexpected end of JSON input"},
		{"nothing there", "eagle:" + p["empty"] + "/none", "", "", "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, path, err := heads.Resolve(tt.spec)
			if tt.err != "" {
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.kind, kind)
			assert.Equal(t, tt.path, path)
		})
	}
}

// TestDetectShared detects the shared drafters: gocoder-xs's Hugging Face directory
// is a model (a Llama directory is no EAGLE layer), each head directory its head.
func TestDetectShared(t *testing.T) {
	for name, want := range map[string]heads.Kind{
		"gocoder-xs":               heads.KindModel,
		"gocoder-xs-q8_0.gguf":     heads.KindModel,
		"gocoder-m-eagle":          heads.KindEAGLE,
		"gocoder-m-eagle3":         heads.KindEAGLE3,
		"gocoder-m-medusa":         heads.KindMedusa,
		"gocoder-m-mlp-speculator": heads.KindMLP,
	} {
		t.Run(name, func(t *testing.T) {
			kind, err := heads.Detect(sharedtest.Path(t, "models", name))
			require.NoError(t, err)
			assert.Equal(t, want, kind)
		})
	}
}
