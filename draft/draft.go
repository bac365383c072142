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
//
// The package holds the contract — [Drafter], [Session], [Proposal], and what a
// session may add to it ([Constrained], [StateSession], [Learner]) — and the
// combinators ([First], [Func]): a drafter that combines others is a [Composite], and
// [Parts] and [SessionParts] are the one walk through combined drafters and sessions.
// It holds tree shapes and the small-model drafter ([SmallModel]). Drafting from text
// seen before, with no model (prompt lookup, suffix drafting), is package draft/lookup;
// the trained heads that read the target's hidden states (MLPSpeculator, Medusa,
// EAGLE) are package draft/heads. Neither is imported here: drafters depend on the
// contract, never the other way.
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
	// Prompt is the request's prompt, for sessions that prepare at the start (a
	// draft model forwards it then, with the target's prefill); the history of the
	// first Propose begins with it. It must not be kept.
	Prompt []int32
	// Sampling is the request's sampling parameters, with a random stream of the
	// session's own ([sampler.Params.Split] of the request's): a session that draws
	// tokens makes its sampler with sampler.New(Sampling, vocab) and takes every
	// random number it needs from that sampler. Its draws are then independent of the
	// acceptance rule's and of every other session's, as exactness requires; a
	// drafter never picks a seed or a stream itself, and one that starts other
	// drafters hands each of them Split(i).
	//
	// Exactness only needs each reported q to be the distribution its token was
	// really drawn from (see Proposal.Dists). Processing the draft logits with
	// exactly these parameters — temperature, top-k, top-p, min-p, penalty — and
	// drafting the argmax when they are greedy is what makes drafts good: the closer q
	// is to the target's processed p, the more of each draft is accepted (Σ min(p, q)
	// per token).
	Sampling sampler.Params
	// VocabSize is the target's vocabulary size; proposed tokens must lie below it.
	VocabSize int
	// MaxK is the largest k the session will be asked for (the decoder's K).
	MaxK int
	// MaxLen is an upper bound on the history length, for sizing buffers up front
	// (0 when unknown).
	MaxLen int
	// Constraint, when set, restricts the output to a language (see
	// [sampler.Constraint]). A session that samples its tokens masks its logits with
	// the state each drafted token reaches, from the state the decoder gives it before
	// each Propose ([Constrained]); the decoder ends any draft at a token the language
	// forbids, so sessions that do not know of constraints stay correct, only
	// less useful.
	Constraint sampler.Constraint
}

// Constrained is a session that drafts under the request's Constraint: before each
// Propose the decoder tells it the state the history ends in.
type Constrained interface {
	Session
	Constrain(state int32)
}

// Constrain hands the state to every session of s that drafts under a constraint,
// looking through composites ([SessionParts]).
func Constrain(s Session, state int32) {
	for part := range SessionParts(s) {
		if c, ok := part.(Constrained); ok {
			c.Constrain(state)
		}
	}
}

// Split returns the request as the i-th of several drafters started for it sees it:
// the same request, with a random stream of its own (see Sampling). Combinators such
// as [First] hand one to each drafter they start.
func (r Request) Split(i int) Request {
	r.Sampling = r.Sampling.Split(i)
	return r
}

// Session is one request's drafting state. It is not safe for concurrent use.
type Session interface {
	// Propose drafts up to k tokens (chain or tree nodes) to follow history into p. It
	// may propose fewer, even none. The proposal's slices stay valid until the next
	// call.
	//
	// k is at most Request.MaxK, and often less: the decoder drafts no more than the
	// request can use, k ≤ MaxTokens − generated − 1 (a step emits up to k + 1
	// tokens) and k ≤ ContextLength − len(history) (the target must hold the pending
	// token, history's last, and the draft), and an adaptive decoder picks k, 0
	// included, every step.
	Propose(ctx context.Context, history []int32, k int, p *Proposal) error
	// Close releases the session's resources.
	Close() error
}

// Proposal is a draft: tokens, and the distribution each was drawn from. It is a tree
// of alternative continuations, and a chain — each token following the one before —
// when Parents is nil. The decoder checks a proposal once, when it is made, and hands
// it on checked (as a [batch.Tree] and a [sampler.Draft]) to the target and the
// acceptance rule.
type Proposal struct {
	// Tokens are the drafted tokens, in order.
	Tokens []int32
	// Dists, when not nil, holds for each token the distribution q it was drawn from,
	// one row per token (the same number of rows as Tokens). A nil row, or a nil Dists,
	// means the token was chosen deterministically: q is one-hot on it, and the
	// target keeps it with probability p(token). Deterministic and sampled tokens may
	// be mixed in one proposal, chain or tree. A row must be the true distribution the
	// token was drawn from: non-negative, summing to 1, positive at the token, and no
	// longer than the target's vocabulary (shorter rows read as 0 beyond their end);
	// the decoder rejects a proposal whose rows are not, since any other q would bias
	// the output. Siblings in a tree drawn from q must be independent draws (with
	// replacement).
	Dists [][]float32
	// Parents, when not nil, makes the proposal a tree: token i follows token
	// Parents[i], or the history when Parents[i] is -1; parents come first (see
	// [batch.NewTree]). There is then one parent per token.
	Parents []int32
	// Confidence, when not nil, holds for each token the drafter's own probability of
	// it (one value per token): the probability q gave the token it drew, or, for a
	// token chosen as the argmax, the softmax probability of the argmax. The acceptance
	// rule never reads it; an adaptive decoder learns from it where a chain is worth
	// ending (see [Confident]).
	Confidence []float32
}

// Reset empties the proposal.
func (p *Proposal) Reset() {
	p.Tokens, p.Dists, p.Parents, p.Confidence = p.Tokens[:0], nil, nil, nil
}

// Learner is implemented by sessions that learn from finished requests; the decoder
// calls Learn with the whole history (prompt and output) when a request ends well.
type Learner interface {
	Learn(history []int32)
}

// StateSession is a drafting session that drafts from the target's hidden states, as a
// trained head (MLPSpeculator, Medusa, EAGLE) does: it needs no model of its own to
// read the context, the target's last hidden state already holds it.
type StateSession interface {
	Session
	// Observe is told, before each Propose, what the history gained since the last
	// call — after the prompt's prefill, the prompt but its first token (or only its
	// tail, for a session with [StatesFrom]); after a step,
	// the accepted tokens and the target's next token — with the target's final
	// hidden state at the position before each: states[i] belongs to the token in
	// front of tokens[i], so the last state is the one the newest token was chosen
	// from (h_t for x_{t+1}). The slices are valid only during the call.
	Observe(tokens []int32, states [][]float32) error
}

// StatesFrom is implemented by a [StateSession] that reads the target's states at only
// the prompt's last positions — Medusa and MLPSpeculator read the last state alone, an
// EAGLE layer that found its rows of a prompt's prefix in its own prefix cache needs
// the states after them — so that the target may take a cached prefix in front of
// them. A session without it reads every state.
type StatesFrom interface {
	// StatesFrom returns, for a prompt prefill of n tokens (the prompt but its last),
	// the first position whose state the session reads, at most n−1 (n = 0: 0).
	// The first Observe is then told the prompt's tokens from some position f+1 on,
	// with the states from f on, where f is at most what StatesFrom returned (the
	// least of the request's readers): a session skips what it holds.
	StatesFrom(n int) int
}

// StateSessions returns the sessions of s, s itself included, that read the target's
// states, looking through composites ([SessionParts]).
func StateSessions(s Session) []StateSession {
	var out []StateSession
	for part := range SessionParts(s) {
		if ss, ok := part.(StateSession); ok {
			out = append(out, ss)
		}
	}
	return out
}
