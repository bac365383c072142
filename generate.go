package specula

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/tokenizer"
)

// Params are a generation's settings. The zero value is greedy decoding to the end of
// the context or the model's end-of-sequence token.
type Params struct {
	// MaxTokens bounds the tokens generated (0: to the end of the context).
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
	// less likely.
	RepetitionPenalty float64
	// Seed makes sampling reproducible: the same seed, prompt and parameters give the
	// same text. 0 draws a random seed.
	Seed uint64
	// Stop ends the text before the first of these strings (the stop string is left
	// out).
	Stop []string
	// IgnoreEOS generates past the model's end-of-sequence tokens (not under a
	// constraint, whose language says where the text ends).
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
	switch len(set) {
	case 0:
		return "", nil
	case 1:
		return set[0], nil
	}
	return "", fmt.Errorf("specula: Format sets %s: at most one", strings.Join(set, " and "))
}

// Validate reports impossible parameters, before any work is done.
func (p Params) Validate() error {
	if p.MaxTokens < 0 {
		return fmt.Errorf("specula: MaxTokens %d must be >= 0 (0: to the end of the context)", p.MaxTokens)
	}
	for i, s := range p.Stop {
		if s == "" {
			return fmt.Errorf("specula: Stop[%d] is empty", i)
		}
	}
	if err := p.sampling().Validate(); err != nil {
		return fmt.Errorf("specula: %w", err)
	}
	_, err := p.Format.kind()
	return err
}

func (p Params) sampling() sampler.Params {
	return sampler.Params{Temperature: p.Temperature, TopP: p.TopP, TopK: p.TopK, MinP: p.MinP,
		RepetitionPenalty: p.RepetitionPenalty, Seed: p.Seed}
}

// Completion is a finished generation.
type Completion struct {
	// Text is the generated text (special tokens left out).
	Text string
	// Tokens are the generated tokens.
	Tokens []int32
	// Finish says why the generation ended: spec.FinishStop at an end-of-sequence
	// token or a stop string, spec.FinishLength at MaxTokens or the end of the
	// context, spec.FinishCancelled when the context ended.
	Finish spec.FinishReason
	// Stats describes the generation: acceptance, speed, time to first token.
	Stats spec.Stats
}

// Message is one turn of a conversation.
type Message struct {
	// Role is "system", "user", "assistant" or "tool".
	Role string
	// Content is the turn's text.
	Content string
}

// Complete generates a continuation of prompt.
func (e *Engine) Complete(ctx context.Context, prompt string, p Params) (Completion, error) {
	return e.Stream(ctx, prompt, p, nil)
}

// Stream generates a continuation of prompt and calls emit with each piece of text as
// soon as it is final (whole characters; a stop string is never shown in part). An
// error from emit ends the generation and is returned. A nil emit only collects.
func (e *Engine) Stream(ctx context.Context, prompt string, p Params, emit func(text string) error) (Completion, error) {
	ids, err := e.encode(prompt)
	if err != nil {
		return Completion{}, err
	}
	return e.generate(ctx, ids, p, emit)
}

// encode tokenizes a text prompt as the model's tokenizer does by default;
// ErrEmptyPrompt when that gives no tokens.
func (e *Engine) encode(prompt string) ([]int32, error) {
	ids := e.tok.Encode(prompt, e.tok.DefaultOptions())
	if len(ids) == 0 {
		return nil, ErrEmptyPrompt
	}
	return ids, nil
}

// Chat answers a conversation: the messages are rendered with the model's chat
// template, and the answer is the assistant's next turn.
func (e *Engine) Chat(ctx context.Context, messages []Message, p Params) (Completion, error) {
	return e.ChatStream(ctx, messages, p, nil)
}

// ChatStream is Chat with the answer's text handed to emit as it comes (see Stream).
func (e *Engine) ChatStream(ctx context.Context, messages []Message, p Params, emit func(text string) error) (Completion, error) {
	conv := make([]any, len(messages))
	for i, m := range messages {
		conv[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	prompt, err := e.ChatPrompt(conv, nil)
	if err != nil {
		return Completion{}, err
	}
	return e.generate(ctx, prompt, p, emit)
}

// ChatPrompt renders a conversation — messages as a chat template reads them, maps
// with "role" and "content" and whatever else the template knows — and encodes it as
// the model's tokenizer does, with the special tokens the template writes recognised,
// and no second beginning-of-sequence token where the template wrote one. extra holds
// further template variables.
func (e *Engine) ChatPrompt(messages []any, extra map[string]any) ([]int32, error) {
	if e.chat == nil {
		why := ""
		if e.chatErr != nil {
			why = ": " + e.chatErr.Error()
		}
		return nil, fmt.Errorf("%w%s", ErrNoChatTemplate, why)
	}
	if len(messages) == 0 {
		return nil, fmt.Errorf("%w: no messages", ErrEmptyPrompt)
	}
	prompt, err := e.chat.Render(messages, extra)
	if err != nil {
		return nil, fmt.Errorf("specula: %w", err)
	}
	opts := e.tok.DefaultOptions()
	if bos := e.chat.bos; bos != "" && strings.HasPrefix(prompt, bos) {
		opts.AddBOS = false
	}
	ids := e.tok.Encode(prompt, opts)
	if len(ids) == 0 {
		return nil, ErrEmptyPrompt
	}
	return ids, nil
}

// ErrNoChatTemplate is returned (wrapped) by Chat when the model has no usable chat
// template: none in its GGUF file or tokenizer_config.json, or one that does not
// compile (Config.ChatTemplate supplies one).
var ErrNoChatTemplate = errors.New("specula: the model has no usable chat template")

// ErrEmptyPrompt is returned when a prompt or conversation encodes to no tokens.
var ErrEmptyPrompt = errors.New("specula: the prompt encodes to no tokens")

// generate runs one request of prompt tokens.
func (e *Engine) generate(ctx context.Context, prompt []int32, p Params, emit func(string) error) (Completion, error) {
	if err := p.Validate(); err != nil {
		return Completion{}, err
	}
	req, dec, err := e.request(prompt, p)
	if err != nil {
		return Completion{}, err
	}
	text := e.TextStream()
	var out strings.Builder
	var toks []int32
	res, err := dec.Stream(ctx, req, func(ids []int32) error {
		toks = append(toks, ids...)
		var piece strings.Builder
		for _, id := range ids {
			piece.WriteString(text.Push(id))
		}
		return e.hand(&out, piece.String(), emit)
	})
	if err == nil {
		err = e.hand(&out, text.Flush(), emit)
	}
	return Completion{Text: out.String(), Tokens: toks, Finish: res.Finish, Stats: res.Stats}, err
}

// hand adds a piece of text to the output and hands it to emit.
func (e *Engine) hand(out *strings.Builder, piece string, emit func(string) error) error {
	if piece == "" {
		return nil
	}
	out.WriteString(piece)
	if emit == nil {
		return nil
	}
	return emit(piece)
}

// Request encodes prompt and builds the decoder's request for it and p, with the
// decoder Complete would use: for callers that drive the lower-level decoders
// themselves (their own emit function, logprobs, n samples) with the engine's
// conventions — the model's end-of-sequence tokens, stop strings on the decoded
// text, a random seed when p has none.
func (e *Engine) Request(prompt string, p Params) (spec.Request, *spec.Decoder, error) {
	if err := p.Validate(); err != nil {
		return spec.Request{}, nil, err
	}
	ids, err := e.encode(prompt)
	if err != nil {
		return spec.Request{}, nil, err
	}
	return e.request(ids, p)
}

// request builds the decoder's request for prompt and p, and picks the decoder: the
// reproducible one when sampling with a seed.
func (e *Engine) request(prompt []int32, p Params) (spec.Request, *spec.Decoder, error) {
	req := spec.Request{Prompt: prompt, MaxTokens: p.MaxTokens, Sampling: p.sampling()}
	m, err := e.Constraint(p.Format)
	if err != nil {
		return spec.Request{}, nil, err
	}
	if m != nil {
		req.Constraint = m
	}
	e.SetStops(&req, p.Stop, p.IgnoreEOS)
	dec := e.dec
	switch {
	case p.Temperature == 0:
	case p.Seed != 0:
		dec = e.seeded
	default:
		req.Sampling.Seed = RandomSeed()
	}
	return req, dec, nil
}

// SetStops sets what ends req besides its length: the stop strings, matched on the
// decoded text, and the model's end-of-sequence tokens — unless ignoreEOS, and always
// when req has a Constraint (its language says where the text ends). Callers that
// build requests of their own (the server) end them as the engine does.
func (e *Engine) SetStops(req *spec.Request, stops []string, ignoreEOS bool) {
	req.StopStrings, req.Text = stops, nil
	if len(stops) > 0 {
		req.Text = e.TextStream
	}
	req.StopTokens = nil
	if !ignoreEOS || req.Constraint != nil {
		req.StopTokens = e.tok.EOS()
	}
}

// TextStream is a streaming decoder of the engine's output: whole characters, special
// tokens left out, as Stream hands text out.
func (e *Engine) TextStream() spec.TextStream {
	return e.tok.NewStream(tokenizer.DecodeOptions{SkipSpecial: true})
}

// RandomSeed returns a seed from the system's random source.
func RandomSeed() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
