// Package server is an OpenAI-compatible HTTP API over specula engines: a Go service
// mounts [Server.Handler] (or [Join]'s handler, for several engines) on its own mux.
// It serves /v1/completions and /v1/chat/completions, streamed as server-sent events
// or whole, with logprobs (of the prompt too, with echo: scoring a text, as
// lm-evaluation-harness asks), n samples forked from one prefill, structured output
// (response_format, grammar, json_schema), an optional API key, admission with a
// queue and Retry-After, graceful shutdown, /v1/models, /healthz and Prometheus
// /metrics. [New] serves an engine already open (any model, CPU or GPU); [Open]
// loads one from [Config.Engine]. examples/server is the command line over it.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/specula/specula"
	"github.com/specula/specula/model"
	"github.com/specula/specula/tokenizer"
)

// Config configures a Server. The zero value of a field means its default, except
// where the field says otherwise.
type Config struct {
	// Engine says what [Open] loads: the target, its drafter, and their runtime
	// settings (see [specula.Config]). [New] serves an engine already open instead.
	Engine specula.Config
	// ModelName is an alias clients may use in "model", listed first by /v1/models.
	// The target's file name (without .gguf) and its general.name are accepted too.
	ModelName string
	// MaxConcurrent is the number of generations that run at once (0: 4 × GOMAXPROCS).
	// With Open it also sizes the default key/value budget.
	MaxConcurrent int
	// MaxQueue is the number of requests that may wait for a free slot; beyond it a
	// request is answered 429. 0 means no queue.
	MaxQueue int
	// Saturation, when positive, is the most generations that may run (the new one
	// included) for a newly admitted request to decode speculatively; with more, it
	// decodes without speculation, as with vLLM's speculative_disable_by_batch_size.
	// 0 never turns speculation off: the target's passes are shared by the running
	// requests, and the adaptive decoder prices each draft by what it costs the whole
	// batch, so speculation fades by itself as the batch fills
	// (BenchmarkConcurrentStreams compares the settings).
	Saturation int
	// Pacing, when positive, spreads the tokens of each accepted burst evenly over
	// this window (15–20 ms is plenty) in streamed responses.
	Pacing time.Duration
	// MaxBodyBytes bounds a request body (0: 1 MiB); a larger one is answered 413.
	MaxBodyBytes int64
	// APIKey, when set, is required of every request but /healthz and /health, as
	// "Authorization: Bearer KEY"; others get 401.
	APIKey string
	// Logger receives one line per request and the server's notices (nil: discard).
	Logger *slog.Logger
}

// Server is an OpenAI-compatible HTTP server for one engine, decoding speculatively.
// Make one with New or Open, serve Handler, and end with Shutdown and Close.
type Server struct {
	cfg   Config
	log   *slog.Logger
	eng   *specula.Engine
	owned bool // the server opened the engine, and closes it
	tok   *tokenizer.Tokenizer
	info  model.Info
	names []string // accepted model names, the primary first

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
	drainRetryAfter  = 5 // seconds, for requests refused while shutting down
	maxRetryAfterSec = 60
)

// Open loads the engine cfg.Engine names and makes a server on it; Close releases it.
func Open(cfg Config) (*Server, error) {
	ec := cfg.Engine
	if ec.MaxSequences == 0 {
		ec.MaxSequences = maxConcurrent(cfg)
	}
	eng, err := specula.Open(ec)
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

// maxConcurrent is the generations that run at once.
func maxConcurrent(cfg Config) int {
	if cfg.MaxConcurrent > 0 {
		return cfg.MaxConcurrent
	}
	return 4 * runtime.GOMAXPROCS(0)
}

// New makes a server on eng, which it does not close; cfg.Engine is not read.
func New(eng *specula.Engine, cfg Config) (*Server, error) {
	if eng == nil {
		return nil, errors.New("server: nil engine")
	}
	s := &Server{cfg: cfg, log: cfg.Logger, eng: eng, started: time.Now().Unix(), avgDur: 1}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBodyBytes <= 0 {
		s.cfg.MaxBodyBytes = defaultMaxBody
	}
	s.cfg.MaxConcurrent = maxConcurrent(cfg)
	s.cfg.MaxQueue = max(cfg.MaxQueue, 0)
	s.saturation = max(cfg.Saturation, 0)
	s.tok, s.info = eng.Tokenizer(), eng.Info()
	if s.names = modelNames(cfg.ModelName, eng.Path(), s.info.Name); len(s.names) == 0 {
		s.names = []string{"model"}
	}
	if _, err := eng.ChatTemplate(); err != nil {
		s.log.Warn("the chat template is not usable: chat requests will be refused", "err", err)
	}
	plan := s.plan()
	plan.log(s.log)
	if err := plan.check(); err != nil {
		return nil, err
	}
	s.slots = make(chan struct{}, s.cfg.MaxConcurrent)
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.drainCh = make(chan struct{})
	s.idle = make(chan struct{})
	s.m = newMetrics(s.names[0], max(eng.MaxDraft(), 1), eng.KVStats, s.speculating, eng.Target())
	s.handler = s.routes()
	return s, nil
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

func (s *Server) serves(name string) bool {
	for _, n := range s.names {
		if n == name {
			return true
		}
	}
	return false
}

// kvCapacity is the number of token positions the target's whole cache holds (0
// when the model does not say).
func (s *Server) kvCapacity() int {
	st, _ := s.eng.KVStats()
	if st == nil {
		return 0
	}
	return st.Blocks * st.BlockSize
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
	return s.eng.MaxDraft() > 0 && (s.saturation == 0 || n <= s.saturation)
}

// Engine is the engine the server serves.
func (s *Server) Engine() *specula.Engine { return s.eng }

// Names are the model names the server answers to, the primary one first.
func (s *Server) Names() []string { return s.names }

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

// Close ends what is left of every generation and, when the server opened its engine
// (Open), releases it. Call it after Shutdown.
func (s *Server) Close() error {
	if s.cancel != nil {
		s.cancel(errShutdown)
	}
	if s.owned {
		return s.eng.Close()
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
			if rw.dropped {
				s.log.Info("client disconnected", "method", r.Method, "path", r.URL.Path, "status", rw.code(), "sent", rw.status, "duration", time.Since(start).Round(time.Microsecond))
				return
			}
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
		if endpoint != "health" && !s.authorized(r) {
			unauthorized(rw)
			return
		}
		if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
			rw.Header().Set("Allow", rt.method)
			writeError(rw, &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest, Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s is not allowed: use %s", r.Method, r.URL.Path, rt.method)})
			return
		}
		rt.h(rw, r)
	})
}

// authorized reports whether r carries the server's API key (every request does when
// the server has none). The comparison takes the same time whatever the key sent.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.cfg.APIKey)) == 1
}

// unauthorized answers OpenAI's 401 for a missing or wrong API key.
func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="specula"`)
	writeError(w, &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
		Message: "a valid API key is required: send it as Authorization: Bearer KEY"})
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

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) { writeModels(w, s) }

// writeModels answers /v1/models with the servers' models, each under every name it
// answers to.
func writeModels(w http.ResponseWriter, servers ...*Server) {
	list := struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{Object: "list"}
	for _, s := range servers {
		for _, n := range s.names {
			list.Data = append(list.Data, s.card(n))
		}
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

// isDraining reports whether Shutdown has begun.
func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}
