package draft_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/internal/reference"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
)

func chain(t *testing.T, cfg markov.Config) *markov.Chain {
	t.Helper()
	c, err := markov.New(cfg)
	require.NoError(t, err)
	return c
}

func newModel(t *testing.T, m model.Model) *draft.SmallModel {
	t.Helper()
	d, err := draft.NewSmallModel(m)
	require.NoError(t, err)
	return d
}

func TestModelDrafterGreedyFollowsHistory(t *testing.T) {
	ctx := context.Background()
	c := chain(t, markov.Config{Vocab: 12, Order: 2, Seed: 4})
	d := newModel(t, c)
	assert.Equal(t, 12, d.VocabSize())
	sess, err := d.Start(ctx, draft.Request{VocabSize: 12, MaxK: 5, MaxLen: 64})
	require.NoError(t, err)
	defer sess.Close()

	var p draft.Proposal
	hist := []int32{1, 2, 3}
	// Histories that grow as the decoder grows them: accepted prefix + one token.
	steps := []struct {
		accept int
		next   int32
	}{{2, 7}, {5, 0}, {0, 11}, {1, 1}, {4, 5}, {3, 2}}
	for i, st := range steps {
		require.NoError(t, sess.Propose(ctx, hist, 5, &p))
		assert.Nil(t, p.Dists, "greedy drafts are deterministic")
		assert.Equal(t, reference.Greedy(c, hist, 5, sampler.Params{}), p.Tokens, "step %d", i)
		// Asking again on the same history (a prefix of what the session holds)
		// gives the same draft.
		again := append([]int32(nil), p.Tokens...)
		require.NoError(t, sess.Propose(ctx, hist, 5, &p))
		assert.Equal(t, again, p.Tokens, "step %d again", i)
		hist = append(append(hist, p.Tokens[:st.accept]...), st.next)
	}
}

func TestModelDrafterSamplesFromProcessedQ(t *testing.T) {
	ctx := context.Background()
	c := chain(t, markov.Config{Vocab: 10, Order: 1, Seed: 8, Scale: 0.5})
	params := sampler.Params{Temperature: 0.8, TopP: 0.9, RepetitionPenalty: 1.2, Seed: 3}
	sess, err := newModel(t, c).Start(ctx, draft.Request{Sampling: params, VocabSize: 10, MaxK: 3})
	require.NoError(t, err)
	var p draft.Proposal
	hist := []int32{4}
	for range 20 {
		require.NoError(t, sess.Propose(ctx, hist, 3, &p))
		require.Len(t, p.Tokens, 3)
		require.Len(t, p.Dists, 3)
		h := append([]int32(nil), hist...)
		for i, tok := range p.Tokens {
			want := reference.Process(c.Logits(h), h, params)
			for j, q := range p.Dists[i] {
				assert.InDelta(t, want[j], q, 1e-5)
			}
			assert.Positive(t, p.Dists[i][tok], "token drawn from q")
			h = append(h, tok)
		}
		hist = append(append(hist, p.Tokens[:1]...), p.Tokens[2])
	}
}

func TestModelDrafterContextLimit(t *testing.T) {
	ctx := context.Background()
	c := chain(t, markov.Config{Vocab: 5, Order: 1, ContextLength: 6})
	sess, err := newModel(t, c).Start(ctx, draft.Request{VocabSize: 5, MaxK: 4})
	require.NoError(t, err)
	var p draft.Proposal
	require.NoError(t, sess.Propose(ctx, []int32{1, 2, 3, 4}, 4, &p))
	assert.Len(t, p.Tokens, 3, "history 4 + 2 forwarded drafts fill a context of 6")
	require.NoError(t, sess.Propose(ctx, []int32{1, 2, 3, 4, 0, 1, 2}, 4, &p))
	assert.Empty(t, p.Tokens, "nothing to draft once the history fills the context")
	assert.ErrorContains(t, sess.Propose(ctx, []int32{1}, 5, &p), "k = 5")
	assert.ErrorContains(t, sess.Propose(ctx, nil, 1, &p), "empty history")
	assert.ErrorContains(t, sess.Propose(ctx, []int32{1, 7}, 1, &p), "token 7")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, sess.Propose(cancelled, []int32{1, 2}, 2, &p), context.Canceled)
	require.NoError(t, sess.Close())
}

func TestModelDrafterRejectsBadRequests(t *testing.T) {
	ctx := context.Background()
	d := newModel(t, chain(t, markov.Config{Vocab: 8, Order: 1}))
	_, err := d.Start(ctx, draft.Request{VocabSize: 6, MaxK: 2})
	assert.ErrorContains(t, err, "more than the target's 6")
	_, err = d.Start(ctx, draft.Request{VocabSize: 8, MaxK: -1})
	assert.ErrorContains(t, err, "MaxK")
	_, err = d.Start(ctx, draft.Request{VocabSize: 8, Sampling: sampler.Params{Temperature: math.NaN()}})
	assert.ErrorContains(t, err, "Temperature")
	_, err = draft.NewSmallModel(nil)
	assert.ErrorContains(t, err, "nil draft model")
	var none *draft.SmallModel
	assert.Zero(t, none.VocabSize())
	_, err = none.Start(ctx, draft.Request{})
	assert.Error(t, err)
}

func TestFunc(t *testing.T) {
	ctx := context.Background()
	repeatLast := draft.Func(func(h, dst []int32) int {
		for i := range dst {
			dst[i] = h[len(h)-1]
		}
		return len(dst)
	})
	sess, err := repeatLast.Start(ctx, draft.Request{MaxK: 3})
	require.NoError(t, err)
	var p draft.Proposal
	require.NoError(t, sess.Propose(ctx, []int32{4, 2}, 3, &p))
	assert.Equal(t, []int32{2, 2, 2}, p.Tokens)
	assert.Nil(t, p.Dists)
	assert.ErrorContains(t, sess.Propose(ctx, []int32{1}, 4, &p), "k = 4")

	liar := draft.Func(func(h, dst []int32) int { return len(dst) + 1 })
	sess, err = liar.Start(ctx, draft.Request{MaxK: 2})
	require.NoError(t, err)
	assert.ErrorContains(t, sess.Propose(ctx, []int32{1}, 2, &p), "returned 3 tokens")

	var nilFunc draft.Func
	_, err = nilFunc.Start(ctx, draft.Request{})
	assert.Error(t, err)
}

// counting wraps a model to count the tokens its sequences forward.
type counting struct {
	*markov.Chain
	forwarded int
}

func (c *counting) NewSequence(ctx context.Context) (model.Sequence, error) {
	s, err := c.Chain.NewSequence(ctx)
	return &countingSeq{Sequence: s, n: &c.forwarded}, err
}

type countingSeq struct {
	model.Sequence
	n *int
}

func (s *countingSeq) Forward(ctx context.Context, b batch.Batch, logits []float32) error {
	*s.n += len(b.Tokens)
	return s.Sequence.Forward(ctx, b, logits)
}

// TestModelDrafterForwardsOnlyWhatIsNew checks that the session keeps its draft model in
// step instead of re-reading the history: after the first proposal, each proposal
// forwards only the tokens the session has not seen plus its own drafts.
func TestModelDrafterForwardsOnlyWhatIsNew(t *testing.T) {
	ctx := context.Background()
	m := &counting{Chain: chain(t, markov.Config{Vocab: 6, Order: 1, Seed: 2})}
	sess, err := newModel(t, m).Start(ctx, draft.Request{VocabSize: 6, MaxK: 4})
	require.NoError(t, err)
	var p draft.Proposal
	hist := []int32{1, 2, 3, 4, 5, 0, 1, 2}
	require.NoError(t, sess.Propose(ctx, hist, 4, &p))
	assert.Equal(t, 8+3, m.forwarded)
	tests := []struct {
		accepted, forwarded int // forwarded: unseen history tokens + 3 drafts
	}{{0, 1 + 3}, {2, 1 + 3}, {3, 1 + 3}, {4, 2 + 3}}
	for _, tt := range tests {
		m.forwarded = 0
		hist = append(append(hist, p.Tokens[:tt.accepted]...), 5)
		if tt.accepted < 4 && p.Tokens[tt.accepted] == 5 {
			hist[len(hist)-1] = 4 // the target's token differs from the draft's
		}
		require.NoError(t, sess.Propose(ctx, hist, 4, &p))
		assert.Equal(t, tt.forwarded, m.forwarded, "accepted %d", tt.accepted)
	}
}
