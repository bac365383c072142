package spec_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/internal/stattest"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
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
			res, err := single(dec.GenerateFunc(context.Background(), req, nil))
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
				want, err := single(dec.GenerateFunc(context.Background(), req, nil))
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
	path := sharedtest.Path(t, "models", "gocoder-m-q8_0.gguf")
	m, err := llama.Open(path, cpu.Factory(2), llama.Options{})
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
	st := tgt.BatchStats()
	for i, req := range reqs {
		want, err := single(dec.GenerateFunc(context.Background(), req, nil))
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, got[i], "request %d", i)
	}
	assert.Greater(t, float64(st.Forwards)/float64(st.Passes), 1.5, fmt.Sprintf("mean batch of %d passes", st.Passes))
}

// TestPrefixReuse runs a request and then one whose prompt begins with the first's:
// the second reuses the first's cached blocks (the model's prefix-cache hits rise)
// and decodes exactly what it decodes on a model without that cache — plainly and
// speculatively (whose accepted paths are published as they are accepted).
func TestPrefixReuse(t *testing.T) {
	path := sharedtest.Path(t, "models", "gocoder-m-q8_0.gguf")
	xs, err := llama.Open(filepath.Join("..", "models", "gocoder-xs-q8_0.gguf"), cpu.Factory(1), llama.Options{})
	require.NoError(t, err)
	defer xs.Close()
	open := func(k int) (*llama.Model, *spec.Decoder) {
		m, err := llama.Open(path, cpu.Factory(2), llama.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		tgt, err := target.NewLocal(m)
		require.NoError(t, err)
		var d draft.Drafter
		if k > 0 {
			d = newDrafter(t, xs)
		}
		dec, err := spec.New(tgt, d, spec.Options{K: k})
		require.NoError(t, err)
		return m, dec
	}
	prefix := make([]int32, 200)
	for i := range prefix {
		prefix[i] = int32(40 + (i*37)%900)
	}
	for _, k := range []int{0, 3} {
		m, dec := open(k)
		first := spec.Request{Prompt: prefix, MaxTokens: 40}
		second := spec.Request{Prompt: append(append([]int32(nil), prefix...), 10, 9, 295), MaxTokens: 24,
			Sampling: sampler.Params{Temperature: 0.8, Seed: 3}}
		_, err := single(dec.GenerateFunc(context.Background(), first, nil))
		require.NoError(t, err)
		before := m.KVStats().PrefixHits
		got, err := single(dec.GenerateFunc(context.Background(), second, nil))
		require.NoError(t, err)
		assert.GreaterOrEqual(t, m.KVStats().PrefixHits-before, int64(len(prefix)/16), "K=%d: the shared prefix's blocks were found", k)
		_, fresh := open(k)
		want, err := single(fresh.GenerateFunc(context.Background(), second, nil))
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, got.Tokens, "K=%d: the same output as on a model without the cache", k)
		// The first request's own output is cached too: asking again with it
		// continues from there.
		third := spec.Request{Prompt: append(append([]int32(nil), prefix...), 10), MaxTokens: 8}
		_, err = single(dec.GenerateFunc(context.Background(), third, nil))
		require.NoError(t, err)
	}
}

// TestBatchedUnderMemoryPressure runs 32 requests of mixed lengths at once on a target
// whose key/value budget holds a fraction of them, cancelling some midway: every
// request ends cleanly — complete, cut short for memory (an error wrapping
// model.ErrOutOfMemory, or finish "length" when the draft or the next token no longer
// fits), or cancelled — and every token any of them produced is its solo run's token
// at that place: nothing is corrupted by the others.
func TestBatchedUnderMemoryPressure(t *testing.T) {
	path := filepath.Join("..", "models", "gocoder-m-q8_0.gguf")
	m, err := llama.Open(path, cpu.Factory(2), llama.Options{KVBudget: 60 * 16 * 8 * 2 * 2 * 64 * 4}) // 60 blocks: 960 positions
	require.NoError(t, err)
	defer m.Close()
	dec := newDecoder(t, m, nil, 0)
	solo, err := llama.Open(path, cpu.Factory(2), llama.Options{})
	require.NoError(t, err)
	defer solo.Close()
	soloDec := newDecoder(t, solo, nil, 0)

	const n = 32
	reqs := make([]spec.Request, n)
	for i := range reqs {
		prompt := make([]int32, 10+(i*13)%60)
		for j := range prompt {
			prompt[j] = int32(40 + (i*31+j*17)%2000)
		}
		reqs[i] = spec.Request{Prompt: prompt, MaxTokens: 20 + (i*7)%40}
	}
	results := make([]spec.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			ctx := context.Background()
			if i%5 == 0 { // some are cancelled midway
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				go func() { time.Sleep(time.Duration(5+i) * time.Millisecond); cancel() }()
			}
			results[i], errs[i] = single(dec.GenerateFunc(ctx, reqs[i], nil))
		})
	}
	wg.Wait()
	var complete, short, cancelled int
	for i, res := range results {
		switch {
		case errs[i] == nil && len(res.Tokens) == reqs[i].MaxTokens:
			complete++
		case errs[i] == nil && res.Finish == spec.FinishLength, errors.Is(errs[i], model.ErrOutOfMemory):
			short++
		case errors.Is(errs[i], context.Canceled):
			cancelled++
		default:
			t.Errorf("request %d: %v (finish %q, %d tokens)", i, errs[i], res.Finish, len(res.Tokens))
		}
		want, err := single(soloDec.GenerateFunc(context.Background(), reqs[i], nil))
		require.NoError(t, err)
		require.LessOrEqual(t, len(res.Tokens), len(want.Tokens))
		assert.True(t, slices.Equal(want.Tokens[:len(res.Tokens)], res.Tokens), "request %d: its tokens %v are not its solo run's %v", i, res.Tokens, want.Tokens)
	}
	t.Logf("%d complete, %d cut short for memory, %d cancelled", complete, short, cancelled)
	assert.Positive(t, complete)
	st := m.KVStats()
	assert.Equal(t, st.Blocks, st.FreeBlocks, "every block came back")
}

// TestBatchedAdaptiveExact runs an adaptive decoder — whose choice of K prices drafts
// by the batch while requests share passes — from 8 goroutines at once: greedy
// outputs are plain greedy decoding's, and sampled sequences follow the target's
// distribution (chi-square), whatever K the load made each step choose.
func TestBatchedAdaptiveExact(t *testing.T) {
	chain := newChain(t, markov.Config{Vocab: 6, Order: 1, Seed: 91, Scale: 1.5})
	// Passes that take time, so that concurrent requests share them.
	tgt, err := target.NewLocal(&countingModel{Model: chain, delay: 100 * time.Microsecond})
	require.NoError(t, err)
	dec, err := spec.New(tgt, newDrafter(t, chain.Perturbed(1.2, 8)), spec.Options{K: 4, Adaptive: true})
	require.NoError(t, err)
	plain := newDecoder(t, chain, nil, 0)
	prompt := []int32{1, 2}

	var greedy []spec.Request
	for i := range 16 {
		greedy = append(greedy, spec.Request{Prompt: []int32{int32(i % 6), int32((i * 5) % 6)}, MaxTokens: 30})
	}
	for i, got := range concurrent(t, dec, greedy) {
		want, err := single(plain.GenerateFunc(context.Background(), greedy[i], nil))
		require.NoError(t, err)
		assert.Equal(t, want.Tokens, got, "request %d", i)
	}

	const draws, workers, length = 12_000, 8, 3
	params := sampler.Params{Temperature: 1}
	counts := make([]int, len(reference.Continuations(chain, prompt, length, params)))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < draws; i += workers {
				req := spec.Request{Prompt: prompt, MaxTokens: length, Sampling: params}
				req.Sampling.Seed = uint64(i)
				res, err := single(dec.GenerateFunc(context.Background(), req, nil))
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				counts[reference.Index(res.Tokens, 6)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fit := stattest.ChiSquare(counts, reference.Continuations(chain, prompt, length, params))
	st := tgt.BatchStats()
	t.Logf("p=%.3f (chi-square %.1f on %d df); %.2f forwards a pass", fit.P, fit.Stat, fit.DF, float64(st.Forwards)/float64(st.Passes))
	assert.Zero(t, fit.Impossible)
	assert.Greater(t, fit.P, 1e-3)
	assert.Greater(t, float64(st.Forwards)/float64(st.Passes), 1.5, "the passes were shared: the adaptive choice priced drafts by the batch")
}
