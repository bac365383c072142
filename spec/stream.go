package spec

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"
)

// The entry points. Each is a thin wrapper of one primitive, [Decoder.stream]: n
// choices of a request, each choice's runs of final tokens handed out with their
// log-probabilities. StreamN is that primitive with its errors joined; the others run
// one choice and keep what their emit does not carry in the Result.

// StreamN runs n samples of one request at once and calls emit with each choice's
// runs of tokens as soon as they are final (usually the tokens one verification pass
// accepted), with their log-probabilities when the request asks for them (else nil),
// one call at a time; both slices are valid only during the call. An error from emit
// ends that choice and is returned. The prompt is prefilled once: when the target's
// sessions fork ([target.ForkSession]), the other choices fork the first one's
// session after the prefill and share the prompt's key/value memory copy-on-write;
// when they do not (or a fork fails) each prefills on its own (and a target with a
// prefix cache finds most of the prompt there). The choices then decode concurrently,
// sharing the target's passes.
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
		return nil, refuse(ErrInvalidRequest, "spec: %d choices: need at least 1", n)
	}
	if emit == nil {
		return nil, errNilEmit
	}
	res, errs := d.stream(ctx, req, n, emit)
	var all []error
	for i, err := range errs {
		if err != nil {
			all = append(all, fmt.Errorf("choice %d: %w", i, err))
		}
	}
	return res, errors.Join(all...)
}

// GenerateN runs n samples of one request (OpenAI's n) and returns their results, in
// order, each with its tokens and log-probabilities. See [Decoder.StreamN].
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

// StreamLogprobs is StreamN of one choice: it runs a request and calls emit with each
// run of tokens as soon as it is final, and their log-probabilities when the request
// asks for them (else nil); both slices are valid only during the call. An error from
// emit ends the generation and is returned.
func (d *Decoder) StreamLogprobs(ctx context.Context, req Request, emit func(tokens []int32, logprobs []Logprob) error) (Result, error) {
	if emit == nil {
		return Result{Finish: FinishError}, errNilEmit
	}
	res, errs := d.stream(ctx, req, 1, func(_ int, toks []int32, lps []Logprob) error { return emit(toks, lps) })
	return res[0], errs[0]
}

// Stream runs a request and calls emit with each run of tokens as soon as it is final
// (usually the tokens one verification pass accepted). The slice is only valid during
// the call. An error from emit ends the generation and is returned. The tokens'
// log-probabilities, when the request asks for them, are in the Result.
func (d *Decoder) Stream(ctx context.Context, req Request, emit func(tokens []int32) error) (Result, error) {
	if emit == nil {
		return Result{Finish: FinishError}, errNilEmit
	}
	var lps []Logprob
	res, err := d.StreamLogprobs(ctx, req, func(toks []int32, lp []Logprob) error {
		lps = append(lps, lp...)
		return emit(toks)
	})
	res.Logprobs = lps
	return res, err
}

// Generate runs a request to its end and returns the whole output, with its
// log-probabilities when the request asks for them.
func (d *Decoder) Generate(ctx context.Context, req Request) (Result, error) {
	var out []int32
	var lps []Logprob
	res, err := d.StreamLogprobs(ctx, req, func(toks []int32, lp []Logprob) error {
		out = append(out, toks...)
		lps = append(lps, lp...)
		return nil
	})
	res.Tokens, res.Logprobs = out, lps
	return res, err
}

// Tokens runs a request as an iterator over its tokens. An error is yielded once, as
// the last pair. When res is not nil it receives the result once the iteration ends —
// with the tokens' log-probabilities when the request asks for them: a request for
// log-probabilities with a nil res has nowhere to put them and is refused
// ([ErrInvalidRequest]). A loop that breaks early ends the generation with
// FinishCancelled (unless the generation had already ended for another reason).
func (d *Decoder) Tokens(ctx context.Context, req Request, res *Result) iter.Seq2[int32, error] {
	return func(yield func(int32, error) bool) {
		if req.Logprobs && res == nil {
			yield(0, refuse(ErrInvalidRequest, "spec: Logprobs with Tokens need a Result to hold them (or use StreamLogprobs)"))
			return
		}
		r, err := d.Stream(ctx, req, func(toks []int32) error {
			for _, t := range toks {
				if !yield(t, nil) {
					return stopIteration{}
				}
			}
			return nil
		})
		if errors.Is(err, stopIteration{}) {
			err = nil
		} else if err != nil {
			yield(0, err)
		}
		if res != nil {
			*res = r
		}
	}
}

var errNilEmit = errors.New("spec: nil emit function")

// stopIteration is the error with which Tokens ends a generation whose loop broke.
type stopIteration struct{}

func (stopIteration) Error() string { return "spec: the caller stopped the iteration" }

// stream is the streaming primitive under every entry point: it runs n ≥ 1 choices
// of req (as StreamN describes), calls emit with each choice's final runs of tokens,
// one call at a time, and returns every choice's result and error.
func (d *Decoder) stream(ctx context.Context, req Request, n int, emit func(choice int, tokens []int32, logprobs []Logprob) error) ([]Result, []error) {
	runs := d.newRuns(req, n, emit)
	errs := make([]error, n)
	errs[0] = runs[0].begin(ctx)
	if n > 1 {
		beginForks(ctx, runs, errs)
	}
	decodeAll(ctx, runs, errs)
	res := make([]Result, n)
	for i, r := range runs {
		r.close(&errs[i])
		res[i] = r.result(errs[i])
	}
	return res, errs
}

// newRuns makes the runs of n choices of req: choice i samples with the parameters'
// Choice(i) and emits as choice i, one emit call at a time.
func (d *Decoder) newRuns(req Request, n int, emit func(choice int, tokens []int32, logprobs []Logprob) error) []*run {
	var mu sync.Mutex
	runs := make([]*run, n)
	for i := range runs {
		cr := req
		cr.Sampling = req.Sampling.Choice(i)
		runs[i] = &run{d: d, req: cr, start: time.Now(), emit: func(toks []int32, lps []Logprob) error {
			mu.Lock()
			defer mu.Unlock()
			return emit(i, toks, lps)
		}}
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

// decodeAll decodes the runs that began, concurrently when there are several.
func decodeAll(ctx context.Context, runs []*run, errs []error) {
	if len(runs) == 1 {
		if errs[0] == nil {
			errs[0] = runs[0].decode(ctx)
		}
		return
	}
	var wg sync.WaitGroup
	for i, r := range runs {
		if errs[i] == nil {
			wg.Go(func() { errs[i] = r.decode(ctx) })
		}
	}
	wg.Wait()
}

// result is what the run ended with, err being how it ended.
func (r *run) result(err error) Result {
	r.stats.GeneratedTokens = r.emitted
	r.stats.Duration = time.Since(r.start)
	res := Result{Finish: r.finish, Stats: r.stats}
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, stopIteration{}):
		res.Finish = FinishCancelled
	default:
		res.Finish = FinishError
	}
	return res
}
