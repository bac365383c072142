// Package draft holds the drafters: cheap guessers of the tokens a target model is about
// to produce. A [Drafter] is shared and safe for concurrent use; each request gets its
// own [Session] from it.
//
// A session proposes up to k tokens after a history — the prompt and everything
// generated so far — and, when it sampled them, reports the processed distribution q
// it drew each token from, so the acceptance rule can stay exact. Deterministic
// drafters report no distributions; the rule then treats q as one-hot. The history only
// grows: each call's history begins with the previous call's, followed by the
// accepted part of the last proposal and one token of the target's. That is how a
// session learns what was accepted. A caller that needs another history starts a new
// session.
package draft

import (
	"context"

	"github.com/specula/specula/sampler"
)

// Drafter makes drafting sessions, one per request.
type Drafter interface {
	// Start begins a session for one request.
	Start(ctx context.Context, req Request) (Session, error)
}

// Request describes the request a session drafts for.
type Request struct {
	// Sampling is the request's sampling parameters. Sessions that draw tokens must
	// process their logits with exactly these parameters (and a random stream of their
	// own), and must draft the argmax when they are greedy.
	Sampling sampler.Params
	// VocabSize is the target's vocabulary size; proposed tokens must lie below it.
	VocabSize int
	// MaxK is the largest k the session will be asked for.
	MaxK int
	// MaxLen is an upper bound on the history length, for sizing buffers up front
	// (0 when unknown).
	MaxLen int
}

// Session is one request's drafting state. It is not safe for concurrent use.
type Session interface {
	// Propose drafts up to k tokens to follow history into p. It may propose fewer,
	// even none. The proposal's slices stay valid until the next call.
	Propose(ctx context.Context, history []int32, k int, p *Proposal) error
	// Close releases the session's resources.
	Close() error
}

// Proposal is a draft: tokens, and the distribution each was drawn from.
type Proposal struct {
	// Tokens are the drafted tokens, in order.
	Tokens []int32
	// Dists, when not nil, holds one processed distribution per token (q). Nil means
	// the tokens were chosen deterministically.
	Dists [][]float32
}

// Reset empties the proposal.
func (p *Proposal) Reset() { p.Tokens, p.Dists = p.Tokens[:0], nil }
