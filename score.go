package specula

import (
	"context"
)

// Score tokenizes text as a prompt and returns, for every token but the first, the
// target's log-probability of it given the tokens before, with the top likeliest
// tokens at its place (0 to MaxTopLogprobs): what an evaluation asks of a model (the
// text's log-likelihood is the sum; a continuation's is the sum over its tokens).
// Nothing is generated. It waits its turn as any request does; see spec.Decoder.Score.
func (e *Engine) Score(ctx context.Context, text string, top int) ([]TokenLogprob, error) {
	c, err := e.GenerateFunc(ctx, Request{Prompt: text, Echo: true, PromptOnly: true, Logprobs: true, TopLogprobs: top}, nil)
	if err != nil {
		return nil, err
	}
	if len(c.PromptLogprobs) == 0 {
		return nil, nil
	}
	return c.PromptLogprobs[1:], nil
}
