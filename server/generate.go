package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/specula/specula/model"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/tokenizer"
)

// shutdownError is the 503 of a request refused or cut short by a shutdown.
func shutdownError(msg string) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_shutting_down",
		Message: msg, RetryAfter: drainRetryAfter}
}

// handleCompletions answers POST /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, false)
}

// handleChat answers POST /v1/chat/completions.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, true)
}

// handleGenerate answers a completion or chat request: parse and validate, wait for a
// slot, generate, and write the response, whole or as a stream.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	arrived := time.Now()
	if !s.enter() {
		writeError(w, shutdownError(errShutdown.Error()))
		return
	}
	defer s.exit()
	var q request
	if e := decodeBody(w, r, s.cfg.MaxBodyBytes, &q); e != nil {
		writeError(w, e)
		return
	}
	j, e := s.parse(&q, chat)
	if e != nil {
		writeError(w, e)
		return
	}
	dec, mode, release, e := s.admit(r.Context(), j, arrived)
	if e != nil {
		if e.Status == 0 { // the client left while queued
			markDropped(w)
			return
		}
		writeError(w, e)
		return
	}
	defer release()

	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.ctx, func() { cancel(errShutdown) })
	defer stop()

	outs := make([]*output, j.n)
	for i := range outs {
		outs[i] = &output{wake: make(chan struct{}, 1)}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx, j, dec, mode, outs, arrived)
	}()
	if j.stream {
		s.stream(ctx, w, j, outs[0], cancel)
	} else {
		<-done
		s.respond(ctx, w, j, mode, outs)
	}
	cancel(nil)
	<-done
}

// admit waits for a generation slot and picks the decoder: speculative while the
// server is not saturated, plain otherwise — except for sampling with a seed, which
// always gets the same decoder (of fixed K), so that a seed always gives the same
// text. A full queue is a 429; a shutdown while waiting a 503; a client that leaves
// while waiting gets an error of status 0.
func (s *Server) admit(ctx context.Context, j *job, arrived time.Time) (dec *spec.Decoder, mode string, release func(), e *apiError) {
	select {
	case s.slots <- struct{}{}:
	default:
		if s.queued.Add(1) > int64(s.cfg.MaxQueue) {
			s.queued.Add(-1)
			return nil, "", nil, &apiError{Status: http.StatusTooManyRequests, Type: typeRateLimit, Code: "queue_full",
				Message:    fmt.Sprintf("the server is busy: %d generations are running and %d waiting; retry later", s.cfg.MaxConcurrent, s.cfg.MaxQueue),
				RetryAfter: s.retryAfter()}
		}
		s.m.queued.Inc()
		defer func() {
			s.queued.Add(-1)
			s.m.queued.Dec()
		}()
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, "", nil, &apiError{}
		case <-s.drainCh:
			return nil, "", nil, shutdownError(errShutdown.Error())
		}
	}
	s.m.queueWait.Observe(time.Since(arrived).Seconds())
	n := s.active.Add(1)
	s.m.active.Inc()
	dec, mode = s.eng.PlainDecoder(), "plain"
	switch {
	case j.seeded:
		if s.eng.MaxDraft() > 0 {
			dec, mode = s.eng.ReproducibleDecoder(), "speculative"
		}
	case s.useSpec(int(n)):
		dec, mode = s.eng.Decoder(), "speculative"
	}
	s.m.decisions.WithLabelValues(mode).Inc()
	return dec, mode, func() {
		s.active.Add(-1)
		s.m.active.Dec()
		<-s.slots
	}, nil
}

// streamWriteTimeout bounds each write of a stream: a client that reads nothing for
// that long is dropped.
const streamWriteTimeout = 30 * time.Second

// output carries a generation's text from the decoding goroutine to the one writing
// the response. It never blocks the decoder: pieces queue up until taken.
type output struct {
	mu     sync.Mutex
	pieces []string       // one per token (possibly "" inside a multi-byte character)
	lps    []spec.Logprob // one per token, when the request asks for logprobs
	done   bool
	res    spec.Result
	err    error
	wake   chan struct{} // capacity 1: something changed
}

func (o *output) push(pieces []string, lps []spec.Logprob) {
	o.mu.Lock()
	o.pieces = append(o.pieces, pieces...)
	o.lps = append(o.lps, lps...)
	o.mu.Unlock()
	o.signal()
}

func (o *output) finish(res spec.Result, err error) {
	o.mu.Lock()
	o.done, o.res, o.err = true, res, err
	o.mu.Unlock()
	o.signal()
}

func (o *output) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// take moves the pending pieces to dst (and their logprobs to lps) and reports
// whether the generation is over (all its pieces then taken).
func (o *output) take(dst []string, lps []spec.Logprob) ([]string, []spec.Logprob, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	dst = append(dst, o.pieces...)
	lps = append(lps, o.lps...)
	clear(o.pieces)
	o.pieces, o.lps = o.pieces[:0], o.lps[:0]
	return dst, lps, o.done
}

// run generates j's choices into outs.
func (s *Server) run(ctx context.Context, j *job, dec *spec.Decoder, mode string, outs []*output, arrived time.Time) {
	if j.scorePrompt {
		scored, err := dec.Score(ctx, j.req.Prompt, j.req.TopLogprobs)
		if err != nil {
			for _, o := range outs {
				o.finish(spec.Result{Finish: spec.FinishError}, err)
			}
			if !errors.Is(err, context.Canceled) {
				s.log.Warn("scoring the prompt failed", "id", j.id, "err", err)
			}
			return
		}
		j.promptLPs = promptLogprobsOf(s.tok, j.req.Prompt, scored, s.promptPieces(j.req.Prompt, j.echo))
	}
	if j.scoreOnly {
		for _, o := range outs {
			res := spec.Result{Finish: spec.FinishLength, Stats: spec.Stats{PromptTokens: len(j.req.Prompt)}}
			s.m.observe(mode, res)
			o.finish(res, nil)
		}
		return
	}
	texts := make([]spec.TextStream, len(outs))
	for i := range texts {
		texts[i] = s.eng.TextStream()
	}
	var once sync.Once
	var pieces []string
	emit := func(choice int, toks []int32, lps []spec.Logprob) error {
		if len(toks) > 0 {
			once.Do(func() { s.m.ttft.Observe(time.Since(arrived).Seconds()) })
		}
		pieces = pieces[:0]
		for _, t := range toks {
			pieces = append(pieces, texts[choice].Push(t))
		}
		outs[choice].push(pieces, lps)
		return nil
	}
	var results []spec.Result
	var err error
	if len(outs) == 1 {
		var res spec.Result
		res, err = dec.StreamLogprobs(ctx, j.req, func(toks []int32, lps []spec.Logprob) error { return emit(0, toks, lps) })
		results = []spec.Result{res}
	} else {
		results, err = dec.StreamN(ctx, j.req, len(outs), emit) // emit is called one choice at a time
	}
	for i, res := range results {
		if tail := texts[i].Flush(); tail != "" {
			outs[i].push([]string{tail}, nil)
		}
		s.m.observe(mode, res)
		s.noteDuration(res.Stats.Duration)
		cerr := err
		if res.Finish != spec.FinishError && res.Finish != spec.FinishCancelled {
			cerr = nil // another choice failed
		}
		outs[i].finish(res, cerr)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("generation failed", "id", j.id, "err", err)
	}
}

// promptPieces returns the text each of the prompt's tokens adds to the echoed text,
// for the offsets of its logprobs: what the streaming decoder writes for it, and for
// a special token its own text where the echo has it there (a text prompt that names
// one), nothing otherwise (a BOS the tokenizer added).
func (s *Server) promptPieces(tokens []int32, echo string) []string {
	ts := s.eng.TextStream()
	out := make([]string, len(tokens))
	at := 0
	for i, t := range tokens {
		if p, _ := s.tok.Piece(t); s.tok.IsSpecial(t) && strings.HasPrefix(echo[min(at, len(echo)):], p) {
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

// outcome turns the end of a generation into a finish reason, or an error for the
// client. Running out of key/value memory after some tokens ends the text with
// "length", as running out of context does; before any token it is a 503.
func (s *Server) outcome(ctx context.Context, res spec.Result, err error) (finish string, e *apiError) {
	switch {
	case err == nil:
		return string(res.Finish), nil
	case errors.Is(context.Cause(ctx), errShutdown):
		return "", shutdownError(fmt.Sprintf("%s: the generation was cancelled after %d tokens", errShutdown, res.Stats.GeneratedTokens))
	case errors.Is(err, model.ErrOutOfMemory) || errors.Is(err, model.ErrContextFull):
		if res.Stats.GeneratedTokens > 0 {
			return string(spec.FinishLength), nil
		}
		return "", &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "kv_cache_full",
			Message:    "the server's key/value cache is full: retry later, or with a shorter prompt",
			RetryAfter: s.retryAfter()}
	case ctx.Err() != nil:
		return "", &apiError{Status: 499, Type: typeServer, Code: "cancelled", Message: "the client closed the request"}
	}
	return "", &apiError{Status: http.StatusInternalServerError, Type: typeServer, Message: "generation failed: " + err.Error()}
}

// respond writes a whole (non-streaming) response once the generation is over: one
// choice per output, usage summed over them.
func (s *Server) respond(ctx context.Context, w http.ResponseWriter, j *job, mode string, outs []*output) {
	u := &usage{PromptTokens: len(j.req.Prompt)}
	comp := completion{ID: j.id, Object: "text_completion", Created: j.created, Model: j.model, Choices: []completionChoice{}}
	chat := chatCompletion{ID: j.id, Object: "chat.completion", Created: j.created, Model: j.model, Choices: []chatChoice{}}
	for i, out := range outs {
		pieces, lps, _ := out.take(nil, nil)
		finish, e := s.outcome(ctx, out.res, out.err)
		if e != nil {
			if e.Status == 499 {
				markDropped(w)
				return
			}
			writeError(w, e)
			return
		}
		text := j.echo + strings.Join(pieces, "")
		u.CompletionTokens += out.res.Stats.GeneratedTokens
		if j.chat {
			c := chatChoice{Index: i, Message: chatMessageOut{Role: "assistant", Content: text}, FinishReason: finish}
			if j.req.Logprobs {
				c.Logprobs = chatLogprobsOf(s.tok, lps)
			}
			chat.Choices = append(chat.Choices, c)
			continue
		}
		c := completionChoice{Index: i, Text: text, FinishReason: &finish}
		if j.req.Logprobs {
			c.Logprobs = completionLogprobsOf(s.tok, j.promptLPs, lps, pieces, len(j.echo))
		}
		comp.Choices = append(comp.Choices, c)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	t := timingsOf(outs[0].res, mode == "speculative")
	if j.chat {
		chat.Usage, chat.Timings = u, t
		writeJSON(w, http.StatusOK, chat)
		return
	}
	comp.Usage, comp.Timings = u, t
	writeJSON(w, http.StatusOK, comp)
}

// stream writes a streamed response as server-sent events, exactly as OpenAI sends
// them: a chunk per burst of tokens (or per token, paced), a last chunk with the
// finish reason, a usage chunk when asked for, and "data: [DONE]". A chat stream
// opens at once with the chunk of the assistant's role; a completions stream's
// headers wait for the first token, so that a request that fails before it (a full
// key/value cache) still gets a proper error status. A failure after the stream has
// opened is sent as an error event, then [DONE]. With logprobs each chunk carries its
// tokens' (and pacing is off: a chunk is what the target accepted).
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, j *job, out *output, cancel context.CancelCauseFunc) {
	sse := &sseWriter{w: w, rc: http.NewResponseController(w), j: j, tok: s.tok}
	defer sse.rc.SetWriteDeadline(time.Time{}) // the connection may serve another request
	if j.chat {
		sse.start()
	}
	var p *pacer
	if s.cfg.Pacing > 0 && !j.req.Logprobs {
		p = &pacer{window: s.cfg.Pacing}
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var buf []string
	var lps []spec.Logprob
	for {
		var done bool
		buf, lps, done = out.take(buf[:0], lps[:0])
		if p == nil {
			if text := strings.Join(buf, ""); text != "" || len(lps) > 0 {
				sse.content(text, buf, lps)
			}
		} else {
			p.add(dropEmpty(buf))
			if done {
				if rest := p.drain(); len(rest) > 0 {
					sse.content(strings.Join(rest, ""), nil, nil)
				}
			}
		}
		if sse.broken {
			cancel(errors.New("the client went away"))
		}
		if done {
			break
		}
		// Wait for more tokens, or for the next paced write.
		var tick <-chan time.Time
		if p != nil {
			if at, ok := p.due(); ok {
				if d := time.Until(at); d <= 0 {
					sse.content(p.pop(time.Now()), nil, nil)
					continue
				} else {
					if timer == nil {
						timer = time.NewTimer(d)
					} else {
						timer.Reset(d)
					}
					tick = timer.C
				}
			}
		}
		select {
		case <-out.wake:
		case <-tick:
			sse.content(p.pop(time.Now()), nil, nil)
		}
	}

	finish, e := s.outcome(ctx, out.res, out.err)
	switch {
	case e != nil && e.Status == 499:
		markDropped(w)
		return
	case e != nil && !sse.started:
		writeError(w, e)
		return
	case e != nil:
		sse.event(e.body())
	default:
		sse.finish(finish, usageOf(len(j.req.Prompt), out.res))
	}
	sse.done()
}

// dropEmpty removes the empty pieces of tokens inside a multi-byte character, so
// that pacing spaces out text the client sees.
func dropEmpty(ss []string) []string {
	out := ss[:0]
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// sseWriter writes a stream's events.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	j       *job
	tok     *tokenizer.Tokenizer // for logprobs' token texts
	offset  int                  // of the next text in the completion, for text_offset
	started bool                 // headers and the opening chunk written
	broken  bool                 // a write failed: the client is gone
}

// start writes the headers and, for chat, the chunk that opens the assistant's
// message.
func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	if s.j.chat {
		empty := ""
		s.event(s.chatChunk(chatDelta{Role: "assistant", Content: &empty}, nil))
	}
	if s.j.echoed {
		c := s.textChunk(s.j.echo, nil)
		if s.j.scorePrompt {
			c.Choices[0].Logprobs = s.j.promptLPs
		}
		s.event(c)
		s.offset = len(s.j.echo)
	}
}

// content writes a chunk of text, with its tokens' logprobs when asked (pieces are
// the tokens' texts, for the offsets).
func (s *sseWriter) content(text string, pieces []string, lps []spec.Logprob) {
	s.start()
	if s.j.chat {
		c := s.chatChunk(chatDelta{Content: &text}, nil)
		if s.j.req.Logprobs {
			c.Choices[0].Logprobs = chatLogprobsOf(s.tok, lps)
		}
		s.event(c)
		return
	}
	c := s.textChunk(text, nil)
	if s.j.req.Logprobs {
		c.Choices[0].Logprobs = completionLogprobsOf(s.tok, nil, lps, pieces, s.offset)
	}
	s.offset += len(text)
	s.event(c)
}

func (s *sseWriter) finish(reason string, u *usage) {
	s.start()
	if s.j.chat {
		s.event(s.chatChunk(chatDelta{}, &reason))
	} else {
		s.event(s.textChunk("", &reason))
	}
	if !s.j.includeUsage {
		return
	}
	if s.j.chat {
		s.event(chatChunk{ID: s.j.id, Object: "chat.completion.chunk", Created: s.j.created, Model: s.j.model, Choices: []chatChunkChoice{}, Usage: u})
	} else {
		s.event(completion{ID: s.j.id, Object: "text_completion", Created: s.j.created, Model: s.j.model, Choices: []completionChoice{}, Usage: u})
	}
}

func (s *sseWriter) chatChunk(d chatDelta, finish *string) chatChunk {
	return chatChunk{ID: s.j.id, Object: "chat.completion.chunk", Created: s.j.created, Model: s.j.model,
		Choices: []chatChunkChoice{{Delta: d, FinishReason: finish}}}
}

func (s *sseWriter) textChunk(text string, finish *string) completion {
	return completion{ID: s.j.id, Object: "text_completion", Created: s.j.created, Model: s.j.model,
		Choices: []completionChoice{{Text: text, FinishReason: finish}}}
}

// event writes one "data:" event and flushes it.
func (s *sseWriter) event(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":{"message":"encoding a chunk failed","type":"server_error","param":null,"code":null}}`)
	}
	s.write(append(append([]byte("data: "), b...), '\n', '\n'))
}

func (s *sseWriter) done() { s.write([]byte("data: [DONE]\n\n")) }

func (s *sseWriter) write(b []byte) {
	if s.broken {
		return
	}
	// A client that stops reading must not hold its generation (and a shutdown)
	// forever.
	s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := s.w.Write(b); err != nil {
		s.broken = true
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.broken = true
	}
}

// markDropped notes, for the log, that the client left before an answer.
func markDropped(w http.ResponseWriter) {
	if rw, ok := w.(*recorder); ok {
		rw.dropped = true
	}
}
