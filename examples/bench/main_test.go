package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/specula/specula/internal/headtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBench measures two tiny configurations on two prompts with the demo models and
// checks the table, the verification, the JSON and the plots.
func TestBench(t *testing.T) {
	m, d := "../../models/gocoder-m-q8_0.gguf", "../../models/gocoder-xs-q8_0.gguf"
	for _, p := range []string{m, d} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("demo model %s is absent", p)
		}
	}
	dir := t.TempDir()
	prompts := filepath.Join(dir, "p.jsonl")
	require.NoError(t, os.WriteFile(prompts, []byte(`{"prompt": "func add(a, b int) int {"}
{"prompt": "package main\n\nimport \"fmt\"\n"}
`), 0o644))
	o := options{model: m, draftModels: listFlag{"xs=" + d}, prompts: prompts, n: 2, maxTokens: 12,
		drafters: "xs,ngram", ks: "2,auto", temps: "0", verify: true, paired: true,
		jsonOut: filepath.Join(dir, "r.json"), svgDir: filepath.Join(dir, "svg")}
	var out, log bytes.Buffer
	require.NoError(t, run(context.Background(), o, &out, &log))
	assert.Contains(t, out.String(), "verify: every greedy speculative output equals plain greedy decoding")
	raw, err := os.ReadFile(o.jsonOut)
	require.NoError(t, err)
	var rs []Result
	require.NoError(t, json.Unmarshal(raw, &rs))
	assert.Len(t, rs, 5) // plain + 2 drafters × 2 K
	for _, r := range rs[1:] {
		assert.Positive(t, r.PlainTokensPerS, "paired plain speed of %s K=%s", r.Drafter, r.K)
		assert.InDelta(t, r.TokensPerS/r.PlainTokensPerS, r.Speedup, 1e-9)
	}
	for _, name := range []string{"speedup-T0.svg", "acceptance-T0.svg"} {
		st, err := os.Stat(filepath.Join(o.svgDir, name))
		require.NoError(t, err)
		assert.Positive(t, st.Size())
	}
	assert.Error(t, run(context.Background(), options{model: m}, &out, &log), "-prompts is required")
}

// TestNamedPath reads -draft and -head values, with and without a kind, and says
// which flag takes a path that holds the other kind of drafter.
func TestNamedPath(t *testing.T) {
	gguf := "../../models/gocoder-xs-q8_0.gguf"
	if _, err := os.Stat(gguf); err != nil {
		t.Skipf("demo model %s is absent", gguf)
	}
	med := filepath.Join(t.TempDir(), "medusa")
	require.NoError(t, headtest.Medusa(med, 8, 16, 2, 1, 3))
	tests := []struct {
		flag, value string
		head        bool
		name, path  string
		err         string
	}{
		{"-draft", "xs=" + gguf, false, "xs", gguf, ""},
		{"-draft", "xs=model:" + gguf, false, "xs", gguf, ""},
		{"-head", "m=medusa:" + med, true, "m", med, ""},
		{"-head", "m=" + med, true, "m", med, ""},
		{"-draft", "xs", false, "", "", `-draft "xs": want NAME=[KIND:]PATH`},
		{"-draft", "m=" + med, false, "", "", "is a Medusa head: give it as -head m=medusa:" + med},
		{"-head", "xs=" + gguf, true, "", "", "is a full model: give it as -draft xs=model:" + gguf},
		{"-head", "e=eagle:" + gguf, true, "", "", "is a full model, not an EAGLE layer: did you mean model:" + gguf},
	}
	for _, tt := range tests {
		t.Run(tt.flag+" "+tt.value, func(t *testing.T) {
			name, path, err := namedPath(tt.flag, tt.value, tt.head)
			if tt.err != "" {
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, [2]string{tt.name, tt.path}, [2]string{name, path})
		})
	}
}
