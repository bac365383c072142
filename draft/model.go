package draft

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
)

// SmallModel drafts with a small language model that shares the target's vocabulary. Each
// session keeps its own sequence in the draft model, in step with the request: it rolls
// back the rejected part of its last proposal and forwards what it has not seen (the
// target's token, and the last drafted token when all were accepted) before drafting
// again. When the request samples, it draws each token from its processed distribution
// q and reports q; when greedy, it drafts the argmax.
type SmallModel struct {
	m    model.Model
	info model.Info
	tree TreeShape // zero: chains
}

// NewSmallModelTree returns a drafter on m that proposes trees of the given shape.
func NewSmallModelTree(m model.Model, shape TreeShape) (*SmallModel, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	d, err := NewSmallModel(m)
	if err != nil {
		return nil, err
	}
	d.tree = shape
	return d, nil
}

// NewSmallModel returns a drafter on m.
func NewSmallModel(m model.Model) (*SmallModel, error) {
	if m == nil {
		return nil, errors.New("draft: nil draft model")
	}
	info := m.Info()
	if info.VocabSize < 1 {
		return nil, fmt.Errorf("draft: draft model %q reports vocabulary size %d", info.Name, info.VocabSize)
	}
	return &SmallModel{m: m, info: info}, nil
}

// Model returns the draft model.
func (d *SmallModel) Model() model.Model { return d.m }

// VocabSize implements [VocabSizer]: the draft model's vocabulary size (0 for a nil
// drafter).
func (d *SmallModel) VocabSize() int {
	if d == nil {
		return 0
	}
	return d.info.VocabSize
}

// Start implements [Drafter].
func (d *SmallModel) Start(ctx context.Context, req Request) (Session, error) {
	if d == nil {
		return nil, errors.New("draft: nil *SmallModel")
	}
	v := d.info.VocabSize
	if req.VocabSize != 0 && v > req.VocabSize {
		return nil, fmt.Errorf("draft: draft model %q has %d tokens, more than the target's %d", d.info.Name, v, req.VocabSize)
	}
	if req.MaxK < 0 {
		return nil, fmt.Errorf("draft: MaxK %d must be >= 0", req.MaxK)
	}
	smp, err := sampler.New(req.Sampling, v) // the session's own random stream
	if err != nil {
		return nil, fmt.Errorf("draft: %w", err)
	}
	seq, err := d.m.NewSequence(ctx)
	if err != nil {
		return nil, fmt.Errorf("draft: draft model %q: %w", d.info.Name, err)
	}
	s := &modelSession{
		d:               d,
		seq:             seq,
		smp:             smp,
		ConstraintState: NewConstraintState(req.Constraint),
		greedy:          req.Sampling.Greedy(),
		vocab:           max(req.VocabSize, v),
		held:            make([]int32, 0, req.MaxLen),
		logits:          make([]float32, v),
		toks:            make([]int32, req.MaxK),
		conf:            make([]float32, req.MaxK),
		lse:             make([]float32, 0, v),
		out:             []int32{0},
	}
	if !s.greedy {
		s.dists = make([]float32, req.MaxK*v)
		s.rows = make([][]float32, req.MaxK)
		for i := range s.rows {
			s.rows[i] = s.dists[i*v : (i+1)*v]
		}
	}
	// Prefill the prompt but its last token, which the first proposal forwards.
	if len(req.Prompt) > 1 {
		if cl := d.info.ContextLength; cl == 0 || len(req.Prompt) <= cl {
			switch err := seq.Forward(ctx, batch.Batch{Tokens: req.Prompt[:len(req.Prompt)-1]}, nil); {
			case err == nil:
				s.held = append(s.held, req.Prompt[:len(req.Prompt)-1]...)
				s.seen = len(req.Prompt) - 1
			case errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull):
				// Not now: the first proposal will try, and fail the same way.
			default:
				seq.Close()
				return nil, fmt.Errorf("draft: draft model %q: prefill: %w", d.info.Name, err)
			}
		}
	}
	if d.tree.Width > 0 {
		n := min(d.tree.MaxNodes, req.MaxK)
		s.parents = make([]int32, 0, n)
		s.qrows = make([][]float32, 0, n)
		s.tlogits = make([]float32, n*v)
		s.outs = make([]int32, 0, n)
		s.level = make([]int32, 0, n)
		s.next = make([]int32, 0, n)
		s.top = make([]int32, d.tree.Width)
		if !s.greedy {
			// One q row per expanded node plus the root.
			s.dists = make([]float32, (n+1)*v)
			s.rows = make([][]float32, n+1)
			for i := range s.rows {
				s.rows[i] = s.dists[i*v : (i+1)*v]
			}
		}
	}
	return s, nil
}

type modelSession struct {
	d      *SmallModel
	seq    model.Sequence
	smp    *sampler.Sampler
	greedy bool
	vocab  int     // the target's vocabulary size (req.VocabSize), at least the draft's
	held   []int32 // the tokens in seq, followed while drafting by the drafted ones
	seen   int     // length of the last history: held[:seen] equals it
	logits []float32
	dists  []float32
	rows   [][]float32
	toks   []int32
	out    []int32 // Outputs of a forward: one index

	// The confidence stop ([Confident]): the threshold, each chain token's
	// confidence, and the softmax scratch of a greedy token's.
	minConf float32
	conf    []float32
	lse     []float32

	ConstraintState         // the request's constraint and the state the history ends in
	nstates         []int32 // while drafting a tree, the constraint's state after each node

	// Tree drafting scratch.
	parents     []int32
	shape       batch.Tree // parents, checked
	qrows       [][]float32
	tlogits     []float32
	outs        []int32
	level, next []int32
	top         []int32
	expanded    int // q rows used by this proposal
}

func (s *modelSession) forward(ctx context.Context, tokens []int32) error {
	s.out[0] = int32(len(tokens) - 1)
	if err := s.seq.Forward(ctx, batch.Batch{Tokens: tokens, Outputs: s.out}, s.logits); err != nil {
		return fmt.Errorf("draft: draft model %q: %w", s.d.info.Name, err)
	}
	return nil
}

func (s *modelSession) Propose(ctx context.Context, history []int32, k int, p *Proposal) error {
	p.Reset()
	if k < 0 || k > cap(s.toks) {
		return fmt.Errorf("draft: k = %d outside [0, %d]", k, cap(s.toks))
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
	if s.d.tree.Width > 0 {
		err := s.proposeTree(ctx, history, min(k, s.d.tree.MaxNodes), p)
		if errors.Is(err, errOutsideVocab) {
			p.Reset()
			return nil
		}
		return err
	}
	if err := s.sync(ctx, history); errors.Is(err, errOutsideVocab) {
		return nil
	} else if err != nil {
		return err
	}
	s.toks, s.conf = s.toks[:k], s.conf[:k]
	state := s.State()
	for i := range k {
		var x int32
		var err error
		if !s.Allows(state, s.logits) {
			k = i // nothing may follow: the draft ends here
			break
		}
		if s.greedy {
			x, err = s.smp.Argmax(s.logits, s.held)
		} else if err = s.smp.Process(s.logits, s.held, s.rows[i]); err == nil {
			x = s.smp.Sample(s.rows[i])
		}
		if err != nil {
			return fmt.Errorf("draft: position %d: %w", i, err)
		}
		s.toks[i] = x
		if s.minConf >= 0 {
			s.conf[i] = s.confidence(i, x)
		}
		state = s.After(state, x)
		if i == k-1 {
			break
		}
		if s.minConf > 0 && s.conf[i] < s.minConf {
			k = i + 1 // the confidence stop: this token is the chain's last
			break
		}
		s.held = append(s.held, x)
		if err := s.forward(ctx, s.held[len(s.held)-1:]); err != nil {
			s.held = s.held[:s.seq.Len()]
			return err
		}
	}
	p.Tokens = s.toks[:k]
	if s.minConf >= 0 {
		p.Confidence = s.conf[:k]
	}
	if !s.greedy {
		p.Dists = s.rows[:k]
	}
	return nil
}

// StopBelow implements [Confident] for chains; trees are drafted whole.
func (s *modelSession) StopBelow(p float32) { s.minConf = p }

// confidence is the draft's probability of x, the chain's i-th token
// ([TokenConfidence]).
func (s *modelSession) confidence(i int, x int32) float32 {
	var q []float32
	if !s.greedy {
		q = s.rows[i]
	}
	var c float32
	c, s.lse = TokenConfidence(s.logits, x, q, s.lse)
	return c
}

// errOutsideVocab says that the history holds a token the draft model does not know
// (a target with a padded vocabulary generated one of its extra ids): the session
// cannot draft any more.
var errOutsideVocab = errors.New("draft: the history holds a token outside the draft model's vocabulary")

// sync makes the draft sequence hold history and leaves the logits after its last
// token in s.logits.
func (s *modelSession) sync(ctx context.Context, history []int32) error {
	c := min(s.seen, len(history)-1, len(s.held))
	for c < len(s.held) && c < len(history)-1 && s.held[c] == history[c] {
		c++
	}
	for _, t := range history[c:] {
		switch {
		case t < 0 || int(t) >= s.vocab:
			return fmt.Errorf("draft: history token %d is outside the vocabulary of %d", t, s.vocab)
		case int(t) >= s.d.info.VocabSize:
			return errOutsideVocab
		}
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
	return nil
}

// expand adds up to Width children below parent (-1 for the root), drawn from the
// logits after it, within the node budget n.
func (s *modelSession) expand(parent int32, logits []float32, hist []int32, n int) error {
	w := min(s.d.tree.Width, n-len(s.toks))
	if w <= 0 {
		return nil
	}
	state := s.State()
	if s.Active() && parent >= 0 {
		state = s.nstates[parent]
	}
	if !s.Allows(state, logits) {
		return nil // nothing may follow this node
	}
	if s.greedy {
		s.top = TopTokens(logits, w, s.top)
		for _, t := range s.top {
			if math.IsInf(float64(logits[t]), -1) {
				break // fewer allowed than the width
			}
			s.add(t, parent, state)
		}
		return nil
	}
	q := s.rows[s.expanded]
	s.expanded++
	if err := s.smp.Process(logits, hist, q); err != nil {
		return fmt.Errorf("draft: %w", err)
	}
	for range w {
		s.add(s.smp.Sample(q), parent, state)
		s.qrows = append(s.qrows, q)
	}
	return nil
}

// add appends a tree node, with the constraint's state after it when there is one.
func (s *modelSession) add(tok, parent, state int32) {
	s.toks = append(s.toks, tok)
	s.parents = append(s.parents, parent)
	if s.Active() {
		s.nstates = append(s.nstates, s.After(state, tok))
	}
}

// proposeTree drafts a tree of at most n nodes, one draft forward per level: each
// level forwards the whole tree so far (the model sees every node's ancestors through
// the parent list) and reads the logits of the previous level's nodes.
func (s *modelSession) proposeTree(ctx context.Context, history []int32, n int, p *Proposal) error {
	if err := s.sync(ctx, history); err != nil {
		return err
	}
	base := s.seq.Len()
	s.toks, s.parents, s.qrows, s.expanded, s.nstates = s.toks[:0], s.parents[:0], s.qrows[:0], 0, s.nstates[:0]
	if err := s.expand(-1, s.logits, s.held, n); err != nil {
		return err
	}
	s.level = append(s.level[:0], 0)
	for i := 1; i < len(s.toks); i++ {
		s.level = append(s.level, int32(i))
	}
	v := s.d.info.VocabSize
	for depth := 1; depth < s.d.tree.Depth && len(s.toks) < n && len(s.level) > 0; depth++ {
		if cl := s.d.info.ContextLength; cl > 0 && base+len(s.toks) > cl {
			break
		}
		s.outs = append(s.outs[:0], s.level...)
		err := s.shape.Set(s.parents)
		if err == nil {
			err = s.seq.Forward(ctx, batch.Batch{Tokens: s.toks, Tree: s.shape, Outputs: s.outs}, s.tlogits)
		}
		if terr := s.seq.Truncate(base); err == nil && terr != nil {
			err = terr
		}
		if err != nil {
			return fmt.Errorf("draft: draft model %q: %w", s.d.info.Name, err)
		}
		s.next = s.next[:0]
		for r, node := range s.level {
			// The node's history: the context and its ancestors, for the penalty.
			hist := s.held[:base]
			if !s.greedy && s.smp.Params().RepetitionPenalty != 0 {
				hist = s.pathTo(node)
			}
			first := len(s.toks)
			if err := s.expand(node, s.tlogits[r*v:(r+1)*v], hist, n); err != nil {
				return err
			}
			for c := first; c < len(s.toks); c++ {
				s.next = append(s.next, int32(c))
			}
		}
		s.level, s.next = s.next, s.level
	}
	s.held = s.held[:base]
	p.Tokens, p.Parents = s.toks, s.parents
	if !s.greedy {
		p.Dists = s.qrows
	}
	return nil
}

// pathTo returns the history followed by the tokens from the root to node, a node of
// the tree last forwarded (s.shape).
func (s *modelSession) pathTo(node int32) []int32 {
	h := s.held
	base := len(h)
	for range s.shape.Depth(int(node)) + 1 {
		h = append(h, 0)
	}
	for a, i := node, len(h)-1; a >= 0; a, i = s.parents[a], i-1 {
		h[i] = s.toks[a]
	}
	s.held = h[:base]
	return h
}

func (s *modelSession) Close() error { return s.seq.Close() }
