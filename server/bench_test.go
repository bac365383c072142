package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specula/specula"
)

// benchPrompts are the code-completion prompts of ../shared/prompts/go-dev.jsonl
// (the last 300 bytes of each), or the tests' prompts when that file is absent.
func benchPrompts(b *testing.B) []string {
	f, err := os.Open("../../shared/prompts/go-dev.jsonl")
	if err != nil {
		b.Logf("../../shared/prompts/go-dev.jsonl: %v; using the test prompts", err)
		return testPrompts
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var p struct{ Prompt string }
		if json.Unmarshal(sc.Bytes(), &p) == nil && p.Prompt != "" {
			out = append(out, p.Prompt[max(0, len(p.Prompt)-300):])
		}
	}
	return out
}

// BenchmarkConcurrentStreams measures the server under load: n greedy streams of 128
// tokens at once, with adaptive speculation (the default), with -saturation cores
// (plain decoding once more generations run than there are cores), with a fixed K of
// 3, and never speculating. The machines this runs on are shared and their speed
// drifts by tens of per cent from one second to the next, so the modes are not timed
// one after another: every iteration runs each of them once, in turn, on servers
// made at the start, and each mode's aggregate tokens per second is the median over
// the iterations. It reports those, the mean time to first token of adaptive
// speculation, and adaptive's ratios to the better of k3 and plain (the goal is ≥
// 0.97) and to plain, each the median of the iterations' ratios. The cores mode is
// the adaptive one until more requests run than there are cores, so its ratio to
// adaptive at 1 and 2 streams shows how far two runs of one configuration differ.
//
//	go test ./server -run XXX -bench ConcurrentStreams -benchtime 5x
func BenchmarkConcurrentStreams(b *testing.B) {
	demoModels(b)
	prompts := benchPrompts(b)
	modes := []struct {
		name       string
		saturation int
		k          int
		fixed      bool
	}{{"adaptive", 0, specula.DefaultMaxK, false}, {"cores", runtime.GOMAXPROCS(0), specula.DefaultMaxK, false},
		{"k3", 0, 3, true}, {"plain", 0, 0, false}}
	servers := make([]benchServer, len(modes))
	for i, mode := range modes {
		cfg := speculativeConfig()
		cfg.Engine.Saturation, cfg.Engine.K, cfg.Engine.FixedK = mode.saturation, mode.k, mode.fixed
		if mode.k == 0 {
			cfg.Engine.Draft = "none"
		}
		cfg.Engine.MaxRunning, cfg.Engine.MaxQueue = 16, 16
		srv, err := Open(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		servers[i] = newBenchServer(srv)
		defer servers[i].close()
		runStreams(b, servers[i], prompts, 2, 0) // warm up: caches, and what the adaptive decoder learns
	}
	for _, n := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			rates := make([][]float64, len(modes))
			var ttft time.Duration
			for i := range b.N {
				for j := range modes {
					j = (j + i) % len(modes) // each mode first in turn
					tokens, tt, wall := runStreams(b, servers[j], prompts, n, i*n)
					rates[j] = append(rates[j], float64(tokens)/wall.Seconds())
					if j == 0 {
						ttft += tt
					}
				}
			}
			med := make([]float64, len(modes))
			for j, mode := range modes {
				med[j] = median(slices.Clone(rates[j]))
				b.ReportMetric(med[j], mode.name+"-tokens/s")
			}
			b.ReportMetric(ttft.Seconds()*1e3/float64(n*b.N), "adaptive-ttft-ms")
			best := 2 // k3, or plain when its median is higher
			if med[3] > med[2] {
				best = 3
			}
			// Ratios of runs made one after the other, the median of them: the drift
			// of the machine's speed cancels in each.
			b.ReportMetric(pairedRatio(rates[0], rates[best]), "adaptive/best")
			b.ReportMetric(pairedRatio(rates[0], rates[3]), "adaptive/plain")
			b.ReportMetric(pairedRatio(rates[1], rates[0]), "cores/adaptive")
		})
	}
}

// pairedRatio is the median over the iterations of a[i]/b[i].
func pairedRatio(a, b []float64) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return median(r)
}

// median returns the median of xs (which it sorts).
func median(xs []float64) float64 {
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

type benchServer struct {
	url   string
	close func()
}

func newBenchServer(srv *Server) benchServer {
	hs := &http.Server{Handler: srv.Handler()}
	ln := mustListen()
	go hs.Serve(ln)
	return benchServer{url: "http://" + ln.Addr().String(), close: func() { hs.Close() }}
}

// runStreams runs n streams at once and returns the tokens they generated, the sum
// of their times to first token, and the wall time.
func runStreams(b *testing.B, ts benchServer, prompts []string, n, offset int) (tokens int, ttft, wall time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			t0 := time.Now()
			resp, err := send(context.Background(), ts.url+"/v1/completions", map[string]any{
				"prompt": prompts[(offset+i)%len(prompts)], "max_tokens": 128, "temperature": 0, "ignore_eos": true,
				"stream": true, "stream_options": map[string]any{"include_usage": true},
			})
			if err != nil {
				b.Error(err)
				return
			}
			defer resp.Body.Close()
			var first time.Duration
			var used int
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok || data == "[DONE]" {
					continue
				}
				var c completionResp
				json.Unmarshal([]byte(data), &c)
				if first == 0 && c.text() != "" {
					first = time.Since(t0)
				}
				if c.Usage != nil {
					used = c.Usage.CompletionTokens
				}
			}
			mu.Lock()
			tokens += used
			ttft += first
			mu.Unlock()
		})
	}
	wg.Wait()
	return tokens, ttft, time.Since(start)
}
