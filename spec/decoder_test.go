package spec_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

func TestNewRejectsBadOptions(t *testing.T) {
	tgt := local(t, newChain(t, markov.Config{Vocab: 8, Order: 1}))
	same := newDrafter(t, newChain(t, markov.Config{Vocab: 8, Order: 1}))
	other := newDrafter(t, newChain(t, markov.Config{Vocab: 10, Order: 1}))
	tests := []struct {
		name    string
		target  target.Target
		drafter draft.Drafter
		opts    spec.Options
		want    string // empty: accepted
	}{
		{"nil target", nil, nil, spec.Options{}, "nil target"},
		{"negative K", tgt, same, spec.Options{K: -1}, "K -1"},
		{"huge K", tgt, same, spec.Options{K: spec.MaxK + 1}, "K 65"},
		{"vocabulary mismatch", tgt, other, spec.Options{K: 2}, "draft vocabulary size 10 differs from target vocabulary size 8"},
		{"typed nil drafter", tgt, (*draft.SmallModel)(nil), spec.Options{K: 2}, "draft vocabulary size 0"},
		{"mismatch inside First", tgt, draft.First(lookup.NGram{}, draft.First(other)), spec.Options{K: 2}, "draft vocabulary size 10"},
		{"First of matching parts", tgt, lookup.InFront(same), spec.Options{K: 2}, ""},
		{"First tied to no vocabulary", tgt, draft.First(lookup.NGram{}, lookup.Suffix{}), spec.Options{K: 2}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := spec.New(tt.target, tt.drafter, tt.opts)
			if tt.want == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tt.want)
			}
		})
	}
	dec, err := spec.New(tgt, nil, spec.Options{K: 4})
	require.NoError(t, err)
	assert.Zero(t, dec.K(), "no drafter, no speculation")
}

func TestGenerateRejectsBadRequests(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 8, Order: 1, ContextLength: 10})
	dec := newDecoder(t, tgt, newDrafter(t, tgt.Perturbed(1, 1)), 3)
	ok := []int32{1, 2}
	tests := []struct {
		name string
		req  spec.Request
		want string
	}{
		{"empty prompt", spec.Request{}, "Prompt: empty"},
		{"prompt token", spec.Request{Prompt: []int32{1, 8}}, "Prompt[1]: token 8"},
		{"negative prompt token", spec.Request{Prompt: []int32{-2}}, "Prompt[0]: token -2"},
		{"prompt too long", spec.Request{Prompt: make([]int32, 11)}, "Prompt: 11 tokens exceed the context length 10"},
		{"negative MaxTokens", spec.Request{Prompt: ok, MaxTokens: -1}, "MaxTokens: -1"},
		{"negative temperature", spec.Request{Prompt: ok, Sampling: sampler.Params{Temperature: -1}}, "Temperature"},
		{"top-p above one", spec.Request{Prompt: ok, Sampling: sampler.Params{Temperature: 1, TopP: 1.5}}, "TopP"},
		{"negative top-p", spec.Request{Prompt: ok, Sampling: sampler.Params{Temperature: 1, TopP: -0.1}}, "TopP"},
		{"NaN top-p", spec.Request{Prompt: ok, Sampling: sampler.Params{Temperature: 1, TopP: math.NaN()}}, "TopP"},
		{"stop token", spec.Request{Prompt: ok, StopTokens: []int32{9}}, "StopTokens[0]: token 9"},
		{"empty stop sequence", spec.Request{Prompt: ok, StopSequences: [][]int32{{1}, {}}}, "StopSequences[1]: is empty"},
		{"stop sequence token", spec.Request{Prompt: ok, StopSequences: [][]int32{{1, 99}}}, "StopSequences[0][1]: token 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := single(dec.GenerateFunc(context.Background(), tt.req, nil))
			assert.ErrorContains(t, err, tt.want)
			assert.Empty(t, res.Tokens)
		})
	}
	res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: ok, MaxTokens: 3}, nil))
	require.NoError(t, err, "a nil emit only collects")
	assert.Len(t, res.Tokens, 3)
}

// TestBadDrafters checks that a drafter breaking its contract gets a clear error.
func TestBadDrafters(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 8, Order: 1})
	tests := []struct {
		name string
		d    draft.Drafter
		want string
	}{
		{"token outside the vocabulary", draft.Func(func(h, dst []int32) int { dst[0] = 8; return 1 }), "drafted token 8 at position 0 is outside the vocabulary [0, 8)"},
		{"negative token", draft.Func(func(h, dst []int32) int { dst[0] = -1; return 1 }), "drafted token -1"},
		{"q = 0", sessionDrafter{draft.Proposal{Tokens: []int32{3}, Dists: [][]float32{make([]float32, 8)}}}, "q = 0"},
		{"missing distributions", sessionDrafter{draft.Proposal{Tokens: []int32{3, 4}, Dists: [][]float32{make([]float32, 8)}}}, "1 distributions for 2 tokens"},
		{"too many tokens", sessionDrafter{draft.Proposal{Tokens: []int32{1, 2, 3, 4, 5}}}, "more than k = 4"},
		{"failing drafter", failingDrafter{}, "drafter broke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := single(newDecoder(t, tgt, tt.d, 4).GenerateFunc(context.Background(), spec.Request{Prompt: []int32{1}, MaxTokens: 10, Sampling: sampler.Params{Temperature: 1}}, nil))
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

type sessionDrafter struct{ p draft.Proposal }

func (d sessionDrafter) Start(context.Context, draft.Request) (draft.Session, error) { return d, nil }
func (d sessionDrafter) Propose(_ context.Context, _ []int32, _ int, p *draft.Proposal) error {
	*p = d.p
	return nil
}
func (d sessionDrafter) Close() error { return nil }

type failingDrafter struct{}

func (failingDrafter) Start(context.Context, draft.Request) (draft.Session, error) {
	return nil, errors.New("drafter broke")
}

// greedyFixture is a chain, a drafter that often agrees with it, and the chain's own
// greedy output.
func greedyFixture(t *testing.T) (*markov.Chain, draft.Drafter, []int32, []int32) {
	tgt := newChain(t, markov.Config{Vocab: 10, Order: 2, Seed: 21, Scale: 1})
	prompt := []int32{3, 1, 4}
	return tgt, newDrafter(t, tgt.Perturbed(0.6, 2)), prompt, reference.Greedy(tgt, prompt, 200, sampler.Params{})
}

func index(out, sub []int32) int {
	for i := 0; i+len(sub) <= len(out); i++ {
		if slices.Equal(out[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

func TestStops(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	stopTok := ref[20]
	firstStop := slices.Index(ref, stopTok)
	seq := ref[30:33]
	firstSeq := index(ref, seq)
	tests := []struct {
		name   string
		req    spec.Request
		want   []int32
		finish spec.FinishReason
	}{
		{"max tokens", spec.Request{MaxTokens: 17}, ref[:17], spec.FinishLength},
		{"stop token", spec.Request{StopTokens: []int32{stopTok}, MaxTokens: 100}, ref[:firstStop], spec.FinishStop},
		{"stop token included", spec.Request{StopTokens: []int32{stopTok}, IncludeStop: true, MaxTokens: 100}, ref[:firstStop+1], spec.FinishStop},
		{"stop sequence", spec.Request{StopSequences: [][]int32{{99 % 10, 9, 9, 9, 9}, seq}, MaxTokens: 100}, ref[:firstSeq], spec.FinishStop},
		{"stop sequence included", spec.Request{StopSequences: [][]int32{seq}, IncludeStop: true, MaxTokens: 100}, ref[:firstSeq+3], spec.FinishStop},
		{"limit before stop", spec.Request{StopSequences: [][]int32{seq}, MaxTokens: firstSeq + 1}, ref[:firstSeq+1], spec.FinishLength},
		{"context full", spec.Request{}, ref[:40-len(prompt)+1], spec.FinishLength},
	}
	for _, k := range []int{0, 1, 4, 7} {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				m := tgt
				if tt.name == "context full" {
					m = newChain(t, markov.Config{Vocab: 10, Order: 2, Seed: 21, Scale: 1, ContextLength: 40})
				}
				req := tt.req
				req.Prompt = prompt
				var streamed []int32
				res, err := single(newDecoder(t, m, d, k).GenerateFunc(context.Background(), req, func(c spec.Chunk) error {
					streamed = append(streamed, c.Tokens...)
					// Never hand out a token that a later stop would take back.
					require.Equal(t, tt.want[:len(streamed)], streamed, "K=%d", k)
					return nil
				}))
				require.NoError(t, err)
				assert.Equal(t, tt.want, streamed, "K=%d", k)
				assert.Equal(t, tt.want, res.Tokens, "K=%d: the result's", k)
				assert.Equal(t, tt.finish, res.Finish)
				assert.Equal(t, len(tt.want), res.Stats.GeneratedTokens)
			})
		}
	}
}

func TestCancellation(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []int32
	calls := 0
	res, err := single(newDecoder(t, tgt, d, 4).GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 100}, func(c spec.Chunk) error {
		got = append(got, c.Tokens...)
		calls++
		if len(got) >= 5 {
			cancel()
		}
		return nil
	}))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, spec.FinishCancelled, res.Finish)
	assert.Equal(t, ref[:len(got)], got, "what was handed out is correct")
	assert.Less(t, len(got), 5+5, "stopped within one step")
	assert.Equal(t, len(got), res.Stats.GeneratedTokens)

	// An error from the callback ends the generation and comes back.
	boom := errors.New("client went away")
	_, err = newDecoder(t, tgt, d, 4).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 100}, func(spec.Chunk) error { return boom })
	assert.ErrorIs(t, err, boom)

	// A context that is already done fails before any work.
	_, err = single(newDecoder(t, tgt, d, 4).GenerateFunc(ctx, spec.Request{Prompt: prompt}, nil))
	assert.ErrorIs(t, err, context.Canceled)
}

// TestGenerateIterator: the iterator yields the tokens as they come and ends each
// choice with its last chunk (finish and statistics); a loop that breaks stops the
// generation; an error arrives as the last pair.
func TestGenerateIterator(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	dec := newDecoder(t, tgt, d, 3)
	var got []int32
	var ends []spec.Chunk
	for c, err := range dec.Generate(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 25}) {
		require.NoError(t, err)
		require.Empty(t, ends, "nothing after the last chunk")
		got = append(got, c.Tokens...)
		if c.Finish != "" {
			assert.Empty(t, c.Tokens, "the last chunk carries no tokens")
			ends = append(ends, c)
		}
	}
	assert.Equal(t, ref[:25], got)
	require.Len(t, ends, 1)
	assert.Equal(t, spec.FinishLength, ends[0].Finish)
	assert.Equal(t, 25, ends[0].Stats.GeneratedTokens)

	// Breaking out early stops the generation.
	got = got[:0]
	for c := range dec.Generate(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 100}) {
		got = append(got, c.Tokens...)
		if len(got) >= 7 {
			break
		}
	}
	assert.Equal(t, ref[:len(got)], got)

	// Several choices: every one's chunks, in its order, and its end.
	seen := map[int][]int32{}
	finished := map[int]spec.FinishReason{}
	for c, err := range dec.Generate(context.Background(), spec.Request{Prompt: prompt, N: 3, MaxTokens: 12}) {
		require.NoError(t, err)
		seen[c.Choice] = append(seen[c.Choice], c.Tokens...)
		if c.Finish != "" {
			finished[c.Choice] = c.Finish
		}
	}
	for i := range 3 {
		assert.Equal(t, ref[:12], seen[i], "greedy choice %d", i)
		assert.Equal(t, spec.FinishLength, finished[i], "choice %d", i)
	}

	// Errors arrive as the last pair.
	var errs []error
	for _, err := range dec.Generate(context.Background(), spec.Request{}) {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	re, ok := errors.AsType[*spec.RequestError](errs[0])
	require.True(t, ok, "%v", errs[0])
	assert.Equal(t, "Prompt", re.Field)
}

// TestEmitErrorKeepsOutput: an error from emit ends the choice with FinishError, and
// its result holds what was handed out before.
func TestEmitErrorKeepsOutput(t *testing.T) {
	tgt, d, prompt, _ := greedyFixture(t)
	dec := newDecoder(t, tgt, d, 3)
	stop := errors.New("enough")
	res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 100}, func(c spec.Chunk) error {
		if len(c.Tokens) > 0 {
			return stop
		}
		return nil
	}))
	assert.ErrorIs(t, err, stop)
	assert.Equal(t, spec.FinishError, res.Finish, "an emit's own error")
	assert.NotEmpty(t, res.Tokens, "what was handed out")
	assert.Less(t, len(res.Tokens), 100)
}

// slowStart is a drafter whose sessions take a while to start, as a draft model's
// prefill of a long prompt does.
type slowStart struct {
	draft.Drafter
	delay time.Duration
}

func (d slowStart) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	time.Sleep(d.delay)
	return d.Drafter.Start(ctx, req)
}

// TestPrefillTimeCountsDrafters checks that a drafter's start (its prefill) counts as
// prompt processing, not as decoding: tokens per second leave all of it out.
func TestPrefillTimeCountsDrafters(t *testing.T) {
	tgt, d, prompt, _ := greedyFixture(t)
	const delay = 30 * time.Millisecond
	res, err := single(newDecoder(t, tgt, slowStart{d, delay}, 4).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 20}, nil))
	require.NoError(t, err)
	s := res.Stats
	assert.GreaterOrEqual(t, s.PrefillTime, delay)
	assert.Less(t, s.Duration-s.PrefillTime, delay, "decoding 20 tokens of a toy chain takes well under the drafter's start")
}

func TestStats(t *testing.T) {
	tgt, d, prompt, _ := greedyFixture(t)
	res, err := single(newDecoder(t, tgt, d, 4).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 150}, nil))
	require.NoError(t, err)
	s := res.Stats
	assert.Equal(t, 3, s.PromptTokens)
	assert.Equal(t, 150, s.GeneratedTokens)
	assert.Equal(t, s.Drafted, sum(s.DraftedAt))
	assert.Equal(t, s.Accepted, sum(s.AcceptedAt))
	assert.LessOrEqual(t, s.GeneratedTokens, s.Accepted+s.Steps)
	assert.Greater(t, s.GeneratedTokens, s.Accepted+s.Steps-5, "at most the last step is cut")
	for i := 1; i < len(s.DraftedAt); i++ {
		assert.LessOrEqual(t, s.AcceptedAt[i], s.AcceptedAt[i-1], "accepting position i needs position i-1")
	}
	assert.InDelta(t, float64(s.Accepted+s.Steps)/float64(s.Steps), s.MeanAcceptedLength(), 1e-12)
	assert.Positive(t, s.TokensPerSecond())
	assert.Positive(t, s.TimeToFirstToken)
	assert.GreaterOrEqual(t, s.Duration, s.TimeToFirstToken)
	assert.GreaterOrEqual(t, s.Duration, s.DraftTime+s.VerifyTime+s.SampleTime+s.PrefillTime)
	assert.Zero(t, s.AcceptanceAt(-1))
	assert.Zero(t, s.AcceptanceAt(99))
	assert.Contains(t, s.String(), "acceptance 0.")

	plain, err := single(newDecoder(t, tgt, nil, 0).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 150}, nil))
	require.NoError(t, err)
	assert.Equal(t, 150, plain.Stats.Steps)
	assert.Equal(t, 1.0, plain.Stats.MeanAcceptedLength())
	assert.True(t, strings.HasPrefix(plain.Stats.String(), "no drafts, mean accepted 1.00"))
}

func sum(x []int) int {
	s := 0
	for _, v := range x {
		s += v
	}
	return s
}

func TestAggregateReport(t *testing.T) {
	var a spec.Aggregate
	assert.Equal(t, "no drafts, mean accepted 0.00, 0.0 tokens/s", a.String())
	a.Add(spec.Stats{GeneratedTokens: 58, Steps: 20, Drafted: 50, Accepted: 36, DraftedAt: []int{20, 20, 10}, AcceptedAt: []int{18, 12, 6},
		Duration: 1500e6, PrefillTime: 500e6, TimeToFirstToken: 600e6})
	a.Add(spec.Stats{GeneratedTokens: 58, Steps: 20, Drafted: 50, Accepted: 36, DraftedAt: []int{25, 25}, AcceptedAt: []int{20, 16},
		Duration: 1000e6, TimeToFirstToken: 200e6})
	assert.Equal(t, 2, a.Requests)
	assert.Equal(t, []int{45, 45, 10}, a.Total.DraftedAt)
	assert.Equal(t, []int{38, 28, 6}, a.Total.AcceptedAt)
	assert.Equal(t, int64(400e6), int64(a.MeanTimeToFirstToken()))
	assert.Zero(t, a.Speedup())
	a.Baseline = 31
	assert.InDelta(t, 58.0/31, a.Speedup(), 1e-9)
	assert.Equal(t, "acceptance 0.72, mean accepted 2.80, 58.0 tokens/s, 1.87×", a.String())
}

// TestZeroAllocationsPerToken shows that the decoding loop allocates nothing per
// generated token: a request of 600 tokens allocates exactly as much as one of 60.
func TestZeroAllocationsPerToken(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for channel and lock operations")
	}
	tgt := newChain(t, markov.Config{Vocab: 512, Order: 1, Seed: 1, ContextLength: 1024})
	d := newDrafter(t, tgt.Perturbed(0.8, 1))
	cases := []struct {
		name string
		d    draft.Drafter
		k    int
		p    sampler.Params
		stop [][]int32
	}{
		{"plain greedy", nil, 0, sampler.Params{}, nil},
		{"speculative greedy", d, 4, sampler.Params{}, nil},
		{"speculative sampled", d, 4, sampler.Params{Temperature: 0.8, TopP: 0.95, TopK: 50, RepetitionPenalty: 1.1}, nil},
		{"deterministic drafter", chainDrafter(tgt.Perturbed(0.8, 2)), 5, sampler.Params{Temperature: 1}, nil},
		{"stop sequences", d, 3, sampler.Params{Temperature: 1}, [][]int32{{1, 2, 3}, {4, 4}}},
		{"adaptive", d, 6, sampler.Params{Temperature: 0.9}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dec := newDecoder(t, tgt, c.d, c.k)
			if c.name == "adaptive" {
				var err error
				dec, err = spec.New(local(t, tgt), c.d, spec.Options{K: c.k, Adaptive: true, Alternatives: []draft.Drafter{lookup.NGram{}}})
				require.NoError(t, err)
			}
			emit := func(spec.Chunk) error { return nil }
			allocs := func(n int) float64 {
				return testing.AllocsPerRun(20, func() {
					req := spec.Request{Prompt: []int32{1, 2, 3}, MaxTokens: n, Sampling: c.p, StopSequences: c.stop}
					if _, err := dec.GenerateFunc(context.Background(), req, emit); err != nil {
						t.Fatal(err)
					}
				})
			}
			short, long := allocs(60), allocs(600)
			t.Logf("allocations per request: %v (60 tokens), %v (600 tokens)", short, long)
			assert.Equal(t, short, long)
		})
	}
}

func TestConcurrentRequests(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	dec := newDecoder(t, tgt, d, 4)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			p := sampler.Params{}
			if i%2 == 1 {
				p = sampler.Params{Temperature: 0.9, Seed: uint64(i)}
			}
			res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 64, Sampling: p}, nil))
			assert.NoError(t, err)
			if i%2 == 0 {
				assert.Equal(t, ref[:64], res.Tokens)
			}
		})
	}
	wg.Wait()
}

// TestSeedsReproduce checks that a seed fixes the output, and different seeds differ.
func TestSeedsReproduce(t *testing.T) {
	tgt, d, prompt, _ := greedyFixture(t)
	dec := newDecoder(t, tgt, d, 4)
	gen := func(seed uint64) []int32 {
		res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 50, Sampling: sampler.Params{Temperature: 1, Seed: seed}}, nil))
		require.NoError(t, err)
		return res.Tokens
	}
	assert.Equal(t, gen(7), gen(7))
	assert.NotEqual(t, gen(7), gen(8))
}

// limited wraps a model so that its sequences fail with err once they would hold
// more than limit tokens, and can cancel a context inside a forward.
type limited struct {
	model.Model
	limit  int
	err    error
	cancel func() // called at the start of the forward that reaches cancelAt tokens
	at     int
}

func (m *limited) NewSequence(ctx context.Context) (model.Sequence, error) {
	s, err := m.Model.NewSequence(ctx)
	return &limitedSeq{Sequence: s, m: m}, err
}

type limitedSeq struct {
	model.Sequence
	m *limited
}

func (s *limitedSeq) Forward(ctx context.Context, b batch.Batch, logits []float32) error {
	if s.m.cancel != nil && s.Len()+len(b.Tokens) >= s.m.at {
		s.m.cancel()
	}
	if s.m.limit > 0 && s.Len()+len(b.Tokens) > s.m.limit {
		return fmt.Errorf("wrapped: %w", s.m.err)
	}
	return s.Sequence.Forward(ctx, b, logits)
}

func TestOutOfRoom(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	ctx := context.Background()

	// The target's memory runs out: drafts are dropped while the pending token still
	// fits, then the request fails with a clear error.
	oom := &limited{Model: tgt, limit: 30, err: model.ErrOutOfMemory}
	res, err := single(newDecoder(t, oom, d, 4).GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 100}, nil))
	assert.ErrorIs(t, err, model.ErrOutOfMemory)
	assert.Equal(t, spec.FinishError, res.Finish)
	assert.Equal(t, ref[:30-len(prompt)+1], res.Tokens, "every token that fit")

	// A context limit the model did not announce ends the request with "length".
	full := &limited{Model: tgt, limit: 30, err: model.ErrContextFull}
	res, err = single(newDecoder(t, full, d, 4).GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 100}, nil))
	require.NoError(t, err)
	assert.Equal(t, spec.FinishLength, res.Finish)
	assert.Equal(t, ref[:30-len(prompt)+1], res.Tokens)

	// The drafter runs out of memory: the target goes on alone.
	dm := &limited{Model: tgt.Perturbed(0.6, 2), limit: 20, err: model.ErrOutOfMemory}
	res, err = single(newDecoder(t, tgt, newDrafter(t, dm), 4).GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 60}, nil))
	require.NoError(t, err)
	assert.Equal(t, ref[:60], res.Tokens)
	assert.Contains(t, res.Stats.DraftError, "key/value memory exhausted")
	assert.Positive(t, res.Stats.Accepted, "drafts helped before the drafter ran out")

	// A draft model with a shorter context simply stops drafting.
	short := newChain(t, markov.Config{Vocab: 10, Order: 2, Seed: 21, Scale: 1, ContextLength: 16})
	res, err = single(newDecoder(t, tgt, newDrafter(t, short), 4).GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 60}, nil))
	require.NoError(t, err)
	assert.Equal(t, ref[:60], res.Tokens)
	assert.Empty(t, res.Stats.DraftError)
	assert.Less(t, res.Stats.Drafted, 4*16)
}

func TestCancelDuringForward(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &limited{Model: tgt, cancel: cancel, at: 20}
	var got []int32
	res, err := single(newDecoder(t, m, d, 4).GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 100}, func(c spec.Chunk) error {
		got = append(got, c.Tokens...)
		return nil
	}))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, spec.FinishCancelled, res.Finish)
	assert.Equal(t, ref[:len(got)], got)
	assert.LessOrEqual(t, len(got), 20-len(prompt)+1)
	assert.Equal(t, len(got), res.Stats.GeneratedTokens)
}

func TestGeneratedTokensCountsWhatWasHandedOut(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	dec := newDecoder(t, tgt, d, 4)
	res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: -1}, nil))
	assert.Error(t, err)
	assert.Zero(t, res.Stats.GeneratedTokens)
	assert.Equal(t, spec.FinishError, res.Finish)

	// A token held back for a possible stop sequence is not counted when the
	// request is cancelled before it is handed out.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &limited{Model: tgt, cancel: cancel, at: len(prompt) + 1} // the second step
	stop := [][]int32{{ref[0], (ref[1] + 1) % 10}}
	calls := 0
	res, err = single(newDecoder(t, m, nil, 0).GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 100, StopSequences: stop}, func(c spec.Chunk) error {
		calls += len(c.Tokens)
		return nil
	}))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, res.Stats.Steps, "one token was generated")
	assert.Zero(t, calls, "but held back")
	assert.Zero(t, res.Stats.GeneratedTokens)
}

type lyingRule struct{}

func (lyingRule) Verify(_ *sampler.Sampler, _ sampler.Step, path []int32) ([]int32, int32, error) {
	return path, 99, nil
}

func TestInvalidRuleOutput(t *testing.T) {
	tgt, d, prompt, _ := greedyFixture(t)
	res, err := single(newDecoder(t, tgt, d, 4).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 10, Sampling: sampler.Params{Rule: lyingRule{}}}, nil))
	assert.ErrorContains(t, err, "next token 99")
	assert.Empty(t, res.Tokens)
}

func TestOverlappingStopSequences(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	a, b := ref[8], ref[9]
	first := index(ref, []int32{a, b})
	for _, stops := range [][][]int32{{{b}, {a, b}}, {{a, b}, {b}}} {
		res, err := single(newDecoder(t, tgt, d, 4).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 50, StopSequences: stops}, nil))
		require.NoError(t, err)
		end := slices.Index(ref, b)
		if end == first+1 {
			end = first // both end here: the longer one goes
		}
		assert.Equal(t, ref[:end], res.Tokens, "stops %v", stops)
	}
}

func TestUnlimitedRequests(t *testing.T) {
	tgt, d, prompt, ref := greedyFixture(t)
	stop := ref[40]
	want := ref[:slices.Index(ref, stop)]
	for _, maxTokens := range []int{0, math.MaxInt} {
		res, err := single(newDecoder(t, tgt, d, 4).GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: maxTokens, StopTokens: []int32{stop}}, nil))
		require.NoError(t, err)
		assert.Equal(t, want, res.Tokens)
		assert.Equal(t, spec.FinishStop, res.Finish)
	}
}

// TestPaddedVocab: with PaddedVocab, a draft model with a smaller vocabulary drafts
// for a target whose table is padded, and greedy output stays the target's.
func TestPaddedVocab(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 12, Order: 1, Seed: 4, Scale: 2})
	small := newChain(t, markov.Config{Vocab: 10, Order: 1, Seed: 5})
	_, err := spec.New(local(t, tgt), newDrafter(t, small), spec.Options{K: 3})
	assert.ErrorContains(t, err, "draft vocabulary size 10 differs")
	dec, err := spec.New(local(t, tgt), newDrafter(t, small), spec.Options{K: 3, PaddedVocab: true})
	require.NoError(t, err)
	prompt := []int32{1, 2}
	want := reference.Greedy(tgt, prompt, 60, sampler.Params{})
	res, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, MaxTokens: 60}, nil))
	require.NoError(t, err)
	assert.Equal(t, want, res.Tokens, "the target's ids 10 and 11 stop the drafter, not the request")
	_, err = spec.New(local(t, small), newDrafter(t, tgt), spec.Options{K: 3, PaddedVocab: true})
	assert.Error(t, err, "a larger draft vocabulary is never allowed")
}
