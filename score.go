package specula

import (
	"context"
)

// ScoreRequest is a text to score: Prompt (tokenized as a Request's is) or Tokens,
// exactly one, and TopLogprobs (0 to MaxTopLogprobs), the likeliest tokens to list at
// each place.
type ScoreRequest struct {
	Prompt      string
	Tokens      []int32
	TopLogprobs int
}

// Score returns, for every token of the text but the first, the target's
// log-probability of it given the tokens before, with the TopLogprobs likeliest tokens
// at its place: what an evaluation asks of a model (the text's log-likelihood is the
// sum; a continuation's is the sum over its tokens). It is the request
// Request{Echo: true, PromptOnly: true, Logprobs: true} through GenerateFunc: it
// waits its turn as any request does, generates nothing, and publishes the text's
// key/value blocks to the prefix cache, so that a generation from the same text that
// follows prefills only its last block. Its errors are GenerateFunc's, with the
// fields named as in a Request.
func (e *Engine) Score(ctx context.Context, req ScoreRequest) ([]TokenLogprob, error) {
	c, err := e.GenerateFunc(ctx, Request{Prompt: req.Prompt, Tokens: req.Tokens, TopLogprobs: req.TopLogprobs,
		Echo: true, PromptOnly: true, Logprobs: true}, nil)
	if err != nil {
		return nil, err
	}
	if len(c.PromptLogprobs) == 0 {
		return nil, nil
	}
	return c.PromptLogprobs[1:], nil
}
