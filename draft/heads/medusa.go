package heads

import (
	"context"
	"fmt"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
)

// Medusa drafts with Medusa heads, from a checkpoint as vLLM serves it (config.json
// model_type medusa): head k reads the target's last hidden state h_t alone, through
// num_hidden_layers residual blocks x = x + SiLU(W·x + b), and predicts the token k+2
// places after it (x_{t+2+k}; the target chose x_{t+1}). It drafts a chain — head k's
// choice at depth k — or, with [Options].Tree, the tree of each head's top
// candidates (Medusa's medusa_choices): every node at depth d gets Width children from
// head d. The heads' choices do not depend on the tokens above them, so one pass of
// the heads per step drafts the whole tree.
//
// It loads vLLM's layout (blocks.k.layers.l.{weight,bias}; one output layer
// lm_heads.0 shared with original_lm_head, or lm_heads.k per head) and the original
// Medusa repository's (k.l.linear.{weight,bias} and k.L.weight, L = the number of
// layers).
type Medusa struct {
	name       string
	dim, vocab int
	w          [][]backend.Matrix // [head][layer]
	b          [][][]float32      // [head][layer]; nil without biases
	lm         []backend.Matrix   // [head]; shared ones are one matrix
	tree       draft.TreeShape
	be         backend.Backend // where the matrices live and the products run
}

// OpenMedusa loads the Medusa heads in dir for the target described by target.
func OpenMedusa(dir string, target model.Info, opts Options) (*Medusa, error) {
	c, f, err := openHead(dir, opts)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if c.ModelType != "medusa" {
		return nil, fmt.Errorf("heads: %s: model_type %q, want medusa", dir, c.ModelType)
	}
	if opts.Tree != (draft.TreeShape{}) {
		if err := opts.Tree.Validate(); err != nil {
			return nil, err
		}
	}
	// The original repository's configs give no sizes: the target's are checked by
	// the tensors' shapes then.
	h := &Medusa{name: headName("Medusa", dir), dim: c.HiddenSize, vocab: c.VocabSize, tree: opts.Tree, be: opts.Backend}
	if h.dim == 0 {
		h.dim = target.HiddenSize
	}
	if h.vocab == 0 {
		h.vocab = target.VocabSize
	}
	if err := checkFits(h.name, h.dim, h.vocab, target); err != nil {
		return nil, err
	}
	layers := *c.NumLayers
	names := medusaNames(f, layers, flag(c.OriginalLMHead, false))
	// Biases as the config says, else as the files hold them (vLLM's default is none).
	bias := flag(c.FCBias, layers > 0 && f.has(names.bias(0, 0)))
	for k := range c.NumHeads {
		if err := h.loadHead(f, names, k, layers, bias); err != nil {
			return nil, err
		}
	}
	if f.has(names.weight(0, layers)) || f.has(names.weight(c.NumHeads, 0)) {
		return nil, fmt.Errorf("heads: %s: the files hold more layers or heads than config.json's %d × %d", dir, c.NumHeads, layers)
	}
	return h, nil
}

// medusaLayout names the tensors of one checkpoint layout.
type medusaLayout struct {
	weight, bias func(k, l int) string
	lm           func(k int) string
}

// medusaNames picks vLLM's layout or the original repository's, by what the files
// hold; with shared (original_lm_head) every head reads vLLM's lm_heads.0.
func medusaNames(f *headFiles, layers int, shared bool) medusaLayout {
	if f.has("0.0.linear.weight") || f.has(fmt.Sprintf("0.%d.weight", layers)) {
		return medusaLayout{
			weight: func(k, l int) string { return fmt.Sprintf("%d.%d.linear.weight", k, l) },
			bias:   func(k, l int) string { return fmt.Sprintf("%d.%d.linear.bias", k, l) },
			lm:     func(k int) string { return fmt.Sprintf("%d.%d.weight", k, layers) },
		}
	}
	return medusaLayout{
		weight: func(k, l int) string { return fmt.Sprintf("blocks.%d.layers.%d.weight", k, l) },
		bias:   func(k, l int) string { return fmt.Sprintf("blocks.%d.layers.%d.bias", k, l) },
		lm: func(k int) string {
			if shared {
				return "lm_heads.0.weight"
			}
			return fmt.Sprintf("lm_heads.%d.weight", k)
		},
	}
}

// loadHead loads head k.
func (h *Medusa) loadHead(f *headFiles, n medusaLayout, k, layers int, bias bool) error {
	var ws []backend.Matrix
	var bs [][]float32
	for l := range layers {
		w, err := f.matrix(n.weight(k, l), h.dim, h.dim)
		if err != nil {
			return err
		}
		ws = append(ws, w)
		if bias {
			b, err := f.vector(n.bias(k, l), h.dim)
			if err != nil {
				return err
			}
			bs = append(bs, b)
		}
	}
	name := n.lm(k)
	var lm backend.Matrix
	for j := range k { // a shared output layer is loaded once
		if n.lm(j) == name {
			lm = h.lm[j]
		}
	}
	if lm == nil {
		var err error
		if lm, err = f.matrix(name, h.vocab, h.dim); err != nil {
			return err
		}
	}
	h.w, h.b, h.lm = append(h.w, ws), append(h.b, bs), append(h.lm, lm)
	return nil
}

// Heads is the number of heads: the deepest a draft goes.
func (h *Medusa) Heads() int { return len(h.w) }

// Close implements [io.Closer]: the heads hold nothing to release of their own
// (their matrices live in their backend until that is closed).
func (h *Medusa) Close() error { return nil }

// Start implements [draft.Drafter].
func (h *Medusa) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	run, err := startRun(ctx, h.name, h.vocab, h.be, req)
	if err != nil {
		return nil, err
	}
	n := len(h.w)
	nodes := max(req.MaxK, n)
	return &medusaSession{h: h, run: run, ConstraintState: draft.NewConstraintState(req.Constraint),
		lastState: lastState{state: make([]float32, h.dim)}, x: make([]float32, h.dim), y: make([]float32, h.dim),
		logits: rows(make([]float32, n*h.vocab), n, h.vocab), q: rows(make([]float32, n*h.vocab), n, h.vocab),
		toks: make([]int32, 0, nodes), dists: make([][]float32, 0, nodes), parents: make([]int32, 0, nodes),
		hist: make([]int32, 0, req.MaxLen+n), chainStop: newChainStop(n, h.vocab)}, nil
}

type medusaSession struct {
	h   *Medusa
	run headRun
	draft.ConstraintState
	lastState
	x, y    []float32
	logits  [][]float32 // per head
	q       [][]float32 // per head: its processed distribution, when sampling
	toks    []int32
	dists   [][]float32
	parents []int32
	level   []int32
	top     []int32
	hist    []int32
	chainStop
}

// heads runs the first n heads on the state.
func (s *medusaSession) heads(n int) error {
	h := s.h
	for k := range n {
		copy(s.x, s.state)
		for l, w := range h.w[k] {
			if err := s.run.mul(w, s.x, s.y); err != nil {
				return fmt.Errorf("heads: %s: %w", h.name, err)
			}
			for j := range s.x {
				v := s.y[j]
				if h.b[k] != nil {
					v += h.b[k][l][j]
				}
				s.x[j] += silu(v)
			}
		}
		if err := s.run.mul(h.lm[k], s.x, s.logits[k]); err != nil {
			return fmt.Errorf("heads: %s: %w", h.name, err)
		}
	}
	return nil
}

func (s *medusaSession) Propose(ctx context.Context, history []int32, k int, p *draft.Proposal) error {
	p.Reset()
	if !s.told || len(history) == 0 || k <= 0 {
		return nil
	}
	s.toks, s.dists, s.parents = s.toks[:0], s.dists[:0], s.parents[:0]
	if s.h.tree.Width > 0 {
		return s.proposeTree(history, min(k, s.h.tree.MaxNodes), p)
	}
	n := min(k, len(s.h.w))
	if err := s.heads(n); err != nil {
		return err
	}
	s.hist = append(s.hist[:0], history...)
	s.chainConf = s.chainConf[:0]
	state := s.State()
	for d := range n {
		if !s.Allows(state, s.logits[d]) {
			break
		}
		x, q, err := s.run.pick(s.logits[d], s.hist, s.q[d])
		if err != nil {
			return fmt.Errorf("heads: %s: %w", s.h.name, err)
		}
		s.toks, s.dists, s.hist = append(s.toks, x), append(s.dists, q), append(s.hist, x)
		state = s.After(state, x)
		if s.ends(s.logits[d], x, q) {
			break
		}
	}
	p.Tokens, p.Confidence = s.toks, s.confidence()
	if !s.run.greedy {
		p.Dists = s.dists
	}
	return nil
}

// proposeTree drafts up to n nodes: level d holds Width children of every node of
// level d−1 (the root first), from head d — its Width best tokens, or Width draws from
// its distribution — Depth levels deep at most.
func (s *medusaSession) proposeTree(history []int32, n int, p *draft.Proposal) error {
	h := s.h
	depth := min(h.tree.Depth, len(h.w))
	if err := s.heads(depth); err != nil {
		return err
	}
	s.level = append(s.level[:0], -1)
	for d := 0; d < depth && len(s.toks) < n && len(s.level) > 0; d++ {
		var q []float32
		if !s.run.greedy {
			// The distribution is the head's alone: the same below every node.
			q = s.q[d]
			if err := s.run.smp.Process(s.logits[d], history, q); err != nil {
				return fmt.Errorf("heads: %s: %w", h.name, err)
			}
		} else {
			s.top = draft.TopTokens(s.logits[d], h.tree.Width, s.top)
		}
		start := len(s.toks)
		for _, parent := range s.level {
			for c := range h.tree.Width {
				if len(s.toks) == n {
					break
				}
				var x int32
				if q != nil {
					x = s.run.smp.Sample(q)
				} else if c < len(s.top) {
					x = s.top[c]
				} else {
					break
				}
				s.toks, s.parents, s.dists = append(s.toks, x), append(s.parents, parent), append(s.dists, q)
			}
		}
		s.level = s.level[:0]
		for i := start; i < len(s.toks); i++ {
			s.level = append(s.level, int32(i))
		}
	}
	p.Tokens, p.Parents = s.toks, s.parents
	if !s.run.greedy {
		p.Dists = s.dists
	}
	return nil
}

func (s *medusaSession) Close() error { return nil }

// WeightBytes is the memory the heads' matrices take.
func (h *Medusa) WeightBytes() int64 {
	lists := [][]backend.Matrix{h.lm}
	lists = append(lists, h.w...)
	return matrixBytes(lists...)
}

// WeightFootprint is where the heads' matrices lie (a memory plan's figure).
func (h *Medusa) WeightFootprint() backend.Footprint {
	lists := [][]backend.Matrix{h.lm}
	lists = append(lists, h.w...)
	return matrixFootprint(lists...)
}
