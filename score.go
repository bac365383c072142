package specula

import (
	"context"
)

// TokenScore is one token of a scored text: its text, and the target's
// log-probability of it given the text before, with the likeliest tokens there.
type TokenScore struct {
	Text    string
	Token   int32
	Logprob float32
	Top     []Alternative
}

// Alternative is one of the likeliest tokens at a place of a scored text.
type Alternative struct {
	Text    string
	Token   int32
	Logprob float32
}

// Score tokenizes text as a prompt and returns, for every token but the first, the
// target's log-probability of it given the tokens before, with the top likeliest
// tokens at its place (0 to spec.MaxTopLogprobs): what an evaluation asks of a model
// (the text's log-likelihood is the sum; a continuation's is the sum over its
// tokens). Nothing is generated; see spec.Decoder.Score.
func (e *Engine) Score(ctx context.Context, text string, top int) ([]TokenScore, error) {
	ids, err := e.encode(text)
	if err != nil {
		return nil, err
	}
	lps, err := e.plain.Score(ctx, ids, top)
	if err != nil {
		return nil, err
	}
	out := make([]TokenScore, len(lps))
	for i, lp := range lps {
		out[i] = TokenScore{Text: e.tok.PieceText(lp.Token), Token: lp.Token, Logprob: lp.Logprob}
		for _, t := range lp.Top {
			out[i].Top = append(out[i].Top, Alternative{Text: e.tok.PieceText(t.Token), Token: t.Token, Logprob: t.Logprob})
		}
	}
	return out, nil
}
