package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Join serves several servers — one engine each — under one handler, as one
// OpenAI-compatible server with several models: a generation goes to the server that
// answers to its "model" (the first one when the request names none), /v1/models
// lists them all, /healthz is healthy while every one is, and /metrics reports them
// all, each under its model_name. Each server keeps its own admission, queue and API
// key; the listings and metrics take the first server's key.
func Join(servers ...*Server) (http.Handler, error) {
	if len(servers) == 0 {
		return nil, errors.New("server: Join needs at least one server")
	}
	seen := map[string]bool{}
	for _, s := range servers {
		for _, n := range s.names {
			if seen[n] {
				return nil, fmt.Errorf("server: two servers answer to the model name %q: set ModelName", n)
			}
			seen[n] = true
		}
	}
	j := &joined{servers: servers}
	j.metrics = promhttp.HandlerFor(j, promhttp.HandlerOpts{})
	return j, nil
}

// joined is the handler Join returns.
type joined struct {
	servers []*Server
	metrics http.Handler
}

func (j *joined) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	first := j.servers[0]
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	switch {
	case path == "/models" && r.Method == http.MethodGet:
		if !j.authorize(w, r) {
			return
		}
		writeModels(w, j.servers...)
	case strings.HasPrefix(path, "/models/"):
		name := strings.TrimPrefix(path, "/models/")
		j.serverFor(name).Handler().ServeHTTP(w, r)
	case path == "/healthz" || path == "/health":
		for _, s := range j.servers[1:] {
			if s.isDraining() {
				s.Handler().ServeHTTP(w, r)
				return
			}
		}
		first.Handler().ServeHTTP(w, r)
	case path == "/metrics":
		if j.authorize(w, r) {
			j.metrics.ServeHTTP(w, r)
		}
	case r.Method == http.MethodPost && (path == "/completions" || path == "/chat/completions"):
		j.route(w, r)
	default:
		first.Handler().ServeHTTP(w, r)
	}
}

// authorize checks the first server's key for the joined endpoints, answering 401.
func (j *joined) authorize(w http.ResponseWriter, r *http.Request) bool {
	if j.servers[0].authorized(r) {
		return true
	}
	unauthorized(w)
	return false
}

// route hands a generation to the server of its model, the body read once and
// handed on as it came; a body that is not JSON goes to the first server, which
// says what is wrong with it.
func (j *joined) route(w http.ResponseWriter, r *http.Request) {
	first := j.servers[0]
	limit := first.cfg.MaxBodyBytes
	for _, s := range j.servers[1:] {
		limit = max(limit, s.cfg.MaxBodyBytes)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1)) // the server routed to applies its own limit
	if err != nil {
		return // the client went away
	}
	var head struct {
		Model *string `json:"model"`
	}
	s := first
	if json.Unmarshal(body, &head) == nil && head.Model != nil {
		s = j.serverFor(*head.Model)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.Handler().ServeHTTP(w, r)
}

// serverFor is the server answering to name, or the first (which then answers 404).
func (j *joined) serverFor(name string) *Server {
	for _, s := range j.servers {
		if s.serves(name) {
			return s
		}
	}
	return j.servers[0]
}

// Gather implements prometheus.Gatherer: every server's metrics, told apart by their
// model_name, and the process's (Go runtime, CPU, memory) once.
func (j *joined) Gather() ([]*dto.MetricFamily, error) {
	var out []*dto.MetricFamily
	byName := map[string]*dto.MetricFamily{}
	for i, s := range j.servers {
		fams, err := s.m.reg.Gather()
		if err != nil {
			return nil, err
		}
		for _, f := range fams {
			prev, ok := byName[f.GetName()]
			switch {
			case !ok:
				byName[f.GetName()] = f
				out = append(out, f)
			case i > 0 && !hasModelName(f):
				// The process's own metrics, the same in every registry.
			default:
				prev.Metric = append(prev.Metric, f.Metric...)
			}
		}
	}
	return out, nil
}

var _ prometheus.Gatherer = (*joined)(nil)

// hasModelName reports whether a family's metrics carry the model_name label.
func hasModelName(f *dto.MetricFamily) bool {
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if l.GetName() == "model_name" {
				return true
			}
		}
	}
	return false
}
