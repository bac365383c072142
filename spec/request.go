package spec

import (
	"errors"
	"fmt"

	"github.com/specula/specula/sampler"
)

// Request is one generation.
type Request struct {
	// Prompt is the input: at least one token, the beginning-of-sequence token
	// included where the model wants one, and no longer than the target's context
	// (else [ErrPromptTooLong]).
	Prompt []int32
	// MaxTokens bounds the generated tokens; 0 means until a stop or the model's
	// context is full. A prompt of p tokens in a context of n tokens then yields at
	// most n − p + 1 tokens: the last generated token is never forwarded, so it takes
	// no room in the context (a prompt as long as the context still yields one). A
	// step never drafts more than the request can use.
	MaxTokens int
	// Sampling selects greedy decoding or sampling; see [sampler.Params].
	Sampling sampler.Params
	// StopTokens end generation when generated (end-of-sequence tokens).
	StopTokens []int32
	// StopSequences end generation when the output ends with one of them. Tokens that
	// might begin a stop sequence are held back until it is clear that they do not.
	StopSequences [][]int32
	// StopStrings end generation when the decoded output contains one of them, even
	// across the boundary of two tokens or two drafts; the output then ends with the
	// last token whose text lies wholly before the stop string (the text of a token
	// that straddles it is not emitted). Tokens whose text might begin a stop string
	// are held back until it is clear that they do not. They need Text.
	StopStrings []string
	// Text makes a streaming detokenizer for the request, used for StopStrings; with
	// a tokenizer from package tokenizer, a closure around its NewStream.
	Text func() TextStream
	// IncludeStop keeps the stop token, stop sequence or the token that completes a
	// stop string at the end of the output; by default it is removed.
	IncludeStop bool
	// Logprobs asks for the target's log-probability of every generated token (see
	// [Logprob]), handed out with the tokens by [Decoder.StreamLogprobs] and
	// [Decoder.StreamN] and kept in [Result.Logprobs] by the other entry points;
	// TopLogprobs (0 to [MaxTopLogprobs]) adds that many of the most likely tokens at
	// each place. They come from the verification passes, which score every accepted
	// position anyway: speculation does not change them.
	Logprobs    bool
	TopLogprobs int
	// Constraint restricts the output to a language — a grammar, a regular
	// expression, a JSON Schema (package grammar) — exactly. Every row of logits is
	// processed in one order: first masked with the state the output (or the draft)
	// reaches there, the tokens the language forbids set to −∞; then Sampling's
	// processing (repetition penalty, temperature, top-k, top-p, min-p) runs on what
	// is left. Drafts end at a token the language forbids, a draft model masks its
	// drafts the same way, and the acceptance rule keeps the target's distribution
	// restricted to the language and renormalised. End-of-sequence tokens are allowed
	// exactly where the output is a sentence: put them in StopTokens. Logprobs are
	// then those of the masked distribution (before Sampling's processing).
	Constraint sampler.Constraint
}

// MaxTopLogprobs is the most alternatives a Request's TopLogprobs may ask for.
const MaxTopLogprobs = 20

// TextStream turns tokens into text as they come: Push returns the text a token
// completes (never half a UTF-8 character), Flush what is left.
type TextStream interface {
	Push(id int32) string
	Flush() string
}

// FinishReason says why a generation ended.
type FinishReason string

// The reasons a generation ends.
const (
	FinishStop      FinishReason = "stop"      // a stop token or stop sequence
	FinishLength    FinishReason = "length"    // MaxTokens, or the context is full
	FinishCancelled FinishReason = "cancelled" // the context ended, or the caller stopped
	FinishError     FinishReason = "error"     // anything else: see the error returned
)

// Result is the outcome of a generation.
type Result struct {
	// Tokens is the output, filled by Generate and GenerateN only (the streams hand
	// it out as it comes).
	Tokens []int32
	// Finish says why the generation ended.
	Finish FinishReason
	// Stats describes the request.
	Stats Stats
	// Logprobs holds, when the request asked for them, one entry per output token:
	// filled by the entry points that do not hand them out with the tokens
	// (Generate, GenerateN, Stream and Tokens).
	Logprobs []Logprob
}

// ErrInvalidRequest is matched (with errors.Is) by the error of a request that cannot
// run as given: an empty prompt, a token outside the vocabulary, a negative MaxTokens,
// TopLogprobs out of range or without Logprobs, an empty stop, StopStrings without
// Text, sampling parameters out of range (those match [sampler.ErrInvalidParams]
// too), fewer than one choice, or log-probabilities asked of an entry point with
// nowhere to put them. The message names the field at fault. A service answers it
// with 400.
var ErrInvalidRequest = errors.New("spec: invalid request")

// ErrPromptTooLong is matched (with errors.Is) by the error of a request whose prompt
// is longer than the target's context; the message gives both lengths. A service
// answers it as OpenAI does: 400, context_length_exceeded. It is not an
// [ErrInvalidRequest].
var ErrPromptTooLong = errors.New("spec: prompt longer than the context")

// requestError is a request refused before any work: its message names the field at
// fault, and it matches its kind ([ErrInvalidRequest], [ErrPromptTooLong]) and the
// errors its message wraps.
type requestError struct {
	kind error
	err  error
}

// refuse returns the error of a request refused as kind, with the message of format
// (which may wrap a cause with %w).
func refuse(kind error, format string, args ...any) error {
	return &requestError{kind: kind, err: fmt.Errorf(format, args...)}
}

func (e *requestError) Error() string { return e.err.Error() }

func (e *requestError) Unwrap() []error { return []error{e.kind, e.err} }

// validate checks a request against the target before any work.
func (d *Decoder) validate(req Request) error {
	if err := d.validatePrompt(req.Prompt); err != nil {
		return err
	}
	if req.MaxTokens < 0 {
		return refuse(ErrInvalidRequest, "spec: MaxTokens %d must be >= 0", req.MaxTokens)
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs || (req.TopLogprobs > 0 && !req.Logprobs) {
		return refuse(ErrInvalidRequest, "spec: TopLogprobs %d must lie in [0, %d], and needs Logprobs", req.TopLogprobs, MaxTopLogprobs)
	}
	if err := d.validateStops(req); err != nil {
		return err
	}
	if err := req.Sampling.Validate(); err != nil {
		return refuse(ErrInvalidRequest, "spec: %w", err)
	}
	return nil
}

// validatePrompt checks that the prompt has a token, fits the context and holds
// tokens of the vocabulary.
func (d *Decoder) validatePrompt(prompt []int32) error {
	if len(prompt) == 0 {
		return refuse(ErrInvalidRequest, "spec: empty Prompt: at least one token is needed")
	}
	if cl := d.info.ContextLength; cl > 0 && len(prompt) > cl {
		return refuse(ErrPromptTooLong, "spec: Prompt of %d tokens exceeds the context length %d", len(prompt), cl)
	}
	v := d.info.VocabSize
	for i, t := range prompt {
		if t < 0 || int(t) >= v {
			return refuse(ErrInvalidRequest, "spec: Prompt token %d at index %d is outside the vocabulary [0, %d)", t, i, v)
		}
	}
	return nil
}

// validateStops checks the stop tokens, strings and sequences.
func (d *Decoder) validateStops(req Request) error {
	v := d.info.VocabSize
	for _, t := range req.StopTokens {
		if t < 0 || int(t) >= v {
			return refuse(ErrInvalidRequest, "spec: StopTokens token %d is outside the vocabulary [0, %d)", t, v)
		}
	}
	for i, s := range req.StopStrings {
		if s == "" {
			return refuse(ErrInvalidRequest, "spec: StopStrings[%d] is empty", i)
		}
	}
	if len(req.StopStrings) > 0 && req.Text == nil {
		return refuse(ErrInvalidRequest, "spec: StopStrings need Text, a detokenizer")
	}
	for i, s := range req.StopSequences {
		if len(s) == 0 {
			return refuse(ErrInvalidRequest, "spec: StopSequences[%d] is empty", i)
		}
		for _, t := range s {
			if t < 0 || int(t) >= v {
				return refuse(ErrInvalidRequest, "spec: StopSequences[%d] token %d is outside the vocabulary [0, %d)", i, t, v)
			}
		}
	}
	return nil
}
