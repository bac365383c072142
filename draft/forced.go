package draft

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/specula/specula/sampler"
)

// Forced drafts, under the request's constraint, the tokens the constraint forces:
// from the state the history ends in, while the state allows exactly one token
// (end-of-sequence included), that token, up to k. Where the language leaves no
// choice — a schema's keys, `": "`, closing brackets — the target's masked
// distribution is one-hot, so these tokens are accepted with probability 1 and cost
// nothing but their place in the verification pass. Then, when set, drafts the rest
// of each draft after the forced tokens, as if they were already in the history; a
// draft of Then's that reads the target's hidden states (a trained head) cannot
// follow tokens the target has not yet seen, so it drafts only where nothing is
// forced. Without a constraint, Forced is Then alone.
//
// With Text, Forced drafts the run of bytes the constraint forces too, where several
// tokens could write its start (a key `"colour"` can begin with `"`, `"c`, `"col`):
// the run, tokenized as the target's tokenizer writes it (see [ForcedText]). Those
// tokens are a guess — the target may split the run otherwise — but an exact one: the
// acceptance rule keeps only what the target agrees with. Then does not draft after a
// guess but beside it, from the history as it is: the draft is then a tree of two
// branches below the forced tokens, the run's and Then's, and a run the target
// splits otherwise costs Then's draft nothing.
//
// Forced drafts deterministically and needs no model: put it in front of any other
// drafter (a draft model, prompt lookup, [First] of several) to make constrained
// generation — JSON Schema above all — cheaper. Its proposals go through the exact
// acceptance rule like any other, so the output never changes.
type Forced struct {
	// Then drafts after the forced tokens (nil: nothing more).
	Then Drafter
	// Text, when set, lets Forced draft the runs of bytes the constraint forces.
	Text *ForcedText
}

// ForcedText is what [Forced] needs to draft forced runs of bytes: the tokens of
// single bytes (to find the bytes a constraint allows, one at a time), the
// end-of-sequence tokens (a run stops where the text may end) and the target's
// tokenizer. [TextOf] makes one from a tokenizer.
type ForcedText struct {
	// ByteTokens[b] is a token that writes the byte b alone, or -1 when none does.
	ByteTokens [256]int32
	// EOS are the end-of-sequence tokens.
	EOS []int32
	// Encode appends to dst the tokens the target's tokenizer writes text as.
	Encode func(dst []int32, text []byte) []int32
}

// maxForcedRun bounds the bytes of a forced run.
const maxForcedRun = 64

// maxForcedStates bounds the states a session remembers the forced token of; past it
// the memory starts again.
const maxForcedStates = 1 << 12

// Start implements [Drafter].
func (f Forced) Start(ctx context.Context, req Request) (Session, error) {
	if req.MaxK < 0 {
		return nil, fmt.Errorf("draft: Forced: MaxK %d must be >= 0", req.MaxK)
	}
	s := &forcedSession{c: req.Constraint, toks: make([]int32, req.MaxK)}
	if s.c != nil && f.Text != nil {
		if f.Text.Encode == nil {
			return nil, errors.New("draft: Forced: Text without Encode")
		}
		s.text, s.runs, s.run = f.Text, make(map[int32][]int32, 64), make([]byte, 0, maxForcedRun)
	}
	if s.c != nil {
		if req.VocabSize < 1 {
			return nil, fmt.Errorf("draft: Forced: vocabulary size %d under a constraint", req.VocabSize)
		}
		s.row = make([]float32, req.VocabSize)
		s.only = make(map[int32]int32, 64)
	}
	if f.Then == nil {
		return s, nil
	}
	then, err := f.Then.Start(ctx, req.Split(0))
	if err != nil {
		return nil, fmt.Errorf("draft: Forced: %w", err)
	}
	s.then, s.heads = then, len(StateSessions(then)) > 0
	s.ext = make([]int32, 0, req.MaxLen+req.MaxK)
	s.rows, s.parents = make([][]float32, req.MaxK), make([]int32, req.MaxK)
	return s, nil
}

// Drafters implements [Composite]: Then, when set.
func (f Forced) Drafters() []Drafter {
	if f.Then == nil {
		return nil
	}
	return []Drafter{f.Then}
}

// forcedSession drafts the forced tokens and hands the rest to then, which sees the
// history followed by them (ext). The forced tokens are the only continuation the
// language allows, so the next history always begins with ext, as then's contract
// asks; should it not (a decoder that masks the target otherwise), then is no longer
// asked (lost).
type forcedSession struct {
	c     sampler.Constraint
	state int32             // the state the history ends in
	row   []float32         // scratch: a row masked to count the allowed tokens
	only  map[int32]int32   // state → the one token it allows, or -1
	toks  []int32           // the proposal's tokens, the forced first
	text  *ForcedText       // nil: single forced tokens only
	runs  map[int32][]int32 // state → the guessed tokens of the run it forces
	run   []byte            // scratch: a forced run's bytes

	then    Session
	heads   bool    // then reads the target's states: it cannot follow forced tokens
	lost    bool    // a history did not extend ext: then is asked no more
	ext     []int32 // the last history handed to then, forced tokens included
	hlen    int     // the length of the last history, without the forced tokens
	sub     Proposal
	rows    [][]float32
	parents []int32
}

// Constrain implements [Constrained].
func (s *forcedSession) Constrain(state int32) { s.state = state }

// Sessions implements [CompositeSession].
func (s *forcedSession) Sessions() []Session {
	if s.then == nil {
		return nil
	}
	return []Session{s.then}
}

func (s *forcedSession) Propose(ctx context.Context, history []int32, k int, p *Proposal) error {
	p.Reset()
	if k < 0 || k > len(s.toks) {
		return fmt.Errorf("draft: Forced: k = %d outside [0, %d]", k, len(s.toks))
	}
	n, state := s.force(0, k, s.state, false)
	g, _ := s.force(n, k, state, true)
	g -= n
	if s.then == nil || n+g == k || s.lost || n > 0 && s.heads {
		p.Tokens = s.toks[:n+g]
		return nil
	}
	hist := s.extend(history, n)
	if s.lost {
		p.Tokens = s.toks[:n+g]
		return nil
	}
	if n > 0 {
		Constrain(s.then, state)
	}
	if err := s.then.Propose(ctx, hist, k-n-g, &s.sub); err != nil {
		return err
	}
	return s.join(n, g, k, p)
}

// force writes to s.toks from position n the tokens forced from state, up to k in
// all, and returns the position after them and the state they reach: the tokens the
// constraint forces (each the one token its state allows) and, when guess is set, a
// forced run of bytes as the tokenizer writes it first (a guess: the target may
// write the run otherwise).
func (s *forcedSession) force(n, k int, state int32, guess bool) (int, int32) {
	if s.c == nil {
		return n, state
	}
	if guess {
		run := s.runAt(state)
		if len(run) == 0 {
			return n, state
		}
		for _, tok := range run[:min(len(run), k-n)] {
			s.toks[n] = tok
			n++
			state = s.c.Next(state, tok)
		}
	}
	for n < k && state >= 0 {
		tok := s.forcedAt(state)
		if tok < 0 {
			break
		}
		s.toks[n] = tok
		n++
		state = s.c.Next(state, tok)
	}
	return n, state
}

// runAt returns the tokens of the run of bytes state forces, tokenized as the target
// writes it and cut where the constraint would refuse one (nil without Text).
func (s *forcedSession) runAt(state int32) []int32 {
	if s.text == nil {
		return nil
	}
	if run, ok := s.runs[state]; ok {
		return run
	}
	s.run = s.run[:0]
	x, choice := state, false
	for len(s.run) < maxForcedRun {
		b, next, ok := s.onlyByte(x)
		if !ok {
			choice = true
			break
		}
		s.run, x = append(s.run, b), next
	}
	var run []int32
	if len(s.run) > 0 {
		run = s.text.Encode(nil, s.run)
		if choice {
			// The run's last token ends where the text is free: the target may
			// well write a longer token there (`":` where the run ends with `"`).
			run = run[:len(run)-1]
		}
		for i, x := 0, state; i < len(run); i++ {
			if x = s.c.Next(x, run[i]); x < 0 {
				run = run[:i]
				break
			}
		}
	}
	if len(s.runs) >= maxForcedStates {
		clear(s.runs)
	}
	s.runs[state] = run
	return run
}

// onlyByte reports the one byte state x allows, and the state after it: none where
// the text may end there or two bytes are allowed.
func (s *forcedSession) onlyByte(x int32) (byte, int32, bool) {
	for _, e := range s.text.EOS {
		if s.c.Next(x, e) >= 0 {
			return 0, 0, false
		}
	}
	var b byte
	next := int32(-1)
	for c, tok := range s.text.ByteTokens {
		if tok < 0 {
			continue
		}
		if nx := s.c.Next(x, tok); nx >= 0 {
			if next >= 0 {
				return 0, 0, false
			}
			b, next = byte(c), nx
		}
	}
	return b, next, next >= 0
}

// forcedAt returns the one token state allows, or -1 when it allows none or several.
func (s *forcedSession) forcedAt(state int32) int32 {
	if tok, ok := s.only[state]; ok {
		return tok
	}
	clear(s.row)
	tok := int32(-1)
	if s.c.MaskLogits(state, s.row) {
		for i, x := range s.row {
			if math.IsInf(float64(x), -1) {
				continue
			}
			if tok >= 0 {
				tok = -1
				break
			}
			tok = int32(i)
		}
	}
	if len(s.only) >= maxForcedStates {
		clear(s.only)
	}
	s.only[state] = tok
	return tok
}

// extend returns the history then drafts after: history followed by the n forced
// tokens in s.toks. It marks the session lost when history does not begin with the
// last history handed to then.
func (s *forcedSession) extend(history []int32, n int) []int32 {
	if len(history) < s.hlen || len(history) > s.hlen && !s.extends(history) {
		s.lost = true
		return nil
	}
	s.ext = append(s.ext[:s.hlen], history[s.hlen:]...)
	s.hlen = len(history)
	s.ext = append(s.ext, s.toks[:n]...)
	return s.ext
}

// extends reports whether history, longer than the last one, begins with the forced
// tokens handed to then after it.
func (s *forcedSession) extends(history []int32) bool {
	forced := s.ext[s.hlen:]
	return len(history) >= s.hlen+len(forced) && slices.Equal(history[s.hlen:s.hlen+len(forced)], forced)
}

// join makes p the n forced tokens, the g guessed ones (a forced run) and then's
// proposal s.sub: a chain, or — when then's proposal is a tree, or follows a guess
// as its sibling — a tree below the last forced token.
func (s *forcedSession) join(n, g, k int, p *Proposal) error {
	sub := &s.sub
	if len(sub.Tokens) > k-n-g {
		return fmt.Errorf("draft: Forced: the drafter behind proposed %d tokens for k = %d", len(sub.Tokens), k-n-g)
	}
	if n+g == 0 {
		*p = *sub
		return nil
	}
	m := n + g + len(sub.Tokens)
	copy(s.toks[n+g:], sub.Tokens)
	p.Tokens = s.toks[:m]
	if sub.Dists != nil {
		clear(s.rows[:n+g])
		copy(s.rows[n+g:], sub.Dists)
		p.Dists = s.rows[:m]
	}
	if sub.Parents == nil && (g == 0 || len(sub.Tokens) == 0) {
		return nil
	}
	for i := range n + g {
		s.parents[i] = int32(i) - 1
	}
	for i := range sub.Tokens {
		par := int32(i) - 1
		if sub.Parents != nil {
			par = sub.Parents[i]
		}
		if par < 0 {
			s.parents[n+g+i] = int32(n) - 1 // a root hangs below the last forced token
		} else {
			s.parents[n+g+i] = par + int32(n+g)
		}
	}
	p.Parents = s.parents[:m]
	return nil
}

// Learn passes a finished request on to then, when it learns.
func (s *forcedSession) Learn(history []int32) {
	if l, ok := s.then.(Learner); ok {
		l.Learn(history)
	}
}

func (s *forcedSession) Close() error {
	if s.then == nil {
		return nil
	}
	return s.then.Close()
}
