// Package stattest holds the statistical checks that specula's tests use to show that a
// sampling procedure produces a given distribution.
package stattest

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// MinExpected is the smallest expected count a chi-square bin may have; smaller bins
// are pooled.
const MinExpected = 5

// Fit is the outcome of a chi-square goodness-of-fit test.
type Fit struct {
	// P is the p-value: the probability, if the samples came from the expected
	// distribution, of a statistic at least this large. 0 when an outcome of
	// probability zero was observed.
	P float64
	// Stat is the chi-square statistic and DF its degrees of freedom.
	Stat float64
	DF   int
	// Impossible counts observations of outcomes whose expected probability is zero.
	Impossible int
}

// ChiSquare tests observed counts against expected probabilities (which must sum to
// one). Outcomes with expected count below MinExpected are pooled into one bin.
func ChiSquare(observed []int, probs []float64) Fit {
	var n float64
	for _, o := range observed {
		n += float64(o)
	}
	var f Fit
	var bins []struct{ obs, exp float64 }
	var poolObs, poolExp float64
	for i, p := range probs {
		o := float64(observed[i])
		e := p * n
		switch {
		case p == 0:
			f.Impossible += observed[i]
		case e < MinExpected:
			poolObs += o
			poolExp += e
		default:
			bins = append(bins, struct{ obs, exp float64 }{o, e})
		}
	}
	if poolExp > 0 {
		if poolExp >= MinExpected || len(bins) == 0 {
			bins = append(bins, struct{ obs, exp float64 }{poolObs, poolExp})
		} else {
			// Too small to stand alone: merge with the smallest bin.
			j := 0
			for i := range bins {
				if bins[i].exp < bins[j].exp {
					j = i
				}
			}
			bins[j].obs += poolObs
			bins[j].exp += poolExp
		}
	}
	for _, b := range bins {
		d := b.obs - b.exp
		f.Stat += d * d / b.exp
	}
	f.DF = len(bins) - 1
	switch {
	case f.Impossible > 0:
		f.P = 0
	case f.DF < 1:
		f.P = 1
	default:
		f.P = distuv.ChiSquared{K: float64(f.DF)}.Survival(f.Stat)
	}
	return f
}

// BinomialZ returns how many standard errors the observed success count lies from the
// expected count of n trials with success probability p: (k − np)/√(np(1−p)).
func BinomialZ(k, n int, p float64) float64 {
	p = min(max(p, 0), 1) // rounding can take a sum of probabilities past 1
	sd := math.Sqrt(float64(n) * p * (1 - p))
	d := float64(k) - float64(n)*p
	if sd < 1e-6 {
		if math.Abs(d) < 0.5 {
			return 0
		}
		return math.Inf(1)
	}
	return d / sd
}

// Retest runs a goodness-of-fit test that fails only on evidence seen twice: a first
// p-value at or below alpha is checked on a second sample, and that fit is returned.
// sample(round) must draw a sample independent of the earlier rounds' (seeds
// disjoint from theirs). A correct sampler then fails with probability alpha² rather
// than alpha, which lets a suite of dozens of fixed-seed tests run on machines whose
// float kernels differ in the last bits (a test at a fixed seed may sit near alpha on
// one and cross it on another), while a bias the test can see at all fails both
// rounds.
//
// An outcome of probability zero is never chance: a first fit that saw one is
// returned as it is, without a second round.
func Retest(alpha float64, sample func(round int) Fit) Fit {
	fit := sample(0)
	if fit.P > alpha || fit.Impossible > 0 {
		return fit
	}
	return sample(1)
}
