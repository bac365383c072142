package spec_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/internal/headtest"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// eagle3Case is a tiny four-layer Llama target on disk, on backends of on, with a
// random EAGLE-3 head for it that reads the streams entering layers 1, 2 and 3 and
// drafts from five of the six tokens (5 left out), its lm_head the target's
// embedding rows of those, loaded as an engine loads it
// (llama.OpenEAGLE, which tells the layout from the config).
func eagle3Case(t *testing.T, tree draft.TreeShape, on backend.Factory) (*llama.Model, draft.Drafter) {
	t.Helper()
	m, _, d := eagle3Parts(t, tree, on)
	return m, d
}

// eagle3Parts is eagle3Case with the head's layer, whose key/value cache the
// tests read.
func eagle3Parts(t *testing.T, tree draft.TreeShape, on backend.Factory) (*llama.Model, *llama.Model, draft.Drafter) {
	t.Helper()
	s := headtest.LlamaShape{Dim: 16, Heads: 2, KVHeads: 1, HeadDim: 8, FFN: 32, Vocab: 6, Layers: 4}
	root := t.TempDir()
	tdir, edir := filepath.Join(root, "target"), filepath.Join(root, "eagle3")
	require.NoError(t, headtest.Llama(tdir, s, 3))
	tt, err := llama.OpenTensors(tdir)
	require.NoError(t, err)
	typ, _, raw, ok := tt.Lookup("model.embed_tokens.weight")
	require.True(t, ok)
	embed := make([]float32, s.Vocab*s.Dim)
	require.NoError(t, dtype.Dequantize(typ, raw, embed))
	require.NoError(t, tt.Close())
	require.NoError(t, headtest.EAGLE3(edir, s, []int32{0, 1, 2, 3, 4}, []int{1, 2, 3}, embed, 5))
	m, err := llama.Open(tdir, on, llama.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	layer, err := llama.OpenEAGLE(edir, tdir, on, llama.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = layer.Close() })
	d, err := heads.NewEAGLE3(layer, m.Info(), tree)
	require.NoError(t, err)
	return m, layer, d
}

// TestEAGLE3Distribution checks sampled EAGLE-3 drafting — chains and dynamic trees,
// the head fed fc of the target's auxiliary states and then its own outputs, its
// distributions those of its draft vocabulary mapped to the target's, zero outside —
// against the enumerated distribution of a tiny random Llama target (chi-square), and
// greedy EAGLE-3 drafting, alone and with lookup in front, against plain greedy
// decoding: target and head on the CPU, and on the GPU's host device (the CUDA
// backend's operations, its auxiliary states included, in plain Go).
func TestEAGLE3Distribution(t *testing.T) {
	for _, c := range []struct {
		name string
		k    int
		tree draft.TreeShape
		on   backend.Factory
	}{
		{"chain", 3, draft.TreeShape{}, cpu.Factory(1)},
		{"tree", 5, draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 5}, cpu.Factory(1)},
		{"chain on the host device", 3, draft.TreeShape{}, gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{})},
		{"tree on the host device", 5, draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 5}, gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{})},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, d := eagle3Case(t, c.tree, c.on)
			prompt := checkHeadDistribution(t, m, newDecoder(t, m, d, c.k))

			plain := newDecoder(t, m, nil, 0)
			for _, dr := range []draft.Drafter{d, lookup.InFront(d)} {
				dec := newDecoder(t, m, dr, c.k)
				for _, p := range [][]int32{prompt, {5, 5, 0, 3}} {
					greedy := spec.Request{Prompt: p, MaxTokens: 24}
					wantG, err := single(plain.GenerateFunc(context.Background(), greedy, nil))
					require.NoError(t, err)
					got, err := single(dec.GenerateFunc(context.Background(), greedy, nil))
					require.NoError(t, err)
					assert.Equal(t, wantG.Tokens, got.Tokens, "greedy EAGLE-3 drafting equals plain greedy decoding")
					assert.Positive(t, got.Stats.Drafted)
				}
			}
		})
	}
}

// TestEAGLE3Batched runs many requests at once, greedy and sampled, drafted by an
// EAGLE-3 head (chains and trees) — the target's passes carrying several sessions'
// verifications, each keeping its own rows' auxiliary states — and requires each
// output to be its output alone, and the greedy ones plain greedy decoding's.
func TestEAGLE3Batched(t *testing.T) {
	for _, tree := range []draft.TreeShape{{}, {Width: 2, Depth: 3, MaxNodes: 5}} {
		m, d := eagle3Case(t, tree, cpu.Factory(1))
		tgt, err := target.NewLocal(m)
		require.NoError(t, err)
		dec, err := spec.New(tgt, d, spec.Options{K: 5})
		require.NoError(t, err)
		plain := newDecoder(t, m, nil, 0)
		var reqs []spec.Request
		for i := range 12 {
			p := sampler.Params{}
			if i%2 == 1 {
				p = sampler.Params{Temperature: 0.9, Seed: uint64(i)}
			}
			reqs = append(reqs, spec.Request{Prompt: []int32{int32(i % 6), int32((i * 5) % 6), 1}, MaxTokens: 20 + i, Sampling: p})
		}
		got := concurrent(t, dec, reqs)
		for i, req := range reqs {
			want, err := single(dec.GenerateFunc(context.Background(), req, nil))
			require.NoError(t, err)
			assert.Equal(t, want.Tokens, got[i], "tree %+v request %d", tree, i)
			if req.Sampling.Greedy() {
				w, err := single(plain.GenerateFunc(context.Background(), req, nil))
				require.NoError(t, err)
				assert.Equal(t, w.Tokens, got[i], "tree %+v request %d: plain greedy", tree, i)
			}
		}
	}
}

// TestEAGLE3ConfidenceStop: an EAGLE-3 chain cut where the head's own confidence
// falls (Options.DraftPMin, fixed and learned) drafts fewer tokens and stays exact —
// its sampled two-token continuations the target's distribution (chi-square), its
// greedy output plain greedy decoding's.
func TestEAGLE3ConfidenceStop(t *testing.T) {
	const draws = 20_000
	params := sampler.Params{Temperature: 1}
	m, d := eagle3Case(t, draft.TreeShape{}, cpu.Factory(1))
	decoder := func(opts spec.Options) *spec.Decoder {
		dec, err := spec.New(local(t, m), d, opts)
		require.NoError(t, err)
		return dec
	}
	prompt := []int32{1, 4, 2}
	want := reference.ContinuationsOf(modelLogits(t, m), 6, prompt, 3, params)
	fit, _ := fitDraws(t, decoder(spec.Options{K: 3, DraftPMin: 0.6}), spec.Request{Prompt: prompt, MaxTokens: 3, Sampling: params}, draws, 6, want, nil)
	assert.Zero(t, fit.Impossible, "generated a sequence the target never would")
	assert.Greater(t, fit.P, minP, "chi-square %.1f on %d df", fit.Stat, fit.DF)

	plain := newDecoder(t, m, nil, 0)
	greedy := spec.Request{Prompt: []int32{5, 5, 0, 3}, MaxTokens: 40}
	wantG, err := single(plain.GenerateFunc(context.Background(), greedy, nil))
	require.NoError(t, err)
	whole, err := single(decoder(spec.Options{K: 4}).GenerateFunc(context.Background(), greedy, nil))
	require.NoError(t, err)
	for _, opts := range []spec.Options{{K: 4, DraftPMin: 0.99}, {K: 6, Adaptive: true, DraftPMin: spec.PMinLearned}} {
		got, err := single(decoder(opts).GenerateFunc(context.Background(), greedy, nil))
		require.NoError(t, err)
		assert.Equal(t, wantG.Tokens, got.Tokens, "%+v: plain greedy decoding's output", opts)
		assert.Positive(t, got.Stats.Drafted, "%+v", opts)
		if !opts.Adaptive {
			assert.Less(t, got.Stats.Drafted, whole.Stats.Drafted, "the stop cut chains")
		}
	}
}
