package batch

import (
	"context"
	"errors"
	"time"

	"github.com/specula/specula/model"
)

// Options tune a batched model.
type Options struct {
	// Wait is how long a pass waits for the other open sequences to join it (0:
	// DefaultWait), and never more than half the last pass: a sequence busier than
	// that between its forwards joins the next pass. Negative turns batching off.
	Wait time.Duration
}

// Model is a model whose sequences' concurrent forwards share passes. It implements
// [model.Model]; its sequences implement [model.Sequence], [model.PrefixSequence]
// and [model.ForkSequence] (whose Fork fails when the inner model's do not fork).
type Model struct {
	inner model.Model
	b     *batcher
}

// New returns m with its sequences' forwards batched.
func New(m model.Model, opts Options) *Model {
	return &Model{inner: m, b: newBatcher(m, opts.Wait)}
}

// Inner returns the batched model.
func (m *Model) Inner() model.Model { return m.inner }

// Info implements [model.Model].
func (m *Model) Info() model.Info { return m.inner.Info() }

// NewSequence implements [model.Model].
func (m *Model) NewSequence(ctx context.Context) (model.Sequence, error) {
	s, err := m.inner.NewSequence(ctx)
	if err != nil {
		return nil, err
	}
	m.b.opened()
	return &sequence{m: m, inner: s, job: newJob()}, nil
}

// Forward implements [model.Model]: a caller that batches itself forwards its items
// in one pass of the inner model, outside the shared passes.
func (m *Model) Forward(ctx context.Context, work []model.Work) error {
	inner := make([]model.Work, len(work))
	for i, w := range work {
		s, ok := w.Seq.(*sequence)
		if !ok || s.m != m {
			return errors.New("batch: a sequence of another model")
		}
		inner[i] = model.Work{Seq: s.inner, Batch: w.Batch, Logits: w.Logits}
	}
	return m.inner.Forward(ctx, inner)
}

// Stats counts a batched model's passes since it was made.
type Stats struct {
	// Passes counts the passes run, Forwards the sequences' forwards they carried
	// (Forwards/Passes is the mean batch) and Tokens the tokens in them (Tokens/Passes
	// is the mean tokens per pass: drafts and prefill chunks included).
	Passes, Forwards, Tokens int64
}

// Stats reports the passes run so far and what they carried.
func (m *Model) Stats() Stats {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	return m.b.stats
}

// Load reports what the recent passes carried and what a pass costs by its tokens.
func (m *Model) Load() Load {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	return m.b.curve.load()
}

// Streaming reports whether an open sequence other than seq (one of m's, or nil) is
// streaming — its last forward asked for logits, where a prefill's forwards ask for
// none — and passes are shared. A prefill that joins the passes of streaming
// sequences delays their next tokens by the work it adds, so it should add little at
// a time; one beside other prefills delays no stream and does best in large passes.
func (m *Model) Streaming(seq model.Sequence) bool {
	self := 0
	if s, ok := seq.(*sequence); ok && s.m == m && s.streaming && !s.closed {
		self = 1
	}
	return m.b.wait >= 0 && m.b.streamCount() > self
}

// Prefilling marks seq, one of m's sequences, as prefilling (on) or not: while it is,
// its forwards count as a prefill's even when they ask for logits — a scored prefill
// (target.ScoreSession) asks for every token's — so that they neither make other
// prefills slice themselves (Streaming) nor teach the cost of a step (Load). A
// sequence of another model is left alone.
func (m *Model) Prefilling(seq model.Sequence, on bool) {
	if s, ok := seq.(*sequence); ok && s.m == m {
		s.prefilling = on
	}
}

// sequence is a batched model's sequence: its forwards join the shared passes.
type sequence struct {
	m          *Model
	inner      model.Sequence
	job        *job
	closed     bool
	streaming  bool // its last forward asked for logits (see Model.Streaming)
	prefilling bool // marked by Model.Prefilling: its forwards are a prefill's
}

func (s *sequence) Len() int { return s.inner.Len() }

func (s *sequence) Forward(ctx context.Context, b model.Batch, logits []float32) error {
	if s.closed {
		return s.inner.Forward(ctx, b, logits) // the inner sequence's error
	}
	if streaming := len(b.Outputs) > 0 && !s.prefilling; streaming != s.streaming {
		s.streaming = streaming
		s.m.b.stream(streaming)
	}
	s.job.work, s.job.prefill = model.Work{Seq: s.inner, Batch: b, Logits: logits}, !s.streaming
	err := s.m.b.forward(ctx, s.job)
	s.job.work = model.Work{}
	return err
}

func (s *sequence) Truncate(n int) error { return s.inner.Truncate(n) }

func (s *sequence) Retain(from int, keep []int32) error { return s.inner.Retain(from, keep) }

func (s *sequence) Close() error {
	if !s.closed {
		s.closed = true
		if s.streaming {
			s.m.b.stream(false)
		}
		s.m.b.closed()
	}
	return s.inner.Close()
}

// Reuse implements [model.PrefixSequence] when the inner sequence does.
func (s *sequence) Reuse(tokens []int32) int {
	if p, ok := s.inner.(model.PrefixSequence); ok {
		return p.Reuse(tokens)
	}
	return 0
}

// Publish implements [model.PrefixSequence] when the inner sequence does.
func (s *sequence) Publish() {
	if p, ok := s.inner.(model.PrefixSequence); ok {
		p.Publish()
	}
}

// Fork implements [model.ForkSequence] when the inner sequence does; the fork shares
// the passes too.
func (s *sequence) Fork() (model.Sequence, error) {
	f, ok := s.inner.(model.ForkSequence)
	if !ok {
		return nil, errors.New("batch: the sequence does not fork")
	}
	inner, err := f.Fork()
	if err != nil {
		return nil, err
	}
	s.m.b.opened()
	return &sequence{m: s.m, inner: inner, job: newJob()}, nil
}
