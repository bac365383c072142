// Package reference holds plain, slow, obviously-correct implementations that tests
// compare the real ones against: logit processing in float64 with a full sort, greedy
// decoding one token at a time, and the exact distribution of a Markov chain's
// continuations.
package reference

import (
	"math"
	"sort"

	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/sampler"
)

// Process returns the processed distribution of logits after history, as specified by
// [sampler.Params]: repetition penalty, temperature, top-k, top-p, min-p, with every
// token tied at a cut-off kept.
func Process(logits []float32, history []int32, p sampler.Params) []float64 {
	v := len(logits)
	x := make([]float64, v)
	for i, l := range logits {
		x[i] = float64(l)
	}
	if pen := p.RepetitionPenalty; pen != 0 && pen != 1 {
		h := history
		if w := p.RepetitionWindow; w > 0 && len(h) > w {
			h = h[len(h)-w:]
		}
		seen := map[int32]bool{}
		for _, t := range h {
			if seen[t] {
				continue
			}
			seen[t] = true
			// Penalise as float32 like the runtime does, so both see the same logit.
			l := logits[t]
			if l > 0 {
				x[t] = float64(l / float32(pen))
			} else {
				x[t] = float64(l * float32(pen))
			}
		}
	}
	out := make([]float64, v)
	if p.Temperature == 0 {
		best := 0
		for i := range x {
			if x[i] > x[best] {
				best = i
			}
		}
		out[best] = 1
		return out
	}
	mx := math.Inf(-1)
	for _, l := range x {
		mx = math.Max(mx, l)
	}
	var sum float64
	for i, l := range x {
		out[i] = math.Exp((l - mx) / p.Temperature)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	idx := make([]int, v)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return out[idx[a]] > out[idx[b]] })
	thr := 0.0
	kept := idx
	if k := p.TopK; k > 0 && k < v {
		thr = out[idx[k-1]]
		n := 0
		for n < v && out[idx[n]] >= thr {
			n++
		}
		kept = idx[:n]
	}
	if tp := p.TopP; tp > 0 && tp < 1 {
		var mass float64
		for _, i := range kept {
			mass += out[i]
		}
		cum := 0.0
		for _, i := range kept {
			cum += out[i]
			if cum >= tp*mass {
				thr = math.Max(thr, out[i])
				break
			}
		}
	}
	if p.MinP > 0 {
		thr = math.Max(thr, p.MinP*out[idx[0]])
	}
	sum = 0
	for i := range out {
		if out[i] < thr {
			out[i] = 0
		}
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// Greedy decodes n tokens after prompt from a chain, one at a time, with the repetition
// penalty of p (its temperature is ignored).
func Greedy(c *markov.Chain, prompt []int32, n int, p sampler.Params) []int32 {
	p.Temperature = 0
	h := append([]int32(nil), prompt...)
	for range n {
		d := Process(c.Logits(h), h, p)
		best := 0
		for i := range d {
			if d[i] > d[best] {
				best = i
			}
		}
		h = append(h, int32(best))
	}
	return h[len(prompt):]
}

// Continuations returns the probability of every length-n continuation of prompt
// under a chain with processing p, indexed by the continuation read as a base-V number
// (first token most significant).
func Continuations(c *markov.Chain, prompt []int32, n int, p sampler.Params) []float64 {
	return ContinuationsOf(c.Logits, c.Info().VocabSize, prompt, n, p)
}

// ContinuationsOf is [Continuations] for any model, given as the function from a
// history to the logits after it, over a vocabulary of v tokens.
func ContinuationsOf(logits func(history []int32) []float32, v int, prompt []int32, n int, p sampler.Params) []float64 {
	total := 1
	for range n {
		total *= v
	}
	out := make([]float64, total)
	var walk func(h []int32, prob float64, index int)
	walk = func(h []int32, prob float64, index int) {
		if len(h) == len(prompt)+n {
			out[index] = prob
			return
		}
		d := Process(logits(h), h, p)
		for t, q := range d {
			if q > 0 {
				walk(append(h[:len(h):len(h)], int32(t)), prob*q, index*v+t)
			}
		}
	}
	walk(append([]int32(nil), prompt...), 1, 0)
	return out
}

// Index reads a continuation as a base-v number, as Continuations indexes it.
func Index(toks []int32, v int) int {
	i := 0
	for _, t := range toks {
		i = i*v + int(t)
	}
	return i
}
