package sched_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sched"
)

// countingModel counts the passes of the model it wraps and makes each take a
// millisecond, as a real model's would take some time.
type countingModel struct {
	model.Model
	mu     sync.Mutex
	passes int
}

func (c *countingModel) pass() {
	c.mu.Lock()
	c.passes++
	c.mu.Unlock()
	time.Sleep(time.Millisecond)
}

func (c *countingModel) Forward(ctx context.Context, work []model.Work) error {
	c.pass()
	inner := make([]model.Work, len(work))
	for i, w := range work {
		inner[i] = model.Work{Seq: w.Seq.(*slowSeq).Sequence, Batch: w.Batch, Logits: w.Logits}
	}
	return c.Model.Forward(ctx, inner)
}

func (c *countingModel) NewSequence(ctx context.Context) (model.Sequence, error) {
	s, err := c.Model.NewSequence(ctx)
	return &slowSeq{s, c}, err
}

// slowSeq is a countingModel's sequence.
type slowSeq struct {
	model.Sequence
	c *countingModel
}

func (s *slowSeq) Forward(ctx context.Context, b batch.Batch, logits []float32) error {
	s.c.pass()
	return s.Sequence.Forward(ctx, b, logits)
}

// TestConcurrentForwardsShare runs sequences of a batched model from many goroutines
// at once and checks that each gets the logits it gets alone, that passes carried
// several of them, and that a lone sequence forwards on its own.
func TestConcurrentForwardsShare(t *testing.T) {
	ctx := context.Background()
	c, err := markov.New(markov.Config{Vocab: 7, Order: 2, Seed: 3})
	require.NoError(t, err)
	inner := &countingModel{Model: c}
	m := sched.New(inner, sched.Options{Wait: 50e6}) // a long wait: the test's goroutines join
	v := c.Info().VocabSize
	const n, steps = 8, 20
	want := make([][][]float32, n)
	for i := range n {
		s, err := c.NewSequence(ctx)
		require.NoError(t, err)
		for j := range steps {
			out := make([]float32, v)
			require.NoError(t, s.Forward(ctx, batch.Batch{Tokens: []int32{int32((i + j) % v)}, Outputs: []int32{0}}, out))
			want[i] = append(want[i], out)
		}
	}
	seqs := make([]model.Sequence, n)
	for i := range seqs {
		seqs[i], err = m.NewSequence(ctx)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	got := make([][][]float32, n)
	for i := range n {
		wg.Go(func() {
			for j := range steps {
				out := make([]float32, v)
				if err := seqs[i].Forward(ctx, batch.Batch{Tokens: []int32{int32((i + j) % v)}, Outputs: []int32{0}}, out); err != nil {
					t.Error(err)
				}
				got[i] = append(got[i], out)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, want, got)
	st := m.Stats()
	assert.Equal(t, int64(n*steps), st.Forwards)
	assert.Less(t, st.Passes, st.Forwards/2, "passes carried several sequences")
	assert.Equal(t, st.Forwards, st.Tokens, "a token a forward")
	assert.True(t, m.Streaming(nil), "sequences that asked for logits stream")
	assert.True(t, m.Streaming(seqs[0]), "besides the one asking")
	for _, s := range seqs[1:] {
		require.NoError(t, s.Close())
	}
	assert.True(t, m.Streaming(nil), "one stream is open")
	assert.False(t, m.Streaming(seqs[0]), "none besides the one asking")
	before := inner.passes
	require.NoError(t, seqs[0].Forward(ctx, batch.Batch{Tokens: []int32{1}}, nil))
	assert.Equal(t, before+1, inner.passes, "alone, a sequence forwards on its own, at once")
	assert.False(t, m.Streaming(nil), "a forward without logits is a prefill")
	require.NoError(t, seqs[0].Close())
	assert.Error(t, seqs[0].Forward(ctx, batch.Batch{Tokens: []int32{1}}, nil), "closed")
}

// TestCancelledWhileWaiting checks that a forward whose context ends while it waits for
// a pass leaves the queue with the context's error, and the others go on.
func TestCancelledWhileWaiting(t *testing.T) {
	c, err := markov.New(markov.Config{Vocab: 5, Order: 1, Seed: 4})
	require.NoError(t, err)
	m := sched.New(c, sched.Options{Wait: 20e6})
	a, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	b, err := m.NewSequence(context.Background()) // open, never forwards: a waits for it
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = a.Forward(ctx, batch.Batch{Tokens: []int32{1}}, nil)
	if err != nil {
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 0, a.Len())
	} else {
		assert.Equal(t, 1, a.Len(), "taken into a pass before the cancellation was seen")
	}
	require.NoError(t, a.Forward(context.Background(), batch.Batch{Tokens: []int32{2}}, nil), "the lead was handed on")
	require.NoError(t, b.Close())
	require.NoError(t, a.Close())
}

// TestLoadOfSharedPasses: while several sequences forward at once their passes carry
// several forwards each, and the load says so, with a cost per pass learned from
// them (the prefills before taught nothing).
func TestLoadOfSharedPasses(t *testing.T) {
	c, err := markov.New(markov.Config{Vocab: 5, Order: 1, Seed: 4})
	require.NoError(t, err)
	inner := &countingModel{Model: c}
	m := sched.New(inner, sched.Options{})
	ctx := context.Background()
	const n = 4
	seqs := make([]model.Sequence, n)
	for i := range seqs {
		s, err := m.NewSequence(ctx)
		require.NoError(t, err)
		defer s.Close()
		seqs[i] = s
	}
	var wg sync.WaitGroup
	for _, s := range seqs {
		assert.NoError(t, s.Forward(ctx, batch.Batch{Tokens: []int32{1, 2, 3}}, nil)) // prefills
	}
	m.Prefilling(seqs[0], true) // a scored prefill: logits for every token
	assert.NoError(t, seqs[0].Forward(ctx, batch.Batch{Tokens: []int32{1, 2}, Outputs: []int32{0, 1}}, make([]float32, 10)))
	m.Prefilling(seqs[0], false)
	assert.Equal(t, sched.Load{}, m.Load(), "a prefill's passes teach nothing of what a step costs")
	assert.False(t, m.Streaming(nil), "nor make a stream")
	for _, s := range seqs {
		wg.Go(func() {
			logits := make([]float32, 5)
			for j := range 20 {
				assert.NoError(t, s.Forward(ctx, batch.Batch{Tokens: []int32{int32(j % 5), 1}, Outputs: []int32{1}}, logits))
			}
		})
	}
	wg.Wait()
	l := m.Load()
	t.Logf("%+v", l)
	assert.Greater(t, l.Forwards, 1.5, "passes were shared")
	assert.InDelta(t, 2*l.Forwards, l.Tokens, 1e-9, "two tokens a forward")
	assert.Positive(t, l.Cost(l.Tokens))
}
