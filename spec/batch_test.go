package spec_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/shared"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/model/markov"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// concurrent runs the requests at once through dec and returns their tokens.
func concurrent(t *testing.T, dec *spec.Decoder, reqs []spec.Request) [][]int32 {
	t.Helper()
	out := make([][]int32, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			res, err := dec.Generate(context.Background(), req)
			out[i], errs[i] = res.Tokens, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "request %d", i)
	}
	return out
}

// TestBatchedRequestsAsAlone runs many requests at once through one target, which
// forwards them together, and requires each output — greedy or sampled, plain or
// speculative — to be exactly its output alone: a request's tokens do not depend on
// the batch around it.
func TestBatchedRequestsAsAlone(t *testing.T) {
	tgtModel := newChain(t, markov.Config{Vocab: 9, Order: 2, Seed: 77, Scale: 1.5})
	tgt, err := target.NewLocal(tgtModel)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		k    int
	}{{"plain", 0}, {"speculative", 3}} {
		t.Run(c.name, func(t *testing.T) {
			var drafter draft.Drafter
			if c.k > 0 {
				drafter = newDrafter(t, tgtModel.Perturbed(1.2, 5))
			}
			dec, err := spec.New(tgt, drafter, spec.Options{K: c.k})
			require.NoError(t, err)
			var reqs []spec.Request
			for i := range 16 {
				p := sampler.Params{}
				if i%2 == 1 {
					p = sampler.Params{Temperature: 0.9, Seed: uint64(i)}
				}
				reqs = append(reqs, spec.Request{Prompt: []int32{int32(i % 9), int32((i * 5) % 9)}, MaxTokens: 30 + i, Sampling: p})
			}
			got := concurrent(t, dec, reqs)
			for i, req := range reqs {
				want, err := dec.Generate(context.Background(), req)
				require.NoError(t, err)
				assert.Equal(t, want.Tokens, got[i], "request %d", i)
			}
		})
	}
	// Whether passes of a model this fast gather several requests depends on timing:
	// TestBatchedThroughput checks that on a real model.
}

// TestBatchedThroughput runs 8 greedy requests at once on the demo target and checks
// every output against its solo run; the passes must have carried several requests
// each. (Throughput is measured by examples/bench, not here.)
func TestBatchedThroughput(t *testing.T) {
	path := shared.Path(t, "models", "gocoder-m-q8_0.gguf")
	m, err := llama.Open(path, llama.Options{Threads: 2})
	require.NoError(t, err)
	defer m.Close()
	tgt, err := target.NewLocal(m)
	require.NoError(t, err)
	dec, err := spec.New(tgt, nil, spec.Options{})
	require.NoError(t, err)
	var reqs []spec.Request
	for i := range 8 {
		reqs = append(reqs, spec.Request{Prompt: []int32{int32(100 + i), 46, 10, int32(300 + 7*i)}, MaxTokens: 24})
	}
	got := concurrent(t, dec, reqs)
	p0, f0 := tgt.BatchStats()
	for i, req := range reqs {
		want, err := dec.Generate(context.Background(), req)
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, got[i], "request %d", i)
	}
	assert.Greater(t, float64(f0)/float64(p0), 1.5, fmt.Sprintf("mean batch of %d passes", p0))
}
