package spec

import (
	"errors"
	"fmt"

	"github.com/specula/specula/sampler"
)

// Request is one generation: a prompt, how many choices of its continuation, and how
// each is sampled, stopped and scored.
type Request struct {
	// Prompt is the input: at least one token, the beginning-of-sequence token
	// included where the model wants one, and no longer than the target's context
	// (else [ErrPromptTooLong]).
	Prompt []int32
	// N is how many choices to generate (OpenAI's n; 0 or 1: one, at most
	// [MaxChoices]): independent samples of the target's distribution, the prompt
	// prefilled once (see [Decoder.GenerateFunc]).
	N int
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
	// [Logprob]), handed out with the tokens ([Chunk.Logprobs]) and kept in
	// [Result.Logprobs]. They come from the verification passes, which score every
	// accepted position anyway: speculation does not change them.
	Logprobs bool
	// PromptLogprobs asks for the log-probability of every prompt token but the
	// first, given the tokens before it (vLLM's prompt_logprobs): the prompt is
	// prefilled with every token's logits kept, which needs a target whose sessions
	// are [target.ScoreSession]s ([target.Local]'s are), and its scores come first,
	// as choice 0's prompt chunks ([Chunk.Prompt]), and in [Result.PromptLogprobs].
	// The prompt's key/value blocks are published to the target's prefix cache as
	// any prefill's are.
	PromptLogprobs bool
	// TopLogprobs (0 to [MaxTopLogprobs]) adds, to every log-probability asked for
	// (Logprobs, PromptLogprobs), that many of the most likely tokens at its place —
	// fewer where fewer are possible: under a Constraint, only those it allows there.
	TopLogprobs int
	// PromptOnly generates nothing: the request prefills its prompt (scored, with
	// PromptLogprobs) and ends with FinishLength; no drafter runs. With
	// PromptLogprobs it is the scoring of a text, as lm-evaluation-harness asks of a
	// completions server with echo and logprobs (the text's log-likelihood is the
	// sum of its scores). One choice only.
	PromptOnly bool
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

// MaxChoices is the most choices a Request's N may ask for: each decodes
// concurrently, with sessions of its own.
const MaxChoices = 64

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

// Result is how one choice of a request ended, with its whole output.
type Result struct {
	// Tokens is the choice's output: every token handed out.
	Tokens []int32
	// Logprobs holds, when the request asked for them, one entry per output token.
	Logprobs []Logprob
	// PromptLogprobs holds, when the request asked for them, one entry per prompt
	// token but the first (choice 0's result only).
	PromptLogprobs []Logprob
	// Finish says why the choice ended.
	Finish FinishReason
	// Stats describes how it ran.
	Stats Stats
}

// ErrInvalidRequest is matched (with errors.Is) by the error of a request that cannot
// run as given: an empty prompt, a token outside the vocabulary, a negative MaxTokens
// or N, TopLogprobs out of range or without log-probabilities asked for, an empty
// stop, StopStrings without Text, PromptOnly with several choices, or sampling
// parameters out of range (those match [sampler.ErrInvalidParams] too). The error is
// a [*RequestError] naming the field at fault. A service answers it with 400.
var ErrInvalidRequest = errors.New("spec: invalid request")

// ErrPromptTooLong is matched (with errors.Is) by the error of a request whose prompt
// is longer than the target's context, a [*RequestError] whose message gives both
// lengths. A service answers it as OpenAI does: 400, context_length_exceeded. It is
// not an [ErrInvalidRequest].
var ErrPromptTooLong = errors.New("spec: prompt longer than the context")

// RequestError is a request refused before any work: the field at fault and what is
// wrong with it. It matches (errors.Is) its Kind, [ErrInvalidRequest] or
// [ErrPromptTooLong], and what Err wraps: for Field "Sampling", the sampler's
// [*sampler.FieldError], which names the sampling parameter (and matches
// [sampler.ErrInvalidParams]). A caller maps the field with errors.As.
type RequestError struct {
	// Kind is ErrInvalidRequest or ErrPromptTooLong.
	Kind error
	// Field is the Request's field as the Go field is written ("Prompt",
	// "Prompt[3]", "StopStrings[0]", "Sampling").
	Field string
	// Err says what is wrong with it.
	Err error
}

func (e *RequestError) Error() string { return "spec: " + e.Field + ": " + e.Err.Error() }

// Unwrap returns the kind and the cause.
func (e *RequestError) Unwrap() []error { return []error{e.Kind, e.Err} }

// refuse returns the RequestError of field, refused as kind, with the message of
// format (which may wrap a cause with %w).
func refuse(kind error, field, format string, args ...any) error {
	return &RequestError{Kind: kind, Field: field, Err: fmt.Errorf(format, args...)}
}

// invalid returns the RequestError of an invalid field.
func invalid(field, format string, args ...any) error {
	return refuse(ErrInvalidRequest, field, format, args...)
}

// validate checks a request against the target before any work: every problem, once,
// as a *RequestError.
func (d *Decoder) validate(req Request) error {
	if err := d.validatePrompt(req.Prompt); err != nil {
		return err
	}
	switch {
	case req.N < 0 || req.N > MaxChoices:
		return invalid("N", "%d must lie in [0, %d] (0 or 1: one choice)", req.N, MaxChoices)
	case req.PromptOnly && req.N > 1:
		return invalid("N", "%d choices of a PromptOnly request, which generates nothing: ask for one", req.N)
	case req.MaxTokens < 0:
		return invalid("MaxTokens", "%d must be >= 0", req.MaxTokens)
	case req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs:
		return invalid("TopLogprobs", "%d must lie in [0, %d]", req.TopLogprobs, MaxTopLogprobs)
	case req.TopLogprobs > 0 && !req.Logprobs && !req.PromptLogprobs:
		return invalid("TopLogprobs", "%d needs Logprobs or PromptLogprobs", req.TopLogprobs)
	}
	if err := d.validateStops(req); err != nil {
		return err
	}
	if err := req.Sampling.Validate(); err != nil {
		return invalid("Sampling", "%w", err)
	}
	return nil
}

// validatePrompt checks that the prompt has a token, fits the context and holds
// tokens of the vocabulary.
func (d *Decoder) validatePrompt(prompt []int32) error {
	if len(prompt) == 0 {
		return invalid("Prompt", "empty: at least one token is needed")
	}
	if cl := d.info.ContextLength; cl > 0 && len(prompt) > cl {
		return refuse(ErrPromptTooLong, "Prompt", "%d tokens exceed the context length %d", len(prompt), cl)
	}
	if i, t, ok := d.outside(prompt); ok {
		return invalid(fmt.Sprintf("Prompt[%d]", i), "token %d is outside the vocabulary [0, %d)", t, d.info.VocabSize)
	}
	return nil
}

// outside returns the first token of toks outside the vocabulary, with its index.
func (d *Decoder) outside(toks []int32) (int, int32, bool) {
	for i, t := range toks {
		if t < 0 || int(t) >= d.info.VocabSize {
			return i, t, true
		}
	}
	return 0, 0, false
}

// validateStops checks the stop tokens, strings and sequences.
func (d *Decoder) validateStops(req Request) error {
	v := d.info.VocabSize
	if i, t, ok := d.outside(req.StopTokens); ok {
		return invalid(fmt.Sprintf("StopTokens[%d]", i), "token %d is outside the vocabulary [0, %d)", t, v)
	}
	for i, s := range req.StopStrings {
		if s == "" {
			return invalid(fmt.Sprintf("StopStrings[%d]", i), "is empty")
		}
	}
	if len(req.StopStrings) > 0 && req.Text == nil {
		return invalid("Text", "is nil: StopStrings need a detokenizer")
	}
	for i, s := range req.StopSequences {
		if len(s) == 0 {
			return invalid(fmt.Sprintf("StopSequences[%d]", i), "is empty")
		}
		if j, t, ok := d.outside(s); ok {
			return invalid(fmt.Sprintf("StopSequences[%d][%d]", i, j), "token %d is outside the vocabulary [0, %d)", t, v)
		}
	}
	return nil
}
