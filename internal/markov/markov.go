// Package markov is a tiny explicit language model: a Markov chain of order 1 or more
// over a small vocabulary, whose next-token logits are a random table indexed by the
// last Order tokens. It implements the [model.Model] contract exactly — batched
// forward, trees, truncation — so the speculative loop can be tested against a model
// whose output distribution is known in closed form, and it doubles as a drafter's
// model when perturbed.
package markov

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/model"
)

// Config describes a random chain.
type Config struct {
	// Vocab is the vocabulary size, at least 2.
	Vocab int
	// Order is how many previous tokens select the next-token logits, at least 1.
	Order int
	// Seed makes the random table reproducible.
	Seed uint64
	// Scale is the standard deviation of the random logits; larger values make
	// sharper distributions. Zero means 2.
	Scale float64
	// ContextLength bounds the tokens a sequence may hold; 0 means unbounded.
	// Sequences reserve memory for ContextLength tokens up front.
	ContextLength int
}

// maxLogits bounds the table, Vocab^Order rows of Vocab logits, to 128 MiB.
const maxLogits = 1 << 25

// Chain is a random Markov chain language model. It is read-only after construction
// and safe for concurrent use.
type Chain struct {
	vocab, order, ctxLen int
	logits               []float32 // vocab^order rows of vocab logits
}

// New makes a chain with a random logit table.
func New(cfg Config) (*Chain, error) {
	if cfg.Vocab < 2 {
		return nil, fmt.Errorf("markov: Vocab %d must be at least 2", cfg.Vocab)
	}
	if cfg.Order < 1 {
		return nil, fmt.Errorf("markov: Order %d must be at least 1", cfg.Order)
	}
	if cfg.Scale < 0 || math.IsNaN(cfg.Scale) || math.IsInf(cfg.Scale, 0) {
		return nil, fmt.Errorf("markov: Scale %v must be a finite non-negative number", cfg.Scale)
	}
	if cfg.ContextLength < 0 {
		return nil, fmt.Errorf("markov: ContextLength %d must not be negative", cfg.ContextLength)
	}
	rows := 1
	for range cfg.Order {
		rows *= cfg.Vocab
		if rows > maxLogits/cfg.Vocab {
			return nil, fmt.Errorf("markov: a table of Vocab^(Order+1) = %d^%d logits exceeds %d", cfg.Vocab, cfg.Order+1, maxLogits)
		}
	}
	scale := cfg.Scale
	if scale == 0 {
		scale = 2
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6d61726b6f76))
	c := &Chain{vocab: cfg.Vocab, order: cfg.Order, ctxLen: cfg.ContextLength, logits: make([]float32, rows*cfg.Vocab)}
	for i := range c.logits {
		c.logits[i] = float32(rng.NormFloat64() * scale)
	}
	return c, nil
}

// Perturbed returns a copy of the chain with Gaussian noise of standard deviation sigma
// added to every logit: a draft model that agrees with c more the smaller sigma is.
func (c *Chain) Perturbed(sigma float64, seed uint64) *Chain {
	rng := rand.New(rand.NewPCG(seed, 0x6e6f697365))
	d := &Chain{vocab: c.vocab, order: c.order, ctxLen: c.ctxLen, logits: make([]float32, len(c.logits))}
	for i, v := range c.logits {
		d.logits[i] = v + float32(rng.NormFloat64()*sigma)
	}
	return d
}

// Order is the number of previous tokens the chain looks at.
func (c *Chain) Order() int { return c.order }

// Info describes the chain as a model.
func (c *Chain) Info() model.Info {
	return model.Info{
		Name:          fmt.Sprintf("markov-v%d-o%d", c.vocab, c.order),
		Arch:          "markov",
		VocabSize:     c.vocab,
		ContextLength: c.ctxLen,
		HiddenSize:    c.order * c.vocab,
	}
}

// Logits returns the next-token logits after the given tokens: the row selected by the
// last Order tokens, with missing positions (a history shorter than Order) read as
// token 0. The returned slice belongs to the chain and must not be modified. Tokens
// must lie in the vocabulary.
func (c *Chain) Logits(history []int32) []float32 {
	row := 0
	for i := len(history) - c.order; i < len(history); i++ {
		row *= c.vocab
		if i >= 0 {
			row += int(history[i])
		}
	}
	return c.logits[row*c.vocab : (row+1)*c.vocab]
}

// NewSequence starts an empty sequence.
func (c *Chain) NewSequence(ctx context.Context) (model.Sequence, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("markov: new sequence: %w", err)
	}
	s := &sequence{c: c, ctx: make([]int32, c.order), info: c.Info()}
	if c.ctxLen > 0 {
		s.tokens = make([]int32, 0, c.ctxLen)
	}
	return s, nil
}

// sequence is the chain's per-request state: the tokens forwarded so far.
type sequence struct {
	c      *Chain
	info   model.Info // the chain's, made once
	tokens []int32
	ctx    []int32 // scratch: the Order tokens before an output
	closed bool
}

var errClosed = fmt.Errorf("markov: %w", model.ErrClosed)

func (s *sequence) Len() int { return len(s.tokens) }

// Forward implements [model.Model]: the chain has no weights to share, so each
// sequence forwards on its own, after every batch is checked.
func (c *Chain) Forward(ctx context.Context, work []model.Work) error {
	if err := model.CheckWork(work); err != nil {
		return fmt.Errorf("markov: %w", err)
	}
	for i, w := range work {
		s, ok := w.Seq.(*sequence)
		if !ok || s.c != c {
			return fmt.Errorf("markov: work item %d: the sequence is not one of this chain's", i)
		}
		if err := s.check(ctx, w.Batch, w.Logits); err != nil {
			return fmt.Errorf("work item %d: %w", i, err)
		}
	}
	for _, w := range work {
		w.Seq.(*sequence).forward(w.Batch, w.Logits)
	}
	return nil
}

func (s *sequence) Forward(ctx context.Context, b batch.Batch, logits []float32) error {
	if err := s.check(ctx, b, logits); err != nil {
		return err
	}
	s.forward(b, logits)
	return nil
}

// check validates a forward of b before anything changes.
func (s *sequence) check(ctx context.Context, b batch.Batch, logits []float32) error {
	if s.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("markov: forward: %w", err)
	}
	if err := model.CheckBatch(b, len(s.tokens), s.info, len(logits)); err != nil {
		return fmt.Errorf("markov: %w", err)
	}
	return nil
}

// forward appends b, checked, and writes its logits and hidden states. A chain's hidden
// state at a token is its context, the Order tokens up to it, one-hot each: what the
// next token's distribution depends on.
func (s *sequence) forward(b batch.Batch, logits []float32) {
	v := s.c.vocab
	for r, o := range b.Outputs {
		copy(logits[r*v:(r+1)*v], s.c.Logits(s.context(b, int(o))))
	}
	for r, o := range b.States {
		h := b.Hidden[r*s.c.order*v : (r+1)*s.c.order*v]
		clear(h)
		for j, t := range s.context(b, int(o)) {
			h[j*v+int(t)] = 1
		}
	}
	s.tokens = append(s.tokens, b.Tokens...)
}

// context fills s.ctx with the Order tokens up to batch token i: from i up through its
// ancestors in the batch, then into the tokens already held, from the right.
func (s *sequence) context(b batch.Batch, i int) []int32 {
	at := s.c.order - 1
	for ; at >= 0 && i >= 0; at-- {
		s.ctx[at] = b.Tokens[i]
		i = int(b.Tree.Parent(i))
	}
	for j := len(s.tokens) - 1; at >= 0; at-- {
		if j >= 0 {
			s.ctx[at] = s.tokens[j]
			j--
		} else {
			s.ctx[at] = 0
		}
	}
	return s.ctx
}

func (s *sequence) Truncate(n int) error {
	if s.closed {
		return errClosed
	}
	if n < 0 || n > len(s.tokens) {
		return fmt.Errorf("markov: truncate to %d outside [0, %d]", n, len(s.tokens))
	}
	s.tokens = s.tokens[:n]
	return nil
}

func (s *sequence) Retain(from int, keep []int32) error {
	if s.closed {
		return errClosed
	}
	if err := model.CheckRetain(from, keep, len(s.tokens)); err != nil {
		return fmt.Errorf("markov: %w", err)
	}
	for i, k := range keep {
		s.tokens[from+i] = s.tokens[from+int(k)]
	}
	s.tokens = s.tokens[:from+len(keep)]
	return nil
}

// Fork implements [model.ForkSequence]: a copy of the tokens (the chain keeps nothing
// else per sequence).
func (s *sequence) Fork() (model.Sequence, error) {
	if s.closed {
		return nil, errClosed
	}
	n := &sequence{c: s.c, ctx: make([]int32, s.c.order), info: s.info}
	n.tokens = append(make([]int32, 0, cap(s.tokens)), s.tokens...)
	return n, nil
}

func (s *sequence) Close() error {
	if s.closed {
		return errors.New("markov: sequence closed twice")
	}
	s.closed = true
	s.tokens = nil
	return nil
}

// Tokens returns the tokens a sequence made by a Chain holds, for tests. It returns nil
// for any other sequence.
func Tokens(seq model.Sequence) []int32 {
	if s, ok := seq.(*sequence); ok {
		return s.tokens
	}
	return nil
}
