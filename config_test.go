package specula_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula"
	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/tokenizer"
)

// TestConfigBackend: the target runs on the backend Config.Backend makes, for the
// target's shape, and writes what the CPU's default writes; a backend that cannot be
// made fails Open with its error.
func TestConfigBackend(t *testing.T) {
	ctx := context.Background()
	p := specula.Params{MaxTokens: 8, IgnoreEOS: true}
	prompt := "func main() {\n"
	plain, err := specula.Open(specula.Config{Model: demoTarget, Draft: "none", Threads: 1})
	require.NoError(t, err)
	defer plain.Close()
	want, err := plain.Complete(ctx, prompt, p)
	require.NoError(t, err)

	var shapes []backend.Shape
	given := func(s backend.Shape) (backend.Backend, error) {
		shapes = append(shapes, s)
		return cpu.Factory(1)(s)
	}
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: "none", Backend: given})
	require.NoError(t, err)
	defer e.Close()
	require.Len(t, shapes, 1, "the target's backend, made once")
	assert.Equal(t, e.Info().Layers, shapes[0].Layers)
	got, err := e.Complete(ctx, prompt, p)
	require.NoError(t, err)
	assert.Equal(t, want.Tokens, got.Tokens)

	broken := errors.New("no GPU here")
	_, err = specula.Open(specula.Config{Model: demoTarget, Backend: func(backend.Shape) (backend.Backend, error) { return nil, broken }})
	assert.ErrorIs(t, err, broken)
}

// TestConfigKVBudget: the target's default key/value budget is the model's one rule
// (llama.Config.KVBudget) for Config.MaxSequences at the configured context; a
// KVBudget given is taken as it is.
func TestConfigKVBudget(t *testing.T) {
	tensors, err := llama.OpenTensors(demoTarget)
	require.NoError(t, err)
	shape := tensors.Config
	require.NoError(t, tensors.Close())
	shape.ContextLength = 512
	for _, c := range []struct {
		name string
		cfg  specula.Config
		want int64
	}{
		{"default sequences", specula.Config{}, shape.KVBudget(0)},
		{"many sequences", specula.Config{MaxSequences: 300}, shape.KVBudget(300)},
		{"given", specula.Config{MaxSequences: 300, KVBudget: 5 << 20}, 5 << 20},
	} {
		c.cfg.Model, c.cfg.Draft, c.cfg.ContextLength, c.cfg.Threads = demoTarget, "none", 512, 1
		e, err := specula.Open(c.cfg)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, e.Memory().KVBudget, c.name)
		require.NoError(t, e.Close())
	}
	assert.Greater(t, shape.KVBudget(300), shape.KVBudget(0), "300 sequences need more than the floor")
}

// TestNewEngineOptions: NewEngine takes the decoding settings Open does — MinK
// reaches the adaptive decoder (a step that drafts asks for at least MinK tokens) and
// the output stays plain decoding's — and refuses the same impossible ones, each as
// a *ParameterError naming the field.
func TestNewEngineOptions(t *testing.T) {
	ctx := context.Background()
	tm, err := llama.Open(demoTarget, cpu.Factory(0), llama.Options{})
	require.NoError(t, err)
	defer tm.Close()
	dm, err := llama.Open(demoDraft, cpu.Factory(0), llama.Options{})
	require.NoError(t, err)
	defer dm.Close()
	tok, err := tokenizer.Load(demoTarget)
	require.NoError(t, err)
	sm, err := draft.NewSmallModel(dm)
	require.NoError(t, err)
	for _, c := range []struct {
		name  string
		opts  specula.EngineOptions
		field string
	}{
		{"K too large", specula.EngineOptions{K: spec.MaxK + 1}, "K"},
		{"negative K", specula.EngineOptions{K: -1}, "K"},
		{"MinK above K", specula.EngineOptions{K: 4, MinK: 5}, "MinK"},
		{"MinK above the default K", specula.EngineOptions{MinK: specula.DefaultMaxK + 1}, "MinK"},
		{"negative MinK", specula.EngineOptions{MinK: -1}, "MinK"},
		{"DraftPMin above 1", specula.EngineOptions{DraftPMin: 1.5}, "DraftPMin"},
		{"DraftPMin NaN", specula.EngineOptions{DraftPMin: math.NaN()}, "DraftPMin"},
		{"DraftPMin negative", specula.EngineOptions{DraftPMin: -0.5}, "DraftPMin"},
	} {
		_, err := specula.NewEngine(tm, tok, sm, c.opts)
		pe, ok := errors.AsType[*specula.ParameterError](err)
		require.True(t, ok, "%s: %v", c.name, err)
		assert.Equal(t, c.field, pe.Field, c.name)
	}

	e, err := specula.NewEngine(tm, tok, sm, specula.EngineOptions{K: 6, MinK: 3})
	require.NoError(t, err)
	defer e.Close()
	p := specula.Params{MaxTokens: 64, IgnoreEOS: true}
	prompt := "func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {\n"
	want, err := e.GenerateFunc(ctx, specula.Request{Prompt: prompt, Params: p, NoSpeculation: true}, nil)
	require.NoError(t, err)
	drafted := 0
	for range 3 { // the adaptive decoder learns from one request to the next
		got, err := e.Complete(ctx, prompt, p)
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, got.Tokens)
		byK := got.Stats.StepsByK
		require.Len(t, byK, 7)
		assert.LessOrEqual(t, byK[1]+byK[2], 1, "no step drafts fewer than MinK but the last, which has less room: %v", byK)
		drafted += got.Stats.Drafted
	}
	assert.Positive(t, drafted, "the adaptive decoder drafted")
}
