package specula_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula"
	"github.com/specula/specula/internal/sharedtest"
)

// TestDraftModelDirectory: a Llama model's Hugging Face directory given as the draft
// loads as a draft model — it was once taken for an EAGLE layer and refused ("does
// not fit the target") — and drafts the target's greedy text, bare or as model:DIR;
// asked for as an EAGLE layer, it is refused with what it is.
func TestDraftModelDirectory(t *testing.T) {
	xs := sharedtest.Path(t, "models", "gocoder-xs")
	ctx, prompt := context.Background(), "func (s *Server) Close() error {\n"
	p := specula.Params{MaxTokens: 32, IgnoreEOS: true}
	plain, err := specula.Open(specula.Config{Model: demoTarget, Draft: "none"})
	require.NoError(t, err)
	defer plain.Close()
	want, err := plain.Complete(ctx, prompt, p)
	require.NoError(t, err)
	for _, d := range []string{xs, "model:" + xs} {
		t.Run(d, func(t *testing.T) {
			e, err := specula.Open(specula.Config{Model: demoTarget, Draft: d, NoLookup: true})
			require.NoError(t, err)
			defer e.Close()
			got, err := e.Complete(ctx, prompt, p)
			require.NoError(t, err)
			assert.Equal(t, want.Tokens, got.Tokens)
			assert.Positive(t, got.Stats.Accepted, "the draft model's drafts were accepted")
		})
	}
	_, err = specula.Open(specula.Config{Model: demoTarget, Draft: "eagle:" + xs})
	assert.ErrorContains(t, err, xs+" is a full model, not an EAGLE layer: did you mean model:"+xs+"?")
}
