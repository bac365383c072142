package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/specula/specula"
)

var (
	fuzzOnce sync.Once
	fuzzSrv  *Server
	fuzzErr  error
)

// FuzzParse feeds arbitrary bodies to the request decoding and validation of both
// generation endpoints: nothing may panic, and every refusal is an OpenAI error with
// a status the API uses.
//
//	go test ./server -run XXX -fuzz FuzzParse -fuzztime 30s
func FuzzParse(f *testing.F) {
	demoModels(f)
	fuzzOnce.Do(func() {
		fuzzSrv, fuzzErr = Open(withDefaults(Config{Engine: specula.Config{ChatTemplate: chatmlTemplate(f), ContextLength: 512}, MaxBodyBytes: 1 << 16}))
	})
	if fuzzErr != nil {
		f.Fatal(fuzzErr)
	}
	for _, seed := range []string{
		`{"prompt": "func main() {", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "seed": 3, "stop": ["\n\n", "}"], "stream": true, "stream_options": {"include_usage": true}}`,
		`{"prompt": [1, 2, 3], "echo": true, "n": 1, "logprobs": null}`,
		`{"prompt": [[5, 6]], "stop": "x", "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1}`,
		`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_completion_tokens": 8}`,
		`{"messages": [{"role": "developer", "content": null}, {"role": "assistant", "content": "a", "name": "bob"}], "chat_template_kwargs": {"code_prefix": 1}}`,
		`{"messages": [{"role": "tool", "content": "x"}]}`,
		`{"model": "nope", "prompt": "x"}`,
		`{"prompt": "x", "temperature": 1e999}`,
		`{"prompt": "x", "max_tokens": 9999999999999999999}`,
		`{"prompt": "x", "seed": -9223372036854775808}`,
		`{"prompt": "x", "max_tokens": -3, "temperature": -1, "top_k": -2, "n": 65}`,
		`{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1, "top_logprobs": 21, "min_p": 2}`,
		`{"prompt": "\u0000\ud800", "stop": ["", "", "", ""]}`,
		`[]`, `null`, `"x"`, `{`, ``, `{"prompt": {}}`, `{"messages": [null]}`, `{"messages": [{"role": 5}]}`,
		`{"prompt": "x", "logit_bias": {"1": 2}, "tools": [], "tool_choice": "auto", "response_format": {"type": "text"}}`,
		`{"prompt": "x", "n": 3, "logprobs": 5, "max_tokens": 0}`,
		`{"prompt": "x", "guided_json": "{\"type\": \"object\"}", "guided_choice": ["a", "\"b\""], "user": "u", "temperture": 1}`,
		`{"prompt": "x", "structured_outputs": {"choice": [], "json_object": true, "disable_any_whitespace": false, "jsn": 1}, "guided_grammar": "root ::= \"a\""}`,
		`{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 20, "n": 16}`,
		`{"prompt": "x", "n": 2, "stream": true, "logprobs": -1, "top_logprobs": 1, "best_of": 2}`,
		`{"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"a": {"enum": [1, 2]}}}}}}`,
		`{"prompt": "x", "grammar": "root ::= [a-z]{1,3} | \"(\" root \")\"", "guided_regex": "a"}`,
		`{"prompt": "x", "json_schema": {"$ref": "#/$defs/x"}, "response_format": {"type": "json_object"}}`,
		`{"prompt": [1, 2, 3], "echo": true, "logprobs": 2, "max_tokens": 0}`,
		`{"prompt": "x", "echo": true, "logprobs": 20, "max_tokens": 4, "stream": true, "n": 1}`,
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	allowed := map[int]bool{400: true, 404: true, 413: true}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		s := fuzzSrv
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", bytes.NewReader(body))
		var q request
		if e := decodeBody(w, r, s.cfg.MaxBodyBytes, &q); e != nil {
			check(t, e, allowed)
			return
		}
		x, e := s.parse(&q, chat)
		if e != nil {
			check(t, e, allowed)
			return
		}
		if x.req.MaxTokens > s.Engine().Info().ContextLength {
			t.Fatalf("accepted a request with max_tokens %d", x.req.MaxTokens)
		}
		if x.req.PromptOnly && !x.req.Echo {
			t.Fatalf("generates nothing without echo: %+v", x)
		}
		// A range the library owns (a negative max_tokens, say) is the engine's to
		// refuse: as a parameter, answered 400 naming the request's field.
		if err := x.req.Validate(); err != nil {
			if !errors.Is(err, specula.ErrInvalidParameter) {
				t.Fatalf("a request the engine refuses other than for a parameter: %v", err)
			}
			e := engineError(context.Background(), x, err)
			check(t, e, allowed)
			if e.Status != http.StatusBadRequest || e.Param == "" {
				t.Fatalf("the engine's %v answered %+v", err, e)
			}
		}
	})
}

func check(t *testing.T, e *apiError, allowed map[int]bool) {
	t.Helper()
	if !allowed[e.Status] || e.Message == "" || e.Type == "" {
		t.Fatalf("error %+v", e)
	}
	w := httptest.NewRecorder()
	writeError(w, e)
	if w.Code != e.Status || !bytes.HasPrefix(w.Body.Bytes(), []byte(`{"error":{"message":`)) {
		t.Fatalf("wrote %d %s", w.Code, w.Body.Bytes())
	}
}
