package stattest

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestChiSquare(t *testing.T) {
	tests := []struct {
		name     string
		observed []int
		probs    []float64
		stat     float64
		df       int
		pAbove   float64
		pBelow   float64
	}{
		// A fair die: counts 16, 18, 16, 14, 12, 24 of 100 give chi-square 5.12 on 5 df.
		{"fair die", []int{16, 18, 16, 14, 12, 24}, []float64{1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6}, 5.12, 5, 0.39, 0.41},
		{"clearly biased", []int{90, 10}, []float64{0.5, 0.5}, 64, 1, 0, 1e-9},
		// Small expected counts are pooled: bins 3 and 4 (expected 1 each) join bin 2.
		{"pooling", []int{50, 48, 1, 1}, []float64{0.5, 0.48, 0.01, 0.01}, 0, 1, 0.99, 1.01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := ChiSquare(tt.observed, tt.probs)
			assert.InDelta(t, tt.stat, f.Stat, 1e-9)
			assert.Equal(t, tt.df, f.DF)
			assert.Greater(t, f.P, tt.pAbove)
			assert.Less(t, f.P, tt.pBelow)
			assert.Zero(t, f.Impossible)
		})
	}
	f := ChiSquare([]int{5, 5, 1}, []float64{0.5, 0.5, 0})
	assert.Equal(t, 1, f.Impossible)
	assert.Zero(t, f.P)
}

func TestBinomialZ(t *testing.T) {
	assert.InDelta(t, 2, BinomialZ(60, 100, 0.5), 1e-12)
	assert.InDelta(t, -2, BinomialZ(40, 100, 0.5), 1e-12)
	assert.Zero(t, BinomialZ(100, 100, 1+1e-16))
	assert.True(t, math.IsInf(BinomialZ(99, 100, 1), 1))
}

func TestRetest(t *testing.T) {
	tests := []struct {
		name   string
		ps     []float64 // the p-value of each round's sample
		want   float64
		rounds int
	}{
		{"passes at once", []float64{0.3, 0}, 0.3, 1},
		{"a chance low p is sampled again", []float64{1e-4, 0.6}, 0.6, 2},
		{"low twice fails", []float64{1e-4, 1e-5}, 1e-5, 2},
		{"alpha itself is low", []float64{1e-3, 0.2}, 0.2, 2},
		{"an impossible outcome is not retried", []float64{0, 0.9}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rounds := 0
			fit := Retest(1e-3, func(round int) Fit {
				assert.Equal(t, rounds, round)
				rounds++
				f := Fit{P: tt.ps[round]}
				if f.P == 0 {
					f.Impossible = 1
				}
				return f
			})
			assert.Equal(t, tt.want, fit.P)
			assert.Equal(t, tt.rounds, rounds)
		})
	}
}
