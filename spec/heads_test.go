package spec_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/internal/headtest"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// headCase is a trained-head drafter built on a Markov target, whose hidden state is its
// context one-hot: the heads read it as they would a transformer's.
type headCase struct {
	name string
	k    int
	open func(t *testing.T, c *markov.Chain) draft.Drafter
}

// headBackend returns a CPU backend for a head's matrices, which a Markov target
// does not have: it closes after the head.
func headBackend(t *testing.T) backend.Backend {
	be := cpu.New(backend.Shape{}, 1)
	t.Cleanup(func() { _ = be.Close() })
	return be
}

// hostBackend returns a backend of the GPU's host device (the CUDA backend's
// operations in plain Go) for a head's matrices: a head computing on another backend
// than the CPU's, as on a GPU target.
func hostBackend(t *testing.T) backend.Backend {
	be, err := gpu.NewBackend(gpu.HostDevice(), backend.Shape{HeadDim: 2, Style: backend.RopeHalf}, gpu.BackendOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = be.Close() })
	return be
}

func headCases() []headCase {
	medusa := func(tree draft.TreeShape, on func(*testing.T) backend.Backend) func(t *testing.T, c *markov.Chain) draft.Drafter {
		return func(t *testing.T, c *markov.Chain) draft.Drafter {
			dir := filepath.Join(t.TempDir(), "medusa")
			info := c.Info()
			require.NoError(t, headtest.Medusa(dir, info.HiddenSize, info.VocabSize, 3, 1, 5))
			h, err := heads.OpenMedusa(dir, info, heads.Options{Backend: on(t), Tree: tree})
			require.NoError(t, err)
			t.Cleanup(func() { _ = h.Close() })
			return h
		}
	}
	mlp := func(on func(*testing.T) backend.Backend) func(t *testing.T, c *markov.Chain) draft.Drafter {
		return func(t *testing.T, c *markov.Chain) draft.Drafter {
			dir := filepath.Join(t.TempDir(), "mlp")
			info := c.Info()
			require.NoError(t, headtest.MLPSpeculator(dir, info.HiddenSize, 8, info.VocabSize, 3, 6))
			h, err := heads.OpenMLPSpeculator(dir, info, heads.Options{Backend: on(t)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = h.Close() })
			return h
		}
	}
	return []headCase{
		{"Medusa chain", 3, medusa(draft.TreeShape{}, headBackend)},
		{"Medusa tree", 6, medusa(draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 6}, headBackend)},
		{"MLPSpeculator", 3, mlp(headBackend)},
		{"lookup then Medusa", 3, func(t *testing.T, c *markov.Chain) draft.Drafter {
			return lookup.InFront(medusa(draft.TreeShape{}, headBackend)(t, c))
		}},
		{"Medusa tree on the host device", 6, medusa(draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 6}, hostBackend)},
		{"MLPSpeculator on the host device", 3, mlp(hostBackend)},
	}
}

// TestHeadDistribution draws many continuations with each trained-head drafter — the
// heads fed the target's hidden states through the decoder — and checks them against
// the enumerated distribution of the target alone (chi-square): sampled drafting from
// a head's processed distributions keeps the output the target's.
func TestHeadDistribution(t *testing.T) {
	const draws = 30_000
	params := sampler.Params{Temperature: 0.9, TopP: 0.95}
	for i, hc := range headCases() {
		t.Run(hc.name, func(t *testing.T) {
			t.Parallel()
			tgt := newChain(t, markov.Config{Vocab: 6, Order: 1, Seed: uint64(40 + i), Scale: 1.5})
			dec := newDecoder(t, tgt, hc.open(t, tgt), hc.k)
			prompt := []int32{1, 2}
			want := reference.Continuations(tgt, prompt, 3, params)
			fit, agg := fitDraws(t, dec, spec.Request{Prompt: prompt, MaxTokens: 3, Sampling: params}, draws, 6, want,
				func(res spec.Result) { require.Len(t, res.Tokens, 3) })
			assert.Zero(t, fit.Impossible, "generated a sequence the target never would")
			assert.Greater(t, fit.P, minP, "chi-square %.1f on %d df", fit.Stat, fit.DF)
			rate := agg.Total.AcceptanceRate()
			assert.True(t, rate > 0.02 && rate < 0.98, "acceptance %.3f: drafts were judged both ways", rate)
			t.Logf("p=%.3f, %s", fit.P, agg.String())
		})
	}
}

// TestHeadGreedyIdentity decodes greedily with each trained-head drafter and requires
// the plain greedy output.
func TestHeadGreedyIdentity(t *testing.T) {
	for i, hc := range headCases() {
		t.Run(hc.name, func(t *testing.T) {
			tgt := newChain(t, markov.Config{Vocab: 7, Order: 1, Seed: uint64(60 + i), Scale: 1.5})
			plain := newDecoder(t, tgt, nil, 0)
			dec := newDecoder(t, tgt, hc.open(t, tgt), hc.k)
			for _, prompt := range [][]int32{{1}, {2, 3}, {4, 0, 6}} {
				req := spec.Request{Prompt: prompt, MaxTokens: 40}
				want, err := single(plain.GenerateFunc(context.Background(), req, nil))
				require.NoError(t, err)
				got, err := single(dec.GenerateFunc(context.Background(), req, nil))
				require.NoError(t, err)
				assert.Equal(t, want.Tokens, got.Tokens, "prompt %v", prompt)
				assert.Positive(t, got.Stats.Drafted, "the head drafted")
			}
		})
	}
}

// eagleCase is a tiny Llama target on disk with a random EAGLE layer for it.
func eagleCase(t *testing.T, tree draft.TreeShape) (*llama.Model, draft.Drafter) {
	return eagleCaseOf(t, tree, 0, cpu.Factory(1))
}

// eagleCaseOf is eagleCase with the layer's context length (0: the model's) and the
// backend it runs on.
func eagleCaseOf(t *testing.T, tree draft.TreeShape, layerContext int, on backend.Factory) (*llama.Model, draft.Drafter) {
	m, _, d := eagleParts(t, tree, layerContext, on)
	return m, d
}

// eagleParts is eagleCaseOf, giving the layer too.
func eagleParts(t *testing.T, tree draft.TreeShape, layerContext int, on backend.Factory) (*llama.Model, *llama.Model, draft.Drafter) {
	t.Helper()
	s := headtest.LlamaShape{Dim: 16, Heads: 2, KVHeads: 1, HeadDim: 8, FFN: 32, Vocab: 6, Layers: 1}
	root := t.TempDir()
	tdir, edir := filepath.Join(root, "target"), filepath.Join(root, "eagle")
	require.NoError(t, headtest.Llama(tdir, s, 3))
	require.NoError(t, headtest.EAGLE(edir, s, 4))
	m, err := llama.Open(tdir, cpu.Factory(1), llama.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	layer, err := llama.OpenEAGLE(edir, tdir, on, llama.Options{ContextLength: layerContext})
	require.NoError(t, err)
	t.Cleanup(func() { _ = layer.Close() })
	d, err := heads.NewEAGLE(layer, m.Info(), tree)
	require.NoError(t, err)
	return m, layer, d
}

// modelLogits returns the logits a model gives after a history, by forwarding it in a
// fresh sequence.
func modelLogits(t *testing.T, m *llama.Model) func([]int32) []float32 {
	return func(h []int32) []float32 {
		s, err := m.NewSequence(context.Background())
		require.NoError(t, err)
		defer s.Close()
		out := make([]float32, m.Info().VocabSize)
		require.NoError(t, s.Forward(context.Background(), batch.Batch{Tokens: h, Outputs: []int32{int32(len(h) - 1)}}, out))
		return out
	}
}

// TestEAGLEDistribution checks sampled EAGLE drafting — chains and dynamic trees, the
// layer fed the target's states and then its own — against the enumerated distribution
// of a tiny random Llama target (chi-square), and greedy EAGLE drafting against plain
// greedy decoding — the layer on the CPU, and on the GPU's host device (as on a GPU
// target, whose factory an engine's EAGLE layer runs on).
func TestEAGLEDistribution(t *testing.T) {
	for _, c := range []struct {
		name string
		k    int
		tree draft.TreeShape
		on   backend.Factory
	}{
		{"chain", 3, draft.TreeShape{}, cpu.Factory(1)},
		{"tree", 5, draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 5}, cpu.Factory(1)},
		{"tree on the host device", 5, draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 5}, gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{})},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, d := eagleCaseOf(t, c.tree, 0, c.on)
			dec := newDecoder(t, m, d, c.k)
			prompt := checkHeadDistribution(t, m, dec)

			plain := newDecoder(t, m, nil, 0)
			greedy := spec.Request{Prompt: prompt, MaxTokens: 24}
			wantG, err := single(plain.GenerateFunc(context.Background(), greedy, nil))
			require.NoError(t, err)
			got, err := single(dec.GenerateFunc(context.Background(), greedy, nil))
			require.NoError(t, err)
			assert.Equal(t, wantG.Tokens, got.Tokens, "greedy EAGLE drafting equals plain greedy decoding")
		})
	}
}

// checkHeadDistribution draws 20 000 sampled two-token continuations of a short
// prompt from dec, which a head drafts for the tiny random Llama m, and requires their
// distribution to be m's own (chi-square) with the drafts neither all accepted nor
// all refused; it returns the prompt.
func checkHeadDistribution(t *testing.T, m *llama.Model, dec *spec.Decoder) []int32 {
	t.Helper()
	const draws = 20_000
	params := sampler.Params{Temperature: 1}
	prompt := []int32{1, 4, 2}
	want := reference.ContinuationsOf(modelLogits(t, m), 6, prompt, 3, params)
	fit, agg := fitDraws(t, dec, spec.Request{Prompt: prompt, MaxTokens: 3, Sampling: params}, draws, 6, want, nil)
	assert.Zero(t, fit.Impossible, "generated a sequence the target never would")
	assert.Greater(t, fit.P, minP, "chi-square %.1f on %d df", fit.Stat, fit.DF)
	rate := agg.Total.AcceptanceRate()
	assert.True(t, rate > 0.02 && rate < 0.98, "acceptance %.3f", rate)
	t.Logf("p=%.3f, %s", fit.P, agg.String())
	return prompt
}

// TestEAGLEOutOfRoom checks that an EAGLE layer that runs out of context is dropped for
// the rest of the request, which goes on without drafts to the target's own output.
func TestEAGLEOutOfRoom(t *testing.T) {
	m, d := eagleCaseOf(t, draft.TreeShape{}, 12, cpu.Factory(1))
	req := spec.Request{Prompt: []int32{1, 4, 2}, MaxTokens: 30}
	want, err := single(newDecoder(t, m, nil, 0).GenerateFunc(context.Background(), req, nil))
	require.NoError(t, err)
	got, err := single(newDecoder(t, m, d, 3).GenerateFunc(context.Background(), req, nil))
	require.NoError(t, err)
	assert.Equal(t, want.Tokens, got.Tokens)
	assert.Contains(t, got.Stats.DraftError, "context length", "the layer was dropped when it filled up")
	assert.Positive(t, got.Stats.Drafted, "it drafted until then")
}

// TestHeadsPrefixCache sends one long prompt twice to a decoder with each kind of head
// on a tiny Llama target and checks that the second request takes the prompt's prefix
// from the target's prefix cache — and, for EAGLE, the layer's rows from the layer's
// own — and that cold and warm requests give plain greedy decoding's output, as does a
// prompt that differs from the cached one only in its first token (whose EAGLE rows
// must not be taken). Medusa and MLPSpeculator read the last state alone, EAGLE the
// states after its cached rows: none of them turns the target's prefix cache off.
func TestHeadsPrefixCache(t *testing.T) {
	medusa := func(t *testing.T, m *llama.Model) draft.Drafter {
		dir := filepath.Join(t.TempDir(), "medusa")
		info := m.Info()
		require.NoError(t, headtest.Medusa(dir, info.HiddenSize, info.VocabSize, 3, 1, 5))
		h, err := heads.OpenMedusa(dir, info, heads.Options{Backend: headBackend(t)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
		return h
	}
	mlp := func(t *testing.T, m *llama.Model) draft.Drafter {
		dir := filepath.Join(t.TempDir(), "mlp")
		info := m.Info()
		require.NoError(t, headtest.MLPSpeculator(dir, info.HiddenSize, 8, info.VocabSize, 3, 6))
		h, err := heads.OpenMLPSpeculator(dir, info, heads.Options{Backend: headBackend(t)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
		return h
	}
	tests := []struct {
		name  string
		tree  draft.TreeShape
		k     int
		other func(t *testing.T, m *llama.Model) draft.Drafter // nil: EAGLE
		e3    bool                                             // an EAGLE-3 head on a target of four layers
	}{
		{"EAGLE chain", draft.TreeShape{}, 3, nil, false},
		{"EAGLE tree", draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 5}, 5, nil, false},
		{"EAGLE-3 chain", draft.TreeShape{}, 3, nil, true},
		{"EAGLE-3 tree", draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 5}, 5, nil, true},
		{"Medusa", draft.TreeShape{}, 3, medusa, false},
		{"MLPSpeculator", draft.TreeShape{}, 3, mlp, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, layer, d := eagleParts(t, tt.tree, 0, cpu.Factory(1))
			switch {
			case tt.other != nil:
				d, layer = tt.other(t, m), nil
			case tt.e3:
				m, layer, d = eagle3Parts(t, tt.tree, cpu.Factory(1))
			}
			dec := newDecoder(t, m, d, tt.k)
			prompt := make([]int32, 53) // three full blocks and some
			for i := range prompt {
				prompt[i] = int32((i*7 + i/3) % 6)
			}
			hits := func() (target, eagle int64) {
				if layer != nil {
					eagle = layer.KVStats().PrefixHits
				}
				return m.KVStats().PrefixHits, eagle
			}
			req := spec.Request{Prompt: prompt, MaxTokens: 30}
			generate := func() spec.Result {
				res, err := single(dec.GenerateFunc(context.Background(), req, nil))
				require.NoError(t, err)
				assert.Positive(t, res.Stats.Drafted, "the head drafted")
				return res
			}
			cold := generate()
			t0, e0 := hits()
			warm := generate()
			t1, e1 := hits()
			assert.GreaterOrEqual(t, t1-t0, int64(3), "the target took the prompt's full blocks from its prefix cache")
			if layer != nil {
				assert.GreaterOrEqual(t, e1-e0, int64(3), "the EAGLE layer took its rows of the prompt from its prefix cache")
			}
			want, err := single(newDecoder(t, m, nil, 0).GenerateFunc(context.Background(), req, nil))
			require.NoError(t, err)
			assert.Equal(t, want.Tokens, cold.Tokens, "cold: plain greedy decoding's output")
			assert.Equal(t, want.Tokens, warm.Tokens, "warm: plain greedy decoding's output")
			// Scoring the prompt forwards all of it (no logits are cached); the heads
			// still read only the states they need.
			scored := req
			scored.PromptLogprobs = true
			sres, err := single(dec.GenerateFunc(context.Background(), scored, nil))
			require.NoError(t, err)
			assert.Equal(t, want.Tokens, sres.Tokens, "warm, scoring the prompt")
			// Two choices: the second forks the first's session and its drafters read
			// the states the first kept (the prompt's tail).
			two := req
			two.N = 2
			res, err := dec.GenerateFunc(context.Background(), two, nil)
			require.NoError(t, err)
			require.Len(t, res, 2)
			for i, r := range res {
				assert.Equal(t, want.Tokens, r.Tokens, "choice %d of two, warm", i)
				assert.Positive(t, r.Stats.Drafted, "choice %d drafted", i)
			}

			// Another first token: the target's cache has nothing of it, the layer's
			// rows (fed the same tokens) must not be taken either.
			req.Prompt = append([]int32{(prompt[0] + 1) % 6}, prompt[1:]...)
			t2, e2 := hits()
			other := generate()
			t3, e3 := hits()
			assert.Equal(t, t2, t3, "a prompt with another first token shares no block")
			assert.Equal(t, e2, e3, "nor the layer's rows, salted with the first token")
			want, err = single(newDecoder(t, m, nil, 0).GenerateFunc(context.Background(), req, nil))
			require.NoError(t, err)
			assert.Equal(t, want.Tokens, other.Tokens)
		})
	}
}
