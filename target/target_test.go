package target_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/model"
	"github.com/specula/specula/target"
)

// recording is a model that remembers the last sequence it made, so that a test can
// read what a session holds.
type recording struct {
	*markov.Chain
	seq model.Sequence
}

func (r *recording) NewSequence(ctx context.Context) (model.Sequence, error) {
	s, err := r.Chain.NewSequence(ctx)
	r.seq = s
	return s, err
}

func setup(t *testing.T, maxDraft, chunk int) (*markov.Chain, target.Session, func() []int32) {
	t.Helper()
	c, err := markov.New(markov.Config{Vocab: 9, Order: 2, Seed: 11})
	require.NoError(t, err)
	m := &recording{Chain: c}
	local, err := target.NewLocal(m)
	require.NoError(t, err)
	local.PrefillChunk = chunk
	s, err := local.Start(context.Background(), maxDraft)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return c, s, func() []int32 { return markov.Tokens(m.seq) }
}

func tree(t *testing.T, parents ...int32) batch.Tree {
	t.Helper()
	tr, err := batch.NewTree(parents)
	require.NoError(t, err)
	return tr
}

func TestVerifyChainAndAccept(t *testing.T) {
	ctx := context.Background()
	c, s, held := setup(t, 4, 2) // chunks of 2: exercise chunking
	prompt := []int32{1, 2, 3, 4, 5}
	require.NoError(t, s.Prefill(ctx, prompt[:4]))
	assert.Equal(t, 4, s.Len())

	draft := []int32{6, 7, 8}
	rows, err := s.Verify(ctx, prompt[4], draft, batch.Tree{})
	require.NoError(t, err)
	require.Len(t, rows, 4)
	hist := append([]int32(nil), prompt...)
	for i, row := range rows {
		assert.Equal(t, c.Logits(hist), row, "row %d", i)
		if i < len(draft) {
			hist = append(hist, draft[i])
		}
	}
	assert.ErrorContains(t, s.Accept([]int32{1}), "not a child of -1", "a chain's path is a prefix")
	_, err = s.Verify(ctx, 0, nil, batch.Tree{})
	assert.ErrorContains(t, err, "before the last verification was accepted")
	require.NoError(t, s.Accept([]int32{0}))
	assert.Equal(t, []int32{1, 2, 3, 4, 5, 6}, held())
	assert.ErrorContains(t, s.Accept(nil), "without a verification", "one Accept per verification")

	// A step without a draft is plain decoding.
	rows, err = s.Verify(ctx, 0, nil, batch.Tree{})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, c.Logits([]int32{1, 2, 3, 4, 5, 6, 0}), rows[0])
	require.NoError(t, s.Accept(nil))
	assert.Equal(t, 7, s.Len())

	// Every path of the draft keeps just that prefix.
	for a := range 4 {
		base := s.Len()
		_, err = s.Verify(ctx, 1, []int32{2, 3, 4}, batch.Tree{})
		require.NoError(t, err)
		path := []int32{0, 1, 2}[:a]
		require.NoError(t, s.Accept(path))
		assert.Equal(t, append([]int32{1}, []int32{2, 3, 4}[:a]...), held()[base:], "path %v", path)
	}
}

func TestVerifyTreeAndAccept(t *testing.T) {
	ctx := context.Background()
	c, s, held := setup(t, 6, 0)
	require.NoError(t, s.Prefill(ctx, []int32{1, 2}))
	// Tree below pending token 3: 4 → {5, 6}, 7 → {8}.
	nodes := []int32{4, 7, 5, 6, 8}
	shape := tree(t, -1, -1, 0, 0, 1)
	rows, err := s.Verify(ctx, 3, nodes, shape)
	require.NoError(t, err)
	require.Len(t, rows, 6)
	want := [][]int32{{1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 7}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 6}, {1, 2, 3, 7, 8}}
	for i, h := range want {
		assert.Equal(t, c.Logits(h), rows[i], "row %d", i)
	}
	for _, bad := range []struct {
		path []int32
		want string
	}{
		{[]int32{0, 4}, "node 4 at position 1 is not a child of 0"},
		{[]int32{2}, "node 2 at position 0 is not a child of -1"},
		{[]int32{math.MaxInt32}, "outside the draft of 5 tokens"},
		{[]int32{-1}, "outside the draft"},
	} {
		assert.ErrorContains(t, s.Accept(bad.path), bad.want, "path %v", bad.path)
	}
	require.NoError(t, s.Accept([]int32{1, 4}))
	assert.Equal(t, []int32{1, 2, 3, 7, 8}, held())

	// The sequence continues as if the path had been a chain.
	rows, err = s.Verify(ctx, 0, nil, batch.Tree{})
	require.NoError(t, err)
	assert.Equal(t, c.Logits([]int32{7, 8, 0}), rows[0])
	require.NoError(t, s.Accept(nil))
}

func TestVerifyRejects(t *testing.T) {
	ctx := context.Background()
	_, s, _ := setup(t, 4, 0)
	require.NoError(t, s.Prefill(ctx, []int32{1, 2}))
	for _, tt := range []struct {
		name  string
		draft []int32
		shape batch.Tree
		want  string
	}{
		{"too long", []int32{1, 2, 3, 4, 5}, batch.Tree{}, "exceeds the maximum of 4"},
		{"token outside the vocabulary", []int32{1, 99}, batch.Tree{}, "token 99"},
		{"tree of another size", []int32{1, 2}, tree(t, -1), "a tree of 1 nodes for a draft of 2 tokens"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Verify(ctx, 0, tt.draft, tt.shape)
			assert.ErrorContains(t, err, tt.want)
			assert.Equal(t, 2, s.Len(), "a failed verification changes nothing")
			assert.Error(t, s.Accept(nil), "nothing to accept")
		})
	}
}

func TestNewRejects(t *testing.T) {
	_, err := target.NewLocal(nil)
	assert.ErrorContains(t, err, "nil model")
	c, err := markov.New(markov.Config{Vocab: 4, Order: 1})
	require.NoError(t, err)
	local, err := target.NewLocal(c)
	require.NoError(t, err)
	assert.Equal(t, 4, local.Info().VocabSize)
	_, err = local.Start(context.Background(), -1)
	assert.ErrorContains(t, err, "maximum draft size")
}

// prefills is a model that records how many tokens each prefill's forward carried
// (one without outputs, or a scored one: an output for each of more than two
// tokens).
type prefills struct {
	*markov.Chain
	mu    sync.Mutex
	sizes []int
}

type prefillSeq struct {
	model.Sequence
	p *prefills
}

func (p *prefills) note(b batch.Batch) {
	if len(b.Outputs) == 0 || len(b.Outputs) == len(b.Tokens) && len(b.Tokens) > 2 { // a prefill, or a scored one
		p.mu.Lock()
		p.sizes = append(p.sizes, len(b.Tokens))
		p.mu.Unlock()
	}
}

// take returns the sizes recorded since the last call.
func (p *prefills) take() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sizes
	p.sizes = nil
	return s
}

func (p *prefills) NewSequence(ctx context.Context) (model.Sequence, error) {
	s, err := p.Chain.NewSequence(ctx)
	return &prefillSeq{s, p}, err
}

func (s *prefillSeq) Forward(ctx context.Context, b batch.Batch, logits []float32) error {
	s.p.note(b)
	return s.Sequence.Forward(ctx, b, logits)
}

func (p *prefills) Forward(ctx context.Context, work []model.Work) error {
	inner := make([]model.Work, len(work))
	for i, w := range work {
		p.note(w.Batch)
		inner[i] = model.Work{Seq: w.Seq.(*prefillSeq).Sequence, Batch: w.Batch, Logits: w.Logits}
	}
	return p.Chain.Forward(ctx, inner)
}

// TestPrefillChunks: a prompt goes in PrefillChunk slices alone and beside sessions
// that are only open or prefilling, and in SharedChunk slices once another session
// streams tokens (chunked prefill), and in large slices again when that one closes —
// a scored prefill too, whose own forwards ask for logits.
func TestPrefillChunks(t *testing.T) {
	ctx := context.Background()
	c, err := markov.New(markov.Config{Vocab: 9, Order: 2, Seed: 11})
	require.NoError(t, err)
	m := &prefills{Chain: c}
	local, err := target.NewLocal(m)
	require.NoError(t, err)
	local.PrefillChunk, local.SharedChunk, local.BatchWait = 32, 8, time.Microsecond
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i % 9)
	}
	prefill := func() []int {
		s, err := local.Start(ctx, 2)
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, s.Prefill(ctx, prompt))
		return m.take()
	}
	assert.Equal(t, []int{32, 8}, prefill(), "alone")
	other, err := local.Start(ctx, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{32, 8}, prefill(), "beside an open session that streams nothing")
	require.NoError(t, other.Prefill(ctx, prompt[:5]))
	m.take()
	_, err = other.Verify(ctx, 3, []int32{4}, batch.Tree{})
	require.NoError(t, err)
	require.NoError(t, other.Accept([]int32{0}))
	assert.Equal(t, []int{8, 8, 8, 8, 8}, prefill(), "beside a streaming session")
	require.NoError(t, other.Close())
	assert.Equal(t, []int{32, 8}, prefill(), "alone again")
	s, err := local.Start(ctx, 2)
	require.NoError(t, err)
	defer s.Close()
	long := append(append([]int32(nil), prompt...), prompt...)
	require.NoError(t, s.(target.ScoreSession).PrefillScored(ctx, long, func(int, [][]float32) error { return nil }))
	assert.Equal(t, []int{32, 32, 16}, m.take(), "a scored prefill alone: its own rows do not make it slice")
	assert.Equal(t, []int{32, 8}, prefill(), "beside a session that scored its prompt: nobody streams")
}

// TestPrefillScored: a scored prefill hands out, in order and in slices of the chunk
// size, the logits after every token — the model's own — and leaves the session
// holding the tokens, as Prefill does; an error from the score function ends it.
// (That it forwards a prefix the cache holds is tested in spec, on a Llama model.)
func TestPrefillScored(t *testing.T) {
	ctx := context.Background()
	c, s, held := setup(t, 2, 3) // chunks of 3
	ss, ok := s.(target.ScoreSession)
	require.True(t, ok, "Local's sessions score")
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	var froms []int
	var got [][]float32
	require.NoError(t, ss.PrefillScored(ctx, prompt, func(from int, rows [][]float32) error {
		froms = append(froms, from)
		for _, r := range rows {
			got = append(got, slices.Clone(r))
		}
		return nil
	}))
	assert.Equal(t, []int{0, 3, 6}, froms)
	require.Len(t, got, len(prompt))
	for i, row := range got {
		assert.Equal(t, c.Logits(prompt[:i+1]), row, "row after token %d", i)
	}
	assert.Equal(t, prompt, held())

	stop := errors.New("enough")
	_, s2, _ := setup(t, 2, 3)
	err := s2.(target.ScoreSession).PrefillScored(ctx, prompt, func(int, [][]float32) error { return stop })
	assert.ErrorIs(t, err, stop)
	assert.Error(t, s2.(target.ScoreSession).PrefillScored(ctx, prompt, nil))
}

// TestKeepStatesFrom: after KeepStatesFrom(from) a chunked prefill keeps the states of
// its tokens from position from on — those a full KeepStates prefill keeps there —
// and the next prefill keeps every state again. (That it takes a cached prefix in
// front of them is tested in spec, on a Llama model: TestHeadsPrefixCache.)
func TestKeepStatesFrom(t *testing.T) {
	ctx := context.Background()
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	_, full, _ := setup(t, 2, 3)
	require.NoError(t, full.(target.StateSession).KeepStates())
	require.NoError(t, full.Prefill(ctx, prompt))
	var want [][]float32
	for _, st := range full.(target.StateSession).States() {
		want = append(want, slices.Clone(st))
	}
	require.Len(t, want, len(prompt))
	for _, tt := range []struct {
		from, kept int
	}{{0, 8}, {1, 7}, {3, 5}, {4, 4}, {7, 1}, {8, 0}, {20, 0}} {
		_, s, _ := setup(t, 2, 3) // chunks of 3
		ps, ok := s.(target.PrefixStateSession)
		require.True(t, ok, "Local's sessions keep states from a position")
		require.NoError(t, ps.KeepStatesFrom(tt.from))
		require.NoError(t, s.Prefill(ctx, prompt))
		got := ps.States()
		require.Len(t, got, tt.kept, "from %d", tt.from)
		for i, st := range got {
			assert.Equal(t, want[len(prompt)-tt.kept+i], st, "from %d: state %d", tt.from, i)
		}
		require.NoError(t, s.Prefill(ctx, prompt[:2]))
		assert.Len(t, ps.States(), 2, "the next prefill keeps every state")
	}
	_, s, _ := setup(t, 2, 3)
	assert.Error(t, s.(target.PrefixStateSession).KeepStatesFrom(-1))
}
