package spec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/specula/specula/target"
)

// GenerateN runs n samples of one request (OpenAI's n) and returns their results, in
// order. See [Decoder.StreamN].
func (d *Decoder) GenerateN(ctx context.Context, req Request, n int) ([]Result, error) {
	outs := make([][]int32, max(n, 0))
	lps := make([][]Logprob, max(n, 0))
	res, err := d.StreamN(ctx, req, n, func(choice int, toks []int32, lp []Logprob) error {
		outs[choice] = append(outs[choice], toks...)
		lps[choice] = append(lps[choice], lp...)
		return nil
	})
	for i := range res {
		res[i].Tokens, res[i].Logprobs = outs[i], lps[i]
	}
	return res, err
}

// StreamN runs n samples of one request at once and calls emit with each choice's runs
// of tokens (and their log-probabilities, when asked) as [Decoder.StreamLogprobs]
// does, one call at a time. The prompt is prefilled once: when the target's sessions
// fork ([target.ForkSession]), the other choices fork the first one's session after
// the prefill and share the prompt's key/value memory copy-on-write; when they do not
// (or a fork fails) each prefills on its own (and a target with a prefix cache finds
// most of the prompt there). The choices then decode concurrently, sharing the
// target's passes.
//
// Choice 0 samples as the request alone would; choice i with the parameters'
// [sampler.Params.Choice] (a seed of its own), so that the samples are independent
// draws of the target's distribution. Greedy choices are all the same text.
//
// Every choice has its result, even when others fail; the error joins the choices'
// errors, each naming its choice. A choice's PrefillTime is its own drafters'
// prefills, and for choice 0 the shared prompt's too.
func (d *Decoder) StreamN(ctx context.Context, req Request, n int, emit func(choice int, tokens []int32, logprobs []Logprob) error) ([]Result, error) {
	if n < 1 {
		return nil, fmt.Errorf("spec: %d choices: need at least 1", n)
	}
	if emit == nil {
		return nil, errors.New("spec: nil emit function")
	}
	var mu sync.Mutex
	runs := make([]*run, n)
	for i := range runs {
		cr := req
		cr.Sampling = req.Sampling.Choice(i)
		runs[i] = &run{d: d, req: cr, start: time.Now(), emitLP: func(toks []int32, lps []Logprob) error {
			mu.Lock()
			defer mu.Unlock()
			return emit(i, toks, lps)
		}}
	}
	errs := make([]error, n)
	errs[0] = runs[0].begin(ctx)
	states := runs[0].promptStates()
	for i, r := range runs[1:] {
		if errs[0] != nil {
			errs[i+1] = errs[0]
			continue
		}
		errs[i+1] = r.beginFork(ctx, runs[0].tgt, states)
	}
	var wg sync.WaitGroup
	for i, r := range runs {
		if errs[i] == nil {
			wg.Go(func() { errs[i] = r.decode(ctx) })
		}
	}
	wg.Wait()
	return results(runs, errs)
}

// results closes the runs and returns their results and their errors joined.
func results(runs []*run, errs []error) ([]Result, error) {
	res := make([]Result, len(runs))
	var all []error
	for i, r := range runs {
		r.close(&errs[i])
		res[i] = r.result(errs[i])
		if errs[i] != nil {
			all = append(all, fmt.Errorf("choice %d: %w", i, errs[i]))
		}
	}
	return res, errors.Join(all...)
}

// begin readies the run to decode: it checks the request, starts the target's and
// the drafters' sessions, and prefills.
func (r *run) begin(ctx context.Context) error {
	if err := r.prepare(); err != nil {
		return err
	}
	return r.open(ctx)
}

// open starts the target's and the drafters' sessions and prefills.
func (r *run) open(ctx context.Context) error {
	if err := r.startTarget(ctx); err != nil {
		return err
	}
	if err := r.startDrafters(ctx); err != nil {
		return err
	}
	return r.prefill(ctx)
}

// promptStates returns a copy of the prompt's hidden states when the run keeps them
// (drafters read them), for forks to hand their own readers.
func (r *run) promptStates() [][]float32 {
	if r.tgtState == nil {
		return nil
	}
	var out [][]float32
	for _, s := range r.tgtState.States() {
		out = append(out, append([]float32(nil), s...))
	}
	return out
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
	r.tgt = s
	if err := r.startDrafters(ctx); err != nil {
		return err
	}
	if r.tgtState != nil {
		return r.tell(r.req.Prompt[1:], states)
	}
	return nil
}
