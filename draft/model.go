package draft

import (
	"context"
	"errors"
	"fmt"

	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
)

// drafterStream is the random stream model drafters sample from, distinct from the
// stream the acceptance rule draws on.
const drafterStream = 1

// Model drafts with a small language model that shares the target's vocabulary. Each
// session keeps its own sequence in the draft model, in step with the request: it rolls
// back the rejected part of its last proposal and forwards what it has not seen (the
// target's token, and the last drafted token when all were accepted) before drafting
// again. When the request samples, it draws each token from its processed distribution
// q and reports q; when greedy, it drafts the argmax.
type Model struct {
	m    model.Model
	info model.Info
}

// NewModel returns a drafter on m.
func NewModel(m model.Model) (*Model, error) {
	if m == nil {
		return nil, errors.New("draft: nil draft model")
	}
	info := m.Info()
	if info.VocabSize < 1 {
		return nil, fmt.Errorf("draft: draft model %q reports vocabulary size %d", info.Name, info.VocabSize)
	}
	return &Model{m: m, info: info}, nil
}

// VocabSize is the draft model's vocabulary size (0 for a nil drafter).
func (d *Model) VocabSize() int {
	if d == nil {
		return 0
	}
	return d.info.VocabSize
}

// Start implements [Drafter].
func (d *Model) Start(ctx context.Context, req Request) (Session, error) {
	if d == nil {
		return nil, errors.New("draft: nil *Model")
	}
	v := d.info.VocabSize
	if req.VocabSize != 0 && v > req.VocabSize {
		return nil, fmt.Errorf("draft: draft model %q has %d tokens, more than the target's %d", d.info.Name, v, req.VocabSize)
	}
	if req.MaxK < 0 {
		return nil, fmt.Errorf("draft: MaxK %d must be >= 0", req.MaxK)
	}
	smp, err := sampler.NewStream(req.Sampling, v, drafterStream)
	if err != nil {
		return nil, fmt.Errorf("draft: %w", err)
	}
	seq, err := d.m.NewSequence(ctx)
	if err != nil {
		return nil, fmt.Errorf("draft: draft model %q: %w", d.info.Name, err)
	}
	s := &modelSession{
		d:      d,
		seq:    seq,
		smp:    smp,
		greedy: req.Sampling.Greedy(),
		held:   make([]int32, 0, req.MaxLen),
		logits: make([]float32, v),
		toks:   make([]int32, req.MaxK),
		out:    []int32{0},
	}
	if !s.greedy {
		s.dists = make([]float32, req.MaxK*v)
		s.rows = make([][]float32, req.MaxK)
		for i := range s.rows {
			s.rows[i] = s.dists[i*v : (i+1)*v]
		}
	}
	return s, nil
}

type modelSession struct {
	d      *Model
	seq    model.Sequence
	smp    *sampler.Sampler
	greedy bool
	held   []int32 // the tokens in seq, followed while drafting by the drafted ones
	seen   int     // length of the last history: held[:seen] equals it
	logits []float32
	dists  []float32
	rows   [][]float32
	toks   []int32
	out    []int32 // Outputs of a forward: one index
}

func (s *modelSession) forward(ctx context.Context, tokens []int32) error {
	s.out[0] = int32(len(tokens) - 1)
	if err := s.seq.Forward(ctx, model.Batch{Tokens: tokens, Outputs: s.out}, s.logits); err != nil {
		return fmt.Errorf("draft: draft model %q: %w", s.d.info.Name, err)
	}
	return nil
}

func (s *modelSession) Propose(ctx context.Context, history []int32, k int, p *Proposal) error {
	p.Reset()
	if k < 0 || k > len(s.toks) {
		return fmt.Errorf("draft: k = %d outside [0, %d]", k, len(s.toks))
	}
	if len(history) == 0 {
		return errors.New("draft: empty history")
	}
	if cl := s.d.info.ContextLength; cl > 0 {
		// Draft only what the draft model's context can hold; nothing when the
		// history alone fills it.
		k = min(k, cl-len(history)+1)
	}
	if k <= 0 {
		return nil
	}
	// Keep the longest prefix the sequence already holds, but always forward at
	// least the last history token: its logits start the draft. The history only
	// grows, so only what came after the last one needs comparing.
	c := min(s.seen, len(history)-1, len(s.held))
	for c < len(s.held) && c < len(history)-1 && s.held[c] == history[c] {
		c++
	}
	if err := s.seq.Truncate(c); err != nil {
		return fmt.Errorf("draft: %w", err)
	}
	s.held = append(s.held[:c], history[c:]...)
	if err := s.forward(ctx, s.held[c:]); err != nil {
		s.held = s.held[:s.seq.Len()]
		return err
	}
	s.seen = len(history)
	for i := range k {
		var x int32
		var err error
		if s.greedy {
			x, err = s.smp.Argmax(s.logits, s.held)
		} else if err = s.smp.Process(s.logits, s.held, s.rows[i]); err == nil {
			x = s.smp.Sample(s.rows[i])
		}
		if err != nil {
			return fmt.Errorf("draft: position %d: %w", i, err)
		}
		s.toks[i] = x
		if i == k-1 {
			break
		}
		s.held = append(s.held, x)
		if err := s.forward(ctx, s.held[len(s.held)-1:]); err != nil {
			s.held = s.held[:s.seq.Len()]
			return err
		}
	}
	p.Tokens = s.toks[:k]
	if !s.greedy {
		p.Dists = s.rows[:k]
	}
	return nil
}

func (s *modelSession) Close() error { return s.seq.Close() }
