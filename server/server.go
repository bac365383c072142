// Package server is an OpenAI-compatible HTTP API over specula engines: a Go service
// mounts [Server.Handler] (or [Join]'s handler, for several engines) on its own mux.
// It serves /v1/completions and /v1/chat/completions, streamed as server-sent events
// or whole, with logprobs (of the prompt too, with echo: scoring a text, as
// lm-evaluation-harness asks), n samples forked from one prefill, structured output
// (OpenAI's response_format, llama-server's grammar and json_schema, vLLM's guided_*
// fields and structured_outputs), an optional API key, graceful shutdown,
// /v1/models, /healthz and Prometheus /metrics. A request field the server does not
// know is a 400 naming it, never silently dropped; a short list of fields that
// change nothing in the text (user, store, metadata, …) is accepted and ignored.
//
// The server only translates: a handler turns a request's JSON into a
// [specula.Request], hands it to the engine's one door ([specula.Engine.GenerateFunc])
// and turns the engine's events back into JSON. Admission (the queue, key/value
// memory), the choice of decoder, stops and detokenizing are the engine's; its typed
// errors become OpenAI's error answers (a full queue 429 with Retry-After, a prompt
// over the context 400 context_length_exceeded, …). [New] serves an engine already
// open; [Open] loads one from [Config.Engine]. examples/server is the command line
// over it.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/specula/specula"
)

// Config configures a Server. The zero value of a field means its default.
type Config struct {
	// Engine says what [Open] loads: the target, its drafter, their runtime settings
	// and how many requests run and wait (see [specula.Config]). [New] serves an
	// engine already open instead.
	Engine specula.Config
	// ModelName is an alias clients may use in "model", listed first by /v1/models.
	// The target's file name (without .gguf) and its general.name are accepted too.
	ModelName string
	// Pacing, when positive, spreads the tokens of each accepted burst evenly over
	// this window (15–20 ms is plenty) in streamed responses.
	Pacing time.Duration
	// MaxBodyBytes bounds a request body (0: 1 MiB); a larger one is answered 413.
	MaxBodyBytes int64
	// APIKey, when set, is required of every request but /healthz, /health and
	// /metrics, as "Authorization: Bearer KEY"; others get 401.
	APIKey string
	// ProtectMetrics requires the API key of /metrics too.
	ProtectMetrics bool
	// Logger receives one line per request and the server's notices (nil: discard).
	Logger *slog.Logger
}

// Server is an OpenAI-compatible HTTP server for one engine or, joined, several.
// Make one with New or Open, serve Handler, and end with Shutdown and Close.
type Server struct {
	cfg     Config
	log     *slog.Logger
	models  []*served // the engines served; one unless joined
	owned   bool      // the server opened its engine, and closes it
	reg     *prometheus.Registry
	http    *httpMetrics
	handler http.Handler
	started int64 // unix time, for /v1/models

	ctx     context.Context // ends every generation at a hard shutdown
	cancel  context.CancelCauseFunc
	drain   context.Context // ends when Shutdown begins: requests not yet begun are refused
	drained context.CancelFunc

	mu       sync.Mutex
	inflight int // generation requests being handled
	draining bool
	idle     chan struct{} // closed when draining and nothing is in flight
}

// served is one engine and the names it answers to, the primary one first, with the
// server that owns it (whose shutdown ends its requests).
type served struct {
	eng   *specula.Engine
	names []string
	owner *Server
}

// errShutdown is the cause given to generations that a shutdown cancels.
var errShutdown = errors.New("the server is shutting down")

// Defaults.
const (
	defaultMaxBody  = 1 << 20
	drainRetryAfter = 5 // seconds, for requests refused while shutting down
)

// Open loads the engine cfg.Engine names and makes a server on it; Close releases it.
func Open(cfg Config) (*Server, error) {
	eng, err := specula.Open(cfg.Engine)
	if err != nil {
		return nil, err
	}
	s, err := New(eng, cfg)
	if err != nil {
		eng.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// New makes a server on eng, which it does not close; cfg.Engine is not read.
func New(eng *specula.Engine, cfg Config) (*Server, error) {
	if eng == nil {
		return nil, errors.New("server: nil engine")
	}
	s := newServer(cfg)
	m := &served{eng: eng, owner: s, names: modelNames(cfg.ModelName, eng.Path(), eng.Info().Name)}
	if len(m.names) == 0 {
		m.names = []string{"model"}
	}
	s.models = []*served{m}
	if _, err := eng.ChatTemplate(); err != nil {
		s.log.Warn("the chat template is not usable: chat requests will be refused", "err", err)
	}
	logMemory(s.log, eng.Memory())
	s.finish()
	return s, nil
}

// newServer makes a server of cfg, serving nothing yet.
func newServer(cfg Config) *Server {
	s := &Server{cfg: cfg, log: cfg.Logger, started: time.Now().Unix(), idle: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBodyBytes <= 0 {
		s.cfg.MaxBodyBytes = defaultMaxBody
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.drain, s.drained = context.WithCancel(context.Background())
	return s
}

// finish registers the metrics of the models served and builds the handler.
func (s *Server) finish() {
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, m := range s.models {
		prometheus.WrapRegistererWith(prometheus.Labels{"model_name": m.names[0]}, s.reg).MustRegister(m.eng.Metrics())
	}
	s.http = newHTTPMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"model_name": s.models[0].names[0]}, s.reg))
	s.handler = s.routes()
}

// Join serves several servers — one engine each — under one handler, as one
// OpenAI-compatible server with several models: a generation goes to the engine that
// answers to its "model" (the first one when the request names none), /v1/models
// lists them all, /healthz is healthy while every server is, and /metrics reports
// every engine under its model_name. The first server's settings (API key, body
// limit, pacing, logger) apply to all requests; each engine keeps its own admission,
// and each server's Shutdown ends its own engine's requests.
func Join(servers ...*Server) (http.Handler, error) {
	if len(servers) == 0 {
		return nil, errors.New("server: Join needs at least one server")
	}
	j := newServer(servers[0].cfg)
	seen := map[string]bool{}
	for _, srv := range servers {
		for _, m := range srv.models {
			for _, n := range m.names {
				if seen[n] {
					return nil, fmt.Errorf("server: two servers answer to the model name %q: set ModelName", n)
				}
				seen[n] = true
			}
			j.models = append(j.models, m)
		}
	}
	j.finish()
	return j.handler, nil
}

// modelNames lists the names a client may ask for, the primary one first: the
// alias, the file name without its extension, and the model's own name.
func modelNames(alias, path, name string) []string {
	var out []string
	add := func(n string) {
		if n != "" && n != "." && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	add(alias)
	if path != "" {
		add(strings.TrimSuffix(filepath.Base(filepath.Clean(path)), ".gguf"))
	}
	add(name)
	return out
}

// model returns the engine answering to name ("": the first), or nil.
func (s *Server) model(name string) *served {
	if name == "" {
		return s.models[0]
	}
	for _, m := range s.models {
		if slices.Contains(m.names, name) {
			return m
		}
	}
	return nil
}

// Engine is the engine the server serves (the first, when joined).
func (s *Server) Engine() *specula.Engine { return s.models[0].eng }

// Names are the model names the server answers to, the primary one first.
func (s *Server) Names() []string { return s.models[0].names }

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Shutdown stops the server gracefully: new generation requests are refused with
// 503 (and /healthz reports 503), requests still waiting in the engine's queue are
// refused with 503 too, and running generations may finish until ctx
// ends; then they are cancelled — a stream then ends with an error event and
// [DONE], a non-streaming request with 503 — and Shutdown returns ctx's error once
// they have all answered. It does not stop the HTTP listener: call
// http.Server.Shutdown too.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		s.drained()
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

// Close ends what is left of every generation and, when the server opened its engine
// (Open), releases it. Call it after Shutdown.
func (s *Server) Close() error {
	s.cancel(errShutdown)
	if s.owned {
		return s.models[0].eng.Close()
	}
	return nil
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

// isDraining reports whether Shutdown has begun.
func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// routes builds the handler: one table of ServeMux patterns — OpenAI's paths (also
// without the /v1 prefix, as llama-server accepts them), health and metrics — each
// wrapped in the request log and metrics, and all but health (and metrics, unless
// protected) in the API key check. Anything else is a JSON 404, and a known path
// with the wrong method a JSON 405.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(method, path, endpoint string, open bool, h http.HandlerFunc) {
		var handler http.Handler = h
		if !open {
			handler = s.requireKey(handler)
		}
		mux.Handle(method+" "+path, s.instrument(endpoint, handler))
		mux.Handle(path, s.instrument(endpoint, methodNotAllowed(method)))
	}
	for _, prefix := range []string{"/v1", ""} {
		handle(http.MethodPost, prefix+"/completions", "completions", false, s.handleCompletions)
		handle(http.MethodPost, prefix+"/chat/completions", "chat_completions", false, s.handleChat)
		handle(http.MethodGet, prefix+"/models", "models", false, s.handleModels)
		handle(http.MethodGet, prefix+"/models/{name...}", "models", false, s.handleModel)
	}
	handle(http.MethodGet, "/healthz", "health", true, s.handleHealth)
	handle(http.MethodGet, "/health", "health", true, s.handleHealth)
	handle(http.MethodGet, "/metrics", "metrics", !s.cfg.ProtectMetrics, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}).ServeHTTP)
	mux.Handle("/", s.instrument("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "unknown_url",
			Message: fmt.Sprintf("unknown request URL: %s %s", r.Method, r.URL.Path)})
	})))
	return mux
}

// methodNotAllowed answers a known path asked with another method.
func methodNotAllowed(method string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", method)
		writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest, Code: "method_not_allowed",
			Message: fmt.Sprintf("%s %s is not allowed: use %s", r.Method, r.URL.Path, method)})
	})
}

// instrument logs a request and counts it in the metrics under endpoint.
func (s *Server) instrument(endpoint string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &recorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rw, r)
		took := time.Since(start)
		s.http.request(endpoint, rw.code(), took.Seconds())
		msg := "request"
		if rw.dropped {
			msg = "client disconnected"
		}
		s.log.Info(msg, "method", r.Method, "path", r.URL.Path, "status", rw.code(), "duration", took.Round(time.Microsecond))
	})
}

// requireKey answers 401 to a request without the server's API key (every request
// has it when the server has none). The comparison takes the same time whatever the
// key sent.
func (s *Server) requireKey(h http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.cfg.APIKey)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="specula"`)
			writeError(w, &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
				Message: "a valid API key is required: send it as Authorization: Bearer KEY"})
			return
		}
		h.ServeHTTP(w, r)
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

// code is the status for the log and the metrics: 499 (nginx's "client closed
// request") when the client left before the answer was complete — before any byte,
// or in the middle of a stream whose 200 was already sent.
func (r *recorder) code() int {
	if r.dropped {
		return 499
	}
	return r.status
}

// markDropped notes, for the log, that the client left before an answer.
func markDropped(w http.ResponseWriter) {
	if rw, ok := w.(*recorder); ok {
		rw.dropped = true
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	running, waiting := 0, 0
	for _, m := range s.models {
		if m.owner.isDraining() {
			w.Header().Set("Retry-After", fmt.Sprint(drainRetryAfter))
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":"shutting down"}`+"\n")
			return
		}
		st := m.eng.Status()
		running, waiting = running+st.Running, waiting+st.Waiting
	}
	json.NewEncoder(w).Encode(map[string]any{"status": "ok", "active": running, "queued": waiting})
}

// modelCard is an entry of /v1/models.
type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
}

func (s *Server) card(m *served, name string) modelCard {
	return modelCard{ID: name, Object: "model", Created: s.started, OwnedBy: "specula", MaxModelLen: m.eng.Info().ContextLength}
}

// handleModels answers /v1/models with every model, under every name it answers to.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	list := struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{Object: "list"}
	for _, m := range s.models {
		for _, n := range m.names {
			list.Data = append(list.Data, s.card(m, n))
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	m := s.model(name)
	if m == nil || name == "" {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("the model '%s' does not exist", name)})
		return
	}
	writeJSON(w, http.StatusOK, s.card(m, name))
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

// logMemory logs an engine's memory plan as one line: each of its parts by name
// ("target_weights_mib", "target_kv_mib", "draft_kv_mib", "scratch_mib", …), the
// weights mapped from their files rather than copied, the target's configured
// key/value budget and what it holds, the total its parts come to and the Go heap's
// headroom beyond it (specula.Memory says what each promises).
func logMemory(l *slog.Logger, p specula.Memory) {
	full := 0
	if p.ContextLength > 0 {
		full = p.KVPositions / p.ContextLength
	}
	var attrs []any
	var mapped int64
	for _, part := range p.Parts {
		attrs = append(attrs, strings.ReplaceAll(part.Name, " ", "_")+"_mib", round1(mib(part.Bytes)))
		mapped += part.Where.File
	}
	headroom := any("unbounded")
	if p.HeapHeadroom >= 0 {
		headroom = round1(mib(p.HeapHeadroom))
	}
	attrs = append(attrs, "weights_mapped_mib", round1(mib(mapped)), "kv_budget_mib", round1(mib(p.KVBudget)),
		"kv_positions", p.KVPositions, "context_length", p.ContextLength,
		"full_context_requests", full, "max_running", p.MaxRunning, "total_mib", round1(mib(p.Total())), "heap_headroom_mib", headroom)
	l.Info("memory plan", attrs...)
}

func mib(b int64) float64      { return float64(b) / (1 << 20) }
func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
