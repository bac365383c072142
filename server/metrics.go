package server

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/sched"
	"github.com/specula/specula/spec"
)

// metrics are the server's Prometheus metrics, in a registry of their own.
type metrics struct {
	reg *prometheus.Registry

	requests        *prometheus.CounterVec   // by endpoint and HTTP status
	duration        *prometheus.HistogramVec // by endpoint
	active, queued  prometheus.Gauge
	decisions       *prometheus.CounterVec // speculative or plain, at admission
	finished        *prometheus.CounterVec // by finish reason
	ttft, queueWait prometheus.Histogram
	tokensPerSecond *prometheus.HistogramVec // by mode
	acceptedLength  prometheus.Histogram
	drafted         prometheus.Counter
	accepted        prometheus.Counter
	promptTokens    prometheus.Counter
	generatedTokens prometheus.Counter
	targetPasses    *prometheus.CounterVec // by mode

	// vLLM's spec-decode counters, by the same names under our prefix, so that its
	// dashboards need only the prefix changed.
	numDrafts, numDraftTokens, numAccepted prometheus.Counter
	acceptedPerPos                         *prometheus.CounterVec // by position

	mu                   sync.Mutex
	recentDrafted, recAc float64 // decayed sums behind the acceptance-rate gauge
}

// batcher is what the metrics read of the target's shared passes ([target.Local]).
type batcher interface {
	BatchStats() sched.Stats
	Load() sched.Load
}

// recentDecay is the weight a request's counts keep when the next speculative request
// finishes: the acceptance-rate gauge follows the last few dozen requests.
const recentDecay = 0.9

func newMetrics(modelName string, maxK int, kv func() (target, draft *kvcache.Stats), speculating func() float64, passes batcher) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	// Every metric of ours carries the model's name, as vLLM's do.
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"model_name": modelName}, m.reg)
	f := factory{reg}
	m.requests = f.counterVec("specula_requests_total", "HTTP requests answered, by endpoint and status code.", "endpoint", "code")
	m.duration = f.histogramVec("specula_request_duration_seconds", "Time from a request's arrival to the end of its response, by endpoint.",
		prometheus.ExponentialBuckets(0.005, 2, 15), "endpoint")
	m.active = f.gauge("specula_active_requests", "Generations running now.")
	m.queued = f.gauge("specula_queued_requests", "Generation requests waiting for a slot (all MaxConcurrent are running).")
	m.decisions = f.counterVec("specula_speculation_decisions_total",
		`Requests admitted with speculative decoding ("speculative") or without it because the server was saturated or speculation is off ("plain").`, "mode")
	m.finished = f.counterVec("specula_finished_total", "Generations ended, by finish reason (stop, length, cancelled, error).", "reason")
	m.ttft = f.histogram("specula_time_to_first_token_seconds", "Time from a request's arrival (queueing included) to its first generated token.",
		prometheus.ExponentialBuckets(0.005, 2, 14))
	m.queueWait = f.histogram("specula_queue_wait_seconds", "Time requests waited for a generation slot.",
		prometheus.ExponentialBuckets(0.001, 2, 16))
	m.tokensPerSecond = f.histogramVec("specula_tokens_per_second", "Decoding speed of each request (generated tokens over the time after the prefill), by mode.",
		prometheus.ExponentialBuckets(2, 1.5, 16), "mode")
	buckets := make([]float64, 0, maxK+1)
	for i := 1; i <= maxK+1; i++ {
		buckets = append(buckets, float64(i))
	}
	m.acceptedLength = f.histogram("specula_accepted_length",
		"Tokens each target forward pass produced: accepted draft tokens plus the target's own (1 for a plain step).", buckets)
	m.drafted = f.counter("specula_draft_tokens_total", "Draft tokens the target verified.")
	m.accepted = f.counter("specula_accepted_tokens_total", "Draft tokens the target accepted.")
	m.promptTokens = f.counter("specula_prompt_tokens_total", "Prompt tokens processed.")
	m.generatedTokens = f.counter("specula_generation_tokens_total", "Tokens generated.")
	m.targetPasses = f.counterVec("specula_target_passes_total", "Target forward passes (verification steps), by mode.", "mode")
	m.numDrafts = f.counter("specula:spec_decode_num_drafts_total", "Drafts verified (vLLM's spec_decode_num_drafts): steps that drafted.")
	m.numDraftTokens = f.counter("specula:spec_decode_num_draft_tokens_total", "Draft tokens verified (vLLM's spec_decode_num_draft_tokens; every node of a tree).")
	m.numAccepted = f.counter("specula:spec_decode_num_accepted_tokens_total", "Draft tokens accepted (vLLM's spec_decode_num_accepted_tokens).")
	m.acceptedPerPos = f.counterVec("specula:spec_decode_num_accepted_tokens_per_pos_total",
		"Draft tokens accepted at each draft position, 0 first (vLLM's spec_decode_num_accepted_tokens_per_pos).", "position")
	f.gaugeFunc("specula_acceptance_rate",
		"Fraction of draft tokens accepted, over recent speculative requests (each request's weight decays by 10% per later one).",
		m.acceptanceRate)
	f.gaugeFunc("specula_speculation_enabled",
		"1 when a request admitted now would decode speculatively, 0 when the server is saturated (or speculation is off).",
		speculating)
	f.counterFunc("specula_batch_passes_total",
		"Passes of the target's multi-sequence forward: the requests' verifications and prefill chunks ready at once go through one.",
		func() float64 { return float64(passes.BatchStats().Passes) })
	f.counterFunc("specula_batch_forwards_total",
		"Requests' forwards those passes carried (divided by specula_batch_passes_total: the mean batch size).",
		func() float64 { return float64(passes.BatchStats().Forwards) })
	f.counterFunc("specula_batch_tokens_total",
		"Tokens those passes carried: pending tokens, drafts and prefill chunks (divided by specula_batch_passes_total: the mean tokens per pass).",
		func() float64 { return float64(passes.BatchStats().Tokens) })
	f.gaugeFunc("specula_batch_size",
		"Requests' forwards per pass over the recent passes of streaming requests, prefill passes left out (1: requests forward alone).",
		func() float64 { return passes.Load().Forwards })
	f.gaugeFunc("specula_batch_tokens_per_pass",
		"Tokens per pass over the recent passes of streaming requests, prefill passes left out: what adaptive speculation prices its drafts by, with the pass cost.",
		func() float64 { return passes.Load().Tokens })
	reg.MustRegister(&kvCollector{stats: kv})
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe records a finished generation.
func (m *metrics) observe(mode string, res spec.Result) {
	s := res.Stats
	m.finished.WithLabelValues(string(res.Finish)).Inc()
	m.promptTokens.Add(float64(s.PromptTokens))
	m.generatedTokens.Add(float64(s.GeneratedTokens))
	m.targetPasses.WithLabelValues(mode).Add(float64(s.Steps))
	m.drafted.Add(float64(s.Drafted))
	m.accepted.Add(float64(s.Accepted))
	if len(s.DraftedAt) > 0 {
		m.numDrafts.Add(float64(s.DraftedAt[0]))
	}
	m.numDraftTokens.Add(float64(s.DraftNodes))
	m.numAccepted.Add(float64(s.Accepted))
	for i, a := range s.AcceptedAt {
		if a > 0 {
			m.acceptedPerPos.WithLabelValues(strconv.Itoa(i)).Add(float64(a))
		}
	}
	if s.GeneratedTokens > 0 {
		if tps := s.TokensPerSecond(); tps > 0 {
			m.tokensPerSecond.WithLabelValues(mode).Observe(tps)
		}
	}
	// Step i of a request accepted at least a tokens exactly when draft position a−1
	// was accepted, so AcceptedAt gives the distribution of accepted lengths.
	prev := s.Steps
	for a := 0; a <= len(s.AcceptedAt); a++ {
		atLeastNext := 0
		if a < len(s.AcceptedAt) {
			atLeastNext = s.AcceptedAt[a]
		}
		for range max(prev-atLeastNext, 0) {
			m.acceptedLength.Observe(float64(a + 1))
		}
		prev = atLeastNext
	}
	if s.Drafted > 0 {
		m.mu.Lock()
		m.recentDrafted = m.recentDrafted*recentDecay + float64(s.Drafted)
		m.recAc = m.recAc*recentDecay + float64(s.Accepted)
		m.mu.Unlock()
	}
}

func (m *metrics) acceptanceRate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recentDrafted == 0 {
		return 0
	}
	return m.recAc / m.recentDrafted
}

// request counts an answered request.
func (m *metrics) request(endpoint string, code int, seconds float64) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(endpoint).Observe(seconds)
}

// kvCollector reports the key/value caches of the target and draft models.
type kvCollector struct {
	stats func() (target, draft *kvcache.Stats)
}

var (
	kvUsedDesc   = prometheus.NewDesc("specula_kv_cache_used_bytes", "Key/value cache memory held by sequences.", []string{"model"}, nil)
	kvFreeDesc   = prometheus.NewDesc("specula_kv_cache_free_blocks", "Key/value cache blocks no sequence holds.", []string{"model"}, nil)
	kvBlocksDesc = prometheus.NewDesc("specula_kv_cache_blocks", "Key/value cache blocks in the pool.", []string{"model"}, nil)
	kvBudgetDesc = prometheus.NewDesc("specula_kv_cache_budget_bytes", "Key/value cache memory budget (the target's is Config.Engine.KVBudget, -kv-budget).", []string{"model"}, nil)
	kvUsageDesc  = prometheus.NewDesc("specula_kv_cache_usage_ratio", "Fraction of the key/value cache blocks in use.", []string{"model"}, nil)
	kvLookupDesc = prometheus.NewDesc("specula_prefix_cache_lookups_total", "Full prompt blocks looked for in the prefix cache.", []string{"model"}, nil)
	kvHitDesc    = prometheus.NewDesc("specula_prefix_cache_hits_total", "Full prompt blocks found in the prefix cache (over lookups: the hit rate).", []string{"model"}, nil)
	kvCachedDesc = prometheus.NewDesc("specula_prefix_cache_blocks", "Free key/value blocks that still hold a cached prefix.", []string{"model"}, nil)
)

func (c *kvCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{kvUsedDesc, kvFreeDesc, kvBlocksDesc, kvBudgetDesc, kvUsageDesc, kvLookupDesc, kvHitDesc, kvCachedDesc} {
		ch <- d
	}
}

func (c *kvCollector) Collect(ch chan<- prometheus.Metric) {
	t, d := c.stats()
	for _, e := range []struct {
		name string
		s    *kvcache.Stats
	}{{"target", t}, {"draft", d}} {
		if e.s == nil {
			continue
		}
		s := e.s
		ch <- prometheus.MustNewConstMetric(kvUsedDesc, prometheus.GaugeValue, float64(s.InUseBytes), e.name)
		ch <- prometheus.MustNewConstMetric(kvFreeDesc, prometheus.GaugeValue, float64(s.FreeBlocks), e.name)
		ch <- prometheus.MustNewConstMetric(kvBlocksDesc, prometheus.GaugeValue, float64(s.Blocks), e.name)
		ch <- prometheus.MustNewConstMetric(kvBudgetDesc, prometheus.GaugeValue, float64(s.Budget), e.name)
		ch <- prometheus.MustNewConstMetric(kvLookupDesc, prometheus.CounterValue, float64(s.PrefixLookups), e.name)
		ch <- prometheus.MustNewConstMetric(kvHitDesc, prometheus.CounterValue, float64(s.PrefixHits), e.name)
		ch <- prometheus.MustNewConstMetric(kvCachedDesc, prometheus.GaugeValue, float64(s.CachedBlocks), e.name)
		usage := 0.0
		if s.Blocks > 0 {
			usage = float64(s.Blocks-s.FreeBlocks) / float64(s.Blocks)
		}
		ch <- prometheus.MustNewConstMetric(kvUsageDesc, prometheus.GaugeValue, usage, e.name)
	}
}

// factory registers metrics as it makes them.
type factory struct{ reg prometheus.Registerer }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

// gaugeFunc registers a gauge whose value value reads when scraped.
func (f factory) gaugeFunc(name, help string, value func() float64) {
	f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, value))
}

// counterFunc registers a counter whose value value reads when scraped.
func (f factory) counterFunc(name, help string, value func() float64) {
	f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, value))
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}
