// Package target is the target's role in speculative decoding: score a whole draft —
// a chain or a tree — in one batched forward pass, and keep what the acceptance rule
// accepted. It never samples; that is the sampler's job.
//
// [Target] is the role as a decoder sees it, and [Local] its implementation on a
// [model.Model] in this process. The interface carries per step only what a verifier
// on another engine or machine needs: the pending token, the draft's tokens and its
// shape in, one row of logits per position out, and then the accepted path.
//
// A session keeps one token pending: the last token of the history, already chosen
// but not yet forwarded. A verification forwards the pending token and the draft
// together, so the distributions after the pending token and after each drafted token
// come from one pass, and a step without a draft is plain decoding.
package target

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sched"
)

// Target is a target model as a speculative decoder uses it: it describes the model
// and starts one session per request. A Target is safe for concurrent use.
type Target interface {
	// Info describes the model: VocabSize is the length of every row of logits, and
	// ContextLength bounds what a session may hold (0: no limit).
	Info() model.Info
	// Start begins an empty session for one request, for drafts of up to maxDraft
	// tokens.
	Start(ctx context.Context, maxDraft int) (Session, error)
}

// Session is one request's state in the target: the tokens forwarded so far. The
// history's last token, chosen but not yet forwarded, is pending: the caller hands it
// to each Verify. A Session is not safe for concurrent use.
type Session interface {
	// Len is the number of tokens the session holds, the pending token not included.
	Len() int
	// Prefill forwards tokens without asking for logits: the prompt but its last
	// token, which becomes the first pending token. On error the session may hold
	// part of the tokens.
	Prefill(ctx context.Context, tokens []int32) error
	// Verify forwards the pending token followed by the draft — draft[i] follows
	// draft[shape.Parent(i)], or the pending token when that is -1; the zero Tree is
	// a chain — and returns len(draft)+1 rows of logits: row 0 after the pending
	// token, row i+1 after draft[i] and its ancestors. The rows stay valid until the
	// next call. Every successful Verify is followed by one Accept.
	//
	// When the draft does not fit, Verify fails with an error that wraps
	// [model.ErrOutOfMemory] or [model.ErrContextFull]; on any error the session is
	// as it was, so that the caller may verify the pending token alone.
	Verify(ctx context.Context, pending int32, draft []int32, shape batch.Tree) ([][]float32, error)
	// Accept keeps the pending token and the tokens of the last verified draft on
	// path — indices into the draft, root first, each a child of the one before; for
	// a chain 0 to a−1 — and drops the others. The session then holds the pending
	// token and the path, and the token the rule chose after them is the next
	// pending token. A session on another machine may send the path along with the
	// next call instead of on its own.
	Accept(path []int32) error
	// Close releases the session; it must not be used after.
	Close() error
}

// StateSession is a [Session] that also gives the target's hidden states, for drafters
// that read them (trained heads). [Local]'s sessions are StateSessions.
type StateSession interface {
	Session
	// KeepStates makes every later Prefill and Verify keep the final hidden state of
	// each token it forwards — the normed input of the output layer — from the same
	// pass. It fails when the model gives none.
	KeepStates() error
	// States returns the hidden states of the tokens the last Prefill or Verify
	// forwarded, one per token (for Verify, row i as its rows of logits). They stay
	// valid until the next call.
	States() [][]float32
}

// PrefixStateSession is a [StateSession] whose prefill can keep the states of only
// its last tokens, and so take a cached prefix in front of them: what drafters that
// read the last state alone (Medusa, MLPSpeculator), or that keep their own rows of a
// cached prefix (EAGLE), need to keep the prefix cache. [Local]'s sessions are
// PrefixStateSessions.
type PrefixStateSession interface {
	StateSession
	// KeepStatesFrom is KeepStates for readers that need no state of the next
	// prefill's first from tokens: that prefill may take a cached prefix of up to
	// from of them, and States then holds the states of its tokens from position
	// from on (all of them when from is 0). Later prefills and every Verify keep
	// every state, as after KeepStates.
	KeepStatesFrom(from int) error
}

// ScoreSession is a [Session] whose prefill can also give the logits after every
// token it forwards: what scoring a text needs (the log-probability of each of its
// tokens given those before, as lm-evaluation-harness asks of a completions server
// with echo and logprobs). [Local]'s sessions are ScoreSessions.
type ScoreSession interface {
	Session
	// PrefillScored is Prefill, forwarding every token (a cached prefix is not taken:
	// its logits were never kept), and calls score with the rows of logits after
	// tokens[from], tokens[from+1], …, in order, a slice of them at a time. The rows
	// stay valid until score returns; an error from score ends the prefill with it.
	PrefillScored(ctx context.Context, tokens []int32, score func(from int, rows [][]float32) error) error
}

// ForkSession is a [Session] that may fork: n samples of one prompt prefill it once
// and fork, sharing the prompt's key/value memory copy-on-write. [Local]'s sessions
// have Fork; it succeeds when the model's sequences fork (the Llama runtime's do) and
// fails otherwise, and a caller then starts a session of its own.
type ForkSession interface {
	Session
	// Fork returns a new session holding the same tokens, with the same pending
	// token to come, and the same choice of keeping states. It fails between a
	// Verify and its Accept.
	Fork() (Session, error)
}

// Local is the [Target] on a [model.Model] in this process: a session is a sequence
// of the model plus the rows its passes fill — logits, and hidden states when kept —
// and a verification is one forward pass of the pending token and the draft, with the
// draft's tree as the batch's shape. When the sessions' passes run, and how much of a
// prompt goes in each, is the scheduler's ([sched.Scheduler]): Local's sequences are the
// scheduled model's.
type Local struct {
	m    model.Model
	info model.Info

	// PrefillChunk is how many prompt tokens a session's Prefill forwards per pass
	// alone, or beside other prefills only; the context is checked between passes.
	// 0 means [sched.DefaultPrefillChunk]. Set it before the first Start.
	PrefillChunk int
	// BatchWait is how long a pass waits for the other open sessions to join it
	// (0: [sched.DefaultWait]). Concurrent requests then share each pass — every
	// weight read once for all their verifications and prefill chunks — and a lone
	// request never waits. A negative BatchWait turns batching off: every session
	// forwards on its own. Set it before the first Start.
	BatchWait time.Duration
	// SharedChunk is how many prompt tokens a prefill puts in one pass while other
	// sessions stream tokens (0: [sched.DefaultSharedChunk]): a long prompt is
	// prefilled a slice a pass, inside the passes of the running requests, so that it
	// does not stall their streams (chunked prefill). Set it before the first Start.
	SharedChunk int

	once   sync.Once
	passes *sched.Scheduler // the model, its sequences scheduled
}

// scheduled returns the model with its sequences scheduled, made at first use.
func (l *Local) scheduled() *sched.Scheduler {
	l.once.Do(func() {
		l.passes = sched.New(l.m, sched.Options{Wait: l.BatchWait, PrefillChunk: l.PrefillChunk, SharedChunk: l.SharedChunk})
	})
	return l.passes
}

// NewLocal returns the target on m.
func NewLocal(m model.Model) (*Local, error) {
	if m == nil {
		return nil, errors.New("target: nil model")
	}
	info := m.Info()
	if info.VocabSize < 1 {
		return nil, fmt.Errorf("target: model %q reports vocabulary size %d", info.Name, info.VocabSize)
	}
	return &Local{m: m, info: info}, nil
}

// Info implements [Target].
func (l *Local) Info() model.Info { return l.info }

// BatchStats reports how the target's passes went: how many ran, and how many
// sessions' forwards and tokens they carried.
func (l *Local) BatchStats() sched.Stats {
	return l.scheduled().Stats()
}

// Load reports what the target's shared passes carry and what a pass costs by its
// tokens.
func (l *Local) Load() sched.Load { return l.scheduled().Load() }

// Sharing is the mean number of sessions' forwards per recent pass (see [sched.Load]):
// with Marginal, what an adaptive decoder prices its drafts by (spec.PassCost).
func (l *Local) Sharing() float64 { return l.Load().Sharing() }

// Marginal is the time n tokens of one session add to a pass that carries the other
// sessions' (see [sched.Load.Marginal]).
func (l *Local) Marginal(n float64) time.Duration { return l.Load().Marginal(n) }

// Start implements [Target]: the session holds a new sequence of the model.
func (l *Local) Start(ctx context.Context, maxDraft int) (Session, error) {
	if maxDraft < 0 {
		return nil, fmt.Errorf("target: maximum draft size %d must be >= 0", maxDraft)
	}
	seq, err := l.scheduled().NewSequence(ctx)
	if err != nil {
		return nil, fmt.Errorf("target: new sequence: %w", err)
	}
	return l.newSession(seq, maxDraft), nil
}

// newSession returns a session on seq with buffers of its own.
func (l *Local) newSession(seq model.Sequence, maxDraft int) *session {
	vocab, n := l.info.VocabSize, maxDraft+1
	s := &session{
		local:    l,
		seq:      seq,
		width:    l.info.HiddenSize,
		maxDraft: maxDraft,
		toks:     make([]int32, 0, n),
		path:     make([]int32, 0, n),
		outputs:  make([]int32, n),
	}
	s.logits, s.rows = logitRows(nil, nil, n, vocab)
	for i := range n {
		s.outputs[i] = int32(i)
	}
	return s
}

// session is a [Local] target's session: a sequence of the scheduled model, and the
// rows its passes fill.
type session struct {
	local    *Local
	seq      model.Sequence
	maxDraft int

	base    int        // sequence length before the last verification
	last    int        // tokens forwarded by the last verification; 0 once accepted
	toks    []int32    // the pending token and the draft
	tree    batch.Tree // their shape: the draft's, below the pending token
	path    []int32    // the batch indices Accept keeps
	outputs []int32
	logits  []float32
	rows    [][]float32

	// Hidden states, when kept: width values per forwarded token; with layers, the
	// residual stream after each of them in front of the final state.
	width  int
	keep   bool
	from   int // the next prefill keeps the states from this token on (KeepStatesFrom)
	layers []int32
	hidden []float32
	states [][]float32
}

func (s *session) KeepStates() error {
	if s.width == 0 {
		return errors.New("target: the model gives no hidden states")
	}
	s.keep = true
	return nil
}

func (s *session) KeepStatesFrom(from int) error {
	if from < 0 {
		return fmt.Errorf("target: KeepStatesFrom(%d): a position is at least 0", from)
	}
	if err := s.KeepStates(); err != nil {
		return err
	}
	s.from = from
	return nil
}

func (s *session) States() [][]float32 { return s.states }

// stateRows sizes the states for n tokens.
func (s *session) stateRows(n int) {
	if cap(s.hidden) < n*s.width {
		s.hidden = make([]float32, n*s.width)
	}
	s.hidden = s.hidden[:n*s.width]
	s.states = s.states[:0]
	for i := range n {
		s.states = append(s.states, s.hidden[i*s.width:(i+1)*s.width])
	}
}

// indices returns 0, 1, …, n-1, from the outputs' list when it is long enough.
func (s *session) indices(n int) []int32 {
	for len(s.outputs) < n {
		s.outputs = append(s.outputs, int32(len(s.outputs)))
	}
	return s.outputs[:n]
}

func (s *session) Len() int { return s.seq.Len() }

func (s *session) Prefill(ctx context.Context, tokens []int32) error {
	return s.prefill(ctx, tokens, nil)
}

// scoreRows bounds the rows of logits a scored prefill asks for in one pass (with
// the chunk size): a vocabulary of 151 936 makes each row 0.6 MB.
const scoreRows = 8 << 20 // floats

func (s *session) PrefillScored(ctx context.Context, tokens []int32, score func(from int, rows [][]float32) error) error {
	if score == nil {
		return errors.New("target: PrefillScored without a score function")
	}
	s.local.passes.Prefilling(s.seq, true) // its rows of logits do not make it a stream
	defer s.local.passes.Prefilling(s.seq, false)
	return s.prefill(ctx, tokens, score)
}

// prefill forwards tokens chunk by chunk; with score, asking for every token's
// logits and handing them to score.
func (s *session) prefill(ctx context.Context, tokens []int32, score func(from int, rows [][]float32) error) error {
	ps, reuse := s.seq.(model.PrefixSequence)
	from := min(s.from, len(tokens)) // the first token whose state is kept
	s.from = 0
	if reuse && s.seq.Len() == 0 && score == nil && (!s.keep || from > 0) {
		// A prefix computed before (and published) is taken as it is: only the
		// rest is forwarded. (Not past the first kept state, nor when the logits of
		// every token are asked for.)
		limit := len(tokens)
		if s.keep {
			limit = from
		}
		n := ps.Reuse(tokens[:limit])
		tokens, from = tokens[n:], from-n
	}
	if s.keep {
		s.stateRows(len(tokens) - from)
	}
	if reuse {
		defer ps.Publish()
	}
	var logits []float32
	var rows [][]float32
	vocab := s.local.info.VocabSize
	for done := 0; done < len(tokens); {
		n := min(s.local.passes.Chunk(s.seq), len(tokens)-done)
		if score != nil {
			n = min(n, max(1, scoreRows/vocab))
		}
		b := batch.Batch{Tokens: tokens[done : done+n]}
		if s.keep && done+n > from {
			lo := max(from, done) // the chunk's first kept state
			b.States, b.Hidden, b.StateLayers = s.indices(n)[lo-done:], s.hidden[(lo-from)*s.width:(done+n-from)*s.width], s.layers
		}
		if score != nil {
			b.Outputs = s.indices(n)
			logits, rows = logitRows(logits, rows, n, vocab)
		}
		if err := s.seq.Forward(ctx, b, logits); err != nil {
			return fmt.Errorf("target: prefill: %w", err)
		}
		if score != nil {
			if err := score(done, rows); err != nil {
				return err
			}
		}
		done += n
	}
	return nil
}

// logitRows sizes the logits of n rows of vocab, and the rows over them, reusing
// logits and rows.
func logitRows(logits []float32, rows [][]float32, n, vocab int) ([]float32, [][]float32) {
	if cap(logits) < n*vocab {
		logits = make([]float32, n*vocab)
	}
	logits = logits[:n*vocab]
	rows = rows[:0]
	for i := range n {
		rows = append(rows, logits[i*vocab:(i+1)*vocab])
	}
	return logits, rows
}

func (s *session) Verify(ctx context.Context, pending int32, draft []int32, shape batch.Tree) ([][]float32, error) {
	if s.last != 0 {
		return nil, errors.New("target: Verify before the last verification was accepted")
	}
	if len(draft) > s.maxDraft {
		return nil, fmt.Errorf("target: draft of %d tokens exceeds the maximum of %d", len(draft), s.maxDraft)
	}
	if !shape.Chain() && shape.Len() != len(draft) {
		return nil, fmt.Errorf("target: a tree of %d nodes for a draft of %d tokens", shape.Len(), len(draft))
	}
	s.toks = append(append(s.toks[:0], pending), draft...)
	s.tree.SetRooted(shape)
	n := len(s.toks)
	s.base = s.seq.Len()
	b := batch.Batch{Tokens: s.toks, Tree: s.tree, Outputs: s.outputs[:n]}
	if s.keep {
		s.stateRows(n)
		b.States, b.Hidden, b.StateLayers = b.Outputs, s.hidden, s.layers
	}
	if err := s.seq.Forward(ctx, b, s.logits); err != nil {
		return nil, fmt.Errorf("target: verify: %w", err)
	}
	s.last = n
	return s.rows[:n], nil
}

func (s *session) Accept(path []int32) error {
	if s.last == 0 {
		return errors.New("target: Accept without a verification to accept from")
	}
	nodes := s.last - 1
	prev := int32(-1)
	for i, c := range path {
		if c < 0 || int(c) >= nodes {
			return fmt.Errorf("target: path node %d at position %d is outside the draft of %d tokens", c, i, nodes)
		}
		// Batch index c+1 holds draft token c: the pending token is 0.
		if s.tree.Parent(int(c)+1)-1 != prev {
			return fmt.Errorf("target: path node %d at position %d is not a child of %d", c, i, prev)
		}
		prev = c
	}
	var err error
	if s.tree.Chain() {
		err = s.seq.Truncate(s.base + 1 + len(path)) // a chain's path is a prefix
	} else {
		s.path = append(s.path[:0], 0)
		for _, c := range path {
			s.path = append(s.path, c+1)
		}
		err = s.seq.Retain(s.base, s.path)
	}
	if err != nil {
		return fmt.Errorf("target: accept: %w", err)
	}
	s.last = 0
	if ps, ok := s.seq.(model.PrefixSequence); ok {
		ps.Publish() // the pending token and the accepted path stay
	}
	return nil
}

// Fork implements [ForkSession] when the model's sequences fork.
func (s *session) Fork() (Session, error) {
	if s.last != 0 {
		return nil, errors.New("target: Fork between a verification and its Accept")
	}
	f, ok := s.seq.(model.ForkSequence)
	if !ok {
		return nil, errors.New("target: the model's sequences do not fork")
	}
	seq, err := f.Fork()
	if err != nil {
		return nil, fmt.Errorf("target: fork: %w", err)
	}
	n := s.local.newSession(seq, s.maxDraft)
	n.keep, n.layers, n.width = s.keep, s.layers, s.width
	return n, nil
}

func (s *session) Close() error {
	if err := s.seq.Close(); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	return nil
}
