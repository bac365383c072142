package server

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics count the server's HTTP requests; the engine counts its generations
// (specula.Engine.Metrics), whatever door they came in by.
type httpMetrics struct {
	requests *prometheus.CounterVec   // by endpoint and HTTP status
	duration *prometheus.HistogramVec // by endpoint
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specula_requests_total",
			Help: "HTTP requests answered, by endpoint and status code."}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "specula_request_duration_seconds",
			Help:    "Time from a request's arrival to the end of its response, by endpoint.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15)}, []string{"endpoint"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// request counts an answered request.
func (m *httpMetrics) request(endpoint string, code int, seconds float64) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(endpoint).Observe(seconds)
}
