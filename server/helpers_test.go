package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/specula/specula"
	"github.com/specula/specula/format/gguf"
)

// The demo models, relative to this package's directory.
const (
	testTarget = "../models/gocoder-m-q8_0.gguf"
	testDraft  = "../models/gocoder-xs-q8_0.gguf"
)

// demoModels skips the test when the demo models are not there.
func demoModels(t testing.TB) {
	t.Helper()
	for _, p := range []string{testTarget, testDraft} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("the demo model %s is missing: %v", p, err)
		}
	}
}

// speculativeConfig is the demo setup of main: gocoder-m drafted by gocoder-xs and
// prompt lookup, K chosen adaptively.
func speculativeConfig() Config {
	return Config{Engine: specula.Config{Model: testTarget, Draft: testDraft, Serving: specula.Serving{MaxRunning: 4, MaxQueue: 16}}}
}

// withDefaults fills in the test setup's defaults: the demo target, decoding plainly.
func withDefaults(cfg Config) Config {
	if cfg.Engine.Model == "" {
		cfg.Engine.Model = testTarget
	}
	if cfg.Engine.Draft == "" {
		cfg.Engine.Draft = "none"
	}
	return cfg
}

// startServer makes a server and serves it with httptest; both end with the test.
func startServer(t testing.TB, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	demoModels(t)
	srv, err := Open(withDefaults(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		ts.Close()
		srv.Close()
	})
	return srv, ts
}

// post sends a JSON body (a string is sent as it is) and returns the response with
// its body read.
func post(t testing.TB, url string, body any) (*http.Response, []byte) {
	t.Helper()
	return postCtx(t, context.Background(), url, body)
}

func postCtx(t testing.TB, ctx context.Context, url string, body any) (*http.Response, []byte) {
	t.Helper()
	resp, err := send(ctx, url, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func send(ctx context.Context, url string, body any) (*http.Response, error) {
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// completionResp is a completion or chat completion as the tests read it.
type completionResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Logprobs     any     `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Timings *timings `json:"timings"`
	Error   *struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decode(t testing.TB, b []byte) completionResp {
	t.Helper()
	var r completionResp
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
	return r
}

// complete runs a non-streaming request that must succeed.
func complete(t testing.TB, url string, body any) completionResp {
	t.Helper()
	resp, b := post(t, url, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return decode(t, b)
}

// text is the generated text of a response or chunk (its first choice's).
func (r completionResp) text() string { return r.textAt(0) }

// textAt is the generated text of the response's i-th choice ("" if none).
func (r completionResp) textAt(i int) string {
	if len(r.Choices) <= i {
		return ""
	}
	c := r.Choices[i]
	switch {
	case c.Message != nil:
		return c.Message.Content
	case c.Delta != nil && c.Delta.Content != nil:
		return *c.Delta.Content
	}
	return c.Text
}

func (r completionResp) finish() string {
	if len(r.Choices) == 0 || r.Choices[0].FinishReason == nil {
		return ""
	}
	return *r.Choices[0].FinishReason
}

// event is one server-sent event of a stream, and when it arrived.
type event struct {
	data string
	at   time.Time
}

// readEvents reads the data events of a stream to its end, checking the framing.
func readEvents(t testing.TB, body io.Reader) []event {
	t.Helper()
	var out []event
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	blank := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			blank = true
			continue
		}
		if !blank {
			t.Fatalf("event line %q does not follow a blank line", line)
		}
		blank = false
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data line", line)
		}
		out = append(out, event{data, time.Now()})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// streamed is a stream read to its end.
type streamed struct {
	chunks []completionResp // the JSON events, in order
	times  []time.Time
	done   bool // ended with [DONE]
	raw    []event
}

func (s streamed) text() string {
	var b strings.Builder
	for _, c := range s.chunks {
		b.WriteString(c.text())
	}
	return b.String()
}

func (s streamed) finish() string {
	for _, c := range s.chunks {
		if f := c.finish(); f != "" {
			return f
		}
	}
	return ""
}

// stream runs a streaming request that must be answered 200 with an event stream.
func stream(t testing.TB, url string, body map[string]any) streamed {
	t.Helper()
	body["stream"] = true
	resp, err := send(context.Background(), url, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	return parseStream(t, readEvents(t, resp.Body))
}

func parseStream(t testing.TB, evs []event) streamed {
	t.Helper()
	s := streamed{raw: evs}
	for i, e := range evs {
		if e.data == "[DONE]" {
			if i != len(evs)-1 {
				t.Fatalf("[DONE] is event %d of %d", i, len(evs))
			}
			s.done = true
			continue
		}
		s.chunks = append(s.chunks, decode(t, []byte(e.data)))
		s.times = append(s.times, e.at)
	}
	return s
}

// reference decodes prompt greedily with plain decoding, for comparison with the
// server's output.
func reference(t testing.TB, srv *Server, prompt string, maxTokens int) string {
	t.Helper()
	c, err := srv.Engine().GenerateFunc(context.Background(), specula.Request{Prompt: prompt, NoSpeculation: true,
		Params: specula.Params{MaxTokens: maxTokens}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Text
}

// withChatTemplate copies the GGUF file src into dir with a tokenizer.chat_template.
func withChatTemplate(t testing.TB, src, dir, tmpl string) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kv []gguf.KeyValue
	for _, e := range f.KV {
		if e.Key != specula.ChatTemplateKey {
			kv = append(kv, e)
		}
	}
	kv = append(kv, gguf.KeyValue{Key: specula.ChatTemplateKey, Value: gguf.String(tmpl)})
	tensors := make([]gguf.TensorData, len(f.Tensors))
	for i := range f.Tensors {
		tt := &f.Tensors[i]
		tensors[i] = gguf.TensorData{Name: tt.Name, Type: tt.Type, Dims: tt.Dims, Data: f.Data(tt)}
	}
	out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".gguf")+"-chat.gguf")
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(w)
	if err := gguf.Write(bw, kv, tensors, 0); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func chatmlTemplate(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/chatml.jinja")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls cond until it holds or the time runs out.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// idle reports whether no generation runs or waits and the target's cache is free.
func idle(srv *Server) bool {
	active, queued := counts(srv)
	kv := targetKV(srv)
	return active == 0 && queued == 0 && kv.FreeBlocks == kv.Blocks
}

// firstChunk opens a stream and returns once its first event has arrived; the rest
// of the body is left to read.
func firstChunk(t testing.TB, ctx context.Context, url string, body map[string]any) (*http.Response, *bufio.Reader, string) {
	t.Helper()
	body["stream"] = true
	resp, err := send(ctx, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return resp, br, line
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func mustListen() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	return ln
}

// counts are the requests the server's engine runs and queues.
func counts(srv *Server) (active, queued int) {
	st := srv.Engine().Status()
	return st.Running, st.Waiting
}

// kvFigures are a key/value cache's figures, as the engine's metrics report them.
type kvFigures struct{ FreeBlocks, Blocks, Budget float64 }

// kvOf reads the figures of the target's or the draft model's cache ("target",
// "draft") from the server's registry; all zero when the engine reports none.
func kvOf(srv *Server, which string) kvFigures {
	fams, err := srv.reg.Gather()
	if err != nil {
		panic(err)
	}
	var kv kvFigures
	for _, f := range fams {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() != "model" || l.GetValue() != which {
					continue
				}
				switch f.GetName() {
				case "specula_kv_cache_free_blocks":
					kv.FreeBlocks = m.Gauge.GetValue()
				case "specula_kv_cache_blocks":
					kv.Blocks = m.Gauge.GetValue()
				case "specula_kv_cache_budget_bytes":
					kv.Budget = m.Gauge.GetValue()
				}
			}
		}
	}
	return kv
}

// targetKV is the target's key/value cache.
func targetKV(srv *Server) kvFigures { return kvOf(srv, "target") }
