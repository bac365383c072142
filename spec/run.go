package spec

import (
	"context"
	"fmt"
	"time"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/target"
)

// maxPrealloc bounds the output tokens a request reserves memory for up front.
const maxPrealloc = 1 << 16

// run is one request's state: what was asked, the output so far, and the state of
// each concern of the loop, grouped.
type run struct {
	d      *Decoder
	req    Request
	choice int                 // the request's choice this run decodes
	emit   func(c Chunk) error // the caller's, one call at a time
	start  time.Time

	smp   *sampler.Sampler
	ctl   *controller // with Options.Adaptive
	sess  sessions    // the target's session and the drafters'
	draft stepDraft   // the step's draft, from proposal to accepted path
	lang  langState   // with a Constraint
	lp    lpState     // with Logprobs
	stop  textStops   // with StopStrings

	hist    []int32 // prompt and output; a rule writes the path it walks past the end
	emitted int     // output tokens handed out
	finish  FinishReason
	stats   Stats
}

// sessions are a request's sessions: the target's, the drafters', and what the
// drafters that read the target's hidden states are told.
type sessions struct {
	tgt      target.Session
	states   target.StateSession // the target's session, when readers need its states
	drafts   []draft.Session     // one per drafter
	failed   []bool              // drafters that ran out of room
	readers  []reader            // the sessions that read the target's hidden states
	obsTok   []int32             // what readers are told after a step…
	obsState [][]float32         // …and the states in front of those tokens
	// confident holds, per drafter, its sessions that end chains by confidence.
	confident [][]draft.Confident
}

// stepDraft is a step's draft on its way through the step.
type stepDraft struct {
	proposed draft.Proposal // what the drafter proposed…
	shape    batch.Tree     // …its parent list, checked…
	checked  sampler.Draft  // …and the whole draft, checked: what the step verifies
	path     []int32        // the accepted draft nodes (indices)…
	accepted []int32        // …and their tokens
}

// langState is where a constrained output stands in its language.
type langState struct {
	state int32   // the state the output ends in…
	nodes []int32 // …and the one each draft node reaches (negative: forbidden)
}

// lpState holds the log-probabilities of a request that asks for them.
type lpState struct {
	step   []Logprob // the step's accepted tokens' and the next one's…
	out    []Logprob // …and every output token's so far
	prompt []Logprob // the prompt's, with PromptLogprobs
	sc     scorer    // computes them
}

// prepare makes the request's sampler and buffers (the request was checked).
func (r *run) prepare() error {
	d, req := r.d, r.req
	r.stats.PromptTokens = len(req.Prompt)
	if req.Constraint != nil {
		r.lang.state = req.Constraint.Start()
	}
	var err error
	if r.smp, err = sampler.New(req.Sampling, d.info.VocabSize); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	capacity := r.capacity()
	r.hist = make([]int32, len(req.Prompt), capacity)
	copy(r.hist, req.Prompt)
	if len(req.StopStrings) > 0 {
		r.stop = newTextStops(req, capacity)
	}
	return nil
}

// capacity is the room the history gets up front — the prompt, the output and one
// draft — so that the loop never grows it; within reason: a model without a context
// limit asked for "unlimited" tokens gets a modest start and grows.
func (r *run) capacity() int {
	out := r.req.MaxTokens
	if cl := r.d.info.ContextLength; cl > 0 && (out == 0 || out > cl) {
		out = cl
	}
	if out == 0 || out > maxPrealloc {
		out = maxPrealloc
	}
	return len(r.req.Prompt) + out + r.d.k + 1
}

// decode steps until the request finishes, and lets the drafters learn from it. A
// PromptOnly request, prefilled, has finished.
func (r *run) decode(ctx context.Context) error {
	if r.req.PromptOnly {
		r.finish = FinishLength
		return nil
	}
	for r.finish == "" {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("spec: %w", err)
		}
		if err := r.step(ctx); err != nil {
			return err
		}
	}
	r.learn()
	return nil
}
