package spec_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// TestRequestErrors: every refused request matches its sentinel with errors.Is —
// ErrPromptTooLong for a prompt beyond the context, ErrInvalidRequest for the rest,
// and sampler.ErrInvalidParams besides for sampling parameters — through every entry
// point, with a message that still names the field.
func TestRequestErrors(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 8, Order: 1, ContextLength: 10})
	dec := newDecoder(t, tgt, newDrafter(t, tgt.Perturbed(1, 1)), 3)
	ok := []int32{1, 2}
	tests := []struct {
		name   string
		req    spec.Request
		kind   error
		params bool   // a sampling parameter: matches sampler.ErrInvalidParams too
		field  string // in the message
	}{
		{"prompt too long", spec.Request{Prompt: make([]int32, 11)}, spec.ErrPromptTooLong, false, "Prompt of 11 tokens exceeds the context length 10"},
		{"empty prompt", spec.Request{}, spec.ErrInvalidRequest, false, "empty Prompt"},
		{"prompt token", spec.Request{Prompt: []int32{1, 8}}, spec.ErrInvalidRequest, false, "Prompt token 8"},
		{"negative MaxTokens", spec.Request{Prompt: ok, MaxTokens: -1}, spec.ErrInvalidRequest, false, "MaxTokens -1"},
		{"TopLogprobs too many", spec.Request{Prompt: ok, Logprobs: true, TopLogprobs: spec.MaxTopLogprobs + 1}, spec.ErrInvalidRequest, false, "TopLogprobs 21"},
		{"TopLogprobs without Logprobs", spec.Request{Prompt: ok, TopLogprobs: 2}, spec.ErrInvalidRequest, false, "TopLogprobs 2"},
		{"negative temperature", spec.Request{Prompt: ok, Sampling: sampler.Params{Temperature: -1}}, spec.ErrInvalidRequest, true, "Temperature -1"},
		{"NaN top-p", spec.Request{Prompt: ok, Sampling: sampler.Params{Temperature: 1, TopP: math.NaN()}}, spec.ErrInvalidRequest, true, "TopP NaN"},
		{"stop token", spec.Request{Prompt: ok, StopTokens: []int32{9}}, spec.ErrInvalidRequest, false, "StopTokens token 9"},
		{"empty stop string", spec.Request{Prompt: ok, StopStrings: []string{""}}, spec.ErrInvalidRequest, false, "StopStrings[0] is empty"},
		{"stop strings without Text", spec.Request{Prompt: ok, StopStrings: []string{"x"}}, spec.ErrInvalidRequest, false, "StopStrings need Text"},
		{"empty stop sequence", spec.Request{Prompt: ok, StopSequences: [][]int32{{}}}, spec.ErrInvalidRequest, false, "StopSequences[0] is empty"},
	}
	ctx := context.Background()
	entries := []struct {
		name string
		run  func(spec.Request) error
	}{
		{"Generate", func(r spec.Request) error { _, err := dec.Generate(ctx, r); return err }},
		{"Stream", func(r spec.Request) error {
			_, err := dec.Stream(ctx, r, func([]int32) error { return nil })
			return err
		}},
		{"StreamN", func(r spec.Request) error {
			_, err := dec.StreamN(ctx, r, 2, func(int, []int32, []spec.Logprob) error { return nil })
			return err
		}},
		{"Tokens", func(r spec.Request) error {
			var res spec.Result
			for _, err := range dec.Tokens(ctx, r, &res) {
				if err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, tt := range tests {
		for _, e := range entries {
			t.Run(tt.name+"/"+e.name, func(t *testing.T) {
				err := e.run(tt.req)
				require.ErrorIs(t, err, tt.kind)
				assert.ErrorContains(t, err, tt.field)
				assert.Equal(t, tt.params, errors.Is(err, sampler.ErrInvalidParams), "a sampling parameter's error")
				for _, other := range []error{spec.ErrInvalidRequest, spec.ErrPromptTooLong} {
					if other != tt.kind {
						assert.NotErrorIs(t, err, other)
					}
				}
			})
		}
	}
	_, err := dec.StreamN(ctx, spec.Request{Prompt: ok}, 0, func(int, []int32, []spec.Logprob) error { return nil })
	assert.ErrorIs(t, err, spec.ErrInvalidRequest, "no choices")
	_, err = dec.Score(ctx, make([]int32, 11), 0)
	assert.ErrorIs(t, err, spec.ErrPromptTooLong, "Score's text")
}

// TestEveryEntryPointKeepsLogprobs: the log-probabilities a request asks for reach the
// caller through every entry point — with the tokens from StreamLogprobs and StreamN,
// in the Result from Generate, Stream and Tokens — the same ones each time; Tokens
// without a Result to hold them refuses the request instead of dropping them.
func TestEveryEntryPointKeepsLogprobs(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 16, Order: 2, Seed: 5})
	dec := newDecoder(t, tgt, newDrafter(t, tgt.Perturbed(0.5, 2)), 3)
	ctx := context.Background()
	req := spec.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 20, Sampling: sampler.Params{Temperature: 1, Seed: 7}, Logprobs: true, TopLogprobs: 2}
	want, err := dec.Generate(ctx, req)
	require.NoError(t, err)
	require.Len(t, want.Logprobs, len(want.Tokens))

	var streamed []spec.Logprob
	_, err = dec.StreamLogprobs(ctx, req, func(_ []int32, lps []spec.Logprob) error {
		streamed = append(streamed, lps...)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, want.Logprobs, streamed, "StreamLogprobs")

	var choice0 []spec.Logprob
	_, err = dec.StreamN(ctx, req, 1, func(_ int, _ []int32, lps []spec.Logprob) error {
		choice0 = append(choice0, lps...)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, want.Logprobs, choice0, "StreamN")

	res, err := dec.Stream(ctx, req, func([]int32) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, want.Logprobs, res.Logprobs, "Stream")

	var tokens []int32
	res = spec.Result{}
	for tok, err := range dec.Tokens(ctx, req, &res) {
		require.NoError(t, err)
		tokens = append(tokens, tok)
	}
	assert.Equal(t, want.Tokens, tokens)
	assert.Equal(t, want.Logprobs, res.Logprobs, "Tokens")

	var errs []error
	for _, err := range dec.Tokens(ctx, req, nil) {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], spec.ErrInvalidRequest)
	assert.ErrorContains(t, errs[0], "Logprobs")

	plain := req
	plain.Logprobs, plain.TopLogprobs = false, 0
	res, err = dec.Stream(ctx, plain, func([]int32) error { return nil })
	require.NoError(t, err)
	assert.Nil(t, res.Logprobs, "none asked, none kept")
}
