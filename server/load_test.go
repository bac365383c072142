package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specula/specula"
)

// Sixteen streams at once, each its own sequence, all complete with exactly the text
// greedy decoding gives alone; afterwards nothing runs and the caches are free.
func TestConcurrentStreams(t *testing.T) {
	const streams, tokens = 16, 32
	cfg := speculativeConfig()
	cfg.Engine.MaxRunning, cfg.Engine.MaxQueue = streams, streams
	srv, ts := startServer(t, cfg)
	prompts := make([]string, streams)
	want := make([]string, streams)
	for i := range prompts {
		prompts[i] = testPrompts[i%len(testPrompts)]
		if i >= len(testPrompts) {
			prompts[i] = fmt.Sprintf("%s\n// %d\n", prompts[i], i)
		}
		want[i] = reference(t, srv, prompts[i], tokens)
	}

	type result struct {
		text, finish string
		done         bool
		ttft, total  time.Duration
		completion   int
		err          error
	}
	results := make([]result, streams)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range streams {
		wg.Go(func() {
			r := &results[i]
			t0 := time.Now()
			resp, err := send(context.Background(), ts.URL+"/v1/completions", map[string]any{
				"prompt": prompts[i], "max_tokens": tokens, "temperature": 0, "stream": true,
				"stream_options": map[string]any{"include_usage": true},
			})
			if err != nil {
				r.err = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				r.err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				if data == "[DONE]" {
					r.done = true
					continue
				}
				var c completionResp
				if err := jsonUnmarshal(data, &c); err != nil {
					r.err = err
					return
				}
				if txt := c.text(); txt != "" && r.ttft == 0 {
					r.ttft = time.Since(t0)
				}
				r.text += c.text()
				if f := c.finish(); f != "" {
					r.finish = f
				}
				if c.Usage != nil {
					r.completion = c.Usage.CompletionTokens
				}
			}
			r.err = sc.Err()
			r.total = time.Since(t0)
		})
	}
	wg.Wait()
	wall := time.Since(start)
	var generated int
	var ttfts []time.Duration
	for i, r := range results {
		if r.err != nil {
			t.Errorf("stream %d: %v", i, r.err)
			continue
		}
		if r.text != want[i] || !r.done || r.finish == "" {
			t.Errorf("stream %d: %q (finish %q, done %v), want %q", i, r.text, r.finish, r.done, want[i])
		}
		generated += r.completion
		ttfts = append(ttfts, r.ttft)
	}
	slices.Sort(ttfts)
	if len(ttfts) > 0 {
		t.Logf("%d streams: %d tokens in %v = %.0f tokens/s; time to first token median %v, max %v",
			streams, generated, wall.Round(time.Millisecond), float64(generated)/wall.Seconds(),
			ttfts[len(ttfts)/2].Round(time.Millisecond), ttfts[len(ttfts)-1].Round(time.Millisecond))
	}
	waitFor(t, "the server to be idle", 10*time.Second, func() bool { return idle(srv) && draftIdle(srv) })
	m := scrape(t, ts.URL)
	if m[`specula_requests_total{code="200",endpoint="completions"}`] != streams {
		t.Errorf("requests counted: %v", m[`specula_requests_total{code="200",endpoint="completions"}`])
	}
	t.Logf("decisions: %v speculative, %v plain", m[`specula_speculation_decisions_total{mode="speculative"}`], m[`specula_speculation_decisions_total{mode="plain"}`])
}

func draftIdle(srv *Server) bool {
	kv := kvOf(srv, "draft")
	return kv.FreeBlocks == kv.Blocks
}

// A client that goes away cancels its generation: the slot and the sequence's memory
// come back, whether it was streaming, waiting for a whole response, or queued.
func TestClientDisconnect(t *testing.T) {
	cfg := speculativeConfig()
	cfg.Engine.MaxRunning, cfg.Engine.MaxQueue = 1, 4
	srv, ts := startServer(t, cfg)
	long := func() map[string]any {
		return map[string]any{"prompt": "func main() {", "max_tokens": 1500, "ignore_eos": true, "temperature": 0}
	}

	t.Run("stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		resp, _, _ := firstChunk(t, ctx, ts.URL+"/v1/completions", long())
		if a, _ := counts(srv); a != 1 {
			t.Errorf("active %d", a)
		}
		if kv := targetKV(srv); kv.FreeBlocks == kv.Blocks {
			t.Error("a running stream holds no cache")
		}
		cancel()
		resp.Body.Close()
		waitFor(t, "the generation to end", 5*time.Second, func() bool { return idle(srv) && draftIdle(srv) })
	})

	t.Run("whole response", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			resp, err := send(ctx, ts.URL+"/v1/completions", long())
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		waitFor(t, "the generation to start", 5*time.Second, func() bool {
			a, _ := counts(srv)
			kv := targetKV(srv)
			return a == 1 && kv.FreeBlocks < kv.Blocks
		})
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("the request ended with %v", err)
		}
		waitFor(t, "the generation to end", 5*time.Second, func() bool { return idle(srv) && draftIdle(srv) })
	})

	t.Run("queued", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, _, _ := firstChunk(t, ctx, ts.URL+"/v1/completions", long())
		defer resp.Body.Close()
		qctx, qcancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			resp, err := send(qctx, ts.URL+"/v1/completions", map[string]any{"prompt": "x"})
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		waitFor(t, "a queued request", 5*time.Second, func() bool { _, q := counts(srv); return q == 1 })
		qcancel()
		<-errc
		waitFor(t, "the queue to empty", 5*time.Second, func() bool { _, q := counts(srv); return q == 0 })
		cancel()
		waitFor(t, "the server to be idle", 5*time.Second, func() bool { return idle(srv) && draftIdle(srv) })
	})
	// Every request whose client left before the end counts as 499, a stream whose
	// 200 was sent too.
	if m := scrape(t, ts.URL); m[`specula_requests_total{code="499",endpoint="completions"}`] != 4 ||
		m[`specula_finished_total{reason="cancelled"}`] != 3 {
		t.Errorf("disconnects counted: %v requests, %v cancelled", m[`specula_requests_total{code="499",endpoint="completions"}`], m[`specula_finished_total{reason="cancelled"}`])
	}
}

// Shutdown lets running streams finish, refuses new and queued requests with 503,
// and reports 503 on /healthz.
func TestGracefulShutdown(t *testing.T) {
	srv, ts := startServer(t, Config{Engine: specula.Config{Serving: specula.Serving{MaxRunning: 1, MaxQueue: 2}}})
	body := map[string]any{"prompt": "func main() {", "max_tokens": 200, "ignore_eos": true, "temperature": 0}
	want := reference(t, srv, "func main() {", 200)
	resp, br, first := firstChunk(t, context.Background(), ts.URL+"/v1/completions", body)
	defer resp.Body.Close()
	queued := make(chan int, 1)
	go func() {
		resp, err := send(context.Background(), ts.URL+"/v1/completions", map[string]any{"prompt": "x"})
		if err != nil {
			queued <- 0
			return
		}
		resp.Body.Close()
		queued <- resp.StatusCode
	}()
	waitFor(t, "a queued request", 5*time.Second, func() bool { _, q := counts(srv); return q == 1 })

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	if code := <-queued; code != http.StatusServiceUnavailable {
		t.Errorf("the queued request got %d", code)
	}
	r, b := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x"})
	checkError(t, r, b, http.StatusServiceUnavailable, "-", "server_shutting_down")
	h, err := http.Get(ts.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	h.Body.Close()
	if h.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/healthz while draining: %d", h.StatusCode)
	}

	s := parseStream(t, append([]event{{data: strings.TrimPrefix(strings.TrimSpace(first), "data: ")}}, readEvents(t, br)...))
	if !s.done || s.finish() != "length" || s.text() != want {
		t.Errorf("the running stream: finish %q, done %v, %d of %d bytes", s.finish(), s.done, len(s.text()), len(want))
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// At the shutdown deadline running generations are cancelled: a stream ends with an
// error event and [DONE], a whole response is a 503.
func TestShutdownDeadline(t *testing.T) {
	srv, ts := startServer(t, Config{Engine: specula.Config{Serving: specula.Serving{MaxRunning: 2}}})
	long := map[string]any{"prompt": "func main() {", "max_tokens": 1900, "ignore_eos": true, "temperature": 0}
	resp, br, _ := firstChunk(t, context.Background(), ts.URL+"/v1/completions", long)
	defer resp.Body.Close()
	whole := make(chan []byte, 1)
	go func() {
		delete(long, "stream")
		resp, err := send(context.Background(), ts.URL+"/v1/completions", long)
		if err != nil {
			whole <- []byte(err.Error())
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		whole <- append([]byte(strconv.Itoa(resp.StatusCode)+" "), b...)
	}()
	waitFor(t, "two generations", 5*time.Second, func() bool { a, _ := counts(srv); return a == 2 })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	evs := readEvents(t, br)
	if len(evs) < 2 || evs[len(evs)-1].data != "[DONE]" || !strings.Contains(evs[len(evs)-2].data, `"code":"server_shutting_down"`) {
		t.Errorf("the stream ended with %v", evs[max(0, len(evs)-2):])
	}
	if b := string(<-whole); !strings.HasPrefix(b, "503 ") || !strings.Contains(b, "server_shutting_down") {
		t.Errorf("the whole response: %s", b)
	}
	if !idle(srv) {
		t.Error("generations still hold memory after Shutdown")
	}
}

// Pacing does not change a stream's text, and delivers it in more chunks.
func TestPacing(t *testing.T) {
	cfg := speculativeConfig()
	plainSrv, plainTS := startServer(t, cfg)
	cfg.Pacing = 20 * time.Millisecond
	_, pacedTS := startServer(t, cfg)
	prompt := testPrompts[1]
	want := reference(t, plainSrv, prompt, 64)
	body := func() map[string]any { return map[string]any{"prompt": prompt, "max_tokens": 64, "temperature": 0} }
	unpaced := stream(t, plainTS.URL+"/v1/completions", body())
	paced := stream(t, pacedTS.URL+"/v1/completions", body())
	if unpaced.text() != want || paced.text() != want || paced.finish() != unpaced.finish() || !paced.done {
		t.Fatalf("texts differ:\nunpaced %q\npaced   %q\nwant    %q", unpaced.text(), paced.text(), want)
	}
	t.Logf("unpaced: %d chunks over %v; paced: %d chunks over %v", len(unpaced.chunks), unpaced.times[len(unpaced.times)-1].Sub(unpaced.times[0]).Round(time.Millisecond),
		len(paced.chunks), paced.times[len(paced.times)-1].Sub(paced.times[0]).Round(time.Millisecond))
}

// The stream writer spreads bursts of tokens evenly over the pacing window, one token
// per chunk.
func TestPacedStreamWriter(t *testing.T) {
	const window, bursts, size = 40 * time.Millisecond, 5, 4
	s := &Server{cfg: Config{Pacing: window}}
	x := &exchange{id: "cmpl-x", created: 1, modelName: "m"}
	out := &output{wake: make(chan struct{}, 1)}
	go func() {
		for b := range bursts {
			pieces := make([]string, size)
			for i := range pieces {
				pieces[i] = fmt.Sprintf("<%d.%d>", b, i)
			}
			out.push(specula.Event{Text: strings.Join(pieces, ""), Tokens: make([]int32, size), Pieces: pieces})
			time.Sleep(window)
		}
		out.push(specula.Event{Finish: specula.FinishLength})
		ch := specula.Choice{Finish: specula.FinishLength}
		out.finish(specula.Completion{Choice: ch, Choices: []specula.Choice{ch}}, nil)
	}()
	w := &timedWriter{header: http.Header{}}
	s.stream(context.Background(), w, x, out, func(error) {})
	evs := parseStream(t, w.events(t))
	var content []time.Time
	for i, c := range evs.chunks {
		if txt := c.text(); txt != "" {
			if strings.Count(txt, "<") != 1 {
				t.Errorf("chunk %d holds %q", i, txt)
			}
			content = append(content, evs.times[i])
		}
	}
	if len(content) != bursts*size || !evs.done || evs.finish() != "length" {
		t.Fatalf("%d content chunks, done %v, finish %q", len(content), evs.done, evs.finish())
	}
	var gaps []time.Duration
	for i := 1; i < len(content); i++ {
		gaps = append(gaps, content[i].Sub(content[i-1]))
	}
	slices.Sort(gaps)
	// Within a burst the writes are window/size = 10 ms apart.
	if med := gaps[len(gaps)/2]; med < window/size/2 {
		t.Errorf("median gap %v, want about %v", med, window/size)
	}
	if gaps[1] < time.Millisecond {
		t.Errorf("writes come together: gaps %v", gaps)
	}
	if last := content[len(content)-1].Sub(content[0]); last > bursts*window+window {
		t.Errorf("the stream lagged: %v", last)
	}
}

// timedWriter is a ResponseWriter that notes when each write came.
type timedWriter struct {
	header http.Header
	status int
	mu     sync.Mutex
	writes []event
}

func (w *timedWriter) Header() http.Header  { return w.header }
func (w *timedWriter) WriteHeader(code int) { w.status = code }
func (w *timedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, event{string(b), time.Now()})
	return len(b), nil
}
func (w *timedWriter) Flush() {}

func (w *timedWriter) events(t *testing.T) []event {
	var out []event
	for _, e := range w.writes {
		for _, line := range strings.Split(e.data, "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				out = append(out, event{data, e.at})
			}
		}
	}
	return out
}

func TestPacer(t *testing.T) {
	const w = 20 * time.Millisecond
	t0 := time.Unix(1000, 0)
	p := &pacer{window: w}
	if _, ok := p.due(); ok {
		t.Fatal("an empty pacer has something due")
	}
	p.add([]string{"a", "b", "c", "d"})
	if at, ok := p.due(); !ok || !at.IsZero() {
		t.Fatal("the first piece must go out at once")
	}
	if s := p.pop(t0); s != "a" {
		t.Fatal(s)
	}
	if at, _ := p.due(); at != t0.Add(w/4) {
		t.Errorf("b due at %v, want +5ms", at.Sub(t0))
	}
	p.pop(t0.Add(w / 4))
	// Two more arrive: the four pending are re-spaced over the window.
	p.add([]string{"e", "f"})
	if at, _ := p.due(); at != t0.Add(w/4+w/4) {
		t.Errorf("c due at %v", at.Sub(t0))
	}
	if rest := p.drain(); strings.Join(rest, "") != "cdef" {
		t.Errorf("drain: %v", rest)
	}

	// Simulated bursts: every piece is written in order, at most one window after
	// it arrived, and pieces of a burst are spread.
	p = &pacer{window: w}
	type arrival struct {
		at time.Time
		n  int
	}
	var arrivals []arrival
	now := t0
	for i := range 50 {
		now = now.Add(time.Duration(2+i%7) * time.Millisecond)
		arrivals = append(arrivals, arrival{now, 1 + i%5})
	}
	var written []time.Time
	var arrived []time.Time
	clock, next := t0, 0
	for next < len(arrivals) || len(p.pending) > 0 {
		at, ok := p.due()
		if next < len(arrivals) && (!ok || arrivals[next].at.Before(at)) {
			a := arrivals[next]
			clock = a.at
			pieces := make([]string, a.n)
			for i := range pieces {
				pieces[i] = strconv.Itoa(len(arrived))
				arrived = append(arrived, a.at)
			}
			p.add(pieces)
			next++
			continue
		}
		if at.After(clock) {
			clock = at
		}
		if s := p.pop(clock); s != strconv.Itoa(len(written)) {
			t.Fatalf("piece %s written as number %d", s, len(written))
		}
		written = append(written, clock)
	}
	for i := range written {
		if lag := written[i].Sub(arrived[i]); lag > w {
			t.Errorf("piece %d written %v after it arrived", i, lag)
			for j := max(0, i-6); j <= i; j++ {
				t.Logf("piece %d arrived %v written %v", j, arrived[j].Sub(t0), written[j].Sub(t0))
			}
			break
		}
		if i > 0 && written[i].Equal(written[i-1]) {
			t.Errorf("pieces %d and %d written at once", i-1, i)
		}
	}
}

// Once the server is saturated, new requests decode without speculation (and still
// give the same greedy text); seeded sampling keeps its fixed-K decoder.
func TestSaturation(t *testing.T) {
	cfg := speculativeConfig()
	cfg.Engine.Saturation = 1
	srv, ts := startServer(t, cfg)
	short := map[string]any{"prompt": testPrompts[0], "max_tokens": 16, "temperature": 0}
	seeded := map[string]any{"prompt": testPrompts[0], "max_tokens": 16, "temperature": 0.8, "seed": 7}
	want := reference(t, srv, testPrompts[0], 16)
	alone := complete(t, ts.URL+"/v1/completions", short)
	seededAlone := complete(t, ts.URL+"/v1/completions", seeded)
	if !alone.Timings.Speculative || !seededAlone.Timings.Speculative || alone.text() != want {
		t.Fatalf("alone: %+v %+v", alone.Timings, seededAlone.Timings)
	}
	ctx, cancel := context.WithCancel(context.Background())
	resp, _, _ := firstChunk(t, ctx, ts.URL+"/v1/completions", map[string]any{"prompt": "func main() {", "max_tokens": 1500, "ignore_eos": true})
	defer resp.Body.Close()
	m := scrape(t, ts.URL)
	if m["specula_speculation_enabled"] != 0 {
		t.Errorf("specula_speculation_enabled %v while saturated", m["specula_speculation_enabled"])
	}
	busy := complete(t, ts.URL+"/v1/completions", short)
	if busy.Timings.Speculative || busy.text() != want {
		t.Errorf("saturated: speculative %v, text %q", busy.Timings.Speculative, busy.text())
	}
	seededBusy := complete(t, ts.URL+"/v1/completions", seeded)
	if !seededBusy.Timings.Speculative || seededBusy.text() != seededAlone.text() {
		t.Errorf("seeded while saturated: %q, alone %q", seededBusy.text(), seededAlone.text())
	}
	cancel()
	waitFor(t, "the server to be idle", 5*time.Second, func() bool { return idle(srv) })
	m = scrape(t, ts.URL)
	if m["specula_speculation_enabled"] != 1 || m[`specula_speculation_decisions_total{mode="plain"}`] != 2 || m[`specula_speculation_decisions_total{mode="speculative"}`] != 4 {
		t.Errorf("metrics: enabled %v, decisions %v speculative, %v plain", m["specula_speculation_enabled"],
			m[`specula_speculation_decisions_total{mode="speculative"}`], m[`specula_speculation_decisions_total{mode="plain"}`])
	}
}

// /metrics reports what the issue lists, consistently with the responses.
func TestMetrics(t *testing.T) {
	srv, ts := startServer(t, speculativeConfig())
	var generated, passes, drafted, accepted, prefilled int
	for _, p := range testPrompts[:3] {
		r := complete(t, ts.URL+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 40, "temperature": 0})
		generated += r.Usage.CompletionTokens
		prefilled += r.Usage.PromptTokens - 1 // the last is the first step's pending token
		passes += r.Timings.TargetPasses
		drafted += r.Timings.DraftN
		accepted += r.Timings.DraftNAccepted
	}
	post(t, ts.URL+"/v1/completions", `{"prompt": "x", "temperature": -1}`) // refused by the engine, before any work
	waitFor(t, "the server to be idle", 5*time.Second, func() bool { return idle(srv) })
	m := scrape(t, ts.URL)
	for name, want := range map[string]float64{
		`specula_requests_total{code="200",endpoint="completions"}`:      3,
		`specula_requests_total{code="400",endpoint="completions"}`:      1,
		`specula_generation_tokens_total`:                                float64(generated),
		`specula_target_passes_total{mode="speculative"}`:                float64(passes),
		`specula_accepted_length_count`:                                  float64(passes),
		`specula_draft_tokens_total`:                                     float64(drafted),
		`specula_accepted_tokens_total`:                                  float64(accepted),
		`specula_active_requests`:                                        0,
		`specula_queued_requests`:                                        0,
		`specula_time_to_first_token_seconds_count`:                      3,
		`specula_tokens_per_second_count{mode="speculative"}`:            3,
		`specula_speculation_decisions_total{mode="speculative"}`:        3,
		`specula_kv_cache_used_bytes{model="target"}`:                    0,
		`specula_kv_cache_used_bytes{model="draft"}`:                     0,
		`specula_finished_total{reason="length"}`:                        3,
		`specula_speculation_enabled`:                                    1,
		`specula_kv_cache_usage_ratio{model="target"}`:                   0,
		`specula_kv_cache_free_blocks{model="target"}`:                   float64(targetKV(srv).Blocks),
		`specula_kv_cache_budget_bytes{model="target"}`:                  float64(targetKV(srv).Budget),
		`specula_request_duration_seconds_count{endpoint="completions"}`: 4,
		// One request at a time: a pass per verification and per prefill, each alone.
		`specula_prefix_cache_hits_total{model="target"}`: 0, // three different prompts
		`specula_batch_passes_total`:                      float64(passes + 3),
		`specula_batch_forwards_total`:                    float64(passes + 3),
		`specula_batch_tokens_total`:                      float64(prefilled + passes + drafted),
		`specula_batch_size`:                              1,
		`specula_batch_size{model_name="gocoder-m-q8_0"}`: 1,
		`specula:spec_decode_num_draft_tokens_total`:      float64(drafted),
		`specula:spec_decode_num_accepted_tokens_total`:   float64(accepted),
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	// Each pass yields its accepted tokens plus the target's own.
	if sum := m["specula_accepted_length_sum"]; sum != float64(passes+accepted) {
		t.Errorf("accepted length sum %v, want %d", sum, passes+accepted)
	}
	if r := m["specula_acceptance_rate"]; drafted > 0 && !(r > 0 && r <= 1) {
		t.Errorf("acceptance rate %v", r)
	}
	if _, ok := m["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
}

var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$`)

// scrape reads /metrics into a map from series (name and labels as printed) to value.
// withoutModelName drops the model_name label every metric of ours carries, so that
// tests name metrics by their other labels.
func withoutModelName(key string) string {
	key = modelNameLabel.ReplaceAllString(key, "")
	key = strings.Replace(key, "{,", "{", 1)
	return strings.Replace(key, "{}", "", 1)
}

var modelNameLabel = regexp.MustCompile(`,?model_name="[^"]*"`)

func scrape(t testing.TB, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if g := metricLine.FindStringSubmatch(sc.Text()); g != nil {
			v, err := strconv.ParseFloat(g[2], 64)
			if err == nil {
				m[withoutModelName(g[1])] = v
				m[g[1]] = v
			}
		}
	}
	return m
}
