package specula

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/internal/headtest"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model"
)

// The demo pair shipped in models/.
const (
	demoTargetFile = "models/gocoder-m-q8_0.gguf"
	demoDraftFile  = "models/gocoder-xs-q8_0.gguf"
)

// TestParseDraft reads every name and kind of Config.Draft, joined or alone, detects
// bare paths, and refuses what is none of them with a message that says what the path
// holds.
func TestParseDraft(t *testing.T) {
	dir := t.TempDir()
	llamaDir, eagleDir := filepath.Join(dir, "llama"), filepath.Join(dir, "eagle")
	s := headtest.LlamaShape{Dim: 8, Heads: 2, KVHeads: 1, HeadDim: 4, FFN: 16, Vocab: 16, Layers: 1}
	require.NoError(t, headtest.Llama(llamaDir, s, 1))
	require.NoError(t, headtest.EAGLE(eagleDir, s, 2))
	gguf := demoDraftFile
	model := func(p string) draftPart { return draftPart{kind: heads.KindModel, path: p} }
	ngram, suffix := draftPart{name: "ngram"}, draftPart{name: "suffix"}
	tests := []struct {
		draft string
		want  []draftPart
		err   string
	}{
		{"", []draftPart{ngram}, ""},
		{"ngram", []draftPart{ngram}, ""},
		{"lookup", []draftPart{ngram}, ""},
		{"suffix", []draftPart{suffix}, ""},
		{"none", nil, ""},
		{" ngram + none ", []draftPart{ngram}, ""},
		{"model:" + gguf, []draftPart{model(gguf)}, ""},
		{gguf, []draftPart{model(gguf)}, ""},
		{"suffix+" + gguf, []draftPart{suffix, model(gguf)}, ""},
		{llamaDir, []draftPart{model(llamaDir)}, ""},
		{"eagle:" + eagleDir + "+ngram", []draftPart{{kind: heads.KindEAGLE, path: eagleDir}, ngram}, ""},
		{eagleDir, []draftPart{{kind: heads.KindEAGLE, path: eagleDir}}, ""},

		{"eagle3", nil, `specula: Config.Draft: "eagle3": not ngram, suffix, forced, none or KIND:PATH (KIND model, eagle, eagle3, medusa or mlp), and not a file`},
		{"model:nowhere.gguf", nil, `Config.Draft: "model:nowhere.gguf": not ngram, suffix, forced, none or KIND:PATH`},
		{"eagle:" + llamaDir, nil, fmt.Sprintf("%s is a full model, not an EAGLE layer: did you mean model:%s?", llamaDir, llamaDir)},
		{"ngram+model:" + eagleDir, nil, fmt.Sprintf("%s is an EAGLE layer, not a full model: did you mean eagle:%s?", eagleDir, eagleDir)},
		{"README.md", nil, `Config.Draft: "README.md": heads: README.md is a file but not a GGUF model`},
	}
	for _, tt := range tests {
		t.Run(tt.draft, func(t *testing.T) {
			got, err := parseDraft(tt.draft)
			if tt.err != "" {
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestOpenDrafter checks what each Config.Draft opens: prompt lookup goes in front of
// a draft model unless NoLookup, and a drafter that names lookup keeps its own.
func TestOpenDrafter(t *testing.T) {
	if _, err := os.Stat(demoDraftFile); err != nil {
		t.Skipf("demo model %s is absent", demoDraftFile)
	}
	e, err := Open(Config{Model: demoTargetFile, Draft: "none"})
	require.NoError(t, err)
	defer e.Close()
	tests := []struct {
		draft    string
		noLookup bool
		want     []string // the parts of the drafter, depth first
	}{
		{"none", false, nil},
		{"", false, []string{"lookup.NGram{}"}},
		{"suffix", false, []string{"lookup.Suffix"}},
		{demoDraftFile, false, []string{"draft.First", "lookup.NGram{Min:2}", "*draft.SmallModel"}},
		{"model:" + demoDraftFile, true, []string{"*draft.SmallModel"}},
		{"suffix+" + demoDraftFile, false, []string{"draft.First", "lookup.NGram{Min:2}", "lookup.Suffix", "*draft.SmallModel"}},
		{"ngram+" + demoDraftFile, false, []string{"draft.First", "lookup.NGram{}", "*draft.SmallModel"}},
		{"ngram+suffix", false, []string{"draft.First", "lookup.NGram{}", "lookup.Suffix"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s NoLookup=%v", tt.draft, tt.noLookup), func(t *testing.T) {
			d, err := e.openDrafter(Config{Model: demoTargetFile, Draft: tt.draft, NoLookup: tt.noLookup})
			require.NoError(t, err)
			var got []string
			if d != nil {
				for p := range draft.Parts(d) {
					got = append(got, describe(p))
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// describe names a drafter's type, and an NGram's lengths.
func describe(d draft.Drafter) string {
	switch d := d.(type) {
	case lookup.NGram:
		if d.Min == 0 {
			return "lookup.NGram{}"
		}
		return fmt.Sprintf("lookup.NGram{Min:%d}", d.Min)
	case lookup.Suffix:
		return "lookup.Suffix"
	case draft.Composite:
		return "draft.First"
	}
	return fmt.Sprintf("%T", d)
}

// TestEngineOneCPUPool opens an engine drafting with a draft model and every kind of
// trained head and checks that it makes one pool of CPU threads, which every backend
// it made runs on (the target's, whose backend the MLPSpeculator and Medusa compute
// on, the draft model's and the EAGLE layer's), and that they draft the target's
// greedy text.
func TestEngineOneCPUPool(t *testing.T) {
	target := sharedtest.Path(t, "models", "gocoder-m-f16.gguf")
	xs := sharedtest.Path(t, "models", "gocoder-xs-q8_0.gguf")
	mlp, medusa := sharedtest.Path(t, "models", "gocoder-m-mlp-speculator"), sharedtest.Path(t, "models", "gocoder-m-medusa")
	eagle := sharedtest.Path(t, "models", "gocoder-m-eagle")
	e, err := Open(Config{Model: target, Draft: "mlp:" + mlp + "+medusa:" + medusa + "+eagle:" + eagle + "+model:" + xs, Threads: 2})
	require.NoError(t, err)
	defer e.Close()
	pools, backends := 0, 0
	for _, c := range e.closers {
		switch c := c.(type) {
		case *cpu.Pool:
			pools++
		case backendLender:
			be, ok := c.Backend().(*cpu.Backend)
			require.True(t, ok, "a CPU backend")
			assert.Same(t, e.pool, be.Pool(), "%s runs on the engine's pool", c.(model.Model).Info().Name)
			backends++
		}
	}
	assert.Equal(t, 1, pools, "one pool of CPU threads for the engine")
	assert.Equal(t, 3, backends, "the target's, the draft model's and the EAGLE layer's backends")
	assert.Equal(t, 2, e.pool.Threads())
	assert.Same(t, e.closers[0], io.Closer(e.pool), "the pool opened first, closed last")

	plain, err := Open(Config{Model: target, Draft: "none", Threads: 2})
	require.NoError(t, err)
	defer plain.Close()
	ctx, prompt, p := context.Background(), "func (s *Server) Close() error {\n", Params{MaxTokens: 24, IgnoreEOS: true}
	want, err := plain.Complete(ctx, prompt, p)
	require.NoError(t, err)
	got, err := e.Complete(ctx, prompt, p)
	require.NoError(t, err)
	assert.Equal(t, want.Tokens, got.Tokens)
	assert.Positive(t, got.Stats.Accepted, "the heads' drafts were accepted")
}

// TestEngineEAGLE3 opens engines drafting with the shared EAGLE-3 head as
// Config.Draft names it — eagle3:DIR, a bare DIR, and eagle:DIR beside the EAGLE
// layer, so that one request keeps the aux layers' streams for one reader and the
// final states for the other — and checks that they draft the target's greedy text.
func TestEngineEAGLE3(t *testing.T) {
	target := sharedtest.Path(t, "models", "gocoder-m-f16.gguf")
	eagle3, eagle := sharedtest.Path(t, "models", "gocoder-m-eagle3"), sharedtest.Path(t, "models", "gocoder-m-eagle")
	plain, err := Open(Config{Model: target, Draft: "none", Threads: 2})
	require.NoError(t, err)
	defer plain.Close()
	ctx, prompt, p := context.Background(), "func (s *Server) Close() error {\n", Params{MaxTokens: 24, IgnoreEOS: true}
	want, err := plain.Complete(ctx, prompt, p)
	require.NoError(t, err)
	for _, draft := range []string{"eagle3:" + eagle3, eagle3, "eagle:" + eagle + "+eagle:" + eagle3} {
		t.Run(draft, func(t *testing.T) {
			e, err := Open(Config{Model: target, Draft: draft, Threads: 2})
			require.NoError(t, err)
			defer e.Close()
			got, err := e.Complete(ctx, prompt, p)
			require.NoError(t, err)
			assert.Equal(t, want.Tokens, got.Tokens)
			assert.Positive(t, got.Stats.Drafted, "the head drafted")
		})
	}
}
