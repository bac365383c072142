package specula

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/specula/specula/spec"
	"github.com/specula/specula/tokenizer"
)

// plan is how one request runs: the caller's request, checked; its prompt encoded
// and the decoder's request built from it; the key/value memory it may fill, which
// it waits for; and, once admitted, the decoder it runs on.
type plan struct {
	req        Request
	spec       spec.Request
	echo       string   // the prompt's text, with Echo
	echoPieces []string // the text each prompt token adds to echo
	need       int      // key/value blocks the request may fill, all choices together

	dec         *spec.Decoder // picked at admission
	speculative bool
}

// prepare checks req and makes its plan. Every problem is an error of the
// engine's, before any model work: a *ParameterError naming the field, or
// ErrPromptTooLong.
func (e *Engine) prepare(req Request) (*plan, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	pl := &plan{req: req}
	if err := e.encodePrompt(pl); err != nil {
		return nil, err
	}
	n := len(pl.spec.Prompt)
	if err := e.checkPromptLength(n); err != nil {
		return nil, err
	}
	if err := e.setRequest(pl); err != nil {
		return nil, err
	}
	if err := e.checkFits(pl); err != nil {
		return nil, err
	}
	pl.need = e.blocksFor(pl)
	return pl, nil
}

// encodePrompt sets the plan's prompt tokens from the request's text, tokens or
// messages, and the text an echo shows.
func (e *Engine) encodePrompt(pl *plan) error {
	r := pl.req
	var err error
	switch {
	case len(r.Messages) > 0:
		pl.spec.Prompt, err = e.renderChat(r.Messages, r.TemplateArgs)
		return err
	case len(r.Tokens) > 0:
		v := e.info.VocabSize
		for i, t := range r.Tokens {
			if t < 0 || int(t) >= v {
				return invalid(fmt.Sprintf("Tokens[%d]", i), "token %d is outside the vocabulary [0, %d)", t, v)
			}
		}
		pl.spec.Prompt = slices.Clone(r.Tokens) // the caller may reuse its slice
		pl.echo = e.tok.DecodeWith(r.Tokens, tokenizer.DecodeOptions{SkipSpecial: true})
	default:
		if pl.spec.Prompt, err = e.encode(r.Prompt); err != nil {
			return err
		}
		pl.echo = r.Prompt
	}
	if r.Echo {
		pl.echoPieces = e.promptPieces(pl.spec.Prompt, pl.echo)
	}
	return nil
}

// encode tokenizes a text prompt as the model's tokenizer does by default.
func (e *Engine) encode(prompt string) ([]int32, error) {
	ids := e.tok.Encode(prompt, e.tok.DefaultOptions())
	if len(ids) == 0 {
		return nil, &ParameterError{Field: "Prompt", Err: ErrEmptyPrompt}
	}
	return ids, nil
}

// renderChat renders a conversation with the chat template and encodes it as the
// model's tokenizer does, with the special tokens the template writes recognised, and
// no second beginning-of-sequence token where the template wrote one.
func (e *Engine) renderChat(messages []Message, extra map[string]any) ([]int32, error) {
	if e.chat == nil {
		if e.chatErr != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoChatTemplate, e.chatErr)
		}
		return nil, ErrNoChatTemplate
	}
	conv := make([]any, len(messages))
	for i, m := range messages {
		msg := map[string]any{"role": m.Role, "content": m.Content}
		if m.Name != "" {
			msg["name"] = m.Name
		}
		conv[i] = msg
	}
	prompt, err := e.chat.Render(conv, extra)
	if err != nil {
		return nil, &ParameterError{Field: "Messages", Err: fmt.Errorf("%w: %w", ErrChatTemplate, err)}
	}
	opts := e.tok.DefaultOptions()
	if bos := e.chat.bos; bos != "" && strings.HasPrefix(prompt, bos) {
		opts.AddBOS = false
	}
	ids := e.tok.Encode(prompt, opts)
	if len(ids) == 0 {
		return nil, &ParameterError{Field: "Messages", Err: ErrEmptyPrompt}
	}
	return ids, nil
}

// promptPieces returns the text each of the prompt's tokens adds to the echoed text:
// what the streaming detokenizer writes for it, and for a special token its own text
// where the echo has it there (a text prompt that names one), nothing otherwise (a
// BOS the tokenizer added).
func (e *Engine) promptPieces(tokens []int32, echo string) []string {
	ts := e.textStream()
	out := make([]string, len(tokens))
	at := 0
	for i, t := range tokens {
		if p, _ := e.tok.Piece(t); e.tok.IsSpecial(t) && strings.HasPrefix(echo[min(at, len(echo)):], p) {
			out[i] = p
		} else {
			out[i] = ts.Push(t)
		}
		at += len(out[i])
	}
	if tail := ts.Flush(); tail != "" && len(out) > 0 {
		out[len(out)-1] += tail
	}
	return out
}

// checkPromptLength refuses a prompt of n tokens that leaves no room to generate, in
// the model's context or in the whole key/value cache.
func (e *Engine) checkPromptLength(n int) error {
	if ctxLen := e.info.ContextLength; ctxLen > 0 && n >= ctxLen {
		return fmt.Errorf("%w: %d tokens, and the model's context length is %d tokens: there is no room to generate",
			ErrPromptTooLong, n, ctxLen)
	}
	if have := e.adm.positions(); have > 0 && n+1 > have {
		return fmt.Errorf("%w: %d tokens, and the whole key/value cache (its budget) holds %d positions",
			ErrPromptTooLong, n, have)
	}
	return nil
}

// setRequest builds the decoder's request: choices, length, sampling (a random seed
// unless the caller's must be kept), format, stops, log-probabilities — the prompt's
// too, for an echo that shows them. A PromptOnly request is one prefill, whatever
// its N: its choices are all the same.
func (e *Engine) setRequest(pl *plan) error {
	r, s := pl.req, &pl.spec
	s.N, s.PromptOnly = r.choices(), r.PromptOnly
	if r.PromptOnly {
		s.N = 1
	}
	s.MaxTokens = r.MaxTokens
	if ctxLen := e.info.ContextLength; s.MaxTokens == 0 && ctxLen > 0 {
		s.MaxTokens = ctxLen - len(s.Prompt)
	}
	s.Sampling = r.sampling()
	if r.Temperature > 0 && !r.seeded() {
		s.Sampling.Seed = RandomSeed()
	}
	s.Logprobs, s.TopLogprobs = r.Logprobs, r.TopLogprobs
	s.PromptLogprobs = r.Echo && r.Logprobs
	m, err := e.constraint(r.Format)
	if err != nil {
		return err
	}
	if m != nil {
		s.Constraint = m
	}
	if len(r.Stop) > 0 {
		s.StopStrings, s.Text = r.Stop, e.textStream
	}
	if !r.IgnoreEOS || s.Constraint != nil {
		s.StopTokens = e.tok.EOS()
	}
	return nil
}

// blocksFor is the key/value blocks a plan may fill at most, which it reserves: its
// prompt and every choice's tokens to MaxTokens, with room for a last draft (up
// to the cache's whole capacity: a draft that finds no room is dropped, and the
// target's token verified alone). 0 when the target does not say how its cache
// is laid out.
func (e *Engine) blocksFor(pl *plan) int {
	need := e.footprint(pl, pl.spec.MaxTokens, pl.req.choices(), e.maxK+1)
	if c := e.adm.capacity; c > 0 {
		need = min(need, c)
	}
	return need
}

// footprint is the key/value blocks a plan's prompt and n choices of maxTokens
// tokens fill, with room positions more for each choice's last draft; forked
// choices share the prompt's full blocks and copy its last. 0 when the target does
// not say how its cache is laid out.
func (e *Engine) footprint(pl *plan, maxTokens, n, room int) int {
	bs := e.adm.blockSize
	if bs == 0 {
		return 0
	}
	prompt := len(pl.spec.Prompt)
	if pl.req.PromptOnly {
		return ceilDiv(prompt, bs)
	}
	end := prompt + maxTokens + room
	if ctxLen := e.info.ContextLength; ctxLen > 0 {
		end = min(end, ctxLen)
	}
	blocks := ceilDiv(end, bs)
	if n > 1 {
		blocks += (n - 1) * (ceilDiv(end-prompt, bs) + 1)
	}
	return blocks
}

// checkFits refuses a plan that could not run even alone: its prompt and its
// choices' tokens, at their most, fill more blocks than the whole cache has. The
// error says how far MaxTokens or N would have to come down.
func (e *Engine) checkFits(pl *plan) error {
	capacity, n, maxTokens := e.adm.capacity, pl.req.choices(), pl.spec.MaxTokens
	if capacity == 0 || e.footprint(pl, maxTokens, n, 0) <= capacity {
		return nil
	}
	ce := &CapacityError{PromptTokens: len(pl.spec.Prompt), Choices: n, MaxTokens: maxTokens, MaxTokensSet: pl.req.MaxTokens > 0,
		Positions: e.footprint(pl, maxTokens, n, 0) * e.adm.blockSize, CachePositions: e.adm.positions()}
	ce.FitMaxTokens = largest(maxTokens-1, func(m int) bool { return e.footprint(pl, m, n, 0) <= capacity })
	ce.FitChoices = largest(n-1, func(k int) bool { return e.footprint(pl, maxTokens, k, 0) <= capacity })
	field := "MaxTokens"
	if ce.FitMaxTokens == 0 {
		field = "N"
	}
	return &ParameterError{Field: field, Err: ce}
}

// largest is the largest x in [1, hi] for which ok holds, ok being true up to a
// point and false after it (0: none).
func largest(hi int, ok func(int) bool) int {
	return sort.Search(hi, func(i int) bool { return !ok(i + 1) })
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// pick chooses the plan's decoder once it is admitted with running requests (itself
// included): plain when asked, without a drafter or when nothing is generated; the
// reproducible one for a caller's seed; else speculative unless the engine is
// saturated (Config.Saturation).
func (pl *plan) pick(e *Engine, running int) {
	pl.dec, pl.speculative = e.plain, false
	switch {
	case e.maxK == 0 || pl.req.NoSpeculation || pl.req.PromptOnly:
	case pl.req.seeded():
		pl.dec, pl.speculative = e.seeded, true
	case e.speculates(running):
		pl.dec, pl.speculative = e.dec, true
	}
}

// mode names the plan's decoding for the metrics.
func (pl *plan) mode() string {
	if pl.speculative {
		return "speculative"
	}
	return "plain"
}

// logprobs gives the decoder's log-probabilities their texts and bytes.
func (e *Engine) logprobs(lps []spec.Logprob) []TokenLogprob {
	if len(lps) == 0 {
		return nil
	}
	out := make([]TokenLogprob, len(lps))
	for i, lp := range lps {
		out[i].Alternative = e.alternative(lp.Token, lp.Logprob)
		if len(lp.Top) > 0 {
			out[i].Top = make([]Alternative, len(lp.Top))
			for k, t := range lp.Top {
				out[i].Top[k] = e.alternative(t.Token, t.Logprob)
			}
		}
	}
	return out
}

func (e *Engine) alternative(tok int32, lp float32) Alternative {
	p, _ := e.tok.Piece(tok)
	return Alternative{Token: tok, Text: e.tok.PieceText(tok), Bytes: []byte(p), Logprob: lp}
}

// textStream is a streaming detokenizer of the engine's output: whole characters,
// special tokens left out.
func (e *Engine) textStream() spec.TextStream {
	return e.tok.NewStream(tokenizer.DecodeOptions{SkipSpecial: true})
}
