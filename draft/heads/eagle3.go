package heads

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
)

// EAGLE3Layer is an EAGLE-3 head as llama.OpenEAGLE3 loads it: a one-layer model
// over the target's tokens, fed beside each token a hidden state g of its own width,
// giving logits over its draft vocabulary and, as the state after its layer 0
// ([batch.Batch.StateLayers] [0]), its pre-norm output; with fc, which turns the
// target's auxiliary hidden states into the first step's g, and d2t.
type EAGLE3Layer interface {
	Layer
	// Project writes fc's output, Info().InputSize values a row, for rows rows of
	// concatenated auxiliary states of ProjectInputSize values each.
	Project(in []float32, rows int, out []float32) error
	// ProjectInputSize is the width of the concatenated auxiliary states.
	ProjectInputSize() int
	// DraftTargets is the target id of each draft id.
	DraftTargets() []int32
	// AuxStateLayers are the target's layers after which the head reads the residual
	// stream (vLLM's eagle_aux_hidden_state_layer_ids less one).
	AuxStateLayers() []int32
}

// EAGLE3 drafts with an EAGLE-3 head (llama.OpenEAGLE3 loads one), as vLLM's and
// SGLang's proposers do: the head's first step over each position reads fc of the
// target's auxiliary hidden states there — the residual stream entering three of its
// layers, kept from the target's own passes — and every later step its own pre-norm
// output. Its logits over the draft vocabulary are placed at their target ids (d2t),
// −∞ elsewhere, so that a drafted token's distribution over the target's vocabulary
// is the head's mapped distribution, zero outside the draft vocabulary. Chains and
// EAGLE-2 dynamic trees are drafted as [EAGLE] drafts them, by the same code.
type EAGLE3 struct {
	e      *EAGLE
	layer  EAGLE3Layer
	layers []int32
	aux    int // the values of the auxiliary states a row: len(layers)·target hidden size
	width  int // the target's state rows: (len(layers)+1)·target hidden size
	dim    int // the head's g
}

// NewEAGLE3 returns the drafter on an EAGLE-3 head for the target described by
// target: the head must read the target's tokens and as many auxiliary states of the
// target's hidden size as it names layers. A zero tree drafts chains.
func NewEAGLE3(layer EAGLE3Layer, target model.Info, tree draft.TreeShape) (*EAGLE3, error) {
	if layer == nil {
		return nil, errors.New("heads: nil EAGLE-3 head")
	}
	info := layer.Info()
	layers, d2t := layer.AuxStateLayers(), layer.DraftTargets()
	th := target.HiddenSize
	switch {
	case th == 0:
		return nil, fmt.Errorf("heads: EAGLE-3 head %s reads the target's hidden states; target %q gives none", info.Name, target.Name)
	case info.InputSize == 0 || info.HiddenSize != info.InputSize:
		return nil, fmt.Errorf("heads: model %q is not an EAGLE-3 head (it takes %d values beside each token and gives states of %d)",
			info.Name, info.InputSize, info.HiddenSize)
	case len(layers) == 0 || layer.ProjectInputSize() != len(layers)*th:
		return nil, fmt.Errorf("heads: EAGLE-3 head %s reads %d values of %d layers' states; target %q has a hidden size of %d",
			info.Name, layer.ProjectInputSize(), len(layers), target.Name, th)
	case int(layers[len(layers)-1]) >= target.Layers:
		return nil, fmt.Errorf("heads: EAGLE-3 head %s reads the stream after layer %d; target %q has %d layers", info.Name, layers[len(layers)-1], target.Name, target.Layers)
	case info.TokenVocab != target.VocabSize || len(d2t) != info.VocabSize:
		return nil, fmt.Errorf("heads: EAGLE-3 head %s reads a vocabulary of %d and maps %d draft ids; target %q has %d tokens",
			info.Name, info.TokenVocab, len(d2t), target.Name, target.VocabSize)
	}
	if tree != (draft.TreeShape{}) {
		if err := tree.Validate(); err != nil {
			return nil, err
		}
	}
	view := &targetVocab{l: layer, d2t: d2t}
	view.info = model.Info{Name: info.Name, Arch: info.Arch, VocabSize: target.VocabSize, ContextLength: info.ContextLength,
		HiddenSize: info.HiddenSize, Layers: 1, InputSize: info.InputSize}
	return &EAGLE3{e: &EAGLE{m: view, info: view.info, tree: tree}, layer: layer, layers: layers,
		aux: len(layers) * th, width: (len(layers) + 1) * th, dim: info.InputSize}, nil
}

// StateLayers are the target's layers after which the head reads the residual stream.
func (e *EAGLE3) StateLayers() []int32 { return e.layers }

// Start implements [draft.Drafter].
func (e *EAGLE3) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	s, err := e.e.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	return &eagle3Session{eagleSession: s.(*eagleSession), e: e}, nil
}

// eagle3Session is an EAGLE session on the head's target-vocabulary view, told the
// projected auxiliary states.
type eagle3Session struct {
	*eagleSession
	e  *EAGLE3
	in []float32   // the auxiliary states, row after row
	g  []float32   // fc's output
	gs [][]float32 // its rows
}

// StateLayers implements [draft.LayerStateSession].
func (s *eagle3Session) StateLayers() []int32 { return s.e.layers }

// Observe implements [draft.StateSession]: each state row — the streams after the
// head's layers, then the final state — is turned into the first step's g by fc, and
// the pairs (token, g) go to the head as an EAGLE layer's do.
func (s *eagle3Session) Observe(tokens []int32, states [][]float32) error {
	n := len(states)
	if n == 0 {
		return s.eagleSession.Observe(tokens, states)
	}
	s.in = s.in[:0]
	for i, st := range states {
		if len(st) != s.e.width {
			return fmt.Errorf("heads: EAGLE-3 head %q: state row %d has %d values, want %d (the target's streams after layers %v and its final state)",
				s.e.e.info.Name, i, len(st), s.e.width, s.e.layers)
		}
		s.in = append(s.in, st[:s.e.aux]...)
	}
	d := s.e.dim
	if cap(s.g) < n*d {
		s.g = make([]float32, n*d)
	}
	s.g = s.g[:n*d]
	if err := s.e.layer.Project(s.in, n, s.g); err != nil {
		return fmt.Errorf("heads: EAGLE-3 head %q: %w", s.e.e.info.Name, err)
	}
	s.gs = s.gs[:0]
	for i := range n {
		s.gs = append(s.gs, s.g[i*d:(i+1)*d])
	}
	return s.eagleSession.Observe(tokens, s.gs)
}

// targetVocab is an EAGLE-3 head seen as an EAGLE layer over the target's vocabulary:
// its logits rows placed at their target ids (−∞ elsewhere), its state the pre-norm
// output.
type targetVocab struct {
	l    EAGLE3Layer
	d2t  []int32
	info model.Info
}

func (t *targetVocab) Info() model.Info { return t.info }

func (t *targetVocab) NewSequence(ctx context.Context) (model.Sequence, error) {
	seq, err := t.l.NewSequence(ctx)
	if err != nil {
		return nil, err
	}
	tv := &targetVocabSeq{t: t, seq: seq, layer0: []int32{0}}
	if ps, ok := seq.(model.SaltedSequence); ok {
		return &prefixTargetVocabSeq{tv, ps}, nil
	}
	return tv, nil
}

// prefixTargetVocabSeq is a targetVocabSeq over a sequence with a salted prefix cache:
// the head's own rows of a prompt are found again, as an EAGLE layer's are (keyed by
// the tokens it is fed, salted with the prompt's first token, on which its inputs —
// fc of the target's states — depend too).
type prefixTargetVocabSeq struct {
	*targetVocabSeq
	ps model.SaltedSequence
}

func (s *prefixTargetVocabSeq) Reuse(tokens []int32) int { return s.ps.Reuse(tokens) }
func (s *prefixTargetVocabSeq) Publish()                 { s.ps.Publish() }
func (s *prefixTargetVocabSeq) Salt(salt uint64) error   { return s.ps.Salt(salt) }

// Forward forwards each item on its own sequence: a head's session forwards only its
// own.
func (t *targetVocab) Forward(ctx context.Context, work []model.Work) error {
	for _, w := range work {
		if err := w.Seq.Forward(ctx, w.Batch, w.Logits); err != nil {
			return err
		}
	}
	return nil
}

// targetVocabSeq is a sequence of the head, its rows mapped.
type targetVocabSeq struct {
	t      *targetVocab
	seq    model.Sequence
	layer0 []int32
	hidden []float32 // the state rows: pre-norm output, then the normed
	logits []float32 // over the draft vocabulary
}

func (s *targetVocabSeq) Len() int                            { return s.seq.Len() }
func (s *targetVocabSeq) Truncate(n int) error                { return s.seq.Truncate(n) }
func (s *targetVocabSeq) Retain(from int, keep []int32) error { return s.seq.Retain(from, keep) }
func (s *targetVocabSeq) Close() error                        { return s.seq.Close() }
func (s *targetVocabSeq) grow(buf []float32, n int) []float32 { // n values, reused
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

func (s *targetVocabSeq) Forward(ctx context.Context, b batch.Batch, logits []float32) error {
	d, dv, v := s.t.info.HiddenSize, len(s.t.d2t), s.t.info.VocabSize
	if len(logits) < len(b.Outputs)*v || len(b.Hidden) < len(b.States)*d {
		return fmt.Errorf("heads: EAGLE-3 head %q: buffers of %d logits and %d state values are short", s.t.info.Name, len(logits), len(b.Hidden))
	}
	inner := b
	s.logits = s.grow(s.logits, len(b.Outputs)*dv)
	if len(b.States) > 0 {
		s.hidden = s.grow(s.hidden, len(b.States)*2*d)
		inner.StateLayers, inner.Hidden = s.layer0, s.hidden
	}
	if err := s.seq.Forward(ctx, inner, s.logits); err != nil {
		return err
	}
	for r := range b.States {
		copy(b.Hidden[r*d:(r+1)*d], s.hidden[r*2*d:r*2*d+d])
	}
	inf := float32(math.Inf(-1))
	for r := range b.Outputs {
		row, src := logits[r*v:(r+1)*v], s.logits[r*dv:(r+1)*dv]
		for i := range row {
			row[i] = inf
		}
		for i, id := range s.t.d2t {
			row[id] = src[i]
		}
	}
	return nil
}
