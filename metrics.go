package specula

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/specula/specula/kvcache"
)

// Metrics returns the engine's Prometheus metrics, for a service to register in its
// own registry (wrapped with its labels, such as a model_name). Every request is
// counted, whatever door it came in by. Under the specula_ prefix: requests by
// finish, tokens, speed, acceptance, queueing, the target's shared passes and the
// key/value caches; under the names vLLM uses (prefix specula:), its speculative
// counters (spec_decode_num_drafts, …_num_draft_tokens, …_num_accepted_tokens,
// …_num_accepted_tokens_per_pos) and the gauges an inference gateway's endpoint
// picker reads: num_requests_waiting, num_requests_running and kv_cache_usage_perc
// (a fraction, 0 to 1: the blocks a new request cannot have, prefix-cached ones
// counted free, as the Model Server Protocol means it), and beside it
// prefix_cache_usage_perc (the prefix cache's share). docs/library.md lists them all.
func (e *Engine) Metrics() prometheus.Collector { return e.met }

// metrics are an engine's metrics: a prometheus.Collector of them all.
type metrics struct {
	all []prometheus.Collector

	finished        *prometheus.CounterVec // by finish reason
	decisions       *prometheus.CounterVec // by mode
	ttft, queueWait prometheus.Histogram
	tokensPerSecond *prometheus.HistogramVec // by mode
	acceptedLength  prometheus.Histogram
	drafted         prometheus.Counter
	accepted        prometheus.Counter
	promptTokens    prometheus.Counter
	generatedTokens prometheus.Counter
	targetPasses    *prometheus.CounterVec // by mode
	compileSeconds  prometheus.Counter

	// vLLM's spec-decode counters, by the same names under our prefix, so that its
	// dashboards need only the prefix changed.
	numDrafts, numDraftTokens, numAccepted prometheus.Counter
	acceptedPerPos                         *prometheus.CounterVec // by position

	mu                   sync.Mutex
	recentDrafted, recAc float64 // decayed sums behind the acceptance-rate gauge
}

// recentDecay is the weight a request's counts keep when the next speculative request
// finishes: the acceptance-rate gauge follows the last few dozen requests.
const recentDecay = 0.9

// newMetrics makes the engine's metrics; e's admission, target and caches must be
// set.
func newMetrics(e *Engine) *metrics {
	m := &metrics{}
	m.finished = m.counterVec("specula_finished_total", "Choices ended, by finish reason (stop, length, memory, cancelled, error).", "reason")
	m.decisions = m.counterVec("specula_speculation_decisions_total",
		`Requests admitted with speculative decoding ("speculative") or without it, because the engine was saturated, speculation is off or the request asked ("plain").`, "mode")
	m.ttft = m.histogram("specula_time_to_first_token_seconds", "Time from a request's arrival (queueing included) to its first generated token.",
		prometheus.ExponentialBuckets(0.005, 2, 14))
	m.queueWait = m.histogram("specula_queue_wait_seconds", "Time requests waited for their turn and their key/value memory.",
		prometheus.ExponentialBuckets(0.001, 2, 16))
	m.tokensPerSecond = m.histogramVec("specula_tokens_per_second", "Decoding speed of each choice (generated tokens over the time after the prefill), by mode.",
		prometheus.ExponentialBuckets(2, 1.5, 16), "mode")
	maxK := max(e.maxK, 1)
	buckets := make([]float64, 0, maxK+1)
	for i := 1; i <= maxK+1; i++ {
		buckets = append(buckets, float64(i))
	}
	m.acceptedLength = m.histogram("specula_accepted_length",
		"Tokens each target forward pass produced: accepted draft tokens plus the target's own (1 for a plain step).", buckets)
	m.drafted = m.counter("specula_draft_tokens_total", "Draft tokens the target verified.")
	m.accepted = m.counter("specula_accepted_tokens_total", "Draft tokens the target accepted.")
	m.promptTokens = m.counter("specula_prompt_tokens_total", "Prompt tokens processed.")
	m.generatedTokens = m.counter("specula_generation_tokens_total", "Tokens generated.")
	m.targetPasses = m.counterVec("specula_target_passes_total", "Target forward passes (verification steps), by mode.", "mode")
	m.compileSeconds = m.counter("specula_format_compile_seconds_total", "Time spent compiling output formats (schemas, grammars, regular expressions) against the vocabulary.")
	m.numDrafts = m.counter("specula:spec_decode_num_drafts_total", "Drafts verified (vLLM's spec_decode_num_drafts): steps that drafted.")
	m.numDraftTokens = m.counter("specula:spec_decode_num_draft_tokens_total", "Draft tokens verified (vLLM's spec_decode_num_draft_tokens; every node of a tree).")
	m.numAccepted = m.counter("specula:spec_decode_num_accepted_tokens_total", "Draft tokens accepted (vLLM's spec_decode_num_accepted_tokens).")
	m.acceptedPerPos = m.counterVec("specula:spec_decode_num_accepted_tokens_per_pos_total",
		"Draft tokens accepted at each draft position, 0 first (vLLM's spec_decode_num_accepted_tokens_per_pos).", "position")
	m.gaugeFunc("specula_acceptance_rate",
		"Fraction of draft tokens accepted, over recent speculative requests (each request's weight decays by 10% per later one).",
		m.acceptanceRate)
	m.gaugeFunc("specula_speculation_enabled",
		"1 when a request admitted now would decode speculatively, 0 when the engine is saturated (or speculation is off).",
		func() float64 { running, _ := e.adm.counts(); return float64(btoi(e.speculates(running + 1))) })
	m.requestGauges(e)
	m.batchMetrics(e)
	m.all = append(m.all, &kvCollector{stats: e.kvStats})
	return m
}

// requestGauges are the gauges of requests running and waiting, under our names and
// under those an inference gateway reads (vLLM's, prefix specula:).
func (m *metrics) requestGauges(e *Engine) {
	running := func() float64 { r, _ := e.adm.counts(); return float64(r) }
	waiting := func() float64 { _, w := e.adm.counts(); return float64(w) }
	m.gaugeFunc("specula_active_requests", "Requests decoding now.", running)
	m.gaugeFunc("specula_queued_requests", "Requests waiting for their turn or their key/value memory.", waiting)
	m.gaugeFunc("specula:num_requests_running", "Requests decoding now (vLLM's num_requests_running).", running)
	m.gaugeFunc("specula:num_requests_waiting", "Requests waiting for their turn or their key/value memory (vLLM's num_requests_waiting).", waiting)
	m.gaugeFunc("specula:kv_cache_usage_perc",
		"Fraction of the target's key/value cache blocks that a new request cannot have, 0 to 1 (vLLM's kv_cache_usage_perc): "+
			"blocks running requests hold; blocks that only keep a cached prefix, given up when memory is needed, count as free.",
		func() float64 {
			t, _ := e.kvStats()
			return kvUsage(t)
		})
	m.gaugeFunc("specula:prefix_cache_usage_perc",
		"Fraction of the target's key/value cache blocks that keep a cached prefix no request holds, 0 to 1: free for a new request, reused on a prefix hit.",
		func() float64 {
			t, _ := e.kvStats()
			return prefixCacheUsage(t)
		})
}

// batchMetrics report the target's shared passes.
func (m *metrics) batchMetrics(e *Engine) {
	passes := e.local
	m.counterFunc("specula_batch_passes_total",
		"Passes of the target's multi-sequence forward: the requests' verifications and prefill chunks ready at once go through one.",
		func() float64 { return float64(passes.BatchStats().Passes) })
	m.counterFunc("specula_batch_forwards_total",
		"Requests' forwards those passes carried (divided by specula_batch_passes_total: the mean batch size).",
		func() float64 { return float64(passes.BatchStats().Forwards) })
	m.counterFunc("specula_batch_tokens_total",
		"Tokens those passes carried: pending tokens, drafts and prefill chunks (divided by specula_batch_passes_total: the mean tokens per pass).",
		func() float64 { return float64(passes.BatchStats().Tokens) })
	m.gaugeFunc("specula_batch_size",
		"Requests' forwards per pass over the recent passes of streaming requests, prefill passes left out (1: requests forward alone).",
		func() float64 { return passes.Load().Forwards })
	m.gaugeFunc("specula_batch_tokens_per_pass",
		"Tokens per pass over the recent passes of streaming requests, prefill passes left out: what adaptive speculation prices its drafts by, with the pass cost.",
		func() float64 { return passes.Load().Tokens })
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all {
		c.Collect(ch)
	}
}

// admitted counts a request's admission in its mode.
func (m *metrics) admitted(mode string) { m.decisions.WithLabelValues(mode).Inc() }

// observe records a finished choice.
func (m *metrics) observe(mode string, c Choice) {
	s := c.Stats
	m.finished.WithLabelValues(string(c.Finish)).Inc()
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
	m.observeLengths(s)
	if s.Drafted > 0 {
		m.mu.Lock()
		m.recentDrafted = m.recentDrafted*recentDecay + float64(s.Drafted)
		m.recAc = m.recAc*recentDecay + float64(s.Accepted)
		m.mu.Unlock()
	}
}

// observeLengths records the accepted length of every step: step i accepted at least
// a tokens exactly when draft position a−1 was accepted, so AcceptedAt gives their
// distribution.
func (m *metrics) observeLengths(s Stats) {
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
}

func (m *metrics) acceptanceRate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recentDrafted == 0 {
		return 0
	}
	return m.recAc / m.recentDrafted
}

// kvCollector reports the key/value caches of the target and the first draft model.
type kvCollector struct {
	stats func() (target, draft *kvcache.Stats)
}

var (
	kvUsedDesc   = prometheus.NewDesc("specula_kv_cache_used_bytes", "Key/value cache memory held by sequences.", []string{"model"}, nil)
	kvFreeDesc   = prometheus.NewDesc("specula_kv_cache_free_blocks", "Key/value cache blocks no sequence holds.", []string{"model"}, nil)
	kvBlocksDesc = prometheus.NewDesc("specula_kv_cache_blocks", "Key/value cache blocks in the pool.", []string{"model"}, nil)
	kvBudgetDesc = prometheus.NewDesc("specula_kv_cache_budget_bytes", "Key/value cache memory budget (the target's is Config.KVBudget).", []string{"model"}, nil)
	kvUsageDesc  = prometheus.NewDesc("specula_kv_cache_usage_ratio", "Fraction of the key/value cache blocks in use (prefix-cached blocks no sequence holds count as free).", []string{"model"}, nil)
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
		ch <- prometheus.MustNewConstMetric(kvUsageDesc, prometheus.GaugeValue, kvUsage(s), e.name)
	}
}

// kvUsage is the fraction of a cache's blocks in use, which a new request cannot
// have: blocks that only keep a cached prefix are free (kvcache.Stats.FreeBlocks
// counts them) (0 for no cache).
func kvUsage(s *kvcache.Stats) float64 {
	if s == nil || s.Blocks == 0 {
		return 0
	}
	return float64(s.Blocks-s.FreeBlocks) / float64(s.Blocks)
}

// prefixCacheUsage is the fraction of a cache's blocks that keep a cached prefix no
// sequence holds (0 for no cache).
func prefixCacheUsage(s *kvcache.Stats) float64 {
	if s == nil || s.Blocks == 0 {
		return 0
	}
	return float64(s.CachedBlocks) / float64(s.Blocks)
}

// add registers a metric as it is made.
func (m *metrics) add(c prometheus.Collector) { m.all = append(m.all, c) }

func (m *metrics) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	m.add(c)
	return c
}

func (m *metrics) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	m.add(c)
	return c
}

// gaugeFunc adds a gauge whose value value reads when scraped.
func (m *metrics) gaugeFunc(name, help string, value func() float64) {
	m.add(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, value))
}

// counterFunc adds a counter whose value value reads when scraped.
func (m *metrics) counterFunc(name, help string, value func() float64) {
	m.add(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, value))
}

func (m *metrics) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	m.add(h)
	return h
}

func (m *metrics) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	m.add(h)
	return h
}
