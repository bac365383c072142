package main

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/model/llama"
)

// TestSpeculateAcceptance: on the demo target, drafted by the demo draft model and by
// the trained EAGLE-3 head of ../shared, the substitution drafter imposes its
// acceptance — none at α = 0 (one token a step, the target's), nearly all at α =
// 0.99 — every output is plain greedy decoding's (the run fails otherwise), and the
// figures add up: the allowed speedup follows from the expected length and the step
// costs, the efficiency from it and the speedup.
func TestSpeculateAcceptance(t *testing.T) {
	const targetPath = "../../models/gocoder-m-q8_0.gguf"
	for _, tc := range []struct {
		name        string
		draft, head string
	}{
		{"draft model", "../../models/gocoder-xs-q8_0.gguf", ""},
		{"EAGLE-3 head", "", "../../../shared/models/gocoder-m-eagle3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []string{targetPath, tc.draft + tc.head} {
				if _, err := os.Stat(p); err != nil {
					t.Skipf("%s is missing: %v", p, err)
				}
			}
			pool := cpu.NewPool(1)
			defer pool.Close()
			tm, err := llama.Open(targetPath, pool.Factory(), llama.Options{})
			require.NoError(t, err)
			defer tm.Close()
			c := speculateConfig{Target: targetPath, Draft: tc.draft, Head: tc.head, Acceptance: []float64{0, 0.99}, Ks: []int{3, 0}, Tokens: 48, PromptTokens: 16, Threads: 1, Seed: 7}
			inner, _, closer, err := openDrafter(c, tm, pool)
			require.NoError(t, err)
			defer closer.Close()
			res := speculateResult{Config: c}
			require.NoError(t, runSpeculation(context.Background(), c, tm, inner, &res, func(string, ...any) {}))
			require.Len(t, res.Rows, 4)
			require.Len(t, res.PlainTokS, 2)
			for _, r := range res.Rows {
				switch {
				case r.Acceptance == 0:
					assert.InDelta(t, 1.0, r.MeanAccepted, 1e-9, "K %d: nothing accepted", r.K)
				case r.K == 3:
					assert.Greater(t, r.MeanAccepted, 3.5, "nearly every draft accepted")
				}
				if r.K > 0 {
					assert.InDelta(t, (1-pow(r.Acceptance, r.K+1))/(1-r.Acceptance), r.Expected, 1e-9)
					assert.InDelta(t, r.Expected*res.PlainStepM/(r.DraftMs+r.VerifyMs), r.Allowed, 1e-9)
					assert.InDelta(t, r.Speedup/r.Allowed, r.Efficiency, 1e-9)
				}
				assert.Positive(t, r.TokensPerS)
				assert.Positive(t, r.DraftMs, "the drafter ran for its cost")
			}
		})
	}
}

func pow(x float64, n int) float64 {
	out := 1.0
	for range n {
		out *= x
	}
	return out
}

// TestSpeculateFlags: draft lengths and acceptance rates are read, and impossible ones
// refused, naming the flag.
func TestSpeculateFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for success
	}{
		{[]string{"-target", "t.gguf", "-draft", "d.gguf", "-k", "1,8,auto", "-acceptance", "0,0.5"}, ""},
		{[]string{"-draft", "d.gguf"}, "-target and one of -draft and -head are required"},
		{[]string{"-target", "t.gguf"}, "one of -draft and -head"},
		{[]string{"-target", "t.gguf", "-draft", "d.gguf", "-head", "h"}, "one of -draft and -head"},
		{[]string{"-target", "t.gguf", "-draft", "d.gguf", "-k", "0"}, "-k"},
		{[]string{"-target", "t.gguf", "-draft", "d.gguf", "-k", "65"}, "-k"},
		{[]string{"-target", "t.gguf", "-draft", "d.gguf", "-acceptance", "1"}, "-acceptance"},
		{[]string{"-target", "t.gguf", "-draft", "d.gguf", "-tokens", "1"}, "-tokens"},
	} {
		c0, _, err := speculateFlags(c.args)
		if c.want == "" {
			require.NoError(t, err, "%v", c.args)
			assert.Equal(t, []int{1, 8, 0}, c0.Ks)
			assert.Equal(t, []float64{0, 0.5}, c0.Acceptance)
			continue
		}
		assert.ErrorContains(t, err, c.want, "%v", c.args)
	}
}
