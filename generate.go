package specula

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/specula/specula/model"
	"github.com/specula/specula/spec"
)

// Stats describes how one choice of a request ran: acceptance, speed, time to first
// token (see spec.Stats).
type Stats = spec.Stats

// FinishReason says why a choice ended.
type FinishReason = spec.FinishReason

// The finish reasons.
const (
	// FinishStop: an end-of-sequence token, a stop string, or the end of a Format's
	// language.
	FinishStop = spec.FinishStop
	// FinishLength: MaxTokens or the end of the context.
	FinishLength = spec.FinishLength
	// FinishMemory: the key/value cache ran out after some tokens. Admission
	// reserves every request's most memory before it starts, so this happens only
	// for a model that does not say how its cache is laid out (see [NewEngine]).
	FinishMemory FinishReason = "memory"
	// FinishCancelled: the context ended, or the caller's function stopped it.
	FinishCancelled = spec.FinishCancelled
	// FinishError: anything else; the error returned says what.
	FinishError = spec.FinishError
)

// Event is a piece of a generation, handed out as soon as it is final: the text and
// tokens a choice gained (whole characters; a stop string is never shown in part), or
// the echoed prompt, and at a choice's end its finish reason and statistics.
type Event struct {
	// Choice is the index of the choice the event belongs to (0 to N−1).
	Choice int
	// Prompt marks the echoed prompt ([Request.Echo]): it comes first, once, as
	// choice 0, and every choice's text follows it.
	Prompt bool
	// Text is the text the event adds.
	Text string
	// Tokens are the tokens the event adds, and Pieces[i] the text Tokens[i] adds
	// (empty inside a character split across tokens). A choice's last event may
	// have text and no tokens: what the detokenizer held back to the end.
	Tokens []int32
	Pieces []string
	// Logprobs, when the request asks, scores Tokens one for one; the prompt's
	// first token has nothing before it: it is [TokenLogprob.Unscored].
	Logprobs []TokenLogprob
	// Finish is set on a choice's last event, with its Stats and Speculative.
	Finish      FinishReason
	Stats       *Stats
	Speculative bool
}

// TokenLogprob is the target's log-probability of a token at its place, and of the
// likeliest tokens there when asked: the natural logarithm of the softmax of the
// target's logits — the model's own distribution, before temperature, penalties or
// truncation shape it for sampling; under a Format, of that distribution restricted
// to the language.
//
// Every value is a finite number, so that an [Event], a [Choice] and a [Completion]
// marshal with encoding/json as they are (Go's field names, no custom marshaller):
// the one token without a log-probability, an echoed prompt's first, says so in
// Unscored rather than with NaN; Top lists only tokens the model, and the Format,
// allow; and a token the model rules out outright (a −Inf logit, which only a
// prompt's token can have) reads −math.MaxFloat32.
type TokenLogprob struct {
	Alternative
	// Top are the likeliest tokens at the place, likeliest first: TopLogprobs of
	// them, or fewer where fewer are possible — under a Format only tokens its
	// language allows there (a regular expression of digits lists digits alone).
	Top []Alternative
	// Unscored marks an echoed prompt's first token ([Request.Echo]), which nothing
	// comes before: it has no log-probability, its Logprob is 0 and its Top empty.
	// Summing the Logprob of an echoed prompt's tokens therefore gives the
	// log-probability of the rest given the first. JSON carries it only where it is
	// true ("Unscored": true); the OpenAI server writes that token's value as null.
	Unscored bool `json:",omitempty"`
}

// Alternative is one token with its log-probability (finite: see [TokenLogprob]),
// its text (a part of a character shown as U+FFFD) and the bytes it stands for.
type Alternative struct {
	Token   int32
	Text    string
	Bytes   []byte
	Logprob float32
}

// Choice is one finished choice of a request.
type Choice struct {
	// Index is the choice's place among the request's (0 to N−1).
	Index int
	// Text is the generated text (special tokens left out), without the echoed
	// prompt.
	Text string
	// Tokens are the generated tokens.
	Tokens []int32
	// Logprobs score Tokens one for one, when the request asks.
	Logprobs []TokenLogprob
	// Finish says why the choice ended.
	Finish FinishReason
	// Stats describes how it ran; Speculative whether it drafted.
	Stats       Stats
	Speculative bool
}

// Completion is a finished request: its first choice (the only one unless N > 1)
// in the open, every choice in Choices, the echoed prompt, and the token counts.
type Completion struct {
	Choice
	// Choices are every choice in order, the first included.
	Choices []Choice
	// PromptText, PromptTokens and PromptLogprobs are the echoed prompt, with
	// Request.Echo; PromptLogprobs score PromptTokens one for one, with Logprobs
	// (the first is [TokenLogprob.Unscored]: nothing comes before it).
	PromptText     string
	PromptTokens   []int32
	PromptLogprobs []TokenLogprob
	// Usage counts the request's tokens.
	Usage Usage
}

// Usage counts a request's tokens as OpenAI's API reports them: the prompt once, the
// tokens of every choice.
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens int
}

// Generate runs a request and yields its events as they come (see [Event]), then —
// if the request fails — one last pair with the error. Breaking out of the loop
// cancels the request. The decoder waits while the loop body runs; for a consumer
// that must never hold the decoder up, use [Engine.GenerateFunc] with a function
// that only queues.
func (e *Engine) Generate(ctx context.Context, req Request) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		stopped := false
		_, err := e.GenerateFunc(ctx, req, func(ev Event) error {
			if stopped || !yield(ev, nil) {
				stopped = true
				return errStopped
			}
			return nil
		})
		if err != nil && !stopped {
			yield(Event{}, err)
		}
	}
}

// errStopped ends a generation whose iterator's consumer stopped.
var errStopped = errors.New("specula: the caller stopped the iteration")

// GenerateFunc runs a request, hands every event to emit as it comes (nil: only
// collect) and returns the whole completion. It is the engine's one way in: the
// request is checked and encoded, waits for its turn and its key/value memory
// (see [Serving.MaxRunning]), gets the decoder that fits it (speculative,
// reproducible for a seed, plain when asked or when the engine is saturated), and
// is decoded, detokenized and stopped. emit is called one event at a time; an error
// from it ends the request and is returned. The errors are the engine's (see
// [ErrInvalidParameter] and the others), wrapped; the completion holds what was
// generated before one.
func (e *Engine) GenerateFunc(ctx context.Context, req Request, emit func(Event) error) (Completion, error) {
	arrived := time.Now()
	pl, err := e.prepare(req)
	if err != nil {
		return Completion{}, err
	}
	t, err := e.adm.acquire(ctx, pl.need)
	if err != nil {
		return Completion{}, err
	}
	defer func() { t.release(time.Since(arrived)) }() // even if emit panics
	e.met.queueWait.Observe(time.Since(arrived).Seconds())
	ctx, cancel := e.requestContext(ctx)
	defer cancel()
	pl.pick(e, t.running)
	e.met.admitted(pl.mode())
	r := &runner{e: e, pl: pl, emit: emit, arrived: arrived}
	return r.run(ctx)
}

// requestContext is ctx, ended also when the engine closes.
func (e *Engine) requestContext(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(e.ctx, func() { cancel(ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

// Complete generates a continuation of prompt.
func (e *Engine) Complete(ctx context.Context, prompt string, p Params) (Completion, error) {
	return e.Stream(ctx, prompt, p, nil)
}

// Stream generates a continuation of prompt and calls emit with each piece of text as
// soon as it is final (whole characters; a stop string is never shown in part). An
// error from emit ends the generation and is returned. A nil emit only collects.
func (e *Engine) Stream(ctx context.Context, prompt string, p Params, emit func(text string) error) (Completion, error) {
	return e.GenerateFunc(ctx, Request{Prompt: prompt, Params: p}, texts(emit))
}

// Chat answers a conversation: the messages are rendered with the model's chat
// template, and the answer is the assistant's next turn. emit, when not nil, gets
// the answer's text as it comes (see Stream).
func (e *Engine) Chat(ctx context.Context, messages []Message, p Params, emit func(text string) error) (Completion, error) {
	return e.GenerateFunc(ctx, Request{Messages: messages, Params: p}, texts(emit))
}

// texts turns a function of text into one of events.
func texts(emit func(string) error) func(Event) error {
	if emit == nil {
		return nil
	}
	return func(ev Event) error {
		if ev.Text == "" {
			return nil
		}
		return emit(ev.Text)
	}
}

// RandomSeed returns a seed from the system's random source.
func RandomSeed() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// runner runs one admitted request.
type runner struct {
	e       *Engine
	pl      *plan
	emit    func(Event) error
	arrived time.Time

	c       Completion // built as the choices' events come, one at a time
	texts   []spec.TextStream
	out     []strings.Builder // each choice's text so far
	started bool              // a token was handed out: time to first token observed
	echo    Event             // the echoed prompt, until it is handed out
	emitErr error             // what the caller's function returned, when it failed
	outOfKV bool              // the key/value cache ran out after some tokens
}

// run decodes the request: the echoed prompt (scored by the decoder's prefill when
// asked), then the choices. A request that generates nothing and scores nothing
// needs no decoder.
func (r *runner) run(ctx context.Context) (Completion, error) {
	pl := r.pl
	n := pl.req.choices()
	r.c.Choices = make([]Choice, n)
	for i := range r.c.Choices {
		r.c.Choices[i].Index, r.c.Choices[i].Speculative = i, pl.speculative
	}
	r.c.Usage.PromptTokens = len(pl.spec.Prompt)
	if err := r.startEcho(); err != nil {
		return r.done(nil, err)
	}
	if pl.req.PromptOnly && !pl.spec.PromptLogprobs {
		return r.done(promptOnly(spec.Result{Finish: FinishLength, Stats: Stats{PromptTokens: len(pl.spec.Prompt)}}, n), nil)
	}
	r.texts, r.out = make([]spec.TextStream, n), make([]strings.Builder, n)
	for i := range r.texts {
		r.texts[i] = r.e.textStream()
	}
	results, err := pl.dec.GenerateFunc(ctx, pl.spec, r.chunk)
	err = r.classify(ctx, err, results)
	if pl.req.PromptOnly && len(results) == 1 {
		results = promptOnly(results[0], n) // one prefill stands for every choice
	}
	return r.done(results, err)
}

// promptOnly is the results of n choices that generate nothing, each res.
func promptOnly(res spec.Result, n int) []spec.Result {
	out := make([]spec.Result, n)
	for i := range out {
		out[i] = res
	}
	return out
}

// startEcho readies the echoed prompt and hands it out, unless it waits for the
// scores of the decoder's prefill.
func (r *runner) startEcho() error {
	pl := r.pl
	if !pl.req.Echo {
		return nil
	}
	r.echo = Event{Prompt: true, Text: pl.echo, Tokens: pl.spec.Prompt, Pieces: pl.echoPieces}
	if pl.req.Logprobs {
		r.echo.Logprobs = []TokenLogprob{{Alternative: r.e.alternative(pl.spec.Prompt[0], 0), Unscored: true}}
	}
	if r.echoWaits() {
		return nil
	}
	return r.handEcho()
}

// echoWaits reports whether the echo still waits for prompt scores: it has fewer
// log-probabilities than tokens.
func (r *runner) echoWaits() bool {
	return r.pl.req.Logprobs && len(r.echo.Logprobs) < len(r.echo.Tokens)
}

// handEcho hands out the echoed prompt, keeping it in the completion.
func (r *runner) handEcho() error {
	r.c.PromptText, r.c.PromptTokens, r.c.PromptLogprobs = r.echo.Text, r.echo.Tokens, r.echo.Logprobs
	return r.hand(r.echo)
}

// chunk takes a chunk from the decoder: the prompt's scores, which complete the echo,
// or a choice's tokens. A choice's last chunk is left to done, which knows the
// request's error.
func (r *runner) chunk(c spec.Chunk) error {
	switch {
	case c.Prompt:
		r.echo.Logprobs = append(r.echo.Logprobs, r.e.logprobs(c.Logprobs)...)
		if r.echoWaits() {
			return nil
		}
		return r.handEcho()
	case c.Finish != "":
		return nil
	}
	return r.tokens(c.Choice, c.Tokens, c.Logprobs)
}

// tokens hands out a choice's accepted tokens as text.
func (r *runner) tokens(choice int, toks []int32, lps []spec.Logprob) error {
	if len(toks) > 0 && !r.started {
		r.started = true
		r.e.met.ttft.Observe(time.Since(r.arrived).Seconds())
	}
	ev := Event{Choice: choice, Tokens: toks, Pieces: make([]string, len(toks))}
	out := &r.out[choice]
	start := out.Len()
	for i, t := range toks {
		ev.Pieces[i] = r.texts[choice].Push(t)
		out.WriteString(ev.Pieces[i])
	}
	ev.Text = out.String()[start:]
	if r.pl.req.Logprobs {
		ev.Logprobs = r.e.logprobs(lps)
	}
	ch := &r.c.Choices[choice]
	ch.Tokens = append(ch.Tokens, toks...)
	ch.Logprobs = append(ch.Logprobs, ev.Logprobs...)
	return r.hand(ev)
}

// hand gives an event to the caller's function, unless it has failed: then nothing
// more is handed to it.
func (r *runner) hand(ev Event) error {
	if r.emit == nil || r.emitErr != nil {
		return r.emitErr
	}
	r.emitErr = r.emit(ev)
	return r.emitErr
}

// done ends every choice: the text held back, the finish, the statistics; and the
// completion with its usage.
func (r *runner) done(results []spec.Result, err error) (Completion, error) {
	for i, res := range results {
		ch := &r.c.Choices[i]
		ch.Finish, ch.Stats = res.Finish, res.Stats
		if res.Finish == FinishError && err == nil { // out of memory or context after some tokens: see classify
			ch.Finish = FinishLength
			if r.outOfKV {
				ch.Finish = FinishMemory
			}
		}
		ev := Event{Choice: i, Finish: ch.Finish, Stats: &ch.Stats, Speculative: ch.Speculative}
		if r.texts != nil {
			ev.Text = r.texts[i].Flush()
			r.out[i].WriteString(ev.Text)
			ch.Text = r.out[i].String()
		}
		r.e.met.observe(r.pl.mode(), *ch)
		r.c.Usage.CompletionTokens += res.Stats.GeneratedTokens
		if herr := r.hand(ev); herr != nil && err == nil {
			err = herr
		}
	}
	r.c.Usage.TotalTokens = r.c.Usage.PromptTokens + r.c.Usage.CompletionTokens
	if len(r.c.Choices) > 0 {
		r.c.Choice = r.c.Choices[0]
	}
	return r.c, err
}

// classify turns a decoder's error into the engine's: running out of key/value memory
// or context after some tokens is no error (the text ends with FinishMemory or
// FinishLength), before any it is ErrOutOfMemory; an ended context is ErrCancelled (or ErrClosed, when the
// engine closed); the decoder's refusals become the engine's (see fromDecoder).
func (r *runner) classify(ctx context.Context, err error, results []spec.Result) error {
	if err == nil || errors.Is(err, errStopped) {
		return err
	}
	generated := 0
	for _, res := range results {
		generated += res.Stats.GeneratedTokens
	}
	switch {
	case errors.Is(context.Cause(ctx), ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx))
	case errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull):
		if generated > 0 {
			r.outOfKV = errors.Is(err, model.ErrOutOfMemory)
			return nil
		}
		return fmt.Errorf("%w: %w", ErrOutOfMemory, err)
	}
	return fromDecoder(err)
}
