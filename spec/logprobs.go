package spec

import (
	"fmt"
	"math"
	"slices"

	"github.com/specula/specula/sampler"
)

// Logprob is the target's log-probability of a generated token, and of the most
// likely tokens at its place when TopLogprobs asks: the natural logarithm of the
// softmax of the target's logits there — the model's own distribution, before
// temperature, penalties or truncation shape it for sampling (vLLM's raw logprobs);
// under a Constraint, of that distribution restricted to the language. Every value
// is finite (a token ruled out outright reads −math.MaxFloat32), so a Logprob
// marshals with encoding/json.
type Logprob struct {
	Token   int32
	Logprob float32
	// Top are the most likely tokens at the place, most likely first: TopLogprobs of
	// them, or fewer where fewer are possible — under a Constraint only tokens the
	// language allows there, never one it rules out.
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
func (l *lpState) scoreStep(rows [][]float32, accepted, path []int32, next int32, top int) error {
	l.step = l.step[:0]
	row := rows[0]
	for i, tok := range accepted {
		lp, err := l.sc.logprobOf(row, tok, top)
		if err != nil {
			return err
		}
		l.step = append(l.step, lp)
		row = rows[path[i]+1]
	}
	lp, err := l.sc.logprobOf(row, next, top)
	if err != nil {
		return err
	}
	l.step = append(l.step, lp)
	return nil
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

// logprobOf scores tok in a row of logits, with the top most likely tokens: those
// the row allows (a logit of −Inf — a token a constraint rules out — is no
// alternative, so fewer than top come back where fewer are allowed). Every value is
// finite: a row whose normaliser is not (a logit NaN or +Inf, or every one −Inf) is
// an error, and a token the row rules out outright reads −math.MaxFloat32 (see
// finiteLogprob).
func (sc *scorer) logprobOf(row []float32, tok int32, top int) (Logprob, error) {
	var lse float64
	lse, sc.exps = sampler.LogSumExp(row, sc.exps)
	if math.IsNaN(lse) || math.IsInf(lse, 0) {
		return Logprob{}, fmt.Errorf("spec: scoring token %d: the logits' log-sum-exp is %v (a logit NaN or +Inf, or none above −Inf)", tok, lse)
	}
	lp := Logprob{Token: tok, Logprob: finiteLogprob(float64(row[tok]) - lse)}
	if top == 0 {
		return lp, nil
	}
	lp.Top = make([]TokenLogprob, 0, top+1)
	for i, x := range row {
		if math.IsInf(float64(x), -1) || (len(lp.Top) == top && x <= lp.Top[top-1].Logprob) {
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
		lp.Top[i].Logprob = finiteLogprob(float64(lp.Top[i].Logprob) - lse)
	}
	return lp, nil
}

// finiteLogprob is a log-probability as float32, never −Inf: a token whose logit is
// −Inf (which a sampled token never has, a prompt's token only where the model rules
// it out) or so far below the normaliser that float32 cannot hold the difference
// reads −math.MaxFloat32, the least finite float32 — as unlikely as a float32 can
// say, and a value encoding/json can write.
func finiteLogprob(x float64) float32 {
	return float32(max(x, -math.MaxFloat32))
}
