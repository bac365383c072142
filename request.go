package specula

import (
	"fmt"
	"strings"

	"github.com/specula/specula/grammar"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// Request is one generation asked of an [Engine]: a prompt — text, token ids or a
// conversation, exactly one — and how to continue it. The zero values of its
// parameters are greedy decoding of one choice to the end of the context or the
// model's end-of-sequence token.
type Request struct {
	// Prompt is a text prompt, tokenized as the model's tokenizer does by default.
	Prompt string
	// Tokens is a prompt of token ids.
	Tokens []int32
	// Messages is a conversation, rendered with the model's chat template; the
	// answer is the assistant's next turn.
	Messages []Message
	// TemplateArgs are further variables for the chat template (Hugging Face's
	// chat_template_kwargs, such as enable_thinking); they cannot replace messages.
	TemplateArgs map[string]any

	Params

	// N is how many choices to generate: independent samples of the same prompt,
	// which is prefilled once (0 or 1: one).
	N int
	// Logprobs asks for the target's log-probability of every generated token, and
	// TopLogprobs (0 to [MaxTopLogprobs]) for that many likeliest tokens at each
	// place beside it — fewer where fewer are possible: under a Format, only the
	// tokens its language allows there (see [TokenLogprob]).
	Logprobs    bool
	TopLogprobs int
	// Echo puts the prompt first: the first event of choice 0 is the prompt's text
	// and tokens ([Event.Prompt]), with Logprobs its tokens scored, each given those
	// before (the first has none: [TokenLogprob.Unscored]). Not for Messages.
	Echo bool
	// PromptOnly generates nothing: with Echo, the prompt (and its scores) alone —
	// scoring a text, as an evaluation harness asks of a completions server.
	PromptOnly bool
	// NoSpeculation decodes without drafting, whatever the engine's drafter: a
	// baseline beside speculative runs, or a request that must not take the
	// drafter's time.
	NoSpeculation bool
}

// MaxTopLogprobs is the most alternatives a request's TopLogprobs may ask for.
const MaxTopLogprobs = spec.MaxTopLogprobs

// MaxChoices is the most choices (N) one request may ask for: the decoder's bound.
const MaxChoices = spec.MaxChoices

// Params are a generation's sampling and stopping settings, shared by a [Request]
// and the conveniences ([Engine.Complete], [Engine.Stream], [Engine.Chat]). The zero
// value is greedy decoding to the end of the context or the model's end-of-sequence
// token.
type Params struct {
	// MaxTokens bounds the tokens generated; 0 generates to the end of the
	// context (context length − prompt tokens).
	MaxTokens int
	// Temperature scales the logits before sampling; 0 is greedy decoding.
	Temperature float64
	// TopP keeps the smallest set of most likely tokens whose probability reaches it
	// (0 or 1: all); TopK keeps the TopK most likely (0: all); MinP drops tokens
	// less likely than MinP times the most likely one.
	TopP float64
	TopK int
	MinP float64
	// RepetitionPenalty (CTRL-style, 0 or 1: none) makes tokens already in the text
	// less likely; RepetitionWindow, when positive, limits it to the text's last
	// RepetitionWindow tokens (the prompt's included; llama.cpp's repeat_last_n).
	// The bounds of these parameters are the sampler's (see sampler.Params).
	RepetitionPenalty float64
	RepetitionWindow  int
	// Seed makes sampling reproducible: the same seed, prompt and parameters give the
	// same text. 0 draws a random seed, unless Reproducible is set.
	Seed uint64
	// Reproducible asks for the same text for the same Seed every time, Seed 0
	// included (a nonzero Seed implies it). Under adaptive speculation the draft
	// length depends on timing, and the random draws with it, so a reproducible
	// request drafts a small fixed number of tokens a step instead.
	Reproducible bool
	// Stop ends the text before the first of these strings (the stop string is left
	// out).
	Stop []string
	// IgnoreEOS generates past the model's end-of-sequence tokens (not under a
	// Format, whose language says where the text ends).
	IgnoreEOS bool
	// Format constrains the output to a language — JSON, a JSON Schema, a regular
	// expression or a GBNF grammar — exactly: the text is the target's own
	// distribution restricted to the language (see package grammar for what each
	// supports). The zero Format is free text.
	Format Format
}

// Format is a language the output must belong to: at most one field set.
type Format struct {
	// JSON asks for any JSON object (OpenAI's response_format json_object).
	JSON bool
	// JSONSchema asks for JSON valid against this schema (OpenAI's json_schema).
	JSONSchema string
	// Regex asks for text the whole of which matches this regular expression.
	Regex string
	// Grammar asks for a sentence of this GBNF grammar (llama.cpp's format; the
	// start rule is root).
	Grammar string
	// Whitespace, with JSON or JSONSchema only, is the whitespace allowed between
	// JSON's tokens. The zero value, [WhitespaceIndent], allows what
	// encoding/json writes, compact or indented (a bounded indent a level, one space
	// after ":" and "," at most, nothing after the value); [WhitespaceCompact]
	// none; [WhitespaceFree] a space or a newline and up to 20 blanks between
	// any two tokens and after the value (which a model may fill until it runs out of
	// tokens). vLLM's disable_any_whitespace maps onto it: true is WhitespaceCompact;
	// false or absent is the zero value here (vLLM's xgrammar then allows any
	// whitespace: ask for WhitespaceFree to get that freedom back).
	Whitespace Whitespace
}

// Whitespace is the whitespace a JSON [Format] allows between JSON's tokens (see
// [Format.Whitespace]). It is package grammar's type, named here so that a caller
// that sets a Format — a service, the OpenAI server — needs nothing below this
// package.
type Whitespace = grammar.Whitespace

// The whitespace modes of a JSON [Format], as package grammar defines them.
const (
	// WhitespaceIndent, the zero value: what encoding/json writes, compact or
	// indented.
	WhitespaceIndent = grammar.WhitespaceIndent
	// WhitespaceCompact: no whitespace at all (vLLM's disable_any_whitespace).
	WhitespaceCompact = grammar.WhitespaceCompact
	// WhitespaceFree: a space or a newline and up to 20 blanks between any two
	// tokens and after the value.
	WhitespaceFree = grammar.WhitespaceFree
)

// Message is one turn of a conversation.
type Message struct {
	// Role is "system", "user", "assistant" or "tool".
	Role string
	// Content is the turn's text.
	Content string
	// Name, when set, names the author of the turn (for templates that use it).
	Name string
}

// kind names the set field, or "" for free text; more than one is an error.
func (f Format) kind() (string, error) {
	var set []string
	if f.JSON {
		set = append(set, "JSON")
	}
	for _, k := range []struct{ name, v string }{{"JSONSchema", f.JSONSchema}, {"Regex", f.Regex}, {"Grammar", f.Grammar}} {
		if k.v != "" {
			set = append(set, k.name)
		}
	}
	if len(set) > 1 {
		return "", invalid("Format", "sets %s: at most one", strings.Join(set, " and "))
	}
	if err := f.checkWhitespace(set); err != nil {
		return "", err
	}
	if len(set) == 0 {
		return "", nil
	}
	return set[0], nil
}

// checkWhitespace refuses a whitespace mode that is none of them, or one asked of
// a format that is not JSON.
func (f Format) checkWhitespace(set []string) error {
	switch {
	case !f.Whitespace.Valid():
		return invalid("Format.Whitespace", "%v is not one of grammar's Whitespace modes", f.Whitespace)
	case f.Whitespace != grammar.WhitespaceIndent && (len(set) == 0 || set[0] != "JSON" && set[0] != "JSONSchema"):
		return invalid("Format.Whitespace", "%v applies to JSON and JSONSchema only", f.Whitespace)
	}
	return nil
}

// Validate reports impossible parameters, before any work is done, as a
// [*ParameterError].
func (p Params) Validate() error {
	if p.MaxTokens < 0 {
		return invalid("MaxTokens", "%d must be >= 0 (0: to the end of the context)", p.MaxTokens)
	}
	for i, s := range p.Stop {
		if s == "" {
			return invalid(fmt.Sprintf("Stop[%d]", i), "is empty")
		}
	}
	if err := p.sampling().Validate(); err != nil {
		return fromDecoder(err)
	}
	_, err := p.Format.kind()
	return err
}

// Validate reports an impossible request, before any work is done, as a
// [*ParameterError].
func (r Request) Validate() error {
	if err := r.Params.Validate(); err != nil {
		return err
	}
	prompts := 0
	for _, set := range []bool{r.Prompt != "", len(r.Tokens) > 0, len(r.Messages) > 0} {
		prompts += btoi(set)
	}
	switch {
	case prompts == 0:
		return &ParameterError{Field: "Prompt", Err: ErrEmptyPrompt}
	case prompts > 1:
		return invalid("Prompt", "set one of Prompt, Tokens and Messages, not %d", prompts)
	case r.N < 0 || r.N > MaxChoices:
		return invalid("N", "%d must lie in [0, %d]", r.N, MaxChoices)
	case r.TopLogprobs < 0 || r.TopLogprobs > MaxTopLogprobs:
		return invalid("TopLogprobs", "%d must lie in [0, %d]", r.TopLogprobs, MaxTopLogprobs)
	case r.TopLogprobs > 0 && !r.Logprobs:
		return invalid("TopLogprobs", "needs Logprobs")
	case r.Echo && len(r.Messages) > 0:
		return invalid("Echo", "echoes a Prompt or Tokens, not Messages")
	case r.PromptOnly && !r.Echo:
		return invalid("PromptOnly", "needs Echo: a request that generates nothing returns only its prompt")
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return invalid(fmt.Sprintf("Messages[%d].Role", i), "%q is not one of system, user, assistant, tool", m.Role)
		}
	}
	return nil
}

// choices is the number of choices r asks for.
func (r Request) choices() int { return max(r.N, 1) }

// seeded reports whether r samples with a seed of its caller's, whose text must then
// be the same every time.
func (r Request) seeded() bool {
	return r.Temperature > 0 && (r.Seed != 0 || r.Reproducible)
}

func (p Params) sampling() sampler.Params {
	return sampler.Params{Temperature: p.Temperature, TopP: p.TopP, TopK: p.TopK, MinP: p.MinP,
		RepetitionPenalty: p.RepetitionPenalty, RepetitionWindow: p.RepetitionWindow, Seed: p.Seed}
}
