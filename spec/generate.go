package spec

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"
)

// Chunk is a piece of a request's output, handed out as soon as it is final: the
// tokens a choice gained, or the prompt's scores, or — a choice's last chunk — how
// the choice ended. Its slices are valid only during the call that hands it out (in
// [Decoder.Generate], until the next iteration).
type Chunk struct {
	// Choice is the choice the chunk belongs to, 0 to N−1.
	Choice int
	// Prompt marks the prompt's scores ([Request.PromptLogprobs]): Tokens are
	// prompt tokens, from the second on, in the runs the prefill scores them in,
	// and Logprobs their scores. They come first, as choice 0.
	Prompt bool
	// Tokens are the tokens the choice gained, usually what one verification pass
	// accepted; Logprobs score them one for one when the request asks (else nil).
	Tokens   []int32
	Logprobs []Logprob
	// Finish is set on a choice's last chunk, which carries no tokens: why the
	// choice ended, and Stats how it ran (its [Result]'s).
	Finish FinishReason
	Stats  *Stats
}

// GenerateFunc runs a request and calls emit with each [Chunk] as soon as it is
// final, one call at a time (a nil emit only collects); it returns every choice's
// [Result], in order, with its whole output. It is the decoder's one way in; see
// [Decoder.Generate] for its iterator.
//
// The request's N choices are independent samples of the target's distribution:
// choice 0 samples as the request alone would, choice i with the parameters'
// [sampler.Params.Choice] (a seed of its own). Greedy choices are all the same text.
// The prompt is prefilled once: when the target's sessions fork
// ([target.ForkSession]), the other choices fork the first one's session after the
// prefill and share the prompt's key/value memory copy-on-write; when they do not (or
// a fork fails) each prefills on its own (and a target with a prefix cache finds most
// of the prompt there). The choices then decode concurrently, sharing the target's
// passes. A choice's PrefillTime is its own drafters' prefills, and for choice 0 the
// shared prompt's too.
//
// A request refused before any work fails with a [*RequestError] (matching
// [ErrInvalidRequest] or [ErrPromptTooLong]) and hands out nothing; its results
// say FinishError (one per choice, or one when N is at fault). Otherwise every
// choice ends with its last chunk and has its result, even when others fail; the
// error joins the choices' errors, each naming its choice. An error from emit ends
// the choice it was handed (every choice, for a prompt chunk) and is returned.
func (d *Decoder) GenerateFunc(ctx context.Context, req Request, emit func(Chunk) error) ([]Result, error) {
	if err := d.validate(req); err != nil {
		return refused(req), err
	}
	n := max(req.N, 1)
	runs := d.newRuns(req, n, emit)
	errs := make([]error, n)
	errs[0] = runs[0].begin(ctx)
	if n > 1 {
		beginForks(ctx, runs, errs)
	}
	res := make([]Result, n)
	endAll(ctx, runs, errs, res)
	var all []error
	for i, err := range errs {
		if err != nil {
			all = append(all, fmt.Errorf("choice %d: %w", i, err))
		}
	}
	if n == 1 && len(all) == 1 {
		return res, errs[0]
	}
	return res, errors.Join(all...)
}

// Generate runs a request as an iterator over its chunks (see
// [Decoder.GenerateFunc]): every choice's tokens as they become final, each choice's
// last chunk with its finish and statistics, and — if the request fails — one last
// pair with the error. A loop that breaks early ends the generation (its choices
// finish with FinishCancelled, unless they had ended for another reason). The
// decoder waits while the loop body runs.
func (d *Decoder) Generate(ctx context.Context, req Request) iter.Seq2[Chunk, error] {
	return func(yield func(Chunk, error) bool) {
		stopped := false // emit is called one chunk at a time: no race
		_, err := d.GenerateFunc(ctx, req, func(c Chunk) error {
			if stopped || !yield(c, nil) {
				stopped = true
				return stopIteration{}
			}
			return nil
		})
		if err != nil && !stopped {
			yield(Chunk{}, err)
		}
	}
}

// stopIteration is the error with which Generate ends a generation whose loop broke.
type stopIteration struct{}

func (stopIteration) Error() string { return "spec: the caller stopped the iteration" }

// refused is the results of a request refused before any work: one per choice, or
// one when the number of choices is at fault.
func refused(req Request) []Result {
	n := 1
	if req.N > 1 && req.N <= MaxChoices {
		n = req.N
	}
	res := make([]Result, n)
	for i := range res {
		res[i].Finish = FinishError
	}
	return res
}

// newRuns makes the runs of n choices of req: choice i samples with the parameters'
// Choice(i) and emits as choice i, one emit call at a time; only choice 0 scores the
// prompt.
func (d *Decoder) newRuns(req Request, n int, emit func(Chunk) error) []*run {
	var mu sync.Mutex
	serial := func(c Chunk) error {
		if emit == nil {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		return emit(c)
	}
	runs := make([]*run, n)
	for i := range runs {
		cr := req
		cr.Sampling = req.Sampling.Choice(i)
		cr.PromptLogprobs = req.PromptLogprobs && i == 0
		runs[i] = &run{d: d, req: cr, choice: i, start: time.Now(), emit: serial}
	}
	return runs
}

// beginForks readies the further choices, runs[1:], from the first one's prefilled
// session; when the first failed, they fail with it.
func beginForks(ctx context.Context, runs []*run, errs []error) {
	states := runs[0].promptStates()
	for i, r := range runs[1:] {
		if errs[0] != nil {
			errs[i+1] = errs[0]
			continue
		}
		errs[i+1] = r.beginFork(ctx, runs[0].sess.tgt, states)
	}
}

// endAll decodes the runs that began, concurrently when there are several, and ends
// every run: its sessions closed, its result in res, its last chunk handed out.
func endAll(ctx context.Context, runs []*run, errs []error, res []Result) {
	if len(runs) == 1 {
		runs[0].end(ctx, &errs[0], &res[0])
		return
	}
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() { r.end(ctx, &errs[i], &res[i]) })
	}
	wg.Wait()
}

// end decodes the run when it began (*err nil), closes its sessions, fills its
// result and hands out its last chunk; an error from that emit becomes the run's
// when it had none.
func (r *run) end(ctx context.Context, err *error, res *Result) {
	if *err == nil {
		*err = r.decode(ctx)
	}
	r.close(err)
	*res = r.result(*err)
	if eerr := r.emit(Chunk{Choice: r.choice, Finish: res.Finish, Stats: &res.Stats}); eerr != nil && *err == nil {
		*err = fmt.Errorf("spec: emit: %w", eerr)
	}
}

// result is what the run ended with, err being how it ended: the tokens handed out
// (copied from the history, which holds more than them), their log-probabilities and
// the prompt's when asked for.
func (r *run) result(err error) Result {
	r.stats.GeneratedTokens = r.emitted
	r.stats.Duration = time.Since(r.start)
	res := Result{Finish: r.finish, Stats: r.stats, PromptLogprobs: r.lp.prompt}
	if r.emitted > 0 {
		res.Tokens = slices.Clone(r.hist[len(r.req.Prompt) : len(r.req.Prompt)+r.emitted])
	}
	if r.req.Logprobs && r.emitted > 0 {
		res.Logprobs = r.lp.out[:r.emitted:r.emitted]
	}
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, stopIteration{}):
		res.Finish = FinishCancelled
	default:
		res.Finish = FinishError
	}
	return res
}
