package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
	"github.com/specula/specula/tokenizer"
)

// Config configures a Server. The zero value of a field means its default, except
// where the field says otherwise.
type Config struct {
	// Model is the target model: a GGUF file or a Hugging Face directory, with its
	// tokenizer inside.
	Model string
	// DraftModel is the draft model ("" for none); it must share the target's
	// vocabulary.
	DraftModel string
	// Head is a trained draft head's directory (MLPSpeculator, Medusa or EAGLE) to
	// draft with instead of a draft model ("" for none).
	Head string
	// ModelName is an alias clients may use in "model", listed first by /v1/models.
	// The target's file name (without .gguf) and its general.name are accepted too.
	ModelName string
	// SpeculativeTokens is the number of tokens drafted per step, or with Adaptive the
	// most the decoder may choose; 0 turns speculation off.
	SpeculativeTokens int
	// Adaptive lets the decoder choose how many tokens to draft, and which drafter to
	// ask, every step.
	Adaptive bool
	// NGram adds prompt lookup (n-gram matching) as a drafter, ahead of the draft
	// model when there is one (which then drafts where lookup finds nothing).
	NGram bool
	// Threads is the number of threads of a forward pass (0: GOMAXPROCS).
	Threads int
	// KVBudget is the target's key/value cache budget in bytes (0: MaxConcurrent
	// sequences at full context, at least 64 MiB and at most 4 GiB; memory is only
	// used as sequences grow).
	KVBudget int64
	// ContextLength, when positive, lowers the model's context length.
	ContextLength int
	// MaxConcurrent is the number of generations that run at once (0: 4 × GOMAXPROCS).
	MaxConcurrent int
	// MaxQueue is the number of requests that may wait for a free slot; beyond it a
	// request is answered 429. 0 means no queue.
	MaxQueue int
	// Saturation, when positive, is the most generations that may run (the new one
	// included) for a newly admitted request to decode speculatively; with more, it
	// decodes without speculation, as with vLLM's speculative_disable_by_batch_size:
	// where a runtime batches requests together, a busy server gains little from
	// drafts. 0 never turns speculation off, which suits specula's CPU runtime: it
	// runs each request's forward passes on their own, so a draft saves as much work
	// under load as alone (BenchmarkConcurrentStreams compares the settings). The
	// adaptive decoder still drafts nothing in a step where drafting does not pay.
	Saturation int
	// Pacing, when positive, spreads the tokens of each accepted burst evenly over
	// this window (15–20 ms is plenty) in streamed responses.
	Pacing time.Duration
	// MaxBodyBytes bounds a request body (0: 1 MiB); a larger one is answered 413.
	MaxBodyBytes int64
	// ChatTemplate, when set, is the Jinja chat template to use instead of the
	// model's own.
	ChatTemplate string
	// Logger receives one line per request and the server's notices (nil: discard).
	Logger *slog.Logger
}

// Server is an OpenAI-compatible HTTP server for one model, decoding speculatively.
// Make one with New, serve Handler, and end with Shutdown and Close.
type Server struct {
	cfg     Config
	log     *slog.Logger
	target  *llama.Model
	local   *target.Local // the target every decoder verifies through
	drafts  []*llama.Model
	closers []io.Closer // draft heads
	tok     *tokenizer.Tokenizer
	info    model.Info
	names   []string // accepted model names, the primary first

	chat    *chatTemplate // nil: chat requests get 400
	chatErr error         // why a template the model has is not usable

	specDec    *spec.Decoder // nil when speculation is off
	plainDec   *spec.Decoder
	seededDec  *spec.Decoder // fixed K, for seeded sampling; nil when speculation is off
	maxK       int
	saturation int // 0: never
	m          *metrics
	handler    http.Handler
	started    int64 // unix time, for /v1/models

	slots  chan struct{} // one per running generation
	queued atomic.Int64
	active atomic.Int64

	ctx    context.Context // ends every generation at a hard shutdown
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	inflight int // generation requests being handled
	draining bool
	drainCh  chan struct{} // closed when draining begins
	idle     chan struct{} // closed when draining and nothing is in flight
	avgDur   float64       // recent mean generation time, seconds, for Retry-After
}

// errShutdown is the cause given to generations that a shutdown cancels.
var errShutdown = errors.New("the server is shutting down")

// Defaults.
const (
	defaultMaxBody   = 1 << 20
	adaptiveMaxK     = 8 // the most an adaptive decoder drafts, as examples/generate
	seededK          = 2 // tokens drafted per step for seeded sampling under -num-speculative-tokens auto
	maxDefaultKV     = 4 << 30
	drainRetryAfter  = 5 // seconds, for requests refused while shutting down
	maxRetryAfterSec = 60
)

// New loads the models and makes a server.
func New(cfg Config) (*Server, error) {
	s := &Server{cfg: cfg, log: cfg.Logger, started: time.Now().Unix(), avgDur: 1}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBodyBytes <= 0 {
		s.cfg.MaxBodyBytes = defaultMaxBody
	}
	if cfg.MaxConcurrent <= 0 {
		s.cfg.MaxConcurrent = 4 * runtime.GOMAXPROCS(0)
	}
	s.cfg.MaxQueue = max(cfg.MaxQueue, 0)
	s.saturation = max(cfg.Saturation, 0)
	if cfg.SpeculativeTokens < 0 || cfg.SpeculativeTokens > spec.MaxK {
		return nil, fmt.Errorf("speculative tokens %d: want 0 to %d", cfg.SpeculativeTokens, spec.MaxK)
	}
	if err := s.load(); err != nil {
		s.Close()
		return nil, err
	}
	plan := s.plan()
	plan.log(s.log)
	if err := plan.check(); err != nil {
		s.Close()
		return nil, err
	}
	s.slots = make(chan struct{}, s.cfg.MaxConcurrent)
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.drainCh = make(chan struct{})
	s.idle = make(chan struct{})
	s.m = newMetrics(max(s.maxK, 1), s.kvStats, s.speculating, s.local)
	s.handler = s.routes()
	return s, nil
}

// load opens the target model with its tokenizer, the chat template and the draft
// model, and makes the decoders: the plain one always, the speculative ones when
// speculation is on and there is something to draft with.
func (s *Server) load() error {
	opts, err := s.targetOptions()
	if err != nil {
		return err
	}
	if err := s.loadTarget(opts); err != nil {
		return err
	}
	if err := s.loadChatTemplate(); err != nil {
		return err
	}
	tgt, err := target.NewLocal(s.target)
	if err != nil {
		return err
	}
	s.local = tgt
	if s.plainDec, err = spec.New(tgt, nil, spec.Options{}); err != nil {
		return err
	}
	k := s.cfg.SpeculativeTokens
	if k == 0 {
		return nil
	}
	if s.cfg.Adaptive {
		k = min(k, spec.MaxK)
	}
	drafter, err := s.loadDrafter(opts)
	if err != nil {
		return err
	}
	if drafter == nil {
		return nil // nothing to draft with
	}
	return s.makeSpecDecoders(tgt, drafter, k)
}

// targetOptions returns the target's runtime options. Without a KVBudget the cache
// gets room for every slot's sequence at full context, at least 64 MiB and at most
// maxDefaultKV; the model's shape says what a position costs (cheap to learn: the
// file is mapped, its weights not read).
func (s *Server) targetOptions() (llama.Options, error) {
	cfg := s.cfg
	opts := llama.Options{Threads: cfg.Threads, KVBudget: cfg.KVBudget, ContextLength: cfg.ContextLength}
	if opts.KVBudget > 0 {
		return opts, nil
	}
	t, err := llama.OpenTensors(cfg.Model)
	if err != nil {
		return opts, fmt.Errorf("model %s: %w", cfg.Model, err)
	}
	c := t.Config
	t.Close()
	ctxLen := c.ContextLength
	if cfg.ContextLength > 0 && (ctxLen <= 0 || cfg.ContextLength < ctxLen) {
		ctxLen = cfg.ContextLength
	}
	if ctxLen <= 0 {
		ctxLen = 4096
	}
	opts.KVBudget = min(max(int64(cfg.MaxConcurrent)*int64(ctxLen)*c.KVBytesPerPosition(), 64<<20), maxDefaultKV)
	return opts, nil
}

// loadTarget opens the target model and its tokenizer, and sets the names the
// server answers to.
func (s *Server) loadTarget(opts llama.Options) error {
	var err error
	if s.target, err = openModel(s.cfg.Model, opts); err != nil {
		return err
	}
	s.info = s.target.Info()
	if s.tok, err = tokenizer.Load(s.cfg.Model); err != nil {
		return err
	}
	s.names = modelNames(s.cfg.ModelName, s.cfg.Model, s.info.Name)
	return nil
}

// loadChatTemplate compiles the chat template: the -chat-template-file, or else the
// model's own. A template that does not compile is no error: the server still
// serves completions, and refuses chat requests saying why.
func (s *Server) loadChatTemplate() error {
	var bos, eos string
	if id, ok := s.tok.BOS(); ok {
		bos = s.tok.Decode([]int32{id})
	}
	if ids := s.tok.EOS(); len(ids) > 0 {
		eos = s.tok.Decode(ids[:1])
	}
	src, source := s.cfg.ChatTemplate, "the -chat-template-file"
	if src == "" {
		var err error
		if src, source, err = readChatTemplate(s.cfg.Model); err != nil {
			return fmt.Errorf("reading the chat template: %w", err)
		}
	}
	if src == "" {
		return nil
	}
	s.chat, s.chatErr = newChatTemplate(src, source, bos, eos)
	if s.chatErr != nil {
		s.log.Warn("the chat template does not compile: chat requests will be refused", "err", s.chatErr)
	}
	return nil
}

// loadDrafter makes the drafter: the draft model, which must share the target's
// vocabulary, and prompt lookup, which drafts ahead of it (or alone). It returns nil
// when configured with neither.
func (s *Server) loadDrafter(opts llama.Options) (draft.Drafter, error) {
	cfg := s.cfg
	var drafter draft.Drafter
	switch {
	case cfg.Head != "":
		// Q8_0 heads: half the bytes per drafted token; the output stays the target's.
		h, closer, err := heads.Open(cfg.Head, cfg.Model, s.target.Info(), heads.Options{Threads: cfg.Threads, Requantize: dtype.Q8_0,
			Layer: llama.Options{Threads: cfg.Threads, ContextLength: cfg.ContextLength}})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, closer)
		drafter = h
	case cfg.DraftModel != "":
		// The draft model's cache keeps the runtime's default budget: it is small.
		dm, err := openModel(cfg.DraftModel, llama.Options{Threads: cfg.Threads, ContextLength: cfg.ContextLength, Progress: opts.Progress})
		if err != nil {
			return nil, err
		}
		s.drafts = append(s.drafts, dm)
		dtok, err := tokenizer.Load(cfg.DraftModel)
		if err != nil {
			return nil, err
		}
		if err := tokenizer.Compatible(dtok, s.tok); err != nil {
			return nil, fmt.Errorf("the draft model %s cannot draft for %s: %w", cfg.DraftModel, cfg.Model, err)
		}
		d, err := draft.NewSmallModel(dm)
		if err != nil {
			return nil, err
		}
		drafter = d
	}
	if cfg.NGram {
		if drafter != nil {
			drafter = draft.WithLookup(drafter)
		} else {
			drafter = draft.NGram{}
		}
	}
	return drafter, nil
}

// makeSpecDecoders makes the speculative decoder on tgt, drafting up to k tokens a
// step, and the one for seeded sampling. Sampling with a seed must give the same
// text every time, but the adaptive choice of K depends on timing, and so would the
// random draws: seeded requests get a decoder with a fixed K (and the same drafter).
func (s *Server) makeSpecDecoders(tgt target.Target, drafter draft.Drafter, k int) error {
	var err error
	o := spec.Options{K: k, Adaptive: s.cfg.Adaptive}
	if s.specDec, err = spec.New(tgt, drafter, o); err != nil {
		return err
	}
	s.maxK = k
	s.seededDec = s.specDec
	if s.cfg.Adaptive {
		if s.seededDec, err = spec.New(tgt, drafter, spec.Options{K: min(k, seededK)}); err != nil {
			return err
		}
	}
	return nil
}

// openModel opens a GGUF file or Hugging Face directory.
func openModel(path string, opts llama.Options) (*llama.Model, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	m, err := llama.Open(path, opts)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	return m, nil
}

// modelNames lists the names a client may ask for, the primary one first: the
// alias, the file name without its extension, and the model's own name.
func modelNames(alias, path, name string) []string {
	var out []string
	add := func(n string) {
		if n != "" && !strings.Contains(strings.Join(out, "\x00")+"\x00", n+"\x00") {
			out = append(out, n)
		}
	}
	add(alias)
	add(strings.TrimSuffix(filepath.Base(filepath.Clean(path)), ".gguf"))
	add(name)
	return out
}

func (s *Server) serves(name string) bool {
	for _, n := range s.names {
		if n == name {
			return true
		}
	}
	return false
}

// kvCapacity is the number of token positions the target's whole cache holds.
func (s *Server) kvCapacity() int {
	st := s.target.KVStats()
	return st.Blocks * st.BlockSize
}

func (s *Server) kvStats() (target, draft *kvcache.Stats) {
	t := s.target.KVStats()
	target = &t
	if len(s.drafts) > 0 {
		d := s.drafts[0].KVStats()
		draft = &d
	}
	return target, draft
}

// speculating reports whether a request admitted now would decode speculatively.
func (s *Server) speculating() float64 {
	if s.useSpec(int(s.active.Load()) + 1) {
		return 1
	}
	return 0
}

// useSpec is the saturation policy: with n generations running (the new one
// included), speculate unless n is above the saturation point, if there is one.
func (s *Server) useSpec(n int) bool {
	return s.specDec != nil && (s.saturation == 0 || n <= s.saturation)
}

func (s *Server) textStream() spec.TextStream {
	return s.tok.NewStream(tokenizer.DecodeOptions{SkipSpecial: true})
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Metrics returns a snapshot of the gauges tests and examples look at: running and
// queued generations.
func (s *Server) Metrics() (active, queued int) {
	return int(s.active.Load()), int(s.queued.Load())
}

// Shutdown stops the server gracefully: new generation requests are refused with
// 503 (and /healthz reports 503), queued ones are refused, and running generations
// may finish until ctx ends; then they are cancelled — a stream then ends with an
// error event and [DONE], a non-streaming request with 503 — and Shutdown returns
// ctx's error once they have all answered. It does not stop the HTTP listener: call
// http.Server.Shutdown too.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		close(s.drainCh)
		if s.inflight == 0 {
			close(s.idle)
		}
	}
	s.mu.Unlock()
	select {
	case <-s.idle:
		return nil
	case <-ctx.Done():
	}
	s.cancel(errShutdown)
	<-s.idle
	return ctx.Err()
}

// Close releases the models. Call it after Shutdown.
func (s *Server) Close() error {
	if s.cancel != nil {
		s.cancel(errShutdown)
	}
	var errs []error
	if s.target != nil {
		errs = append(errs, s.target.Close())
	}
	for _, c := range s.closers {
		errs = append(errs, c.Close())
	}
	for _, d := range s.drafts {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}

// enter counts a generation request in, unless the server is draining.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.inflight++
	return true
}

func (s *Server) exit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.inflight == 0 && s.draining {
		close(s.idle)
	}
}

// retryAfter estimates, in seconds, when a refused request might get a slot: the
// recent mean generation time, times the queue ahead of it over the slots.
func (s *Server) retryAfter() int {
	s.mu.Lock()
	avg := s.avgDur
	s.mu.Unlock()
	wait := avg * float64(s.queued.Load()+1) / float64(s.cfg.MaxConcurrent)
	return min(max(int(math.Ceil(wait)), 1), maxRetryAfterSec)
}

func (s *Server) noteDuration(d time.Duration) {
	s.mu.Lock()
	s.avgDur = 0.9*s.avgDur + 0.1*d.Seconds()
	s.mu.Unlock()
}

// routes builds the handler: OpenAI's paths (also without the /v1 prefix, as
// llama-server accepts them), health and metrics; anything else is a JSON 404, and a
// known path with the wrong method a JSON 405.
func (s *Server) routes() http.Handler {
	type route struct {
		method   string
		endpoint string // metrics label
		h        http.HandlerFunc
	}
	completions := route{http.MethodPost, "completions", s.handleCompletions}
	chat := route{http.MethodPost, "chat_completions", s.handleChat}
	models := route{http.MethodGet, "models", s.handleModels}
	health := route{http.MethodGet, "health", s.handleHealth}
	metrics := route{http.MethodGet, "metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}).ServeHTTP}
	table := map[string]route{
		"/v1/completions":      completions,
		"/completions":         completions,
		"/v1/chat/completions": chat,
		"/chat/completions":    chat,
		"/v1/models":           models,
		"/models":              models,
		"/healthz":             health,
		"/health":              health,
		"/metrics":             metrics,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &recorder{ResponseWriter: w, status: http.StatusOK}
		endpoint := "other"
		defer func() {
			s.m.request(endpoint, rw.code(), time.Since(start).Seconds())
			s.log.Info("request", "method", r.Method, "path", r.URL.Path, "status", rw.code(), "duration", time.Since(start).Round(time.Microsecond))
		}()
		rt, ok := table[r.URL.Path]
		if !ok && strings.HasPrefix(r.URL.Path, "/v1/models/") {
			rt, ok = route{http.MethodGet, "models", s.handleModel}, true
		}
		if !ok {
			writeError(rw, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "unknown_url",
				Message: fmt.Sprintf("unknown request URL: %s %s", r.Method, r.URL.Path)})
			return
		}
		endpoint = rt.endpoint
		if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
			rw.Header().Set("Allow", rt.method)
			writeError(rw, &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest, Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s is not allowed: use %s", r.Method, r.URL.Path, rt.method)})
			return
		}
		rt.h(rw, r)
	})
}

// recorder remembers the status written, for the log and metrics.
type recorder struct {
	http.ResponseWriter
	status  int
	wrote   bool
	dropped bool // the client went away before an answer
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's Flush.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// code is the status for the log: 499 (nginx's "client closed request") when the
// client left before any answer.
func (r *recorder) code() int {
	if r.dropped && !r.wrote {
		return 499
	}
	return r.status
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if draining {
		w.Header().Set("Retry-After", fmt.Sprint(drainRetryAfter))
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"status":"shutting down"}`+"\n")
		return
	}
	active, queued := s.Metrics()
	json.NewEncoder(w).Encode(map[string]any{"status": "ok", "active": active, "queued": queued})
}

// modelCard is an entry of /v1/models.
type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
}

func (s *Server) card(name string) modelCard {
	return modelCard{ID: name, Object: "model", Created: s.started, OwnedBy: "specula", MaxModelLen: s.info.ContextLength}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	list := struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{Object: "list"}
	for _, n := range s.names {
		list.Data = append(list.Data, s.card(n))
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	if !s.serves(name) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("the model '%s' does not exist", name)})
		return
	}
	writeJSON(w, http.StatusOK, s.card(name))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, &apiError{Status: http.StatusInternalServerError, Type: typeServer, Message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
