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

// TestRequestErrors: every refused request is a *RequestError naming the field at
// fault, and matches its sentinel with errors.Is — ErrPromptTooLong for a prompt
// beyond the context, ErrInvalidRequest for the rest, and for a sampling parameter
// sampler.ErrInvalidParams besides, with the sampler's *FieldError naming it —
// through both ways in, and hands nothing out.
func TestRequestErrors(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 8, Order: 1, ContextLength: 10})
	dec := newDecoder(t, tgt, newDrafter(t, tgt.Perturbed(1, 1)), 3)
	ok := []int32{1, 2}
	tests := []struct {
		name    string
		req     spec.Request
		kind    error
		field   string // the Request's field
		sampler string // a sampling parameter's, for Field "Sampling"
	}{
		{"prompt too long", spec.Request{Prompt: make([]int32, 11)}, spec.ErrPromptTooLong, "Prompt", ""},
		{"empty prompt", spec.Request{}, spec.ErrInvalidRequest, "Prompt", ""},
		{"prompt token", spec.Request{Prompt: []int32{1, 8}}, spec.ErrInvalidRequest, "Prompt[1]", ""},
		{"negative N", spec.Request{Prompt: ok, N: -2}, spec.ErrInvalidRequest, "N", ""},
		{"PromptOnly of several", spec.Request{Prompt: ok, N: 2, PromptOnly: true}, spec.ErrInvalidRequest, "N", ""},
		{"negative MaxTokens", spec.Request{Prompt: ok, MaxTokens: -1}, spec.ErrInvalidRequest, "MaxTokens", ""},
		{"TopLogprobs too many", spec.Request{Prompt: ok, Logprobs: true, TopLogprobs: spec.MaxTopLogprobs + 1}, spec.ErrInvalidRequest, "TopLogprobs", ""},
		{"TopLogprobs without Logprobs", spec.Request{Prompt: ok, TopLogprobs: 2}, spec.ErrInvalidRequest, "TopLogprobs", ""},
		{"negative temperature", spec.Request{Prompt: ok, Sampling: sampler.Params{Temperature: -1}}, spec.ErrInvalidRequest, "Sampling", "Temperature"},
		{"NaN top-p", spec.Request{Prompt: ok, Sampling: sampler.Params{Temperature: 1, TopP: math.NaN()}}, spec.ErrInvalidRequest, "Sampling", "TopP"},
		{"negative window", spec.Request{Prompt: ok, Sampling: sampler.Params{RepetitionWindow: -1}}, spec.ErrInvalidRequest, "Sampling", "RepetitionWindow"},
		{"stop token", spec.Request{Prompt: ok, StopTokens: []int32{9}}, spec.ErrInvalidRequest, "StopTokens[0]", ""},
		{"empty stop string", spec.Request{Prompt: ok, StopStrings: []string{""}}, spec.ErrInvalidRequest, "StopStrings[0]", ""},
		{"stop strings without Text", spec.Request{Prompt: ok, StopStrings: []string{"x"}}, spec.ErrInvalidRequest, "Text", ""},
		{"empty stop sequence", spec.Request{Prompt: ok, StopSequences: [][]int32{{}}}, spec.ErrInvalidRequest, "StopSequences[0]", ""},
	}
	ctx := context.Background()
	handed := 0
	entries := []struct {
		name string
		run  func(spec.Request) error
	}{
		{"GenerateFunc", func(r spec.Request) error {
			_, err := dec.GenerateFunc(ctx, r, func(spec.Chunk) error { handed++; return nil })
			return err
		}},
		{"Generate", func(r spec.Request) error {
			for c, err := range dec.Generate(ctx, r) {
				if err != nil {
					return err
				}
				handed += 1 + len(c.Tokens)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		for _, e := range entries {
			t.Run(tt.name+"/"+e.name, func(t *testing.T) {
				err := e.run(tt.req)
				require.ErrorIs(t, err, tt.kind)
				re, ok := errors.AsType[*spec.RequestError](err)
				require.True(t, ok, "a *RequestError: %v", err)
				assert.Equal(t, tt.field, re.Field)
				assert.Equal(t, tt.kind, re.Kind)
				assert.ErrorContains(t, err, tt.field)
				fe, isParam := errors.AsType[*sampler.FieldError](err)
				assert.Equal(t, tt.sampler != "", isParam, "a sampling parameter's error")
				assert.Equal(t, tt.sampler != "", errors.Is(err, sampler.ErrInvalidParams))
				if isParam {
					assert.Equal(t, tt.sampler, fe.Field)
				}
				for _, other := range []error{spec.ErrInvalidRequest, spec.ErrPromptTooLong} {
					if other != tt.kind {
						assert.NotErrorIs(t, err, other)
					}
				}
			})
		}
	}
	assert.Zero(t, handed, "a refused request hands out nothing")
}

// TestBothWaysKeepLogprobs: the log-probabilities a request asks for reach the caller
// through both ways in — with the tokens, chunk by chunk, and in the Result — the
// same ones each time; none are kept when none are asked for.
func TestBothWaysKeepLogprobs(t *testing.T) {
	tgt := newChain(t, markov.Config{Vocab: 16, Order: 2, Seed: 5})
	dec := newDecoder(t, tgt, newDrafter(t, tgt.Perturbed(0.5, 2)), 3)
	ctx := context.Background()
	req := spec.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 20, Sampling: sampler.Params{Temperature: 1, Seed: 7}, Logprobs: true, TopLogprobs: 2}
	want, err := single(dec.GenerateFunc(ctx, req, nil))
	require.NoError(t, err)
	require.Len(t, want.Logprobs, len(want.Tokens))
	require.NotEmpty(t, want.Tokens)

	var tokens []int32
	var streamed []spec.Logprob
	res, err := single(dec.GenerateFunc(ctx, req, func(c spec.Chunk) error {
		require.Len(t, c.Logprobs, len(c.Tokens), "a chunk's scores are its tokens'")
		tokens, streamed = append(tokens, c.Tokens...), append(streamed, c.Logprobs...)
		return nil
	}))
	require.NoError(t, err)
	assert.Equal(t, want.Tokens, tokens, "GenerateFunc's chunks")
	assert.Equal(t, want.Logprobs, streamed, "GenerateFunc's chunks")
	assert.Equal(t, want.Logprobs, res.Logprobs, "GenerateFunc's result with an emit")

	tokens, streamed = nil, nil
	for c, err := range dec.Generate(ctx, req) {
		require.NoError(t, err)
		tokens, streamed = append(tokens, c.Tokens...), append(streamed, c.Logprobs...)
	}
	assert.Equal(t, want.Tokens, tokens, "Generate")
	assert.Equal(t, want.Logprobs, streamed, "Generate")

	plain := req
	plain.Logprobs, plain.TopLogprobs = false, 0
	res, err = single(dec.GenerateFunc(ctx, plain, func(c spec.Chunk) error {
		assert.Nil(t, c.Logprobs)
		return nil
	}))
	require.NoError(t, err)
	assert.Nil(t, res.Logprobs, "none asked, none kept")
	assert.Nil(t, res.PromptLogprobs)
}
