package spec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
	"github.com/specula/specula/target"
)

// begin readies the run to decode: it checks the request, starts the target's and
// the drafters' sessions, and prefills.
func (r *run) begin(ctx context.Context) error {
	if err := r.prepare(); err != nil {
		return err
	}
	return r.open(ctx)
}

// open starts the target's and the drafters' sessions (none for a PromptOnly
// request: nothing is drafted) and prefills.
func (r *run) open(ctx context.Context) error {
	if err := r.startTarget(ctx); err != nil {
		return err
	}
	if !r.req.PromptOnly {
		if err := r.startDrafters(ctx); err != nil {
			return err
		}
	}
	return r.prefill(ctx)
}

// beginFork readies a further choice of lead's request: its target session forks
// lead's after the prefill, or — when the session does not fork (a model whose
// sequences do not) — starts and prefills on its own; its drafters start and read the
// prompt's states.
func (r *run) beginFork(ctx context.Context, lead target.Session, states [][]float32) error {
	if err := r.prepare(); err != nil {
		return err
	}
	f, ok := lead.(target.ForkSession)
	if !ok {
		return r.open(ctx)
	}
	s, err := f.Fork()
	if err != nil {
		return r.open(ctx) // a prefill of its own (and the fork's error, if it is memory, again)
	}
	r.sess.tgt = s
	if err := r.startDrafters(ctx); err != nil {
		return err
	}
	if r.sess.states == nil {
		return nil
	}
	if r.statesFrom() < len(r.req.Prompt)-1-len(states) {
		// The lead kept too few states for these readers (an EAGLE layer whose
		// prefix cache gave up the lead's rows since): a prefill of its own.
		err := r.sess.tgt.Close()
		r.sess.tgt, r.sess.states = nil, nil
		if err != nil {
			return fmt.Errorf("spec: %w", err)
		}
		if err := r.startTarget(ctx); err != nil {
			return err
		}
		if err := r.keepStates(); err != nil {
			return err
		}
		return r.prefill(ctx)
	}
	return r.tellPrompt(states)
}

// promptStates returns a copy of the prompt's hidden states the target kept — all,
// or the tail its readers need ([draft.StatesFrom]) — when the run keeps them
// (drafters read them), for forks to hand their own readers.
func (r *run) promptStates() [][]float32 {
	if r.sess.states == nil {
		return nil
	}
	var out [][]float32
	for _, s := range r.sess.states.States() {
		out = append(out, append([]float32(nil), s...))
	}
	return out
}

// startTarget starts the request's session in the target.
func (r *run) startTarget(ctx context.Context) error {
	s, err := r.d.target.Start(ctx, r.d.k)
	if err != nil {
		return fmt.Errorf("spec: target %q: %w", r.d.info.Name, err)
	}
	r.sess.tgt = s
	return nil
}

// startDrafters starts a drafting session of each drafter, each with a random stream
// of its own, and the adaptive controller, from what the last request learned.
func (r *run) startDrafters(ctx context.Context) error {
	d, k := r.d, r.d.k
	if k == 0 {
		return nil
	}
	req := draft.Request{
		Prompt:     r.req.Prompt,
		Sampling:   r.req.Sampling,
		VocabSize:  d.info.VocabSize,
		MaxK:       k,
		MaxLen:     cap(r.hist),
		Constraint: r.req.Constraint,
	}
	for i, dr := range d.drafters {
		t := time.Now()
		s, err := dr.Start(ctx, req.Split(i))
		r.stats.PrefillTime += time.Since(t)
		if err != nil {
			return fmt.Errorf("spec: starting drafter %d: %w", i, err)
		}
		r.sess.drafts = append(r.sess.drafts, s)
		for _, ss := range draft.StateSessions(s) {
			r.sess.readers = append(r.sess.readers, reader{s: ss, owner: i})
		}
	}
	if err := r.keepStates(); err != nil {
		return err
	}
	r.sess.failed = make([]bool, len(r.sess.drafts))
	r.confidentSessions()
	r.draft.path, r.draft.accepted = make([]int32, 0, k), make([]int32, 0, k)
	r.stats.DraftedAt = make([]int, k)
	r.stats.AcceptedAt = make([]int, k)
	r.stats.StepsByK = make([]int, k+1)
	if d.adaptive {
		r.ctl = d.controllerFor(len(r.sess.drafts))
	}
	return nil
}

// controllerFor returns the controller of an adaptive request with the given number of
// drafting sessions: what the last request learned, when it had as many, or a new one.
func (d *Decoder) controllerFor(drafters int) *controller {
	d.mu.Lock()
	var c *controller
	if d.learned != nil && d.learned.maxK == d.k && len(d.learned.drafters) == drafters {
		c = d.learned.clone()
	}
	d.mu.Unlock()
	if c == nil {
		c = newController(d.k, drafters)
	}
	c.minK = d.minK
	c.pmin = d.pmin
	c.load = d.loaded
	return c
}

// keepStates makes the target's session keep its hidden states when a drafting
// session reads them.
func (r *run) keepStates() error {
	if len(r.sess.readers) == 0 {
		return nil
	}
	ts, ok := r.sess.tgt.(target.StateSession)
	if !ok {
		return fmt.Errorf("spec: a drafter reads the target's hidden states; target %q gives none", r.d.info.Name)
	}
	if err := r.keepStateRows(ts); err != nil {
		return fmt.Errorf("spec: a drafter reads the target's hidden states: %w", err)
	}
	r.sess.states = ts
	return nil
}

// statesFrom returns the first position of the prompt's prefill whose state a reader
// reads ([draft.StatesFrom]): the target may take a cached prefix in front of it.
func (r *run) statesFrom() int {
	n := max(len(r.req.Prompt)-1, 0)
	from := n
	for _, rd := range r.sess.readers {
		f := 0
		if sf, ok := rd.s.(draft.StatesFrom); ok {
			f = sf.StatesFrom(n)
		}
		from = min(from, max(f, 0))
	}
	return from
}

// tellPrompt tells the readers the prompt after the prefill: the tokens in front of
// states, the states of the prefill's last tokens (all, or those from statesFrom on).
func (r *run) tellPrompt(states [][]float32) error {
	p := r.req.Prompt
	if len(states) > len(p)-1 {
		return fmt.Errorf("spec: the target kept %d states of a prefill of %d tokens", len(states), len(p)-1)
	}
	return r.tell(p[len(p)-len(states):], states)
}

// prefill forwards the prompt but its last token, which becomes the pending token
// (scored, with PromptLogprobs), and tells the readers of states the prompt.
func (r *run) prefill(ctx context.Context) error {
	t := time.Now()
	prompt := r.req.Prompt
	var err error
	if r.req.PromptLogprobs {
		err = r.scorePrompt(ctx, prompt[:len(prompt)-1])
	} else {
		err = r.sess.tgt.Prefill(ctx, prompt[:len(prompt)-1])
	}
	if err == nil && r.sess.states != nil {
		err = r.tellPrompt(r.sess.states.States())
	}
	r.stats.PrefillTime += time.Since(t) // after the drafters' prefills
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

// scorePrompt prefills tokens, the prompt but its last token, keeping the logits
// after each: the score of the prompt token after it, handed out as a prompt chunk of
// choice 0 and kept for the result. The prefill forwards every token (a cached
// prefix holds no logits) and publishes the prompt's blocks as any prefill does.
func (r *run) scorePrompt(ctx context.Context, tokens []int32) error {
	ss, ok := r.sess.tgt.(target.ScoreSession)
	if !ok {
		return fmt.Errorf("PromptLogprobs: the sessions of target %q give no prompt logits (target.ScoreSession)", r.d.info.Name)
	}
	prompt, top := r.req.Prompt, r.req.TopLogprobs
	r.lp.prompt = make([]Logprob, 0, len(tokens))
	return ss.PrefillScored(ctx, tokens, func(from int, rows [][]float32) error {
		at := len(r.lp.prompt)
		for i, row := range rows {
			lp, err := r.lp.sc.logprobOf(row, prompt[from+i+1], top)
			if err != nil {
				return fmt.Errorf("prompt token %d: %w", from+i+1, err)
			}
			r.lp.prompt = append(r.lp.prompt, lp)
		}
		c := Chunk{Choice: r.choice, Prompt: true, Tokens: prompt[from+1 : from+1+len(rows)], Logprobs: r.lp.prompt[at:]}
		if err := r.emit(c); err != nil {
			return fmt.Errorf("emit: %w", err)
		}
		return nil
	})
}

// reader is a session that reads the target's states, and the drafter it belongs to.
type reader struct {
	s     draft.StateSession
	owner int
	width int         // the final state's width, when the rows hold layers' streams in front of it; 0: the rows as they are
	final [][]float32 // the views view hands out
}

// tell hands the readers of states the tokens the history gained and the target's
// states in front of them. A reader that runs out of memory or context drops its
// drafter for the rest of the request, as a failed proposal does.
func (r *run) tell(tokens []int32, states [][]float32) error {
	for i := range r.sess.readers {
		rd := &r.sess.readers[i]
		if r.sess.failed != nil && r.sess.failed[rd.owner] {
			continue
		}
		err := rd.s.Observe(tokens, rd.view(states))
		switch {
		case err == nil:
		case errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull):
			r.stats.DraftError = err.Error()
			if r.sess.failed != nil {
				r.sess.failed[rd.owner] = true
			}
		default:
			return fmt.Errorf("drafter: %w", err)
		}
	}
	return nil
}

// observe tells the readers of states what a step added: the accepted tokens and the
// target's next, each with the state of the row in front of it (the pending token's
// row, then the rows of the accepted nodes). Its time counts as drafting.
func (r *run) observe(accepted []int32, next int32) error {
	if r.sess.states == nil {
		return nil
	}
	t := time.Now()
	defer func() { r.stats.DraftTime += time.Since(t) }()
	states := r.sess.states.States()
	r.sess.obsTok = append(append(r.sess.obsTok[:0], accepted...), next)
	r.sess.obsState = append(r.sess.obsState[:0], states[0])
	for _, c := range r.draft.path {
		r.sess.obsState = append(r.sess.obsState, states[c+1])
	}
	if err := r.tell(r.sess.obsTok, r.sess.obsState); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

// learn hands the finished request to the sessions that learn, and what the adaptive
// controller learned to the next request.
func (r *run) learn() {
	for _, s := range r.sess.drafts {
		if l, ok := s.(draft.Learner); ok {
			l.Learn(r.hist)
		}
	}
	if r.ctl != nil {
		r.stats.DraftPMin = r.ctl.thresholds(r.stats.DraftPMin[:0])
		r.d.mu.Lock()
		r.d.learned = r.ctl.clone()
		r.d.mu.Unlock()
	}
}

// close ends the drafting sessions and the target's session; the first failure
// becomes the request's error when it had none.
func (r *run) close(err *error) {
	keep := func(cerr error) {
		if cerr != nil && *err == nil {
			*err = fmt.Errorf("spec: %w", cerr)
		}
	}
	for _, s := range r.sess.drafts {
		keep(s.Close())
	}
	if r.sess.tgt != nil {
		keep(r.sess.tgt.Close())
	}
}
