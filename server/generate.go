package server

// generate.go: the generation endpoints' handler. It decodes and parses a request
// (request.go), hands the specula.Request to its engine's one door, and writes the
// engine's events back as the response (responses.go's objects), whole or as
// server-sent events, or the engine's error (errors.go).

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/specula/specula"
)

// handleCompletions answers POST /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, false)
}

// handleChat answers POST /v1/chat/completions.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, true)
}

// handleGenerate answers a completion or chat request: parse and validate, hand the
// request to its engine (which makes it wait its turn), and write the engine's
// events as the response, whole or as a stream.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	var q request
	if e := decodeBody(w, r, s.cfg.MaxBodyBytes, &q); e != nil {
		writeError(w, e)
		return
	}
	x, e := s.parse(&q, chat)
	if e != nil {
		writeError(w, e)
		return
	}
	owner := x.model.owner
	if !owner.enter() {
		writeError(w, shutdownError(errShutdown.Error()))
		return
	}
	defer owner.exit()

	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(owner.ctx, func() { cancel(errShutdown) })
	defer stop()
	out := &output{wake: make(chan struct{}, 1)}
	stopWaiting := context.AfterFunc(owner.drain, func() {
		if !out.begun() {
			cancel(errShutdown) // still waiting for its turn: refused as new ones are
		}
	})
	defer stopWaiting()

	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := x.model.eng.GenerateFunc(ctx, x.req, out.push)
		out.finish(c, err)
	}()
	if x.stream {
		s.stream(ctx, w, x, out, cancel)
	} else {
		<-done
		s.respond(ctx, w, x, out)
	}
	cancel(nil)
	<-done
}

// streamWriteTimeout bounds each write of a stream: a client that reads nothing for
// that long is dropped.
const streamWriteTimeout = 30 * time.Second

// output carries a generation's events from the engine to the goroutine writing the
// response. It never blocks the engine: events queue up until taken.
type output struct {
	mu      sync.Mutex
	events  []specula.Event
	done    bool
	started bool // an event came: the request was admitted and began
	c       specula.Completion
	err     error
	wake    chan struct{} // capacity 1: something changed
}

// push queues an event; it is the engine's emit function.
func (o *output) push(ev specula.Event) error {
	o.mu.Lock()
	o.started = true
	o.events = append(o.events, ev)
	o.mu.Unlock()
	o.signal()
	return nil
}

func (o *output) finish(c specula.Completion, err error) {
	o.mu.Lock()
	o.done, o.c, o.err = true, c, err
	o.mu.Unlock()
	o.signal()
}

func (o *output) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// begun reports whether an event has come.
func (o *output) begun() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.started
}

// take moves the pending events to dst and reports whether the generation is over
// (all its events then taken).
func (o *output) take(dst []specula.Event) ([]specula.Event, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	dst = append(dst, o.events...)
	clear(o.events)
	o.events = o.events[:0]
	return dst, o.done
}

// respond writes a whole (non-streaming) response once the generation is over: one
// choice per choice of the completion, the echoed prompt before each, usage summed.
func (s *Server) respond(ctx context.Context, w http.ResponseWriter, x *exchange, out *output) {
	events, _ := out.take(nil)
	if out.err != nil {
		s.fail(w, x, engineError(ctx, x, out.err), out.err)
		return
	}
	c := out.c
	u := usageOf(c)
	t := timingsOf(c.Choice)
	if x.chat {
		resp := chatCompletion{ID: x.id, Object: "chat.completion", Created: x.created, Model: x.modelName, Choices: []chatChoice{}, Usage: u, Timings: t}
		for _, ch := range c.Choices {
			cc := chatChoice{Index: ch.Index, Message: chatMessageOut{Role: "assistant", Content: ch.Text}, FinishReason: string(ch.Finish)}
			if x.req.Logprobs {
				cc.Logprobs = chatLogprobsOf(ch.Logprobs)
			}
			resp.Choices = append(resp.Choices, cc)
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
	resp := completion{ID: x.id, Object: "text_completion", Created: x.created, Model: x.modelName, Choices: []completionChoice{}, Usage: u, Timings: t}
	pieces := piecesOf(events, len(c.Choices))
	for _, ch := range c.Choices {
		finish := string(ch.Finish)
		cc := completionChoice{Index: ch.Index, Text: c.PromptText + ch.Text, FinishReason: &finish}
		if x.req.Logprobs {
			lp := newCompletionLogprobs()
			offset := len(c.PromptText)
			if x.req.Echo {
				offset = lp.addPrompt(events[0])
			}
			lp.addTokens(ch.Logprobs, pieces[ch.Index], offset)
			cc.Logprobs = lp
		}
		resp.Choices = append(resp.Choices, cc)
	}
	writeJSON(w, http.StatusOK, resp)
}

// piecesOf gathers each choice's token texts from its events, for text_offset.
func piecesOf(events []specula.Event, n int) [][]string {
	out := make([][]string, n)
	for _, ev := range events {
		if !ev.Prompt {
			out[ev.Choice] = append(out[ev.Choice], ev.Pieces...)
		}
	}
	return out
}

// fail answers with e, before anything was written, a request the engine refused or
// could not finish with err.
func (s *Server) fail(w http.ResponseWriter, x *exchange, e *apiError, err error) {
	if e.Status == 499 {
		markDropped(w)
		return
	}
	if e.Status >= 500 && e.Code == "" {
		s.log.Warn("generation failed", "id", x.id, "err", err)
	}
	writeError(w, e)
}

// stream writes a streamed response as server-sent events, exactly as OpenAI sends
// them: chunks of each choice's text (one per burst of tokens, or per token, paced),
// each naming its choice's index, then every choice's last chunk with its finish
// reason and its speculative statistics (timings, as llama-server sends them), a
// usage chunk when asked for, and "data: [DONE]". The headers wait for the first
// event, so that a request the engine refuses before it (a full queue, a prompt too
// long) still gets its proper error status; a chat stream then opens with a chunk of
// the assistant's role for each choice. A failure after the stream has opened is
// sent as an error event, then [DONE]. With logprobs each chunk carries its tokens'
// (and pacing is off: a chunk is what the target accepted).
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, x *exchange, out *output, cancel context.CancelCauseFunc) {
	sse := newSSEWriter(w, x)
	defer sse.rc.SetWriteDeadline(time.Time{}) // the connection may serve another request
	var pacers []*pacer                        // one per choice, when pacing
	if s.cfg.Pacing > 0 && !x.req.Logprobs {
		pacers = make([]*pacer, len(sse.offsets))
		for i := range pacers {
			pacers[i] = &pacer{window: s.cfg.Pacing}
		}
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var buf []specula.Event
	for {
		var done bool
		buf, done = out.take(buf[:0])
		for _, ev := range buf {
			switch {
			case ev.Prompt:
				sse.prompt(ev)
			case pacers == nil:
				if ev.Text != "" || len(ev.Logprobs) > 0 {
					sse.content(ev.Choice, ev.Text, ev.Pieces, ev.Logprobs)
				}
			default:
				pacers[ev.Choice].add(dropEmpty(append(ev.Pieces, tail(ev))))
			}
		}
		if done {
			for i, p := range pacers {
				if rest := p.drain(); len(rest) > 0 {
					sse.content(i, strings.Join(rest, ""), nil, nil)
				}
			}
		}
		if sse.broken {
			cancel(errors.New("the client went away"))
		}
		if done {
			break
		}
		// Wait for more events, or for the next paced write.
		var tick <-chan time.Time
		if i, at, ok := nextDue(pacers); ok {
			if d := time.Until(at); d <= 0 {
				sse.content(i, pacers[i].pop(time.Now()), nil, nil)
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
		select {
		case <-out.wake:
		case <-tick:
			if i, _, ok := nextDue(pacers); ok {
				sse.content(i, pacers[i].pop(time.Now()), nil, nil)
			}
		}
	}
	s.end(ctx, w, sse, out)
}

// nextDue returns the choice whose pacer has the earliest pending piece, and when it
// is due; ok is false when nothing is pending.
func nextDue(pacers []*pacer) (choice int, at time.Time, ok bool) {
	for i, p := range pacers {
		if t, pending := p.due(); pending && (!ok || t.Before(at)) {
			choice, at, ok = i, t, true
		}
	}
	return choice, at, ok
}

// end closes a stream: every choice's finish and the usage, or the error.
func (s *Server) end(ctx context.Context, w http.ResponseWriter, sse *sseWriter, out *output) {
	if out.err != nil {
		e := engineError(ctx, sse.x, out.err)
		switch {
		case e.Status == 499:
			markDropped(w)
			return
		case !sse.started:
			s.fail(w, sse.x, e, out.err)
			return
		}
		sse.event(e.body())
	} else {
		sse.finish(out.c)
	}
	sse.done()
}

// tail is the text an event adds beyond its tokens' pieces: what the detokenizer
// held back to a choice's end.
func tail(ev specula.Event) string {
	if len(ev.Tokens) == 0 {
		return ev.Text
	}
	return ""
}

// dropEmpty removes the empty pieces of tokens inside a multi-byte character, so
// that pacing spaces out text the client sees.
func dropEmpty(ss []string) []string {
	out := ss[:0:0]
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
	x       *exchange
	offsets []int // of each choice's next text in its completion, for text_offset
	started bool  // headers and the opening chunks written
	broken  bool  // a write failed: the client is gone
}

// newSSEWriter is the writer of x's stream, with a text offset for each choice.
func newSSEWriter(w http.ResponseWriter, x *exchange) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), x: x, offsets: make([]int, max(x.req.N, 1))}
}

// start writes the headers and, for chat, the chunks that open each choice's
// assistant message.
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
	if s.x.chat {
		empty := ""
		for i := range s.offsets {
			s.event(s.chatChunk(i, chatDelta{Role: "assistant", Content: &empty}, nil))
		}
	}
}

// prompt writes the echoed prompt, with its logprobs when asked, at the head of
// every choice (as a whole completion has it).
func (s *sseWriter) prompt(ev specula.Event) {
	s.start()
	for i := range s.offsets {
		c := s.textChunk(i, ev.Text, nil)
		if s.x.req.Logprobs {
			lp := newCompletionLogprobs()
			lp.addPrompt(ev)
			c.Choices[0].Logprobs = lp
		}
		s.event(c)
		s.offsets[i] = len(ev.Text)
	}
}

// content writes a chunk of a choice's text, with its tokens' logprobs when asked
// (pieces are the tokens' texts, for the offsets).
func (s *sseWriter) content(choice int, text string, pieces []string, lps []specula.TokenLogprob) {
	s.start()
	if s.x.chat {
		c := s.chatChunk(choice, chatDelta{Content: &text}, nil)
		if s.x.req.Logprobs {
			c.Choices[0].Logprobs = chatLogprobsOf(lps)
		}
		s.event(c)
		return
	}
	c := s.textChunk(choice, text, nil)
	if s.x.req.Logprobs {
		lp := newCompletionLogprobs()
		lp.addTokens(lps, pieces, s.offsets[choice])
		c.Choices[0].Logprobs = lp
	}
	s.offsets[choice] += len(text)
	s.event(c)
}

// finish writes each choice's last chunk, with its finish reason and its timings,
// and the usage chunk when asked for.
func (s *sseWriter) finish(c specula.Completion) {
	s.start()
	for _, ch := range c.Choices {
		reason := string(ch.Finish)
		if s.x.chat {
			cc := s.chatChunk(ch.Index, chatDelta{}, &reason)
			cc.Timings = timingsOf(ch)
			s.event(cc)
		} else {
			tc := s.textChunk(ch.Index, "", &reason)
			tc.Timings = timingsOf(ch)
			s.event(tc)
		}
	}
	if !s.x.includeUsage {
		return
	}
	u := usageOf(c)
	if s.x.chat {
		s.event(chatChunk{ID: s.x.id, Object: "chat.completion.chunk", Created: s.x.created, Model: s.x.modelName, Choices: []chatChunkChoice{}, Usage: u})
	} else {
		s.event(completion{ID: s.x.id, Object: "text_completion", Created: s.x.created, Model: s.x.modelName, Choices: []completionChoice{}, Usage: u})
	}
}

func (s *sseWriter) chatChunk(choice int, d chatDelta, finish *string) chatChunk {
	return chatChunk{ID: s.x.id, Object: "chat.completion.chunk", Created: s.x.created, Model: s.x.modelName,
		Choices: []chatChunkChoice{{Index: choice, Delta: d, FinishReason: finish}}}
}

func (s *sseWriter) textChunk(choice int, text string, finish *string) completion {
	return completion{ID: s.x.id, Object: "text_completion", Created: s.x.created, Model: s.x.modelName,
		Choices: []completionChoice{{Index: choice, Text: text, FinishReason: finish}}}
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
