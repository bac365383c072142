package spec

import (
	"slices"

	"github.com/specula/specula/sampler"
)

// Logprob is the target's log-probability of a generated token, and of the most
// likely tokens at its place when TopLogprobs asks: the natural logarithm of the
// softmax of the target's logits there — the model's own distribution, before
// temperature, penalties or truncation shape it for sampling (vLLM's raw logprobs);
// under a Constraint, of that distribution restricted to the language.
type Logprob struct {
	Token   int32
	Logprob float32
	// Top are the most likely tokens at the place, most likely first.
	Top []TokenLogprob
}

// TokenLogprob is one token's log-probability.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// scoreStep works out the log-probabilities of a step's accepted tokens (the nodes
// path of the draft) and the target's token after them, from the verification's
// rows: the first accepted token (or the next one, when none was) is scored by row 0,
// the one after accepted node c by row c+1.
func (l *lpState) scoreStep(rows [][]float32, accepted, path []int32, next int32, top int) {
	l.step = l.step[:0]
	row := rows[0]
	for i, tok := range accepted {
		l.step = append(l.step, l.sc.logprobOf(row, tok, top))
		row = rows[path[i]+1]
	}
	l.step = append(l.step, l.sc.logprobOf(row, next, top))
}

// keep lines the output's log-probabilities up with the output of n tokens after a
// step: the tokens it appended are the first of the step's (accepted tokens, then the
// next), and a stop rule may have cut the output back, even before the step.
func (l *lpState) keep(n int) {
	l.out = l.out[:min(len(l.out), n)]
	l.out = append(l.out, l.step[:max(0, n-len(l.out))]...)
}

// scorer computes log-probabilities from rows of logits, with a buffer of its own
// for the exponentials (a row of the target's stays as it is).
type scorer struct {
	exps []float32
}

// logprobOf scores tok in a row of logits, with the top most likely tokens.
func (sc *scorer) logprobOf(row []float32, tok int32, top int) Logprob {
	var lse float64
	lse, sc.exps = sampler.LogSumExp(row, sc.exps)
	lp := Logprob{Token: tok, Logprob: float32(float64(row[tok]) - lse)}
	if top == 0 {
		return lp
	}
	lp.Top = make([]TokenLogprob, 0, top+1)
	for i, x := range row {
		if len(lp.Top) == top && x <= lp.Top[top-1].Logprob {
			continue
		}
		// Insert in order, most likely first (ties by the lower id), keeping top.
		at := len(lp.Top)
		for at > 0 && lp.Top[at-1].Logprob < x {
			at--
		}
		lp.Top = slices.Insert(lp.Top, at, TokenLogprob{Token: int32(i), Logprob: x})
		lp.Top = lp.Top[:min(len(lp.Top), top)]
	}
	for i := range lp.Top {
		lp.Top[i].Logprob = float32(float64(lp.Top[i].Logprob) - lse)
	}
	return lp
}
