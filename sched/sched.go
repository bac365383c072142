// Package sched schedules the forwards of a model's sequences, everything that decides
// when and with what a pass of the model runs:
//
//   - shared passes: the forwards that the sequences make concurrently — the
//     verifications of many requests, their prefill chunks — are gathered into one call
//     of the model's multi-sequence forward, every weight read once for all of them.
//     Each sequence still behaves as on its own (a model's logits do not depend on the
//     batch around them), and a lone sequence never waits;
//   - chunked prefill: how many prompt tokens a prefill puts in its next pass — many
//     alone or beside other prefills, a few beside sequences that stream tokens, so
//     that a long prompt does not stall their streams ([Scheduler.Chunk]);
//   - the cost line: what the recent passes carried and what a pass costs by its
//     tokens, learned from their timings ([Scheduler.Load]), by which an adaptive decoder
//     prices its drafts under load.
package sched

import (
	"context"
	"errors"
	"time"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/model"
)

// Options tune a Scheduler.
type Options struct {
	// Wait is how long a pass waits for the other open sequences to join it (0:
	// DefaultWait), and never more than half the last pass: a sequence busier than
	// that between its forwards joins the next pass. Negative turns batching off.
	Wait time.Duration
	// PrefillChunk is how many prompt tokens a prefill puts in a pass alone or beside
	// other prefills only (0: DefaultPrefillChunk); the context is checked between
	// passes.
	PrefillChunk int
	// SharedChunk is how many prompt tokens a prefill puts in a pass while other
	// sequences stream tokens (0: DefaultSharedChunk; never more than PrefillChunk).
	SharedChunk int
}

// Scheduler schedules the forwards of a model's sequences: concurrent forwards share
// passes, a prefill asks [Scheduler.Chunk] how many tokens to put in each, and the
// passes teach the cost line ([Scheduler.Load]). It is itself a model — it implements
// [model.Model], wrapping the one it schedules —; its sequences implement [model.Sequence], [model.PrefixSequence]
// and [model.ForkSequence] (whose Fork fails when the inner model's do not fork).
type Scheduler struct {
	inner  model.Model
	b      *batcher
	chunks chunks
}

// New returns m with its sequences' forwards scheduled as opts say.
func New(m model.Model, opts Options) *Scheduler {
	return &Scheduler{inner: m, b: newBatcher(m, opts.Wait), chunks: newChunks(opts)}
}

// Inner returns the scheduled model.
func (m *Scheduler) Inner() model.Model { return m.inner }

// Info implements [model.Model].
func (m *Scheduler) Info() model.Info { return m.inner.Info() }

// NewSequence implements [model.Model].
func (m *Scheduler) NewSequence(ctx context.Context) (model.Sequence, error) {
	s, err := m.inner.NewSequence(ctx)
	if err != nil {
		return nil, err
	}
	m.b.opened()
	return &sequence{m: m, inner: s, fwd: newQueued()}, nil
}

// Forward implements [model.Model]: a caller that batches itself forwards its items
// in one pass of the inner model, outside the shared passes.
func (m *Scheduler) Forward(ctx context.Context, work []model.Work) error {
	inner := make([]model.Work, len(work))
	for i, w := range work {
		s, ok := w.Seq.(*sequence)
		if !ok || s.m != m {
			return errors.New("sched: a sequence of another model")
		}
		inner[i] = model.Work{Seq: s.inner, Batch: w.Batch, Logits: w.Logits}
	}
	return m.inner.Forward(ctx, inner)
}

// Stats counts a scheduled model's passes since it was made.
type Stats struct {
	// Passes counts the passes run, Forwards the sequences' forwards they carried
	// (Forwards/Passes is the mean batch) and Tokens the tokens in them (Tokens/Passes
	// is the mean tokens per pass: drafts and prefill chunks included).
	Passes, Forwards, Tokens int64
}

// Stats reports the passes run so far and what they carried.
func (m *Scheduler) Stats() Stats {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	return m.b.stats
}

// Load reports what the recent passes carried and what a pass costs by its tokens.
func (m *Scheduler) Load() Load {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	return m.b.load
}

// sequence is a scheduled model's sequence: its forwards join the shared passes.
type sequence struct {
	m          *Scheduler
	inner      model.Sequence
	fwd        *queued // its forward, when it waits for a pass
	closed     bool
	streaming  bool // its last forward asked for logits (see Scheduler.Streaming)
	prefilling bool // marked by Scheduler.Prefilling: its forwards are a prefill's
}

func (s *sequence) Len() int { return s.inner.Len() }

func (s *sequence) Forward(ctx context.Context, b batch.Batch, logits []float32) error {
	if s.closed {
		return s.inner.Forward(ctx, b, logits) // the inner sequence's error
	}
	if streaming := len(b.Outputs) > 0 && !s.prefilling; streaming != s.streaming {
		s.streaming = streaming
		s.m.b.stream(streaming)
	}
	s.fwd.work, s.fwd.prefill = model.Work{Seq: s.inner, Batch: b, Logits: logits}, !s.streaming
	err := s.m.b.forward(ctx, s.fwd)
	s.fwd.work = model.Work{}
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
		return nil, errors.New("sched: the sequence does not fork")
	}
	inner, err := f.Fork()
	if err != nil {
		return nil, err
	}
	s.m.b.opened()
	return &sequence{m: s.m, inner: inner, fwd: newQueued()}, nil
}
