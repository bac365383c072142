package llama

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
)

// layerLoop is a Model as the backend runs it.
type layerLoop Model

// Layers is the architecture: one pass of a plan's rows through every layer, to the
// logits of its output rows.
func (ll *layerLoop) Layers(ctx context.Context, ps backend.Pass) error {
	m := (*Model)(ll)
	if m.e3 != nil {
		m.eagle3Layers(ps)
		return ctx.Err()
	}
	if m.fcEmbed == nil {
		ps.Embed(backend.X, m.embed)
	} else {
		// A draft layer's input: fc over the token's embedding and the hidden state
		// given beside it, fc·[e, h] = fc_e·e + fc_h·h.
		ps.Embed(backend.XN, m.embed)
		ps.Mul(backend.X, backend.XN, m.fcEmbed)
		ps.Load(backend.XN)
		ps.MulAdd(backend.X, backend.XN, m.fcHidden)
	}
	if m.cfg.EmbedScale != 0 {
		ps.Scale(backend.X, m.cfg.EmbedScale)
	}
	for l := range m.layers {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("llama: forward: %w", err)
		}
		ly := &m.layers[l]
		in := backend.X
		if ly.attnNorm != nil { // an EAGLE layer has none
			ps.Norm(backend.XN, backend.X, ly.attnNorm)
			in = backend.XN
		}
		ps.Mul(backend.QKV, in, ly.qkv)
		if ly.qNorm != nil {
			ps.HeadNorm(backend.QKV, 0, m.cfg.Heads, ly.qNorm)
			ps.HeadNorm(backend.QKV, m.cfg.Heads, m.cfg.KVHeads, ly.kNorm)
		}
		ps.Attention(l, m.cfg.attn(l, ly.bias))
		residual(ps, backend.Att, ly.o, ly.postAttnNorm)
		ps.Norm(backend.XN, backend.X, ly.ffnNorm)
		ps.Mul(backend.GateUp, backend.XN, ly.gateUp)
		ps.GLU(m.cfg.Activation)
		residual(ps, backend.Hidden, ly.down, ly.postFFNNorm)
		ps.Save(l)
	}
	ps.Final(m.outNorm, m.output)
	return nil
}

// residual adds src · wᵀ to the residual stream X, normalised by post first when
// there is one (Gemma's norms after attention and feed-forward).
func residual(ps backend.Pass, src backend.Act, w backend.Matrix, post backend.Vector) {
	if post == nil {
		ps.MulAdd(backend.X, src, w)
		return
	}
	ps.Mul(backend.XN, src, w)
	ps.Norm(backend.XN, backend.XN, post)
	ps.Add(backend.X, backend.XN)
}

// Forward implements [model.Model]: the batches of every sequence go through the
// layers together, in passes of at most the backend's row limit. The books of
// sliding layers that keep only their window (see [sequence.windowed]) grow pass by
// pass, in passes of at most [windowChunk] rows, and give back after each pass the
// blocks no later row will see, so that a long prompt needs no more of them than a
// window, the reserve and a chunk. On error every sequence is left as it was — but
// for one whose long prompt gave back blocks it would need again, which is left
// empty (and the error says so).
func (m *Model) Forward(ctx context.Context, work []model.Work) error {
	if err := m.check(ctx, work); err != nil {
		return err
	}
	for _, w := range work {
		s := w.Seq.(*sequence)
		s.start = s.kv.Len()
	}
	grown, err := m.grow(work)
	if err == nil {
		err = m.passes(ctx, work)
	}
	if err != nil {
		for _, w := range work[:grown] {
			err = w.Seq.(*sequence).restore(err)
		}
		return err
	}
	return m.release(work)
}

// windowChunk is the most rows of one sequence a pass takes when its books give back
// what lies behind the window: what those books hold beyond the window and the
// reserve while a long prompt goes through.
const windowChunk = 256

// release gives back each sequence's key/value blocks of its sliding layers that lie
// wholly before its length less the window and [WindowReserve] (when every layer
// slides, or the sliding layers keep their own books): no row of a later forward sees
// them, also after a rollback of up to WindowReserve positions (and the backends'
// attention never reads before a row's window: [backend.Pass]). It runs after every
// pass, so a long prompt gives back blocks as it goes.
func (m *Model) release(work []model.Work) error {
	behind := m.cfg.releaseBehind()
	if behind == 0 {
		return nil
	}
	for _, w := range work {
		s := w.Seq.(*sequence)
		kv := s.windowed()
		if kv == nil {
			continue // a global layer shares the books: nothing to give back
		}
		// A tree's rows lie at the depths of its nodes, not one after another: the
		// shallowest may come last, and whichever path is kept, only the root's
		// position is sure to stay.
		end := kv.Len()
		if !w.Batch.Tree.Chain() {
			end = min(end, s.start+1)
		}
		if n := end - behind; n > 0 {
			if err := kv.ReleaseBefore(n); err != nil {
				return fmt.Errorf("llama: releasing positions behind the sliding window: %w", err)
			}
		}
	}
	return nil
}

// check validates a forward before anything changes.
func (m *Model) check(ctx context.Context, work []model.Work) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("llama: forward: %w", err)
	}
	if m.closed.Load() {
		return ErrModelClosed
	}
	if err := model.CheckWork(work); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	info := m.Info()
	for i, w := range work {
		s, ok := w.Seq.(*sequence)
		switch {
		case !ok || s.m != m:
			return fmt.Errorf("llama: work item %d: the sequence is not one of this model's", i)
		case s.closed:
			return errClosed
		}
		if err := model.CheckBatch(w.Batch, s.kv.Len(), info, len(w.Logits)); err != nil {
			if len(work) > 1 {
				return fmt.Errorf("llama: work item %d: %w", i, err)
			}
			return fmt.Errorf("llama: %w", err)
		}
	}
	return nil
}

// grow takes the key/value blocks of every batch; on error it returns how many
// sequences grew, for the caller to shrink back.
func (m *Model) grow(work []model.Work) (int, error) {
	for i, w := range work {
		if err := w.Seq.(*sequence).grow(w.Batch.Tokens); err != nil {
			return i, fmt.Errorf("llama: %w", err) // model.ErrOutOfMemory when the budget is spent
		}
	}
	return len(work), nil
}

// passes runs the rows of every batch through the layers, as many per pass as the
// backend takes.
func (m *Model) passes(ctx context.Context, work []model.Work) error {
	p, _ := m.plans.Get().(*backend.Plan)
	if p == nil {
		p = new(backend.Plan)
	}
	defer func() {
		p.Reset() // no references to the caller's buffers kept in the pool
		m.plans.Put(p)
	}()
	p.Reset()
	p.Dim, p.InvFreq, p.LocalInvFreq, p.RopeScale = m.cfg.Dim, m.invFreq, m.localInvFreq, m.cfg.RopeScale
	limit := m.be.MaxRows()
	if m.cfg.releaseBehind() > 0 {
		limit = min(cmp.Or(limit, windowChunk), windowChunk)
	}
	run := func() error {
		if err := m.run(ctx, p); err != nil {
			return err
		}
		p.Reset()
		return m.release(work)
	}
	for _, w := range work {
		seq := w.Seq.(*sequence)
		b := w.Batch
		for lo := 0; lo < len(b.Tokens); {
			hi := len(b.Tokens)
			if limit > 0 {
				if p.Rows() == limit {
					if err := run(); err != nil {
						return err
					}
				}
				hi = min(hi, lo+limit-p.Rows())
			}
			if err := seq.growWindowed(b.Tokens, hi); err != nil {
				return fmt.Errorf("llama: %w", err)
			}
			p.Add(seq.kv, seq.sliding, seq.start, b, lo, hi, w.Logits)
			lo = hi
		}
	}
	if p.Rows() == 0 {
		return nil
	}
	return m.run(ctx, p)
}

// run runs one pass.
func (m *Model) run(ctx context.Context, p *backend.Plan) error {
	return m.be.Run(ctx, p, (*layerLoop)(m))
}

// sequence is one request's state: its key/value books; the data is the backend's.
// When the model's sliding layers keep their own books (beside global layers), the
// sequence has two, which hold the same tokens and change together.
type sequence struct {
	m       *Model
	kv      *kvcache.Seq // every layer's, or the global layers'
	sliding *kvcache.Seq // the sliding layers'; nil: none
	start   int          // the length before the forward under way
	closed  bool
	one     [1]model.Work // Forward's work list, kept so that a forward does not allocate
}

// windowed returns the books that give back what lies behind the window: the sliding
// layers' own, or, when every layer slides, the only ones; nil when a global layer
// shares them.
func (s *sequence) windowed() *kvcache.Seq {
	switch {
	case s.sliding != nil:
		return s.sliding
	case s.m.slidesAll:
		return s.kv
	}
	return nil
}

// grow extends by tokens the books that do not give back what lies behind the window;
// those that do grow pass by pass (growWindowed).
func (s *sequence) grow(tokens []int32) error {
	if s.windowed() == s.kv {
		return nil
	}
	return s.kv.Grow(tokens)
}

// growWindowed extends the books that give back what lies behind the window, if
// any, to hold the forward's tokens before hi.
func (s *sequence) growWindowed(tokens []int32, hi int) error {
	kv := s.windowed()
	if kv == nil {
		return nil
	}
	if have := kv.Len() - s.start; have < hi {
		return kv.Grow(tokens[have:hi])
	}
	return nil
}

// restore puts the sequence back as it was before the forward that failed with err,
// or, when its passes gave back blocks it would need again, empties it; it returns
// err, saying so in that case.
func (s *sequence) restore(err error) error {
	if s.reach(s.start) != nil {
		s.shrink(0)
		return fmt.Errorf("%w (the sequence is left empty: its prompt's passes gave back positions behind the sliding window)", err)
	}
	s.shrink(s.start)
	return err
}

// shrink truncates both books to n positions, or as many as they hold.
func (s *sequence) shrink(n int) {
	_ = s.kv.Truncate(min(n, s.kv.Len()))
	if s.sliding != nil {
		_ = s.sliding.Truncate(min(n, s.sliding.Len()))
	}
}

var errClosed = fmt.Errorf("llama: %w", model.ErrClosed)

func (s *sequence) Len() int { return s.kv.Len() }

func (s *sequence) Forward(ctx context.Context, b batch.Batch, logits []float32) error {
	if s.closed {
		return errClosed
	}
	s.one[0] = model.Work{Seq: s, Batch: b, Logits: logits}
	err := s.m.Forward(ctx, s.one[:])
	s.one[0] = model.Work{}
	return err
}

func (s *sequence) Close() error {
	if s.closed {
		return errors.New("llama: sequence closed twice")
	}
	s.closed = true
	s.kv.Close()
	if s.sliding != nil {
		s.sliding.Close()
	}
	return nil
}

func (s *sequence) Truncate(n int) error {
	if s.closed {
		return errClosed
	}
	if n < 0 || n > s.kv.Len() {
		return fmt.Errorf("llama: truncate to %d outside [0, %d]", n, s.kv.Len())
	}
	if err := s.reach(n); err != nil {
		return err
	}
	s.shrink(n)
	return nil
}

func (s *sequence) Retain(from int, keep []int32) error {
	if s.closed {
		return errClosed
	}
	if err := model.CheckRetain(from, keep, s.kv.Len()); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	if err := s.reach(from + len(keep)); err != nil {
		return err
	}
	if err := s.kv.Retain(from, keep); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	if s.sliding != nil {
		if err := s.sliding.Retain(from, keep); err != nil {
			s.shrink(min(from, s.sliding.Len())) // the books agree again: nothing of the draft kept
			return fmt.Errorf("llama: retaining the sliding layers' positions (the sequence is cut back to %d): %w", s.kv.Len(), err)
		}
	}
	return nil
}

// reach checks that a sequence cut back to n positions still holds what its next row
// attends to: with a sliding window of W, the positions from n−W+1 on. A sequence of a
// model whose every layer slides gives back the positions behind the window and
// [WindowReserve] as it grows; going back further than that is refused (to 0, a fresh
// start, is not).
func (s *sequence) reach(n int) error {
	kv := s.windowed()
	if kv == nil {
		return nil
	}
	rel, w := kv.Released(), s.m.cfg.SlidingWindow
	if rel == 0 || n == 0 || n-w+1 >= rel {
		return nil
	}
	return fmt.Errorf("llama: cannot go back to %d positions: with the sliding window of %d positions the next row "+
		"attends to positions from %d on, but those before %d were given back (a sequence keeps %d positions beyond the window): %w",
		n, w, n-w+1, rel, WindowReserve, kvcache.ErrReleased)
}

// Reuse implements [model.PrefixSequence].
func (s *sequence) Reuse(tokens []int32) int {
	if s.closed {
		return 0
	}
	if cl := s.m.cfg.ContextLength; cl > 0 && len(tokens) > cl {
		tokens = tokens[:cl]
	}
	n := s.kv.Reuse(tokens)
	if s.sliding != nil {
		if m := s.sliding.Reuse(tokens[:n]); m < n {
			_ = s.kv.Truncate(m) // both books hold the same prefix
			n = m
		}
	}
	return n
}

// Salt implements [model.SaltedSequence].
func (s *sequence) Salt(salt uint64) error {
	if s.closed {
		return errClosed
	}
	if err := s.kv.Salt(salt); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	if s.sliding != nil {
		if err := s.sliding.Salt(salt); err != nil {
			return fmt.Errorf("llama: %w", err)
		}
	}
	return nil
}

// Publish implements [model.PrefixSequence].
func (s *sequence) Publish() {
	if !s.closed {
		s.kv.Publish()
		if s.sliding != nil {
			s.sliding.Publish()
		}
	}
}

// Fork implements [model.ForkSequence]: a new sequence with the same tokens, sharing
// the key/value blocks of s until one of them writes into a shared block, which is
// then copied (copy on write). The new sequence must be closed on its own.
func (s *sequence) Fork() (model.Sequence, error) {
	if s.closed {
		return nil, errClosed
	}
	kv, err := s.kv.Fork()
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	f := &sequence{m: s.m, kv: kv}
	if s.sliding != nil {
		if f.sliding, err = s.sliding.Fork(); err != nil {
			kv.Close()
			return nil, fmt.Errorf("llama: %w", err)
		}
	}
	return f, nil
}
