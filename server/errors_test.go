package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specula/specula"
)

// Every bad request gets an OpenAI-style JSON error with the right status, type,
// parameter and code.
func TestBadRequests(t *testing.T) {
	_, ts := startServer(t, Config{MaxBodyBytes: 4096, Engine: specula.Config{ContextLength: 256}})
	long := strings.Repeat("func f() {}\n", 250) // far more than 256 tokens, less than 4096 bytes
	type want struct {
		status int
		param  string // "-" for null
		code   string // "" for any
	}
	cases := []struct {
		name string
		path string
		body any
		want want
	}{
		{"bad JSON", "/v1/completions", `{"prompt": "x",`, want{400, "-", "invalid_json"}},
		{"trailing data", "/v1/completions", `{"prompt": "x"} {}`, want{400, "-", "invalid_json"}},
		{"empty body", "/v1/completions", ``, want{400, "-", "invalid_json"}},
		{"not an object", "/v1/completions", `[1, 2]`, want{400, "-", "invalid_json"}},
		{"wrong type", "/v1/completions", `{"prompt": "x", "temperature": "hot"}`, want{400, "temperature", "invalid_type"}},
		{"seed not an integer", "/v1/completions", `{"prompt": "x", "seed": 1.5}`, want{400, "seed", "invalid_type"}},
		{"nested wrong type", "/v1/completions", `{"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}}`, want{400, "stream_options.include_usage", "invalid_type"}},
		{"temperature below 0", "/v1/completions", `{"prompt": "x", "temperature": -0.1}`, want{400, "temperature", "invalid_value"}},
		{"top_p 0", "/v1/completions", `{"prompt": "x", "top_p": 0}`, want{400, "top_p", "invalid_value"}},
		{"top_p above 1", "/v1/completions", `{"prompt": "x", "top_p": 1.5}`, want{400, "top_p", "invalid_value"}},
		{"top_k", "/v1/completions", `{"prompt": "x", "top_k": -2}`, want{400, "top_k", "invalid_value"}},
		{"min_p", "/v1/completions", `{"prompt": "x", "min_p": 2}`, want{400, "min_p", "invalid_value"}},
		{"repetition_penalty", "/v1/completions", `{"prompt": "x", "repetition_penalty": 0}`, want{400, "repetition_penalty", "invalid_value"}},
		{"max_tokens negative", "/v1/completions", `{"prompt": "x", "max_tokens": -5}`, want{400, "max_tokens", "invalid_value"}},
		{"max_tokens above context", "/v1/completions", `{"prompt": "x", "max_tokens": 100000}`, want{400, "max_tokens", "invalid_value"}},
		{"max_completion_tokens", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1}`, want{400, "max_completion_tokens", "invalid_value"}},
		{"n above MaxChoices", "/v1/completions", fmt.Sprintf(`{"prompt": "x", "n": %d}`, specula.MaxChoices+1), want{400, "n", "invalid_value"}},
		{"n 0", "/v1/completions", `{"prompt": "x", "n": 0}`, want{400, "n", "invalid_value"}},
		{"best_of", "/v1/completions", `{"prompt": "x", "best_of": 3}`, want{400, "best_of", "unsupported_parameter"}},
		{"logprobs 21", "/v1/completions", `{"prompt": "x", "logprobs": 21}`, want{400, "logprobs", "invalid_value"}},
		{"logprobs a bool for completions", "/v1/completions", `{"prompt": "x", "logprobs": true}`, want{400, "logprobs", "invalid_type"}},
		{"top_logprobs for completions", "/v1/completions", `{"prompt": "x", "top_logprobs": 2}`, want{400, "top_logprobs", "invalid_value"}},
		{"chat logprobs a number", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "logprobs": 3}`, want{400, "logprobs", "invalid_type"}},
		{"chat top_logprobs 21", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21}`, want{400, "top_logprobs", "invalid_value"}},
		{"chat top_logprobs without logprobs", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}`, want{400, "top_logprobs", "invalid_value"}},
		{"suffix", "/v1/completions", `{"prompt": "x", "suffix": "}"}`, want{400, "suffix", "unsupported_parameter"}},
		{"logit_bias", "/v1/completions", `{"prompt": "x", "logit_bias": {"5": 1}}`, want{400, "logit_bias", "unsupported_parameter"}},
		{"presence_penalty", "/v1/completions", `{"prompt": "x", "presence_penalty": 1}`, want{400, "presence_penalty", "unsupported_parameter"}},
		{"frequency_penalty range", "/v1/completions", `{"prompt": "x", "frequency_penalty": 3}`, want{400, "frequency_penalty", "invalid_value"}},
		{"tools", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}`, want{400, "tools", "unsupported_parameter"}},
		{"response_format type", "/v1/completions", `{"prompt": "x", "response_format": {"type": "yaml"}}`, want{400, "response_format.type", "invalid_value"}},
		{"json_schema without schema", "/v1/completions", `{"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}`, want{400, "response_format.json_schema.schema", "invalid_value"}},
		{"unsupported schema keyword", "/v1/completions", `{"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "multipleOf": 2}}}}`, want{400, "response_format", "invalid_value"}},
		{"bad grammar", "/v1/completions", `{"prompt": "x", "grammar": "root ::= [a-"}`, want{400, "grammar", "invalid_value"}},
		{"two formats", "/v1/completions", `{"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {"type": "string"}}`, want{400, "json_schema", "invalid_value"}},
		{"bad regex", "/v1/completions", `{"prompt": "x", "guided_regex": "a("}`, want{400, "guided_regex", "invalid_value"}},
		{"stop not strings", "/v1/completions", `{"prompt": "x", "stop": [1]}`, want{400, "stop", "invalid_value"}},
		{"five stops", "/v1/completions", `{"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}`, want{400, "stop", "invalid_value"}},
		{"stream_options without stream", "/v1/completions", `{"prompt": "x", "stream_options": {"include_usage": true}}`, want{400, "stream_options", "invalid_value"}},
		{"no prompt", "/v1/completions", `{"max_tokens": 5}`, want{400, "prompt", "invalid_value"}},
		{"empty prompt", "/v1/completions", `{"prompt": ""}`, want{400, "prompt", "invalid_value"}},
		{"empty token prompt", "/v1/completions", `{"prompt": []}`, want{400, "prompt", "invalid_value"}},
		{"two prompts", "/v1/completions", `{"prompt": ["a", "b"]}`, want{400, "prompt", "unsupported_parameter"}},
		{"prompt object", "/v1/completions", `{"prompt": {"text": "a"}}`, want{400, "prompt", "invalid_value"}},
		{"token outside vocabulary", "/v1/completions", `{"prompt": [1, 99999]}`, want{400, "prompt", "invalid_value"}},
		{"negative token", "/v1/completions", `{"prompt": [-1]}`, want{400, "prompt", "invalid_value"}},
		{"no messages", "/v1/chat/completions", `{"model": "gocoder-m"}`, want{400, "messages", "invalid_value"}},
		{"empty messages", "/v1/chat/completions", `{"messages": []}`, want{400, "messages", "invalid_value"}},
		{"messages not an array", "/v1/chat/completions", `{"messages": "hi"}`, want{400, "messages", "invalid_value"}},
		{"bad role", "/v1/chat/completions", `{"messages": [{"role": "wizard", "content": "x"}]}`, want{400, "messages[0].role", "invalid_value"}},
		{"no role", "/v1/chat/completions", `{"messages": [{"content": "x"}]}`, want{400, "messages[0].role", "invalid_value"}},
		{"image content", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`, want{400, "messages[0].content[0].type", "unsupported_parameter"}},
		{"content a number", "/v1/chat/completions", `{"messages": [{"role": "user", "content": 5}]}`, want{400, "messages[0].content", "invalid_value"}},
		{"no chat template", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}]}`, want{400, "messages", "chat_template_missing"}},
		{"unknown model", "/v1/completions", `{"model": "gpt-4o", "prompt": "x"}`, want{404, "model", "model_not_found"}},
		{"unknown model in chat", "/v1/chat/completions", `{"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}`, want{404, "model", "model_not_found"}},
		{"unknown route", "/v1/embeddings", `{"input": "x"}`, want{404, "-", "unknown_url"}},
		{"unknown route 2", "/v2/completions", `{}`, want{404, "-", "unknown_url"}},
		{"body too large", "/v1/completions", `{"prompt": "` + strings.Repeat("a", 5000) + `"}`, want{413, "-", "request_too_large"}},
		{"prompt longer than the context", "/v1/completions", `{"prompt": "` + strings.ReplaceAll(long, "\n", `\n`) + `"}`, want{400, "prompt", "context_length_exceeded"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, b := post(t, ts.URL+c.path, c.body)
			checkError(t, resp, b, c.want.status, c.want.param, c.want.code)
		})
	}

	// The wrong method is a JSON 405 naming the right one.
	resp, err := http.Get(ts.URL + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("GET /v1/completions: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp2, b := post(t, ts.URL+"/v1/models", `{}`)
	checkError(t, resp2, b, 405, "-", "method_not_allowed")

	// Fields known to change nothing are ignored (unknown ones are refused:
	// TestRequestFields), a missing model means the served one, and nulls are
	// defaults.
	r := complete(t, ts.URL+"/v1/completions", `{"prompt": "x", "max_tokens": 2, "user": "u", "metadata": {"a": 1}, "model": null, "temperature": null, "stop": null, "n": 1, "logprobs": null, "presence_penalty": 0}`)
	if r.Model != "gocoder-m-q8_0" {
		t.Errorf("model %q", r.Model)
	}
}

// A sampling parameter's range is the library's, stated there alone: the server
// passes the value on, and the engine's refusal comes back as a 400 naming the
// request's field, its message the field's name and the library's own words.
// Values the library takes are served, whatever OpenAI documents (temperature
// above 2, as vLLM serves it); a 0 the library would read as unset is refused.
func TestLibraryBounds(t *testing.T) {
	_, ts := startServer(t, Config{})
	chat := func(fields string) string {
		return `{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, ` + fields + `}`
	}
	for _, c := range []struct {
		name, path, body string
		param            string
		lib              specula.Request // what the library is handed; its Validate says why not
	}{
		{"temperature below 0", "/v1/completions", `{"prompt": "x", "temperature": -0.1}`, "temperature",
			specula.Request{Prompt: "x", Params: specula.Params{Temperature: -0.1, TopP: 1}}},
		{"streamed temperature below 0", "/v1/completions", `{"prompt": "x", "stream": true, "temperature": -0.1}`, "temperature",
			specula.Request{Prompt: "x", Params: specula.Params{Temperature: -0.1, TopP: 1}}},
		{"top_p above 1", "/v1/completions", `{"prompt": "x", "top_p": 1.5}`, "top_p",
			specula.Request{Prompt: "x", Params: specula.Params{Temperature: 1, TopP: 1.5}}},
		{"top_k below -1", "/v1/completions", `{"prompt": "x", "top_k": -2}`, "top_k",
			specula.Request{Prompt: "x", Params: specula.Params{Temperature: 1, TopP: 1, TopK: -2}}},
		{"min_p above 1", "/v1/completions", `{"prompt": "x", "min_p": 2}`, "min_p",
			specula.Request{Prompt: "x", Params: specula.Params{Temperature: 1, TopP: 1, MinP: 2}}},
		{"repetition_penalty negative", "/v1/completions", `{"prompt": "x", "repetition_penalty": -1}`, "repetition_penalty",
			specula.Request{Prompt: "x", Params: specula.Params{Temperature: 1, TopP: 1, RepetitionPenalty: -1}}},
		{"max_tokens negative", "/v1/completions", `{"prompt": "x", "max_tokens": -5}`, "max_tokens",
			specula.Request{Prompt: "x", Params: specula.Params{MaxTokens: -5}}},
		{"max_completion_tokens negative", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1}`, "max_completion_tokens",
			specula.Request{Prompt: "x", Params: specula.Params{MaxTokens: -1}}},
		{"n above MaxChoices", "/v1/completions", fmt.Sprintf(`{"prompt": "x", "n": %d}`, specula.MaxChoices+1), "n",
			specula.Request{Prompt: "x", N: specula.MaxChoices + 1}},
		{"n negative", "/v1/completions", `{"prompt": "x", "n": -1}`, "n", specula.Request{Prompt: "x", N: -1}},
		{"logprobs above MaxTopLogprobs", "/v1/completions", fmt.Sprintf(`{"prompt": "x", "logprobs": %d}`, specula.MaxTopLogprobs+1), "logprobs",
			specula.Request{Prompt: "x", Logprobs: true, TopLogprobs: specula.MaxTopLogprobs + 1}},
		{"logprobs negative", "/v1/completions", `{"prompt": "x", "logprobs": -1}`, "logprobs",
			specula.Request{Prompt: "x", Logprobs: true, TopLogprobs: -1}},
		{"chat top_logprobs above MaxTopLogprobs", "/v1/chat/completions", chat(fmt.Sprintf(`"logprobs": true, "top_logprobs": %d`, specula.MaxTopLogprobs+1)), "top_logprobs",
			specula.Request{Prompt: "x", Logprobs: true, TopLogprobs: specula.MaxTopLogprobs + 1}},
		{"chat top_logprobs without logprobs", "/v1/chat/completions", chat(`"top_logprobs": 2`), "top_logprobs",
			specula.Request{Prompt: "x", TopLogprobs: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, b := post(t, ts.URL+c.path, c.body)
			checkError(t, resp, b, 400, c.param, "invalid_value")
			pe, ok := errors.AsType[*specula.ParameterError](c.lib.Validate())
			if !ok {
				t.Fatalf("the library takes %+v", c.lib)
			}
			if got, want := decode(t, b).Error.Message, c.param+": "+pe.Err.Error(); got != want {
				t.Errorf("message %q, want the library's %q", got, want)
			}
		})
	}
	for _, c := range []struct {
		name, body string
		choices    int
	}{
		{"temperature above OpenAI's 2", `{"prompt": "x", "max_tokens": 2, "temperature": 5}`, 1},
		{"repetition_penalty above 10", `{"prompt": "x", "max_tokens": 2, "repetition_penalty": 12}`, 1},
		{"top_k -1: all tokens", `{"prompt": "x", "max_tokens": 2, "top_k": -1}`, 1},
		{"n 17", `{"prompt": "x", "max_tokens": 2, "n": 17}`, 17},
	} {
		t.Run(c.name, func(t *testing.T) {
			if r := complete(t, ts.URL+"/v1/completions", c.body); len(r.Choices) != c.choices {
				t.Errorf("%d choices, want %d", len(r.Choices), c.choices)
			}
		})
	}
	for _, c := range []struct{ param, body string }{
		{"top_p", `{"prompt": "x", "top_p": 0}`},
		{"repetition_penalty", `{"prompt": "x", "repetition_penalty": 0}`},
		{"n", `{"prompt": "x", "n": 0}`},
	} {
		t.Run(c.param+" 0", func(t *testing.T) {
			resp, b := post(t, ts.URL+"/v1/completions", c.body)
			checkError(t, resp, b, 400, c.param, "invalid_value")
			if msg := decode(t, b).Error.Message; !strings.Contains(msg, "reads 0 as unset") {
				t.Errorf("message %q", msg)
			}
		})
	}
}

func checkError(t *testing.T, resp *http.Response, b []byte, status int, param, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	e := decode(t, b)
	if e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an OpenAI error: %s", b)
	}
	gotParam := "-"
	if e.Error.Param != nil {
		gotParam = *e.Error.Param
	}
	if gotParam != param {
		t.Errorf("param %q, want %q: %s", gotParam, param, b)
	}
	if code != "" && (e.Error.Code == nil || *e.Error.Code != code) {
		t.Errorf("want code %q: %s", code, b)
	}
	if status >= 500 || status == 429 {
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
		}
	}
}

// With every slot busy and the queue full, a request is answered 429 with
// Retry-After at once; a queued request runs when a slot frees.
func TestQueueFull(t *testing.T) {
	srv, ts := startServer(t, Config{Engine: specula.Config{Serving: specula.Serving{MaxRunning: 1, MaxQueue: 1}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := map[string]any{"prompt": "func main() {", "max_tokens": 1500, "ignore_eos": true, "temperature": 0}
	resp, _, _ := firstChunk(t, ctx, ts.URL+"/v1/completions", long)
	defer resp.Body.Close()

	// The second waits in the queue…
	type result struct {
		status int
		body   []byte
	}
	queued := make(chan result, 1)
	go func() {
		resp, err := send(context.Background(), ts.URL+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 3})
		if err != nil {
			queued <- result{0, []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		var b []byte
		b, _ = readAll(resp)
		queued <- result{resp.StatusCode, b}
	}()
	waitFor(t, "a queued request", 10*time.Second, func() bool { _, q := counts(srv); return q == 1 })

	// …the third finds the queue full.
	start := time.Now()
	resp3, b := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 3})
	checkError(t, resp3, b, http.StatusTooManyRequests, "-", "queue_full")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the 429 took %v", d)
	}

	cancel() // the long stream goes away; the queued request runs
	r := <-queued
	if r.status != http.StatusOK {
		t.Errorf("the queued request: %d %s", r.status, r.body)
	}
	waitFor(t, "the server to be idle", 10*time.Second, func() bool { return idle(srv) })
}

// A request still waiting when Serving.QueueTimeout (the command's -queue-timeout)
// has passed is refused with 503 queue_timeout and Retry-After, while the one
// running goes on.
func TestQueueTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	_, ts := startServer(t, Config{Engine: specula.Config{Serving: specula.Serving{MaxRunning: 1, QueueTimeout: timeout}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := map[string]any{"prompt": "func main() {", "max_tokens": 1500, "ignore_eos": true, "temperature": 0}
	resp, _, _ := firstChunk(t, ctx, ts.URL+"/v1/completions", long)
	defer resp.Body.Close()

	start := time.Now()
	r, b := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 3})
	waited := time.Since(start)
	checkError(t, r, b, http.StatusServiceUnavailable, "-", "queue_timeout")
	if r.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if waited < timeout || waited > timeout+5*time.Second {
		t.Errorf("refused after %v, the timeout is %v", waited, timeout)
	}
}

// A key/value budget below one full-context request is refused at start, saying
// what to change. On a budget of one context, two requests that cannot both fit run
// one after the other — the second waits for the first's memory, it does not fail
// — and both give plain decoding's text.
func TestKVCacheFull(t *testing.T) {
	// A budget of 8 blocks of 16 positions: 128 tokens for all sequences together,
	// one request's context.
	budget := int64(8 * 16 * 8 * 2 * 2 * 64 * 4)
	_, err := Open(withDefaults(Config{Engine: specula.Config{KVBudget: budget}}))
	if err == nil || !strings.Contains(err.Error(), "raise it to at least 16.0 MiB (16777216 bytes), or lower ContextLength to 128") {
		t.Fatalf("a budget below one full-context request: err = %v", err)
	}
	srv, ts := startServer(t, Config{Engine: specula.Config{KVBudget: budget, ContextLength: 128}})
	if m := srv.Engine().Memory(); m.KVPositions != 128 {
		t.Fatalf("the test budget gives %d positions: %+v", m.KVPositions, m)
	}
	body := map[string]any{"prompt": "func main() {", "max_tokens": 80, "ignore_eos": true, "temperature": 0}
	want := reference(t, srv, "func main() {", 80)
	var wg sync.WaitGroup
	got := make([]completionResp, 2)
	for i := range got {
		wg.Go(func() { got[i] = complete(t, ts.URL+"/v1/completions", body) })
	}
	wg.Wait()
	for i, r := range got {
		if r.text() != want || r.Usage.CompletionTokens != 80 {
			t.Errorf("request %d: %q (%+v), want %q", i, r.text(), r.Usage, want)
		}
	}
	waitFor(t, "the cache to be free", 5*time.Second, func() bool { return idle(srv) })
}

// The engine's errors become OpenAI's answers.
func TestEngineErrors(t *testing.T) {
	ctx := context.Background()
	x := &exchange{modelName: "m", formatParam: "response_format"}
	for _, c := range []struct {
		err         error
		status      int
		param, code string
		retryAfter  bool
	}{
		{&specula.ParameterError{Field: "TopP", Err: errors.New("bad")}, 400, "top_p", "invalid_value", false},
		{&specula.ParameterError{Field: "RepetitionPenalty", Err: errors.New("bad")}, 400, "repetition_penalty", "invalid_value", false},
		{&specula.ParameterError{Field: "Format.JSONSchema", Err: errors.New("bad")}, 400, "response_format", "invalid_value", false},
		{&specula.ParameterError{Field: "Tokens[3]", Err: errors.New("bad")}, 400, "prompt", "invalid_value", false},
		{fmt.Errorf("%w: 9000 tokens", specula.ErrPromptTooLong), 400, "prompt", "context_length_exceeded", false},
		{&specula.OverloadedError{Running: 4, Waiting: 8, RetryAfter: 3 * time.Second}, 429, "", "queue_full", true},
		{&specula.OverloadedError{TimedOut: true}, 503, "", "queue_timeout", true},
		{fmt.Errorf("%w: prefill", specula.ErrOutOfMemory), 503, "", "kv_cache_full", true},
		{specula.ErrClosed, 503, "", "model_closed", true},
		{fmt.Errorf("%w: %w", specula.ErrNoChatTemplate, errors.New("none")), 400, "messages", "chat_template_missing", false},
		{errors.New("boom"), 500, "", "", false},
	} {
		e := engineError(ctx, x, c.err)
		if e.Status != c.status || e.Param != c.param || e.Code != c.code || (e.RetryAfter > 0) != c.retryAfter {
			t.Errorf("%v: %+v", c.err, e)
		}
	}
}

func readAll(resp *http.Response) ([]byte, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if err.Error() == "EOF" {
				return []byte(b.String()), nil
			}
			return []byte(b.String()), err
		}
	}
}

// The server logs its memory plan at start: every part by name — the draft model's
// key/value cache too — and a total that is their sum, the key/value budget and what
// it holds.
func TestMemoryPlanLogged(t *testing.T) {
	var buf bytes.Buffer
	cfg := speculativeConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	srv, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	line := buf.String()
	for _, want := range []string{"memory plan", "target_weights_mib=", "draft_weights_mib=", "kv_budget_mib=", "kv_positions=", "full_context_requests=",
		"target_kv_mib=", "draft_kv_mib=", "scratch_mib=", "weights_mapped_mib=0 ", "heap_headroom_mib="} {
		if !strings.Contains(line, want) {
			t.Errorf("the log lacks %q:\n%s", want, line)
		}
	}
	p := srv.Engine().Memory()
	if p.TargetWeights <= 0 || p.DraftWeights <= 0 || p.KVPositions < p.ContextLength || p.DraftKVBudget < 64<<20 {
		t.Errorf("plan %+v", p)
	}
	figure := func(key string) float64 {
		_, after, ok := strings.Cut(line, " "+key+"=")
		v, err := strconv.ParseFloat(strings.Fields(after + " ")[0], 64)
		if !ok || err != nil {
			t.Fatalf("no figure %s in the log:\n%s", key, line)
		}
		return v
	}
	sum := 0.0
	for _, part := range []string{"target_weights", "target_kv", "draft_weights", "draft_kv", "scratch"} {
		sum += figure(part + "_mib")
	}
	if total := figure("total_mib"); math.Abs(total-sum) > 0.3 || total < figure("kv_budget_mib")+64 {
		t.Errorf("total_mib=%v, the parts add up to %v, and the draft's key/value cache (64 MiB) is in it", total, sum)
	}
}

// TestTooLargeForTheCache: a request that could never fit the server's key/value
// cache — the n=16, max_tokens=2000 on a small budget — is a 400 before it
// waits, naming the field to lower and by how much, in the request's own words; the
// bound it names is served.
func TestTooLargeForTheCache(t *testing.T) {
	demoModels(t)
	probe, err := specula.Open(specula.Config{Model: testTarget, ContextLength: 2048})
	if err != nil {
		t.Fatal(err)
	}
	perPosition := probe.Memory().KVBudget / int64(probe.Memory().KVPositions)
	probe.Close()
	_, ts := startServer(t, Config{Engine: specula.Config{ContextLength: 2048, KVBudget: 2048 * perPosition, ChatTemplate: chatmlTemplate(t)}})
	for _, c := range []struct {
		name, path, body, param, says string
	}{
		{"the finding's request", "/v1/completions", `{"prompt": "func main() {", "n": 16, "max_tokens": 2000, "temperature": 0.8}`, "max_tokens", "lower max_tokens to at most 112 or n to at most 1"},
		{"many short choices", "/v1/completions", `{"prompt": "func main() {", "n": 64, "max_tokens": 17, "temperature": 0.8}`, "max_tokens", "lower max_tokens to at most 16 or n to at most 43"},
		{"chat", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}], "n": 4, "max_completion_tokens": 1000, "temperature": 0.8}`, "max_completion_tokens", "lower max_completion_tokens to at most"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, b := post(t, ts.URL+c.path, c.body)
			checkError(t, resp, b, 400, c.param, "kv_cache_exceeded")
			if !strings.Contains(string(b), c.says) {
				t.Errorf("the message does not say %q: %s", c.says, b)
			}
		})
	}
	r := complete(t, ts.URL+"/v1/completions", `{"prompt": "func main() {", "n": 16, "max_tokens": 112, "temperature": 0.8, "ignore_eos": true}`)
	for _, ch := range r.Choices {
		if ch.FinishReason == nil || *ch.FinishReason != "length" {
			t.Errorf("choice %d ended %v", ch.Index, ch.FinishReason)
		}
	}
	if r.Usage.CompletionTokens != 16*112 {
		t.Errorf("%d tokens, want %d", r.Usage.CompletionTokens, 16*112)
	}
}
