package heads

import (
	"context"
	"fmt"
	"math"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
)

// MLPSpeculator drafts with IBM's MLPSpeculator head, from a checkpoint as vLLM serves
// it (config.json model_type mlp_speculator, the ibm-fms accelerators' layout): from
// the target's last hidden state h_t and the token x_{t+1} the target chose from it,
// stage i mixes its state with the embedding of the token before and predicts the
// next: a chain of up to n_predict tokens per step, each stage reading the token the
// stage before it drafted.
//
// With sw = 0.5^(0.5/n_predict) and ew = √((1 − sw²)·inner_dim/2): s = h_t (scaled to
// rms 1/√2 with scale_input); for each stage, s = GELU(ln(sw·proj(s) + ew·emb(x))),
// logits = head(s), where ln(x) = w ⊙ x/rms(x) + b.
type MLPSpeculator struct {
	name              string
	dim, inner, vocab int
	emb, proj, head   []backend.Matrix // per stage; tied checkpoints share them
	lnW, lnB          [][]float32
	scale             bool
	stateW, embW      float64
	be                backend.Backend // where the matrices live and the products run
}

// OpenMLPSpeculator loads the MLPSpeculator in dir for the target described by target,
// tied (tie_weights: one emb, head and ln for every stage, proj.1 for every stage after
// the first) or untied (emb.i, proj.i, head.i, ln.i per stage).
func OpenMLPSpeculator(dir string, target model.Info, opts Options) (*MLPSpeculator, error) {
	c, f, err := openHead(dir, opts)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if c.ModelType != "mlp_speculator" {
		return nil, fmt.Errorf("heads: %s: model_type %q, want mlp_speculator", dir, c.ModelType)
	}
	h := &MLPSpeculator{name: headName("MLPSpeculator", dir), dim: c.EmbDim, inner: c.InnerDim, vocab: c.VocabSize,
		scale: flag(c.ScaleInput, false), be: opts.Backend}
	if err := checkFits(h.name, h.dim, h.vocab, target); err != nil {
		return nil, err
	}
	tied := flag(c.TieWeights, false)
	for i := range c.NPredict {
		if err := h.loadStage(f, i, tied); err != nil {
			return nil, err
		}
	}
	h.stateW = math.Pow(0.5, 0.5/float64(c.NPredict))
	h.embW = math.Sqrt((1 - h.stateW*h.stateW) * float64(h.inner) / 2)
	return h, nil
}

// loadStage loads the weights of stage i (shared ones once).
func (h *MLPSpeculator) loadStage(f *headFiles, i int, tied bool) error {
	at, pi := i, i
	if tied {
		at, pi = 0, min(i, 1)
	}
	if tied && i > 1 {
		h.emb, h.proj, h.head = append(h.emb, h.emb[0]), append(h.proj, h.proj[1]), append(h.head, h.head[0])
		h.lnW, h.lnB = append(h.lnW, h.lnW[0]), append(h.lnB, h.lnB[0])
		return nil
	}
	proj, err := f.matrix(fmt.Sprintf("proj.%d.weight", pi), h.inner, h.projInputs(pi))
	if err != nil {
		return err
	}
	h.proj = append(h.proj, proj)
	if tied && i == 1 {
		h.emb, h.head = append(h.emb, h.emb[0]), append(h.head, h.head[0])
		h.lnW, h.lnB = append(h.lnW, h.lnW[0]), append(h.lnB, h.lnB[0])
		return nil
	}
	emb, err := f.matrix(fmt.Sprintf("emb.%d.weight", at), h.vocab, h.inner)
	if err != nil {
		return err
	}
	head, err := f.matrix(fmt.Sprintf("head.%d.weight", at), h.vocab, h.inner)
	if err != nil {
		return err
	}
	w, err := f.vector(fmt.Sprintf("ln.%d.weight", at), h.inner)
	if err != nil {
		return err
	}
	b, err := f.vector(fmt.Sprintf("ln.%d.bias", at), h.inner)
	if err != nil {
		return err
	}
	h.emb, h.head, h.lnW, h.lnB = append(h.emb, emb), append(h.head, head), append(h.lnW, w), append(h.lnB, b)
	return nil
}

// Stages is the most tokens the head drafts per step.
func (h *MLPSpeculator) Stages() int { return len(h.proj) }

// projInputs is the number of values stage i's projection reads: the target's state
// for the first stage, the stage before's after.
func (h *MLPSpeculator) projInputs(i int) int {
	if i == 0 {
		return h.dim
	}
	return h.inner
}

// Close implements [io.Closer]: the head holds nothing to release of its own (its
// matrices live in its backend until that is closed).
func (h *MLPSpeculator) Close() error { return nil }

// Start implements [draft.Drafter].
func (h *MLPSpeculator) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	run, err := startRun(ctx, h.name, h.vocab, h.be, req)
	if err != nil {
		return nil, err
	}
	n := len(h.proj)
	return &mlpSession{h: h, run: run, ConstraintState: draft.NewConstraintState(req.Constraint),
		lastState: lastState{state: make([]float32, h.dim)}, s: make([]float32, max(h.dim, h.inner)), z: make([]float32, h.inner),
		e: make([]float32, h.inner), logits: make([]float32, h.vocab),
		q: rows(make([]float32, n*h.vocab), n, h.vocab), toks: make([]int32, 0, n), dists: make([][]float32, 0, n),
		hist: make([]int32, 0, req.MaxLen+n), chainStop: newChainStop(n, h.vocab)}, nil
}

type mlpSession struct {
	h   *MLPSpeculator
	run headRun
	draft.ConstraintState
	lastState
	s, z, e []float32
	logits  []float32
	q       [][]float32
	toks    []int32
	dists   [][]float32
	hist    []int32
	chainStop
}

func (s *mlpSession) Propose(ctx context.Context, history []int32, k int, p *draft.Proposal) error {
	p.Reset()
	if !s.told || len(history) == 0 {
		return nil // no state yet: nothing to draft from
	}
	h := s.h
	n := min(k, len(h.proj))
	if h.scale {
		rmsScale(s.s[:h.dim], s.state, 1e-6, 1/math.Sqrt2)
	} else {
		copy(s.s, s.state)
	}
	s.toks, s.dists, s.chainConf = s.toks[:0], s.dists[:0], s.chainConf[:0]
	s.hist = append(s.hist[:0], history...)
	tok := history[len(history)-1]
	state := s.State()
	for i := range n {
		if err := s.stage(i, tok); err != nil {
			return err
		}
		if !s.Allows(state, s.logits) {
			break
		}
		x, q, err := s.run.pick(s.logits, s.hist, s.q[i])
		if err != nil {
			return fmt.Errorf("heads: %s: %w", h.name, err)
		}
		s.toks, s.dists, s.hist = append(s.toks, x), append(s.dists, q), append(s.hist, x)
		tok, state = x, s.After(state, x)
		if s.ends(s.logits, x, q) {
			break
		}
	}
	p.Tokens, p.Confidence = s.toks, s.confidence()
	if !s.run.greedy {
		p.Dists = s.dists
	}
	return nil
}

// stage runs stage i after token tok: the state moves on and the logits are its.
func (s *mlpSession) stage(i int, tok int32) error {
	h := s.h
	in := s.s[:h.projInputs(i)]
	if err := s.run.mul(h.proj[i], in, s.z); err != nil {
		return fmt.Errorf("heads: %s: %w", h.name, err)
	}
	if err := s.run.row(h.emb[i], tok, s.e); err != nil {
		return fmt.Errorf("heads: %s: %w", h.name, err)
	}
	for j := range s.z {
		s.z[j] = float32(h.stateW*float64(s.z[j]) + h.embW*float64(s.e[j]))
	}
	st := s.s[:h.inner]
	rmsScale(st, s.z, 1e-6, 1)
	for j := range st {
		st[j] = gelu(st[j]*h.lnW[i][j] + h.lnB[i][j])
	}
	if err := s.run.mul(h.head[i], st, s.logits); err != nil {
		return fmt.Errorf("heads: %s: %w", h.name, err)
	}
	return nil
}

func (s *mlpSession) Close() error { return nil }

// WeightBytes is the memory the head's matrices take.
func (h *MLPSpeculator) WeightBytes() int64 { return matrixBytes(h.emb, h.proj, h.head) }

// WeightFootprint is where the head's matrices lie (a memory plan's figure).
func (h *MLPSpeculator) WeightFootprint() backend.Footprint {
	return matrixFootprint(h.emb, h.proj, h.head)
}
