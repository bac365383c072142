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

	out := &output{wake: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx, j, dec, mode, out, arrived)
	}()
	if j.stream {
		s.stream(ctx, w, j, out, cancel)
	} else {
		<-done
		s.respond(ctx, w, j, mode, out)
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
	dec, mode = s.plainDec, "plain"
	switch {
	case j.seeded:
		if s.seededDec != nil {
			dec, mode = s.seededDec, "speculative"
		}
	case s.useSpec(int(n)):
		dec, mode = s.specDec, "speculative"
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
	pieces []string // one per token (possibly "" inside a multi-byte character)
	done   bool
	res    spec.Result
	err    error
	wake   chan struct{} // capacity 1: something changed
}

func (o *output) push(pieces ...string) {
	o.mu.Lock()
	o.pieces = append(o.pieces, pieces...)
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

// take moves the pending pieces to dst and reports whether the generation is over
// (all its pieces then taken).
func (o *output) take(dst []string) ([]string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	dst = append(dst, o.pieces...)
	clear(o.pieces)
	o.pieces = o.pieces[:0]
	return dst, o.done
}

// run generates j's text into out.
func (s *Server) run(ctx context.Context, j *job, dec *spec.Decoder, mode string, out *output, arrived time.Time) {
	text := s.textStream()
	first := true
	var pieces []string
	res, err := dec.Stream(ctx, j.req, func(toks []int32) error {
		if first && len(toks) > 0 {
			first = false
			s.m.ttft.Observe(time.Since(arrived).Seconds())
		}
		pieces = pieces[:0]
		for _, t := range toks {
			pieces = append(pieces, text.Push(t))
		}
		out.push(pieces...)
		return nil
	})
	if tail := text.Flush(); tail != "" {
		out.push(tail)
	}
	s.m.observe(mode, res)
	s.noteDuration(res.Stats.Duration)
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("generation failed", "id", j.id, "err", err, "tokens", res.Stats.GeneratedTokens)
	}
	out.finish(res, err)
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

// respond writes a whole (non-streaming) response once the generation is over.
func (s *Server) respond(ctx context.Context, w http.ResponseWriter, j *job, mode string, out *output) {
	pieces, _ := out.take(nil)
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
	u := usageOf(len(j.req.Prompt), out.res)
	t := timingsOf(out.res, mode == "speculative")
	if j.chat {
		writeJSON(w, http.StatusOK, chatCompletion{
			ID: j.id, Object: "chat.completion", Created: j.created, Model: j.model,
			Choices: []chatChoice{{Message: chatMessageOut{Role: "assistant", Content: text}, FinishReason: finish}},
			Usage:   u, Timings: t,
		})
		return
	}
	writeJSON(w, http.StatusOK, completion{
		ID: j.id, Object: "text_completion", Created: j.created, Model: j.model,
		Choices: []completionChoice{{Text: text, FinishReason: &finish}},
		Usage:   u, Timings: t,
	})
}

// stream writes a streamed response as server-sent events, exactly as OpenAI sends
// them: a chunk per burst of tokens (or per token, paced), a last chunk with the
// finish reason, a usage chunk when asked for, and "data: [DONE]". The headers wait
// for the first token, so that a request that fails before it (a full key/value
// cache) still gets a proper error status. A failure after it is sent as an error
// event, then [DONE].
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, j *job, out *output, cancel context.CancelCauseFunc) {
	sse := &sseWriter{w: w, rc: http.NewResponseController(w), j: j}
	defer sse.rc.SetWriteDeadline(time.Time{}) // the connection may serve another request
	var p *pacer
	if s.cfg.Pacing > 0 {
		p = &pacer{window: s.cfg.Pacing}
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var buf []string
	for {
		var done bool
		buf, done = out.take(buf[:0])
		if p == nil {
			if text := strings.Join(buf, ""); text != "" {
				sse.content(text)
			}
		} else {
			p.add(dropEmpty(buf))
			if done {
				if rest := p.drain(); len(rest) > 0 {
					sse.content(strings.Join(rest, ""))
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
					sse.content(p.pop(time.Now()))
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
			sse.content(p.pop(time.Now()))
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
	started bool // headers and the opening chunk written
	broken  bool // a write failed: the client is gone
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
	if s.j.echo != "" {
		s.event(s.textChunk(s.j.echo, nil))
	}
}

func (s *sseWriter) content(text string) {
	s.start()
	if s.j.chat {
		s.event(s.chatChunk(chatDelta{Content: &text}, nil))
	} else {
		s.event(s.textChunk(text, nil))
	}
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
