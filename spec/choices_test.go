package spec_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/internal/stattest"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// TestChoicesAsAlone runs n = 4 samples of one request on the demo target with the
// demo drafter behind prompt lookup, the target's sessions forking after the shared
// prefill: greedy, every choice is plain greedy decoding's text; seeded sampling,
// choice i is the request run alone with the parameters' Choice(i).
func TestChoicesAsAlone(t *testing.T) {
	tm, dm := demoPair(t)
	tgt, err := target.NewLocal(tm)
	require.NoError(t, err)
	dec, err := spec.New(tgt, lookup.InFront(newDrafter(t, dm)), spec.Options{K: 4})
	require.NoError(t, err)
	prompt := make([]int32, 70) // more than a block, and a partial one
	for i := range prompt {
		prompt[i] = int32(300 + (i*37)%900)
	}
	for _, p := range []sampler.Params{{}, {Temperature: 0.8, TopP: 0.95, Seed: 42}} {
		req := spec.Request{Prompt: prompt, N: 4, MaxTokens: 40, Sampling: p}
		got, err := dec.GenerateFunc(context.Background(), req, nil)
		require.NoError(t, err)
		require.Len(t, got, 4)
		for i, res := range got {
			alone := req
			alone.N, alone.Sampling = 1, p.Choice(i)
			want, err := single(dec.GenerateFunc(context.Background(), alone, nil))
			require.NoError(t, err)
			assert.Equal(t, want.Tokens, res.Tokens, "T=%v choice %d", p.Temperature, i)
			assert.Equal(t, spec.FinishLength, res.Finish)
		}
		if p.Temperature > 0 {
			assert.NotEqual(t, got[0].Tokens, got[1].Tokens, "sampled choices differ")
		}
	}
	st := tm.KVStats()
	assert.Equal(t, st.Blocks-st.CachedBlocks, st.FreeBlocks-st.CachedBlocks, "every block came back")
}

// TestChoicesPrefillOnce counts the tokens the target forwards: n choices of a long
// prompt forward it once, and each choice only its own steps after that.
func TestChoicesPrefillOnce(t *testing.T) {
	chain := newChain(t, markov.Config{Vocab: 9, Order: 2, Seed: 5, Scale: 1.5})
	counted := &countingModel{Model: chain}
	tgt, err := target.NewLocal(counted)
	require.NoError(t, err)
	dec, err := spec.New(tgt, newDrafter(t, chain.Perturbed(1.2, 3)), spec.Options{K: 3})
	require.NoError(t, err)
	prompt := make([]int32, 300)
	for i := range prompt {
		prompt[i] = int32(i % 9)
	}
	res, err := dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, N: 5, MaxTokens: 10, Sampling: sampler.Params{Temperature: 1}}, nil)
	require.NoError(t, err)
	steps := 0
	for _, r := range res {
		require.Len(t, r.Tokens, 10)
		steps += r.Stats.Steps + r.Stats.DraftNodes
	}
	assert.Equal(t, len(prompt)-1+steps, counted.tokens(), "the prompt once, then every choice's verified tokens")
}

// TestChoicesDistribution draws n = 3 samples of sequences of 3 tokens, many times,
// with a drafter that is often wrong: every choice's sequences follow the target's
// distribution, and the first tokens of choices 0 and 1 are independent (their joint
// counts fit the product of the target's probabilities).
func TestChoicesDistribution(t *testing.T) {
	const draws, n, length, vocab = 12_000, 3, 3, 6
	chain := newChain(t, markov.Config{Vocab: vocab, Order: 1, Seed: 11, Scale: 1.5})
	dec := newDecoder(t, chain, newDrafter(t, chain.Perturbed(1.2, 4)), 3)
	params := sampler.Params{Temperature: 0.9}
	prompt := []int32{1, 2}
	want := reference.Continuations(chain, prompt, length, params)
	first := reference.Continuations(chain, prompt, 1, params)
	counts := make([]int, len(want))
	joint := make([]int, vocab*vocab)
	for i := range draws {
		req := spec.Request{Prompt: prompt, N: n, MaxTokens: length, Sampling: params}
		req.Sampling.Seed = uint64(i)
		res, err := dec.GenerateFunc(context.Background(), req, nil)
		require.NoError(t, err)
		for _, r := range res {
			require.Len(t, r.Tokens, length)
			counts[reference.Index(r.Tokens, vocab)]++
		}
		joint[int(res[0].Tokens[0])*vocab+int(res[1].Tokens[0])]++
	}
	fit := stattest.ChiSquare(counts, want)
	assert.Zero(t, fit.Impossible, "generated a sequence the target never would")
	assert.Greater(t, fit.P, 1e-3, "choices' sequences: chi-square %.1f on %d df", fit.Stat, fit.DF)
	product := make([]float64, vocab*vocab)
	for a := range vocab {
		for b := range vocab {
			product[a*vocab+b] = first[a] * first[b]
		}
	}
	ind := stattest.ChiSquare(joint, product)
	assert.Greater(t, ind.P, 1e-3, "choices 0 and 1: chi-square %.1f on %d df", ind.Stat, ind.DF)
	t.Logf("sequences p=%.3f, independence p=%.3f", fit.P, ind.P)
}

// TestChoicesErrors: impossible counts are refused before anything runs, with a
// result of FinishError for every choice and nothing handed out; 0 choices is one; a
// cancelled context ends every choice as cancelled, each with its last chunk.
func TestChoicesErrors(t *testing.T) {
	chain := newChain(t, markov.Config{Vocab: 9, Order: 1, Seed: 5, Scale: 1.5})
	dec := newDecoder(t, chain, newDrafter(t, chain.Perturbed(1.2, 3)), 3)
	req := spec.Request{Prompt: []int32{1, 2}, MaxTokens: 5}
	chunks := 0
	count := func(spec.Chunk) error { chunks++; return nil }
	for _, c := range []struct {
		name    string
		req     spec.Request
		field   string
		results int // one per choice, or one when N is at fault
	}{
		{"negative N", spec.Request{Prompt: req.Prompt, N: -1}, "N", 1},
		{"too many choices", spec.Request{Prompt: req.Prompt, N: spec.MaxChoices + 1}, "N", 1},
		{"far too many choices", spec.Request{Prompt: req.Prompt, N: 1 << 40}, "N", 1},
		{"PromptOnly of two", spec.Request{Prompt: req.Prompt, N: 2, PromptOnly: true}, "N", 2},
		{"a token outside the vocabulary", spec.Request{Prompt: []int32{1, 99}, N: 2, MaxTokens: 5}, "Prompt[1]", 2},
	} {
		res, err := dec.GenerateFunc(context.Background(), c.req, count)
		re, ok := errors.AsType[*spec.RequestError](err)
		require.True(t, ok, "%s: %v", c.name, err)
		assert.Equal(t, c.field, re.Field, c.name)
		assert.ErrorIs(t, err, spec.ErrInvalidRequest, c.name)
		require.Len(t, res, c.results, c.name)
		for _, r := range res {
			assert.Equal(t, spec.FinishError, r.Finish, c.name)
		}
	}
	assert.Zero(t, chunks, "a refused request hands out nothing")
	res, err := dec.GenerateFunc(context.Background(), req, nil)
	require.NoError(t, err)
	require.Len(t, res, 1, "N = 0 is one choice")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req.N = 3
	ends := map[int]spec.FinishReason{}
	res, err = dec.GenerateFunc(ctx, req, func(c spec.Chunk) error {
		if c.Finish != "" {
			ends[c.Choice] = c.Finish
		}
		return nil
	})
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
	require.Len(t, res, 3)
	for i, r := range res {
		assert.Equal(t, spec.FinishCancelled, r.Finish, "choice %d", i)
		assert.Equal(t, spec.FinishCancelled, ends[i], "choice %d's last chunk", i)
	}
}

// demoPair opens the demo target and drafter shipped in models/, closed with the test.
func demoPair(t *testing.T) (tm, dm *llama.Model) {
	t.Helper()
	open := func(name string) *llama.Model {
		m, err := llama.Open(filepath.Join("..", "models", name), cpu.Factory(2), llama.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		return m
	}
	return open("gocoder-m-q8_0.gguf"), open("gocoder-xs-q8_0.gguf")
}

// countingModel counts the tokens its sequences forward; with a delay, every forward
// takes that long, as a real model's pass takes time.
type countingModel struct {
	model.Model
	delay time.Duration
	mu    sync.Mutex
	n     int
}

func (c *countingModel) add(n int) {
	c.mu.Lock()
	c.n += n
	c.mu.Unlock()
}

// pass takes the delay of one pass.
func (c *countingModel) pass() {
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
}

func (c *countingModel) tokens() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *countingModel) NewSequence(ctx context.Context) (model.Sequence, error) {
	s, err := c.Model.NewSequence(ctx)
	if err != nil {
		return nil, err
	}
	return &countedSeq{s.(model.ForkSequence), c}, nil
}

func (c *countingModel) Forward(ctx context.Context, work []model.Work) error {
	inner := make([]model.Work, len(work))
	for i, w := range work {
		c.add(len(w.Batch.Tokens))
		inner[i] = model.Work{Seq: w.Seq.(*countedSeq).ForkSequence, Batch: w.Batch, Logits: w.Logits}
	}
	c.pass()
	return c.Model.Forward(ctx, inner)
}

// countedSeq is a countingModel's sequence.
type countedSeq struct {
	model.ForkSequence
	c *countingModel
}

func (s *countedSeq) Forward(ctx context.Context, b batch.Batch, logits []float32) error {
	s.c.add(len(b.Tokens))
	s.c.pass()
	return s.ForkSequence.Forward(ctx, b, logits)
}

func (s *countedSeq) Fork() (model.Sequence, error) {
	f, err := s.ForkSequence.Fork()
	if err != nil {
		return nil, err
	}
	return &countedSeq{f.(model.ForkSequence), s.c}, nil
}

// noFork hides a model's sequences' Fork: n choices then prefill each on their own.
type noFork struct{ model.Model }

type noForkSeq struct{ model.Sequence }

func (m noFork) NewSequence(ctx context.Context) (model.Sequence, error) {
	s, err := m.Model.NewSequence(ctx)
	return noForkSeq{s}, err
}

func (m noFork) Forward(ctx context.Context, work []model.Work) error {
	inner := make([]model.Work, len(work))
	for i, w := range work {
		inner[i] = model.Work{Seq: w.Seq.(noForkSeq).Sequence, Batch: w.Batch, Logits: w.Logits}
	}
	return m.Model.Forward(ctx, inner)
}

// Choices on a model whose sequences do not fork prefill each on their own and are
// the same as on one that forks.
func TestChoicesWithoutFork(t *testing.T) {
	chain := newChain(t, markov.Config{Vocab: 9, Order: 2, Seed: 5, Scale: 1.5})
	req := spec.Request{Prompt: []int32{1, 2, 3}, N: 3, MaxTokens: 12, Sampling: sampler.Params{Temperature: 1, Seed: 4}}
	want, err := newDecoder(t, chain, newDrafter(t, chain.Perturbed(1.2, 3)), 3).GenerateFunc(context.Background(), req, nil)
	require.NoError(t, err)
	got, err := newDecoder(t, noFork{chain}, newDrafter(t, chain.Perturbed(1.2, 3)), 3).GenerateFunc(context.Background(), req, nil)
	require.NoError(t, err)
	for i := range got {
		assert.Equal(t, want[i].Tokens, got[i].Tokens, "choice %d", i)
	}
}
