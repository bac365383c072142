package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/specula/specula"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/tokenizer"
)

var testPrompts = []string{
	"func main() {",
	"package strings\n\n// Reverse returns",
	"func (b *Buffer) Len() int {",
	"import (\n\t\"fmt\"\n",
}

// The server's greedy output is the target's own greedy output, token for token,
// whether it speculates or not.
func TestCompletionGreedyMatchesPlainDecoding(t *testing.T) {
	srv, ts := startServer(t, speculativeConfig())
	for _, prompt := range testPrompts[:2] {
		want := reference(t, srv, prompt, 48)
		r := complete(t, ts.URL+"/v1/completions", map[string]any{
			"model": "gocoder-m-q8_0", "prompt": prompt, "max_tokens": 48, "temperature": 0,
		})
		if got := r.text(); got != want {
			t.Errorf("prompt %q:\n got %q\nwant %q", prompt, got, want)
		}
		if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || r.Model != "gocoder-m-q8_0" || r.Created == 0 {
			t.Errorf("envelope: %+v", r)
		}
		if len(r.Choices) != 1 || r.Choices[0].Index != 0 || r.Choices[0].Logprobs != nil {
			t.Errorf("choices: %+v", r.Choices)
		}
		if r.Usage == nil || r.Usage.PromptTokens != len(srv.Engine().Tokenizer().Encode(prompt, srv.Engine().Tokenizer().DefaultOptions())) ||
			r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens || r.Usage.CompletionTokens == 0 {
			t.Errorf("usage: %+v", r.Usage)
		}
		if r.Timings == nil || !r.Timings.Speculative {
			t.Errorf("timings: %+v (want a speculative run)", r.Timings)
		}
		if f := r.finish(); f != "length" && f != "stop" {
			t.Errorf("finish_reason %q", f)
		}
	}
}

// A stream's chunks add up to the non-streaming text; the stream ends with a chunk
// carrying the finish reason, the usage chunk when asked for, and [DONE].
func TestStreamingMatchesNonStreaming(t *testing.T) {
	srv, ts := startServer(t, speculativeConfig())
	for _, prompt := range testPrompts {
		want := reference(t, srv, prompt, 40)
		body := map[string]any{"prompt": prompt, "max_tokens": 40, "temperature": 0, "stream_options": map[string]any{"include_usage": true}}
		s := stream(t, ts.URL+"/v1/completions", body)
		if !s.done {
			t.Fatalf("prompt %q: the stream did not end with [DONE]", prompt)
		}
		if got := s.text(); got != want {
			t.Errorf("prompt %q: stream\n got %q\nwant %q", prompt, got, want)
		}
		n := len(s.chunks)
		if n < 3 {
			t.Fatalf("only %d chunks", n)
		}
		last, fin := s.chunks[n-1], s.chunks[n-2]
		if len(last.Choices) != 0 || last.Usage == nil || last.Usage.CompletionTokens == 0 {
			t.Errorf("usage chunk: %+v", last)
		}
		if fin.finish() == "" || fin.text() != "" {
			t.Errorf("finish chunk: %+v", fin)
		}
		for i, c := range s.chunks {
			if c.Object != "text_completion" || c.ID != s.chunks[0].ID || (i < n-2 && c.finish() != "") {
				t.Errorf("chunk %d: %+v", i, c)
			}
			if i < n-1 && c.Usage != nil {
				t.Errorf("chunk %d carries usage", i)
			}
		}
		// Without include_usage there is no usage chunk.
		s = stream(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 40, "temperature": 0})
		if got := s.text(); got != want || !s.done || s.chunks[len(s.chunks)-1].finish() == "" {
			t.Errorf("prompt %q without usage: %q, done %v", prompt, got, s.done)
		}
	}
}

// Sampling with a seed is reproducible; top_p and temperature reach the sampler.
func TestSeededSampling(t *testing.T) {
	_, ts := startServer(t, speculativeConfig())
	body := map[string]any{"prompt": "func main() {", "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 42}
	a := complete(t, ts.URL+"/v1/completions", body).text()
	b := complete(t, ts.URL+"/v1/completions", body).text()
	if a != b {
		t.Errorf("seed 42 gave %q, then %q", a, b)
	}
	body["stream"] = true
	if s := stream(t, ts.URL+"/v1/completions", body); s.text() != a {
		t.Errorf("streamed with seed 42: %q, want %q", s.text(), a)
	}
}

// Stop strings end the text before the first of them, streamed or not.
func TestStopStrings(t *testing.T) {
	srv, ts := startServer(t, speculativeConfig())
	prompt := testPrompts[0]
	full := reference(t, srv, prompt, 48)
	stop := "strings"
	i := strings.Index(full, stop)
	if i < 0 {
		t.Fatalf("reference %q lacks %q: pick another stop string", full, stop)
	}
	for _, s := range []any{stop, []string{"zzzz", stop}} {
		body := map[string]any{"prompt": prompt, "max_tokens": 48, "temperature": 0, "stop": s}
		r := complete(t, ts.URL+"/v1/completions", body)
		if r.text() != full[:i] || r.finish() != "stop" {
			t.Errorf("stop %v: %q (%s), want %q (stop)", s, r.text(), r.finish(), full[:i])
		}
		st := stream(t, ts.URL+"/v1/completions", body)
		if st.text() != full[:i] || st.finish() != "stop" {
			t.Errorf("stop %v streamed: %q (%s), want %q", s, st.text(), st.finish(), full[:i])
		}
	}
}

// echo puts the prompt in front; a prompt of token ids is the same prompt.
func TestEchoAndTokenPrompts(t *testing.T) {
	srv, ts := startServer(t, speculativeConfig())
	prompt := testPrompts[2]
	want := reference(t, srv, prompt, 20)
	r := complete(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 20, "temperature": 0, "echo": true})
	if r.text() != prompt+want {
		t.Errorf("echo: %q, want %q", r.text(), prompt+want)
	}
	ids := srv.Engine().Tokenizer().Encode(prompt, srv.Engine().Tokenizer().DefaultOptions())
	for _, p := range []any{ids, [][]int32{ids}, []string{prompt}} {
		r := complete(t, ts.URL+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 20, "temperature": 0})
		if r.text() != want {
			t.Errorf("prompt %v: %q, want %q", p, r.text(), want)
		}
	}
	s := stream(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 20, "temperature": 0, "echo": true})
	if s.text() != prompt+want {
		t.Errorf("streamed echo: %q", s.text())
	}
}

// A model with a chat template answers chat requests, streamed or not, with the text
// a completion of the rendered prompt gives.
func TestChat(t *testing.T) {
	demoModels(t)
	tmpl := chatmlTemplate(t)
	target := withChatTemplate(t, testTarget, t.TempDir(), tmpl)
	cfg := speculativeConfig()
	cfg.Engine.Model = target
	srv, ts := startServer(t, cfg)
	if c, _ := srv.Engine().ChatTemplate(); c == nil {
		t.Fatal("the template was not found")
	}
	msgs := []map[string]any{
		{"role": "system", "content": "You write Go."},
		{"role": "user", "content": "  Write a function that reverses a string.  "},
	}
	rendered := "<|im_start|>system\nYou write Go.<|im_end|>\n<|im_start|>user\nWrite a function that reverses a string.<|im_end|>\n<|im_start|>assistant\n"
	want := reference(t, srv, rendered, 32)

	r := complete(t, ts.URL+"/v1/chat/completions", map[string]any{"model": "gocoder-m-q8_0-chat", "messages": msgs, "max_tokens": 32, "temperature": 0})
	if r.Object != "chat.completion" || !strings.HasPrefix(r.ID, "chatcmpl-") || r.Model != "gocoder-m-q8_0-chat" {
		t.Errorf("envelope: %+v", r)
	}
	if len(r.Choices) != 1 || r.Choices[0].Message == nil || r.Choices[0].Message.Role != "assistant" {
		t.Fatalf("choices: %+v", r.Choices)
	}
	if r.text() != want {
		t.Errorf("chat: %q, want %q", r.text(), want)
	}
	if r.Usage == nil || r.Usage.PromptTokens != len(srv.Engine().Tokenizer().Encode(rendered, srv.Engine().Tokenizer().DefaultOptions())) {
		t.Errorf("usage %+v", r.Usage)
	}
	// max_completion_tokens is chat's newer name for max_tokens.
	r2 := complete(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "max_completion_tokens": 32, "temperature": 0})
	if r2.text() != want {
		t.Errorf("max_completion_tokens: %q", r2.text())
	}

	s := stream(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 32, "temperature": 0,
		"stream_options": map[string]any{"include_usage": true}})
	if !s.done || s.text() != want {
		t.Errorf("chat stream: %q (done %v), want %q", s.text(), s.done, want)
	}
	first := s.chunks[0]
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta == nil || first.Choices[0].Delta.Role == nil || *first.Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk: %s", s.raw[0].data)
	}
	if n := len(s.chunks); s.chunks[n-1].Usage == nil || s.chunks[n-2].finish() == "" {
		t.Errorf("end of stream: %s | %s", s.raw[n-2].data, s.raw[n-1].data)
	}
	for i, c := range s.chunks[1:] {
		if len(c.Choices) > 0 && c.Choices[0].Delta.Role != nil {
			t.Errorf("chunk %d repeats the role", i+1)
		}
	}

	// chat_template_kwargs reach the template.
	r3 := complete(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 8, "temperature": 0,
		"chat_template_kwargs": map[string]any{"code_prefix": "func Reverse("}})
	if want := reference(t, srv, rendered+"func Reverse(", 8); r3.text() != want {
		t.Errorf("chat_template_kwargs: %q, want %q", r3.text(), want)
	}

	// The template's raise_exception is a 400 with its message.
	resp, b := post(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "tool", "content": "x"}}})
	e := decode(t, b)
	if resp.StatusCode != 400 || e.Error == nil || !strings.Contains(e.Error.Message, "Unsupported role: tool") || *e.Error.Code != "chat_template_error" {
		t.Errorf("raise_exception: %d %s", resp.StatusCode, b)
	}
}

// The demo models have no chat template: chat requests get a clear 400.
func TestChatWithoutTemplate(t *testing.T) {
	_, ts := startServer(t, Config{})
	resp, b := post(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}})
	e := decode(t, b)
	if resp.StatusCode != http.StatusBadRequest || e.Error == nil || e.Error.Code == nil || *e.Error.Code != "chat_template_missing" ||
		!strings.Contains(e.Error.Message, "no chat template") {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
}

// -chat-template-file gives a model without one a template.
func TestChatTemplateOverride(t *testing.T) {
	_, ts := startServer(t, Config{Engine: specula.Config{ChatTemplate: chatmlTemplate(t)}})
	r := complete(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 4})
	if r.Choices[0].Message == nil {
		t.Errorf("%+v", r)
	}
}

// Templates come from GGUF metadata, chat_template.jinja or tokenizer_config.json.
func TestReadChatTemplate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(want string) {
		t.Helper()
		got, _, err := specula.ReadChatTemplate(dir)
		if err != nil || got != want {
			t.Errorf("got %q, %v; want %q", got, err, want)
		}
	}
	check("")
	write("tokenizer_config.json", `{"chat_template": null}`)
	check("")
	write("tokenizer_config.json", `{"chat_template": "{{ messages }}"}`)
	check("{{ messages }}")
	write("tokenizer_config.json", `{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}`)
	check("D")
	write("chat_template.jinja", "J")
	check("J")
	write("chat_template.jinja", "")
	os.Remove(filepath.Join(dir, "chat_template.jinja"))
	write("tokenizer_config.json", `{"chat_template": 7}`)
	if _, _, err := specula.ReadChatTemplate(dir); err == nil {
		t.Error("a chat_template of 7 was accepted")
	}
	demoModels(t)
	if src, _, err := specula.ReadChatTemplate(testTarget); err != nil || src != "" {
		t.Errorf("gocoder-m: %q, %v", src, err)
	}
	p := withChatTemplate(t, testDraft, dir, "X")
	if src, _, err := specula.ReadChatTemplate(p); err != nil || src != "X" {
		t.Errorf("copy with template: %q, %v", src, err)
	}
}

func TestModelsAndHealth(t *testing.T) {
	_, ts := startServer(t, Config{ModelName: "coder"})
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string
		Data   []modelCard
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if list.Object != "list" || len(list.Data) != 3 || list.Data[0].ID != "coder" || list.Data[1].ID != "gocoder-m-q8_0" || list.Data[2].ID != "gocoder-m" {
		t.Errorf("models: %+v", list)
	}
	for _, name := range []string{"coder", "gocoder-m-q8_0", "gocoder-m"} {
		r := complete(t, ts.URL+"/v1/completions", map[string]any{"model": name, "prompt": "x", "max_tokens": 1})
		if r.Model != name {
			t.Errorf("asked for %q, answered as %q", name, r.Model)
		}
	}
	resp, err = http.Get(ts.URL + "/v1/models/coder")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/models/coder: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	for _, path := range []string{"/healthz", "/health"} {
		resp, err = http.Get(ts.URL + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"ok"`) {
			t.Errorf("%s: %s", path, b)
		}
	}
}

func TestModelNames(t *testing.T) {
	if got := modelNames("a", "/x/m.gguf", "m"); strings.Join(got, ",") != "a,m" {
		t.Errorf("modelNames: %v", got)
	}
	if got := modelNames("", "", "m"); strings.Join(got, ",") != "m" {
		t.Errorf("modelNames without a path: %v", got)
	}
}

// A server drafting with a trained head (EAGLE and EAGLE-3, as -head sets them up) gives the target's
// own greedy output, over HTTP; skipped without ../shared.
func TestCompletionWithHead(t *testing.T) {
	for _, head := range []string{"gocoder-m-eagle", "gocoder-m-eagle3"} {
		t.Run(head, func(t *testing.T) { completionWithHead(t, head) })
	}
}

// completionWithHead checks the completions of a server drafting with the shared head.
func completionWithHead(t *testing.T, head string) {
	cfg := speculativeConfig()
	cfg.Engine.Model = sharedtest.Path(t, "models", "gocoder-m-f16.gguf")
	cfg.Engine.Draft = sharedtest.Path(t, "models", head)
	srv, ts := startServer(t, cfg)
	for _, prompt := range testPrompts[:2] {
		want := reference(t, srv, prompt, 40)
		r := complete(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 40, "temperature": 0})
		if got := r.text(); got != want {
			t.Errorf("prompt %q:\n got %q\nwant %q", prompt, got, want)
		}
		if r.Timings == nil || !r.Timings.Speculative {
			t.Errorf("timings: %+v (want a speculative run)", r.Timings)
		}
	}
}

// With an API key, every endpoint but the health check wants it as a bearer token,
// and refuses others with OpenAI's 401.
func TestAPIKey(t *testing.T) {
	_, ts := startServer(t, Config{APIKey: "s3cret"})
	get := func(path, auth string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/v1/models", "", 401}, {"/v1/models", "Bearer wrong", 401}, {"/v1/models", "s3cret", 401},
		{"/v1/models", "Bearer s3cret", 200}, {"/metrics", "", 200}, {"/healthz", "", 200}, {"/health", "", 200},
	} {
		code, b := get(c.path, c.auth)
		if code != c.want {
			t.Errorf("%s with %q: %d, want %d: %s", c.path, c.auth, code, c.want, b)
		}
		if code == 401 {
			if e := decode(t, b); e.Error == nil || e.Error.Code == nil || *e.Error.Code != "invalid_api_key" {
				t.Errorf("%s: %s", c.path, b)
			}
		}
	}
	resp, b := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 2})
	if resp.StatusCode != 401 {
		t.Errorf("completion without the key: %d %s", resp.StatusCode, b)
	}
}

// Two engines joined under one handler: each generation goes to the server of its
// model, the listing and the metrics hold both.
func TestJoin(t *testing.T) {
	demoModels(t)
	open := func(model, name string) *Server {
		srv, err := Open(withDefaults(Config{Engine: specula.Config{Model: model}, ModelName: name}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return srv
	}
	big, small := open(testTarget, "big"), open(testDraft, "small")
	h, err := Join(big, small)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(big, big); err == nil {
		t.Error("two servers of one name were joined")
	}
	ts := httptest.NewServer(h)
	defer ts.Close()
	for _, c := range []struct {
		model string
		srv   *Server
	}{{"big", big}, {"small", small}, {"", big}} {
		body := map[string]any{"prompt": "func main() {", "max_tokens": 12, "temperature": 0, "ignore_eos": true}
		if c.model != "" {
			body["model"] = c.model
		}
		if r := complete(t, ts.URL+"/v1/completions", body); r.text() != reference(t, c.srv, "func main() {", 12) {
			t.Errorf("model %q: %q", c.model, r.text())
		}
	}
	resp, b := post(t, ts.URL+"/v1/completions", map[string]any{"model": "gpt-4o", "prompt": "x"})
	checkError(t, resp, b, http.StatusNotFound, "model", "model_not_found")
	r, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Data []struct{ ID string } }
	json.NewDecoder(r.Body).Decode(&list)
	r.Body.Close()
	var ids []string
	for _, d := range list.Data {
		ids = append(ids, d.ID)
	}
	if !slices.Contains(ids, "big") || !slices.Contains(ids, "small") {
		t.Errorf("models %v", ids)
	}
	m := scrape(t, ts.URL)
	// Every request through an engine counts, the references' too: big served two
	// requests of 12 tokens and gave two references, small one and one.
	if m[`specula_generation_tokens_total{model_name="big"}`] != 48 || m[`specula_generation_tokens_total{model_name="small"}`] != 24 {
		t.Errorf("metrics per model: big %v, small %v", m[`specula_generation_tokens_total{model_name="big"}`], m[`specula_generation_tokens_total{model_name="small"}`])
	}
}

// anyModel is a model of a kind the server knows nothing about: it hides every
// method of the Llama runtime but the model contract.
type anyModel struct{ model.Model }

// A server over an engine made by specula.NewEngine from any model.Model (here one
// that reports no key/value figures) serves it like the runtime's own.
func TestServeAnyModel(t *testing.T) {
	demoModels(t)
	m, err := llama.Open(testTarget, cpu.Factory(2), llama.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tok, err := tokenizer.Load(testTarget)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := specula.NewEngine(anyModel{m}, tok, lookup.NGram{}, specula.EngineOptions{K: 4})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(eng, Config{ModelName: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	r := complete(t, ts.URL+"/v1/completions", map[string]any{"model": "mine", "prompt": "func main() {", "max_tokens": 16, "temperature": 0, "ignore_eos": true})
	if want := reference(t, srv, "func main() {", 16); r.text() != want || r.Timings == nil || !r.Timings.Speculative {
		t.Errorf("%q (%+v), want %q", r.text(), r.Timings, want)
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Error("a nil engine was served")
	}
}

// Constrained output through every request field that asks for it: the text is of
// the language, greedy and sampled, whole and streamed; a grammar's error names its
// line and column.
func TestFormats(t *testing.T) {
	cfg := speculativeConfig()
	cfg.Engine.Model = withChatTemplate(t, testTarget, t.TempDir(), chatmlTemplate(t))
	_, ts := startServer(t, cfg)
	prompt := "// a record as JSON\n{\"name\": \"bolt\", \"count\": 3}\n"
	schema := map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string", "maxLength": 8},
		"count": map[string]any{"type": "integer"}}, "required": []string{"name", "count"}}
	validate := func(s string) error {
		var v struct {
			Name  *string
			Count *int
		}
		d := json.NewDecoder(strings.NewReader(s))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil {
			return err
		}
		if v.Name == nil || v.Count == nil {
			return fmt.Errorf("required properties missing")
		}
		return nil
	}
	isObject := func(s string) error { var v map[string]any; return json.Unmarshal([]byte(s), &v) }
	for _, c := range []struct {
		name  string
		extra map[string]any
		check func(string) error
	}{
		{"json_object", map[string]any{"response_format": map[string]any{"type": "json_object"}}, isObject},
		{"json_schema", map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "rec", "schema": schema}}}, validate},
		{"llama-server json_schema", map[string]any{"json_schema": schema}, validate},
		{"grammar", map[string]any{"grammar": "root ::= (\"yes\" | \"no\") \".\""}, func(s string) error {
			if s != "yes." && s != "no." {
				return fmt.Errorf("%q", s)
			}
			return nil
		}},
		{"guided_regex", map[string]any{"guided_regex": `[a-z]{2,5}=[0-9]+;`}, func(s string) error {
			if !regexp.MustCompile(`^[a-z]{2,5}=[0-9]+;$`).MatchString(s) {
				return fmt.Errorf("%q", s)
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i, temp := range []float64{0, 1, 1, 1} {
				body := map[string]any{"prompt": prompt, "max_tokens": 100, "temperature": temp, "seed": i}
				for k, v := range c.extra {
					body[k] = v
				}
				r := complete(t, ts.URL+"/v1/completions", body)
				if r.finish() == "stop" {
					if err := c.check(r.text()); err != nil {
						t.Errorf("T=%v: %v in %q", temp, err, r.text())
					}
				}
				if i == 0 {
					st := stream(t, ts.URL+"/v1/completions", body)
					if st.text() != r.text() {
						t.Errorf("streamed %q, whole %q", st.text(), r.text())
					}
				}
			}
			chat := map[string]any{"messages": []map[string]any{{"role": "user", "content": "A record, please."}}, "max_tokens": 100, "temperature": 0}
			for k, v := range c.extra {
				chat[k] = v
			}
			r := complete(t, ts.URL+"/v1/chat/completions", chat)
			if r.finish() == "stop" {
				if err := c.check(r.text()); err != nil {
					t.Errorf("chat: %v", err)
				}
			}
		})
	}
	resp, b := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "x", "grammar": "root ::= \"a\"\nb ::= [z-a]"})
	if e := decode(t, b); resp.StatusCode != 400 || e.Error == nil || !strings.Contains(e.Error.Message, "line 2, column 8") {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
}

// n choices stream as OpenAI streams them: every chunk names its choice's index,
// each choice's chunks add up to that choice of the whole (seeded) response, each
// choice ends with its own finish reason, chat opens each choice with the
// assistant's role, and the usage chunk counts them all; paced or not, with the
// echoed prompt at the head of every choice.
func TestStreamChoices(t *testing.T) {
	demoModels(t)
	cfg := speculativeConfig()
	cfg.Engine.Model = withChatTemplate(t, testTarget, t.TempDir(), chatmlTemplate(t))
	cfg.Pacing = 20 * time.Millisecond
	_, paced := startServer(t, cfg)
	_, unpaced := startServer(t, speculativeConfig())
	const n = 3
	cases := []struct {
		name string
		url  string
		body map[string]any
	}{
		{"completions paced", paced.URL + "/v1/completions", map[string]any{"prompt": "func main() {", "max_tokens": 24}},
		{"completions echo", unpaced.URL + "/v1/completions", map[string]any{"prompt": "func main() {", "max_tokens": 24, "echo": true}},
		{"completions logprobs", unpaced.URL + "/v1/completions", map[string]any{"prompt": "func main() {", "max_tokens": 24, "logprobs": 2}},
		{"chat", paced.URL + "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "write a loop"}}, "max_tokens": 24}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.body["n"], tc.body["temperature"], tc.body["seed"] = n, 0.9, 7
			whole := complete(t, tc.url, tc.body)
			if len(whole.Choices) != n {
				t.Fatalf("the whole response has %d choices, want %d", len(whole.Choices), n)
			}
			tc.body["stream_options"] = map[string]any{"include_usage": true}
			s := stream(t, tc.url, tc.body)
			if !s.done {
				t.Fatal("the stream did not end with [DONE]")
			}
			texts, finishes, roles := make([]string, n), make([]string, n), make([]int, n)
			distinct := map[string]bool{}
			for i, c := range s.chunks {
				if c.Usage != nil {
					if i != len(s.chunks)-1 || len(c.Choices) != 0 {
						t.Errorf("chunk %d carries usage", i)
					}
					if c.Usage.CompletionTokens != whole.Usage.CompletionTokens {
						t.Errorf("usage counts %d tokens, the whole response %d", c.Usage.CompletionTokens, whole.Usage.CompletionTokens)
					}
					continue
				}
				if len(c.Choices) != 1 {
					t.Fatalf("chunk %d has %d choices", i, len(c.Choices))
				}
				ch := c.Choices[0]
				if ch.Index < 0 || ch.Index >= n {
					t.Fatalf("chunk %d names choice %d", i, ch.Index)
				}
				if finishes[ch.Index] != "" {
					t.Errorf("chunk %d of choice %d comes after its finish", i, ch.Index)
				}
				if ch.Delta != nil && ch.Delta.Role != nil {
					roles[ch.Index]++
				}
				texts[ch.Index] += c.text()
				if ch.FinishReason != nil {
					finishes[ch.Index] = *ch.FinishReason
				}
			}
			for i, w := range whole.Choices {
				if want := whole.textAt(i); texts[w.Index] != want {
					t.Errorf("choice %d streamed %q, whole %q", w.Index, texts[w.Index], want)
				}
				if finishes[w.Index] != *w.FinishReason {
					t.Errorf("choice %d streamed finish %q, whole %q", i, finishes[w.Index], *w.FinishReason)
				}
				if strings.Contains(tc.url, "chat") && roles[w.Index] != 1 {
					t.Errorf("choice %d opened with %d role chunks, want 1", w.Index, roles[w.Index])
				}
				distinct[texts[w.Index]] = true
			}
			if len(distinct) < 2 {
				t.Errorf("the %d sampled choices are all %q: the choices are not independent", n, texts[0])
			}
		})
	}
}
