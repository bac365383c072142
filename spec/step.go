package spec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
)

// step drafts, verifies, accepts and emits once.
func (r *run) step(ctx context.Context) error {
	var began time.Time // the step's pace, for an adaptive decoder
	if r.ctl != nil {
		began = time.Now()
	}
	k, ok := r.room()
	if !ok {
		r.finish = FinishLength
		return r.flush()
	}
	di, k, tau, draftDur, err := r.propose(ctx, k)
	if err != nil {
		return err
	}
	if r.stats.StepsByK != nil {
		r.stats.StepsByK[k]++
	}
	verifyStart := r.stats.VerifyTime
	accepted, next, err := r.verify(ctx)
	if errors.Is(err, model.ErrContextFull) {
		r.finish = FinishLength
		return r.flush()
	}
	if err != nil {
		return err
	}
	depth, nodes := r.draft.checked.Depth(), r.draft.checked.Len() // 0 when the draft was dropped
	r.stats.Steps++
	r.count(depth, len(accepted), nodes)
	observed := r.stats.DraftTime
	if err := r.observe(accepted, next); err != nil {
		return err
	}
	if r.ctl != nil {
		// A head's reading of the step's states is part of what its drafts cost.
		draftDur += r.stats.DraftTime - observed
		r.ctl.observe(di, k, depth, len(accepted), nodes+1, draftDur, r.stats.VerifyTime-verifyStart)
		if p := &r.draft.proposed; k > 0 && p.Parents == nil && p.Confidence != nil {
			r.ctl.observeChain(di, k, p.Confidence, depth, len(accepted), draftDur.Seconds(), tau)
		}
	}
	grown := r.pushAll(accepted, next)
	if r.ctl == nil {
		return r.flush()
	}
	r.ctl.grow(grown)
	err = r.flush()
	r.ctl.paced(grown, time.Since(began))
	return err
}

// room returns the most tokens this step may draft: no more than the request can use
// (a step yields up to k+1 tokens) or the context can hold after the pending token.
// It reports false when not even the pending token fits.
func (r *run) room() (int, bool) {
	k := r.d.k
	if mt := r.req.MaxTokens; mt > 0 {
		k = min(k, mt-(len(r.hist)-len(r.req.Prompt))-1)
	}
	if cl := r.d.info.ContextLength; cl > 0 {
		room := cl - r.sess.tgt.Len() - 1
		if room < 0 {
			return 0, false
		}
		k = min(k, room)
	}
	return k, true
}

// propose asks a drafter — the adaptive controller's choice, or the only one — for up
// to k tokens and checks the proposal once, into r.draft. It returns the drafter asked,
// the k it was asked for, the confidence threshold it drafted under and the time it
// took. A drafter that runs out of memory or
// context is dropped for the rest of the request, and the step goes on without a
// draft.
func (r *run) propose(ctx context.Context, k int) (di, asked int, tau float64, took time.Duration, err error) {
	r.draft.checked.Reset()
	r.lang.nodes = r.lang.nodes[:0]
	if r.ctl != nil && k > 0 {
		di, k = r.ctl.choose(k)
	}
	if k > 0 && r.sess.failed[di] {
		k = 0
	}
	if k <= 0 {
		return di, 0, 0, 0, nil
	}
	s := r.sess.drafts[di]
	if r.req.Constraint != nil {
		draft.Constrain(s, r.lang.state)
	}
	tau = r.stopBelow(di)
	t := time.Now()
	err = s.Propose(ctx, r.hist, k, &r.draft.proposed)
	took = time.Since(t)
	r.stats.DraftTime += took
	switch {
	case err == nil:
		if err := r.check(k); err != nil {
			return di, k, tau, took, err
		}
		return di, k, tau, took, r.constrain()
	case ctx.Err() == nil && (errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull)):
		r.stats.DraftError = err.Error()
		r.sess.failed[di] = true
		return di, k, tau, took, nil
	}
	return di, k, tau, took, fmt.Errorf("spec: drafter: %w", err)
}

// check validates the proposal, once per step: no more than k tokens, a parent list
// that makes a tree ([batch.Tree.Set]), and tokens and distributions that fit the
// target's vocabulary ([sampler.Draft.Set]). What passes is r.draft.checked, which the
// target and the sampler take as it is.
func (r *run) check(k int) error {
	p := &r.draft.proposed
	if len(p.Tokens) > k {
		return fmt.Errorf("spec: drafter proposed %d tokens, more than k = %d", len(p.Tokens), k)
	}
	if err := r.draft.shape.Set(p.Parents); err != nil {
		return fmt.Errorf("spec: drafter: %w", err)
	}
	if err := r.draft.checked.Set(r.d.info.VocabSize, p.Tokens, p.Dists, r.draft.shape); err != nil {
		return fmt.Errorf("spec: drafter: %w", err)
	}
	return nil
}

// verify scores the pending token and the draft with the target, judges the draft,
// keeps the accepted path in the target, and returns the accepted tokens and the token
// after them. The draft is the one verified: empty when it was dropped for want of
// room.
func (r *run) verify(ctx context.Context) (accepted []int32, next int32, err error) {
	rows, err := r.score(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := r.maskRows(rows); err != nil {
		return nil, 0, err
	}
	t := time.Now()
	defer func() { r.stats.SampleTime += time.Since(t) }()
	dr := &r.draft
	dr.path, next, err = r.smp.Verify(sampler.Step{History: r.hist, Draft: dr.checked, Logits: rows}, dr.path[:0])
	if err != nil {
		return nil, 0, fmt.Errorf("spec: %w", err)
	}
	if err := r.sess.tgt.Accept(dr.path); err != nil {
		return nil, 0, fmt.Errorf("spec: %w", err)
	}
	dr.accepted = dr.accepted[:0]
	for _, c := range dr.path {
		dr.accepted = append(dr.accepted, dr.checked.Tokens()[c])
	}
	if r.req.Logprobs {
		if err := r.lp.scoreStep(rows, dr.accepted, dr.path, next, r.req.TopLogprobs); err != nil {
			return nil, 0, err
		}
	}
	if err := r.advanceConstraint(next); err != nil {
		return nil, 0, err
	}
	return dr.accepted, next, nil
}

// score runs the target over the pending token and the draft. A draft that does not
// fit in the target's memory or context is dropped, and the pending token is
// verified alone.
func (r *run) score(ctx context.Context) ([][]float32, error) {
	pending := r.hist[len(r.hist)-1]
	t := time.Now()
	defer func() { r.stats.VerifyTime += time.Since(t) }()
	dr := &r.draft.checked
	rows, err := r.sess.tgt.Verify(ctx, pending, dr.Tokens(), dr.Tree())
	if err != nil && dr.Len() > 0 && (errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull)) {
		dr.Reset()
		rows, err = r.sess.tgt.Verify(ctx, pending, nil, batch.Tree{})
	}
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return rows, nil
}

// count records a verification of a draft depth positions deep (nodes tokens in
// all) of which accepted were kept.
func (r *run) count(depth, accepted, nodes int) {
	s := &r.stats
	s.Drafted += depth
	s.Accepted += accepted
	s.DraftNodes += nodes
	for i := range min(depth, len(s.DraftedAt)) {
		s.DraftedAt[i]++
		if i < accepted {
			s.AcceptedAt[i]++
		}
	}
}
