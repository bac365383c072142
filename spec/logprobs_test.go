package spec_test

import (
	"context"
	"errors"
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// referenceLogprobs scores every output token by one forward of prompt and output on
// a fresh sequence of m: the log-softmax of the logits before each output token.
func referenceLogprobs(t *testing.T, m model.Model, prompt, out []int32) [][]float64 {
	t.Helper()
	seq, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	defer seq.Close()
	all := append(append([]int32(nil), prompt...), out...)
	outputs := make([]int32, len(out))
	for i := range outputs {
		outputs[i] = int32(len(prompt) - 1 + i)
	}
	v := m.Info().VocabSize
	logits := make([]float32, len(out)*v)
	require.NoError(t, seq.Forward(context.Background(), batch.Batch{Tokens: all[:len(all)-1], Outputs: outputs}, logits))
	rows := make([][]float64, len(out))
	for i := range rows {
		row := logits[i*v : (i+1)*v]
		mx := math.Inf(-1)
		for _, x := range row {
			mx = max(mx, float64(x))
		}
		var s float64
		for _, x := range row {
			s += math.Exp(float64(x) - mx)
		}
		rows[i] = make([]float64, v)
		for j, x := range row {
			rows[i][j] = float64(x) - mx - math.Log(s)
		}
	}
	return rows
}

// checkLogprobs compares a result's logprobs with the reference: the token's value,
// and the top list (the most likely tokens, in order, with their values).
func checkLogprobs(t *testing.T, res spec.Result, ref [][]float64, top int, tol float64) {
	t.Helper()
	require.Len(t, res.Logprobs, len(res.Tokens))
	for i, lp := range res.Logprobs {
		require.Equal(t, res.Tokens[i], lp.Token, "token %d", i)
		assert.InDelta(t, ref[i][lp.Token], float64(lp.Logprob), tol, "token %d", i)
		require.Len(t, lp.Top, top, "token %d", i)
		order := make([]int, len(ref[i]))
		for j := range order {
			order[j] = j
		}
		sort.SliceStable(order, func(a, b int) bool { return ref[i][order[a]] > ref[i][order[b]] })
		for j, tl := range lp.Top {
			assert.InDelta(t, ref[i][order[j]], float64(tl.Logprob), tol, "token %d, top %d", i, j)
			assert.InDelta(t, ref[i][tl.Token], float64(tl.Logprob), tol, "token %d, top %d is its token's", i, j)
		}
	}
}

// TestLogprobsExact: under speculation — chains with the demo drafter behind lookup,
// greedy and sampled with a seed — every output token's log-probability and its top
// alternatives are the target's own, as one plain forward of the whole text gives
// them, and greedy ones equal plain decoding's.
func TestLogprobsExact(t *testing.T) {
	tm, dm := demoPair(t)
	tgt := local(t, tm)
	dec, err := spec.New(tgt, lookup.InFront(newDrafter(t, dm)), spec.Options{K: 4})
	require.NoError(t, err)
	plain, err := spec.New(tgt, nil, spec.Options{})
	require.NoError(t, err)
	prompt := []int32{1, 2960, 1759, 46, 10, 10, 300, 484, 1032}
	for _, p := range []sampler.Params{{}, {Temperature: 0.9, Seed: 3}} {
		req := spec.Request{Prompt: prompt, MaxTokens: 40, Sampling: p, Logprobs: true, TopLogprobs: 3}
		got, err := single(dec.GenerateFunc(context.Background(), req, nil))
		require.NoError(t, err)
		require.Positive(t, got.Stats.Accepted, "drafts were accepted")
		checkLogprobs(t, got, referenceLogprobs(t, tm, prompt, got.Tokens), 3, 2e-3)
		if p.Temperature == 0 {
			want, err := single(plain.GenerateFunc(context.Background(), req, nil))
			require.NoError(t, err)
			assert.Equal(t, want.Tokens, got.Tokens)
			assert.Equal(t, want.Logprobs, got.Logprobs, "greedy: plain decoding's values")
		}
	}
}

// TestLogprobsTreesAndStops: tree drafts on a Markov target (whose distributions are
// known exactly), with a stop sequence that cuts the output back across a step:
// every kept token's log-probability is the chain's.
func TestLogprobsTreesAndStops(t *testing.T) {
	chain := newChain(t, markov.Config{Vocab: 8, Order: 2, Seed: 21, Scale: 1.5})
	dec := newDecoder(t, chain, newTreeDrafter(t, chain.Perturbed(0.8, 2), draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 8}), 8)
	prompt := []int32{1, 2}
	for seed := range uint64(20) {
		req := spec.Request{Prompt: prompt, MaxTokens: 30, Sampling: sampler.Params{Temperature: 1, Seed: seed},
			Logprobs: true, TopLogprobs: 2, StopSequences: [][]int32{{3, 4}}}
		got, err := single(dec.GenerateFunc(context.Background(), req, nil))
		require.NoError(t, err)
		checkLogprobs(t, got, referenceLogprobs(t, chain, prompt, got.Tokens), 2, 1e-5)
	}
	_, err := single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, TopLogprobs: 2}, nil))
	assert.Error(t, err, "TopLogprobs without Logprobs")
	_, err = single(dec.GenerateFunc(context.Background(), spec.Request{Prompt: prompt, Logprobs: true, TopLogprobs: 21}, nil))
	assert.Error(t, err)
}

// score scores text as lm-evaluation-harness asks: a request for the prompt's
// log-probabilities that generates nothing.
func score(ctx context.Context, dec *spec.Decoder, text []int32, top int) ([]spec.Logprob, error) {
	res, err := single(dec.GenerateFunc(ctx, spec.Request{Prompt: text, PromptOnly: true, PromptLogprobs: true, TopLogprobs: top}, nil))
	return res.PromptLogprobs, err
}

// TestScore: scoring a text gives, for every token but the first, the target's
// log-probability and top alternatives given the tokens before — one plain forward
// of the whole text's, and, for the tokens a generation produced, the generation's
// own logprobs; the prefix cache (which the first scoring fills) is not taken for a
// second, and bad input is refused.
func TestScore(t *testing.T) {
	ctx := context.Background()
	tm, dm := demoPair(t)
	dec, err := spec.New(local(t, tm), lookup.InFront(newDrafter(t, dm)), spec.Options{K: 4})
	require.NoError(t, err)
	prompt := []int32{1, 2960, 1759, 46, 10, 10, 300, 484, 1032}
	gen, err := single(dec.GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 30, Logprobs: true, TopLogprobs: 3}, nil))
	require.NoError(t, err)
	text := append(append([]int32(nil), prompt...), gen.Tokens...)
	for round := range 2 { // the second after the first published the text's blocks
		scored, err := score(ctx, dec, text, 3)
		require.NoError(t, err)
		require.Len(t, scored, len(text)-1, "round %d", round)
		checkLogprobs(t, spec.Result{Tokens: text[1:], Logprobs: scored}, referenceLogprobs(t, tm, text[:1], text[1:]), 3, 2e-3)
		tail := scored[len(prompt)-1:]
		for i, lp := range gen.Logprobs {
			assert.Equal(t, lp.Token, tail[i].Token)
			assert.InDelta(t, lp.Logprob, tail[i].Logprob, 2e-3, "generated token %d", i)
		}
	}
	again, err := single(dec.GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 30}, nil))
	require.NoError(t, err)
	assert.Equal(t, gen.Tokens, again.Tokens, "a generation after scoring")

	chain := newChain(t, markov.Config{Vocab: 6, Order: 2, Seed: 5, Scale: 1.5})
	cdec := newDecoder(t, chain, nil, 0)
	ctext := []int32{0, 3, 1, 4, 4, 2}
	scored, err := score(ctx, cdec, ctext, 0)
	require.NoError(t, err)
	checkLogprobs(t, spec.Result{Tokens: ctext[1:], Logprobs: scored}, referenceLogprobs(t, chain, ctext[:1], ctext[1:]), 0, 1e-5)
	one, err := score(ctx, cdec, ctext[:1], 0)
	require.NoError(t, err)
	assert.Empty(t, one, "one token: nothing to score")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for name, call := range map[string]func() error{
		"empty":     func() error { _, err := score(ctx, cdec, nil, 0); return err },
		"bad token": func() error { _, err := score(ctx, cdec, []int32{0, 9}, 0); return err },
		"top 21":    func() error { _, err := score(ctx, cdec, ctext, 21); return err },
		"cancelled": func() error { _, err := score(cancelled, cdec, ctext, 0); return err },
	} {
		assert.Error(t, call(), name)
	}
}

// TestPromptLogprobs: a request that asks for its prompt's log-probabilities and
// generates gets them from its own prefill — first, as choice 0's prompt chunks, the
// prompt's tokens from the second on with the chain's exact values, and in choice 0's
// result only — and generates exactly what it generates without them, every choice
// of it, with the same output log-probabilities.
func TestPromptLogprobs(t *testing.T) {
	ctx := context.Background()
	chain := newChain(t, markov.Config{Vocab: 8, Order: 2, Seed: 13, Scale: 1.5})
	dec := newDecoder(t, chain, newDrafter(t, chain.Perturbed(0.8, 3)), 3)
	prompt := []int32{1, 2, 5, 3, 3, 0, 7}
	for _, n := range []int{1, 3} {
		req := spec.Request{Prompt: prompt, N: n, MaxTokens: 12, Sampling: sampler.Params{Temperature: 1, Seed: 8}, Logprobs: true, TopLogprobs: 2}
		want, err := dec.GenerateFunc(ctx, req, nil)
		require.NoError(t, err)
		req.PromptLogprobs = true
		var promptToks []int32
		var promptLps []spec.Logprob
		outputSeen := false
		got, err := dec.GenerateFunc(ctx, req, func(c spec.Chunk) error {
			if !c.Prompt {
				outputSeen = true
				return nil
			}
			assert.False(t, outputSeen, "the prompt's scores come first")
			assert.Zero(t, c.Choice, "as choice 0")
			require.Len(t, c.Logprobs, len(c.Tokens))
			promptToks, promptLps = append(promptToks, c.Tokens...), append(promptLps, c.Logprobs...)
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, prompt[1:], promptToks, "n=%d", n)
		scored := spec.Result{Tokens: prompt[1:], Logprobs: got[0].PromptLogprobs}
		checkLogprobs(t, scored, referenceLogprobs(t, chain, prompt[:1], prompt[1:]), 2, 1e-5)
		assert.Equal(t, promptLps, got[0].PromptLogprobs, "streamed and kept alike")
		for i := range got {
			assert.Equal(t, want[i].Tokens, got[i].Tokens, "n=%d choice %d: the same output", n, i)
			assert.Equal(t, want[i].Logprobs, got[i].Logprobs, "n=%d choice %d", n, i)
			if i > 0 {
				assert.Nil(t, got[i].PromptLogprobs, "n=%d choice %d: the prompt's scores are choice 0's", n, i)
			}
		}
	}
	// An error from emit on the prompt's scores ends every choice.
	stop := errors.New("enough")
	res, err := dec.GenerateFunc(ctx, spec.Request{Prompt: prompt, N: 2, MaxTokens: 12, PromptLogprobs: true}, func(c spec.Chunk) error {
		if c.Prompt {
			return stop
		}
		return nil
	})
	assert.ErrorIs(t, err, stop)
	for i, r := range res {
		assert.Equal(t, spec.FinishError, r.Finish, "choice %d", i)
		assert.Empty(t, r.Tokens, "choice %d", i)
	}
}

// TestPromptOnly: a request that generates nothing prefills its prompt — which a
// generation that follows finds in the prefix cache, scored or not — hands out only
// its last chunk, ends with FinishLength and starts no drafter (one that cannot start
// does not fail it).
func TestPromptOnly(t *testing.T) {
	ctx := context.Background()
	tm, _ := demoPair(t)
	tgt, err := target.NewLocal(tm)
	require.NoError(t, err)
	dec, err := spec.New(tgt, failingDrafter{}, spec.Options{K: 4})
	require.NoError(t, err)
	plain, err := spec.New(tgt, nil, spec.Options{})
	require.NoError(t, err)
	for _, scored := range []bool{false, true} {
		prompt := make([]int32, 100)
		for i := range prompt {
			prompt[i] = int32(50 + (i*41+btoi(scored)*7)%800)
		}
		var chunks []spec.Chunk
		res, err := single(dec.GenerateFunc(ctx, spec.Request{Prompt: prompt, PromptOnly: true, PromptLogprobs: scored}, func(c spec.Chunk) error {
			if !c.Prompt {
				chunks = append(chunks, c)
			}
			return nil
		}))
		require.NoError(t, err, "scored %v: no drafter starts", scored)
		assert.Empty(t, res.Tokens)
		assert.Equal(t, spec.FinishLength, res.Finish)
		assert.Equal(t, len(prompt), res.Stats.PromptTokens)
		assert.Len(t, res.PromptLogprobs, btoi(scored)*(len(prompt)-1))
		require.Len(t, chunks, 1, "its last chunk only")
		assert.Equal(t, spec.FinishLength, chunks[0].Finish)
		before := tm.KVStats().PrefixHits
		_, err = single(plain.GenerateFunc(ctx, spec.Request{Prompt: prompt, MaxTokens: 4}, nil))
		require.NoError(t, err)
		assert.GreaterOrEqual(t, tm.KVStats().PrefixHits-before, int64(len(prompt)/16), "scored %v: the prompt's blocks were published", scored)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
