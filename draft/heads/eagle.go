package heads

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
)

// EAGLE drafts with an EAGLE draft layer (llama.OpenEAGLE loads one): a model whose
// input beside each token is the target's hidden state at the position before it, and
// whose own hidden state stands in for the target's at the token's position. The
// session keeps the layer's sequence in step with the request — after each step it
// forwards the accepted tokens with the target's true states — and drafts by feeding
// the layer its own: a chain, or with a [draft.TreeShape] an EAGLE-2 dynamic tree, expanded
// level by level below the nodes the draft is most confident of.
type EAGLE struct {
	m    model.Model
	info model.Info
	tree draft.TreeShape
}

// NewEAGLE returns the drafter on an EAGLE layer for the target described by target:
// the layer must take states of the target's hidden size and draft from its
// vocabulary. A zero tree drafts chains.
func NewEAGLE(layer model.Model, target model.Info, tree draft.TreeShape) (*EAGLE, error) {
	if layer == nil {
		return nil, errors.New("heads: nil EAGLE layer")
	}
	info := layer.Info()
	if info.InputSize == 0 || info.HiddenSize != info.InputSize {
		return nil, fmt.Errorf("heads: model %q is not an EAGLE layer (it takes %d values beside each token and gives states of %d)",
			info.Name, info.InputSize, info.HiddenSize)
	}
	if err := checkFits("EAGLE layer "+info.Name, info.InputSize, info.VocabSize, target); err != nil {
		return nil, err
	}
	if tree != (draft.TreeShape{}) {
		if err := tree.Validate(); err != nil {
			return nil, err
		}
	}
	return &EAGLE{m: layer, info: info, tree: tree}, nil
}

// Start implements [draft.Drafter].
func (e *EAGLE) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	if req.VocabSize != e.info.VocabSize {
		return nil, fmt.Errorf("heads: EAGLE layer %q drafts from %d tokens; the request's vocabulary has %d", e.info.Name, e.info.VocabSize, req.VocabSize)
	}
	smp, err := sampler.New(req.Sampling, req.VocabSize)
	if err != nil {
		return nil, fmt.Errorf("heads: %w", err)
	}
	seq, err := e.m.NewSequence(ctx)
	if err != nil {
		return nil, fmt.Errorf("heads: EAGLE layer %q: %w", e.info.Name, err)
	}
	d, v := e.info.HiddenSize, e.info.VocabSize
	n := max(req.MaxK, 1)
	cached, err := reusePrompt(seq, req.Prompt)
	if err != nil {
		_ = seq.Close()
		return nil, fmt.Errorf("heads: EAGLE layer %q: %w", e.info.Name, err)
	}
	return &eagleSession{e: e, seq: seq, smp: smp, greedy: req.Sampling.Greedy(), ConstraintState: draft.NewConstraintState(req.Constraint),
		base: cached, cached: cached, prompt: len(req.Prompt), inputs: make([]float32, 0, (n+1)*d),
		root: make([]float32, d), rootLogits: make([]float32, v),
		logits: make([]float32, n*v), g: make([]float32, (n+max(e.tree.Width, 1))*d), q: rows(make([]float32, (n+1)*v), n+1, v),
		conf: make([]float64, 0, n), outs: make([]int32, 0, n),
		toks: make([]int32, 0, n), dists: make([][]float32, 0, n), parents: make([]int32, 0, n),
		hist: make([]int32, 0, req.MaxLen+n), one: make([]int32, 1), chainStop: newChainStop(n, v)}, nil
}

// reusePrompt takes into the layer's empty sequence the rows of the longest prefix of
// the prompt its prefix cache holds, and returns their number. The layer's row i is
// prompt token i+1 beside the target's state at token i, so the rows are keyed by the
// tokens they are fed, salted with the prompt's first token, on which the states depend
// too. The row of the prompt's last token is never taken: its logits and state are
// where the first draft starts. A sequence without a salted prefix cache takes none.
func reusePrompt(seq model.Sequence, prompt []int32) (int, error) {
	ps, ok := seq.(model.SaltedSequence)
	if !ok || len(prompt) < 3 {
		return 0, nil
	}
	if err := ps.Salt(uint64(uint32(prompt[0]))); err != nil {
		return 0, err
	}
	return ps.Reuse(prompt[1 : len(prompt)-1]), nil
}

type eagleSession struct {
	draft.ConstraintState
	e      *EAGLE
	seq    model.Sequence
	smp    *sampler.Sampler
	greedy bool
	told   bool
	base   int // the layer's positions that follow the request (true states)
	cached int // of them, the prompt's rows its prefix cache gave at Start
	prompt int // the prompt's length
	// prompted: the first Observe, the prompt's, was told.
	prompted bool

	inputs     []float32 // the states fed beside the tokens
	root       []float32 // the layer's state after the last observed pair…
	rootLogits []float32 // …and its logits: where every draft starts
	logits     []float32 // per node of a forward
	g          []float32 // the layer's states, per node
	q          [][]float32
	toks       []int32
	dists      [][]float32
	parents    []int32
	hist       []int32
	one        []int32
	outs       []int32
	conf       []float64 // per node: the draft's probability of its path
	shape      batch.Tree
	top        []int32
	path       []int32
	// expanded counts the q rows this proposal used.
	expanded int
	chainStop
}

// Observe implements [draft.StateSession]: the pairs (token, the target's state before it)
// are forwarded, and the last one's logits and state are what the next draft starts
// from. Of the prompt, the rows the prefix cache gave are skipped; the rows of the
// history are published for later requests that begin alike (a conversation's next
// turn), as the target publishes its own.
func (s *eagleSession) Observe(tokens []int32, states [][]float32) error {
	if !s.prompted {
		s.prompted = true
		// The prompt's tail from row prompt−1−len(tokens) on: skip the cached rows.
		skip := s.cached - (s.prompt - 1 - len(tokens))
		if s.cached > 0 && len(tokens) > 0 {
			if skip < 0 || skip >= len(tokens) || len(states) != len(tokens) {
				return fmt.Errorf("heads: EAGLE layer %q holds %d of the prompt's rows; told %d tokens with %d states of a prompt of %d",
					s.e.info.Name, s.cached, len(tokens), len(states), s.prompt)
			}
			tokens, states = tokens[skip:], states[skip:]
		}
	}
	n := len(tokens)
	if n == 0 {
		return nil
	}
	d := s.e.info.HiddenSize
	s.one[0] = int32(n - 1)
	b := batch.Batch{Tokens: tokens, Inputs: s.inputsOf(states), Outputs: s.one, States: s.one, Hidden: s.root[:d]}
	if err := s.seq.Forward(context.Background(), b, s.rootLogits); err != nil {
		return fmt.Errorf("heads: EAGLE layer %q: %w", s.e.info.Name, err)
	}
	s.base = s.seq.Len()
	if ps, ok := s.seq.(model.PrefixSequence); ok {
		ps.Publish() // the rows of the history so far, as the target publishes it
	}
	s.told = true
	return nil
}

// inputsOf returns the states as one run of values: the rows themselves when they lie
// one after another in memory (a prefill's, as the target keeps them), else a copy in
// the session's buffer.
func (s *eagleSession) inputsOf(states [][]float32) []float32 {
	d := s.e.info.HiddenSize
	if run := states[0]; cap(run) >= len(states)*d {
		run = run[:len(states)*d]
		adjacent := true
		for i, st := range states {
			if len(st) != d || &st[0] != &run[i*d] {
				adjacent = false
				break
			}
		}
		if adjacent {
			return run
		}
	}
	s.inputs = slices.Grow(s.inputs[:0], len(states)*d)
	for _, st := range states {
		s.inputs = append(s.inputs, st...)
	}
	return s.inputs
}

// StatesFrom implements [draft.StatesFrom]: the layer reads the target's states
// after the prompt's rows its prefix cache gave.
func (s *eagleSession) StatesFrom(n int) int { return min(s.cached, max(n-1, 0)) }

func (s *eagleSession) Propose(ctx context.Context, history []int32, k int, p *draft.Proposal) error {
	p.Reset()
	if !s.told || len(history) == 0 || k <= 0 {
		return nil
	}
	if cl := s.e.info.ContextLength; cl > 0 {
		k = min(k, cl-s.base)
	}
	if k <= 0 {
		return nil
	}
	s.toks, s.dists, s.parents = s.toks[:0], s.dists[:0], s.parents[:0]
	s.hist = append(s.hist[:0], history...)
	var err error
	if s.e.tree.Width > 0 {
		err = s.proposeTree(ctx, min(k, s.e.tree.MaxNodes, cap(s.toks)))
	} else {
		err = s.proposeChain(ctx, min(k, cap(s.toks)))
	}
	if terr := s.seq.Truncate(s.base); err == nil && terr != nil {
		err = terr
	}
	if err != nil {
		if errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull) {
			return err
		}
		return fmt.Errorf("heads: EAGLE layer %q: %w", s.e.info.Name, err)
	}
	p.Tokens = s.toks
	if s.e.tree.Width > 0 {
		p.Parents = s.parents
	} else {
		p.Confidence = s.confidence()
	}
	if !s.greedy {
		p.Dists = s.dists
	}
	return nil
}

// proposeChain drafts n tokens: each from the logits after the one before, the layer
// fed its own state.
func (s *eagleSession) proposeChain(ctx context.Context, n int) error {
	d, v := s.e.info.HiddenSize, s.e.info.VocabSize
	logits, state := s.rootLogits, s.root
	cs := s.State()
	s.chainConf = s.chainConf[:0]
	for i := range n {
		if !s.Allows(cs, logits) {
			break
		}
		x, q, err := s.pick(logits, s.hist, i)
		if err != nil {
			return err
		}
		s.toks, s.dists, s.hist = append(s.toks, x), append(s.dists, q), append(s.hist, x)
		cs = s.After(cs, x)
		if s.ends(logits, x, q) || i == n-1 {
			break
		}
		s.one[0] = 0
		next := s.g[i*d : (i+1)*d]
		b := batch.Batch{Tokens: s.toks[i : i+1], Inputs: state, Outputs: s.one, States: s.one, Hidden: next}
		if err := s.seq.Forward(ctx, b, s.logits[:v]); err != nil {
			return err
		}
		logits, state = s.logits[:v], next
	}
	return nil
}

// proposeTree drafts an EAGLE-2 dynamic tree of at most n nodes, Depth levels deep:
// the root's Width best tokens (or Width draws from its distribution), then, level by
// level, children below the Width nodes of the newest level whose paths the draft
// gives the most probability. Each level forwards the tree so far, every node fed its
// parent's state, and reads the chosen nodes' logits and states. Which nodes grow is
// settled before their children are drawn, so sampled siblings stay independent draws
// from their parent's distribution.
func (s *eagleSession) proposeTree(ctx context.Context, n int) error {
	t := s.e.tree
	s.conf = s.conf[:0]
	s.expanded = 0
	if err := s.expand(-1, s.rootLogits, 1, n); err != nil {
		return err
	}
	level := [2]int{0, len(s.toks)} // the newest level's nodes
	for depth := 1; depth < t.Depth && len(s.toks) < n; depth++ {
		s.outs = s.bestOf(level[0], level[1], t.Width)
		if err := s.forwardTree(ctx, s.outs); err != nil {
			return err
		}
		start := len(s.toks)
		for r, node := range s.outs {
			v := s.e.info.VocabSize
			if err := s.expand(node, s.logits[r*v:(r+1)*v], s.conf[node], n); err != nil {
				return err
			}
		}
		if len(s.toks) == start {
			break
		}
		level = [2]int{start, len(s.toks)}
	}
	return nil
}

// bestOf returns the (at most) w nodes of [lo, hi) of the highest confidence, in
// order.
func (s *eagleSession) bestOf(lo, hi, w int) []int32 {
	out := s.outs[:0]
	for i := lo; i < hi; i++ {
		out = append(out, int32(i))
		for j := len(out) - 1; j > 0 && s.conf[out[j]] > s.conf[out[j-1]]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
		if len(out) > w {
			out = out[:w]
		}
	}
	slices.Sort(out)
	return out
}

// forwardTree forwards the draft so far, each node fed its parent's state (the root's
// for the first level), asking the logits and states of the nodes outs.
func (s *eagleSession) forwardTree(ctx context.Context, outs []int32) error {
	if err := s.seq.Truncate(s.base); err != nil {
		return err
	}
	d, v := s.e.info.HiddenSize, s.e.info.VocabSize
	s.inputs = s.inputs[:0]
	for _, p := range s.parents {
		if p < 0 {
			s.inputs = append(s.inputs, s.root...)
		} else {
			s.inputs = append(s.inputs, s.g[int(p)*d:(int(p)+1)*d]...)
		}
	}
	if err := s.shape.Set(s.parents); err != nil {
		return err
	}
	// The states of outs go to a scratch row each, then to their nodes' rows.
	hidden := s.g[len(s.toks)*d:]
	if len(hidden) < len(outs)*d {
		hidden = make([]float32, len(outs)*d)
	}
	b := batch.Batch{Tokens: s.toks, Tree: s.shape, Inputs: s.inputs, Outputs: outs, States: outs, Hidden: hidden}
	if err := s.seq.Forward(ctx, b, s.logits[:len(outs)*v]); err != nil {
		return err
	}
	for r, node := range outs {
		copy(s.g[int(node)*d:(int(node)+1)*d], hidden[r*d:(r+1)*d])
	}
	return nil
}

// expand adds up to Width children below parent (-1: the root), from the logits after
// it: its best tokens, or draws from its distribution, each with its path's
// confidence, conf times its own probability; never past n nodes. Every expansion has
// a q row of its own, which its children report.
func (s *eagleSession) expand(parent int32, logits []float32, conf float64, n int) error {
	w := min(s.e.tree.Width, n-len(s.toks))
	if w <= 0 {
		return nil
	}
	q := s.q[s.expanded]
	s.expanded++
	if s.greedy {
		softmax(logits, q)
		s.top = draft.TopTokens(logits, w, s.top)
		w = len(s.top) // fewer tokens than Width in the vocabulary
	} else if err := s.smp.Process(logits, s.pathHistory(parent), q); err != nil {
		return err
	}
	for c := range w {
		var x int32
		var row []float32
		if s.greedy {
			x = s.top[c]
		} else {
			x, row = s.smp.Sample(q), q
		}
		s.toks, s.parents, s.dists = append(s.toks, x), append(s.parents, parent), append(s.dists, row)
		s.conf = append(s.conf, conf*float64(q[x]))
	}
	return nil
}

// pathHistory is the history followed by the draft's path to node (nothing for -1).
func (s *eagleSession) pathHistory(node int32) []int32 {
	s.path = append(s.path[:0], s.hist...)
	start := len(s.path)
	for a := node; a >= 0; a = s.parents[a] {
		s.path = append(s.path, s.toks[a])
	}
	slices.Reverse(s.path[start:])
	return s.path
}

// softmax writes the distribution of logits at temperature 1 to dst.
func softmax(logits, dst []float32) {
	mx := logits[0]
	for _, x := range logits {
		mx = max(mx, x)
	}
	var sum float64
	for i, x := range logits {
		e := math.Exp(float64(x - mx))
		dst[i] = float32(e)
		sum += e
	}
	for i := range dst[:len(logits)] {
		dst[i] = float32(float64(dst[i]) / sum)
	}
}

// pick chooses a token from logits after hist: the argmax, or a draw from the
// processed distribution, written to q row i.
func (s *eagleSession) pick(logits []float32, hist []int32, i int) (int32, []float32, error) {
	return pickToken(s.smp, s.greedy, logits, hist, s.q[i])
}

func (s *eagleSession) Close() error { return s.seq.Close() }
