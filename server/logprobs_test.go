package server

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/specula/specula"
)

// lpResp reads the logprobs objects of both APIs.
type lpResp struct {
	Choices []struct {
		Index    int
		Text     string
		Message  *struct{ Content string }
		Logprobs *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
			Content       []struct {
				Token       string  `json:"token"`
				Logprob     float64 `json:"logprob"`
				Bytes       []int   `json:"bytes"`
				TopLogprobs []struct {
					Token   string  `json:"token"`
					Logprob float64 `json:"logprob"`
				} `json:"top_logprobs"`
			} `json:"content"`
		}
		FinishReason string `json:"finish_reason"`
	}
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func postLP(t *testing.T, url string, body map[string]any) lpResp {
	t.Helper()
	resp, b := post(t, url, body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var r lpResp
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// plainLogprobs decodes the request's prompt plainly with logprobs, for comparison:
// the values the server reports under speculation must be these.
func plainLogprobs(t *testing.T, srv *Server, prompt string, maxTokens, top int) specula.Completion {
	t.Helper()
	c, err := srv.Engine().GenerateFunc(context.Background(), specula.Request{Prompt: prompt, NoSpeculation: true, Logprobs: true, TopLogprobs: top,
		Params: specula.Params{MaxTokens: maxTokens, IgnoreEOS: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tokenText is a token's text as logprobs report it.
func tokenText(srv *Server, id int32) (string, []byte) {
	p, _ := srv.Engine().Tokenizer().Piece(id)
	return srv.Engine().Tokenizer().PieceText(id), []byte(p)
}

// The server's logprobs under speculation, completions and chat, whole and streamed,
// are plain decoding's: the same tokens, the same values, the same alternatives.
func TestLogprobs(t *testing.T) {
	cfg := speculativeConfig()
	cfg.Engine.Model = withChatTemplate(t, testTarget, t.TempDir(), chatmlTemplate(t))
	srv, ts := startServer(t, cfg)
	prompt := "func (s *Server) Close() error {\n"
	want := plainLogprobs(t, srv, prompt, 24, 3)
	close := func(a, b float64) bool { return math.Abs(a-b) < 1e-4 }

	r := postLP(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": true, "logprobs": 3})
	lp := r.Choices[0].Logprobs
	if lp == nil || len(lp.TokenLogprobs) != len(want.Tokens) {
		t.Fatalf("logprobs %+v for %d tokens", lp, len(want.Tokens))
	}
	offset := 0
	for i, w := range want.Logprobs {
		text, _ := tokenText(srv, w.Token)
		if lp.Tokens[i] != text || lp.TokenLogprobs[i] == nil || !close(*lp.TokenLogprobs[i], float64(w.Logprob)) || lp.TextOffset[i] != offset {
			t.Errorf("token %d: %q %v at %d, want %q %v at %d", i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TextOffset[i], text, w.Logprob, offset)
		}
		offset += len(text)
		for _, alt := range w.Top {
			s, _ := tokenText(srv, alt.Token)
			if v, ok := lp.TopLogprobs[i][s]; !ok || v < float64(alt.Logprob)-1e-4 {
				t.Errorf("token %d: alternative %q %v missing from %v", i, s, alt.Logprob, lp.TopLogprobs[i])
			}
		}
	}

	chat := map[string]any{"messages": []map[string]any{{"role": "user", "content": "Close the server."}}, "max_tokens": 12,
		"temperature": 0, "ignore_eos": true, "logprobs": true, "top_logprobs": 2}
	whole := postLP(t, ts.URL+"/v1/chat/completions", chat)
	content := whole.Choices[0].Logprobs.Content
	if len(content) != 12 {
		t.Fatalf("chat logprobs: %d entries", len(content))
	}
	for i, c := range content {
		if len(c.TopLogprobs) != 2 || c.TopLogprobs[0].Logprob < c.Logprob-1e-6 || len(c.Bytes) == 0 {
			t.Errorf("chat token %d: %+v", i, c)
		}
	}
	st := stream(t, ts.URL+"/v1/chat/completions", chat)
	var streamed []float64
	for _, c := range st.chunks {
		if len(c.Choices) == 0 || c.Choices[0].Logprobs == nil {
			continue
		}
		b, _ := json.Marshal(c.Choices[0].Logprobs)
		var l struct{ Content []struct{ Logprob float64 } }
		json.Unmarshal(b, &l)
		for _, e := range l.Content {
			streamed = append(streamed, e.Logprob)
		}
	}
	if len(streamed) != len(content) {
		t.Fatalf("streamed %d logprobs, whole %d", len(streamed), len(content))
	}
	for i := range streamed {
		if !close(streamed[i], content[i].Logprob) {
			t.Errorf("token %d: streamed %v, whole %v", i, streamed[i], content[i].Logprob)
		}
	}
}

// n choices: greedy ones are all plain decoding's text, seeded ones are the same on a
// second request and differ from each other, and usage counts every choice.
func TestSeveralChoices(t *testing.T) {
	srv, ts := startServer(t, speculativeConfig())
	prompt := "func main() {\n"
	want := reference(t, srv, prompt, 20)
	r := postLP(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 20, "temperature": 0, "ignore_eos": true, "n": 3})
	if len(r.Choices) != 3 || r.Usage.CompletionTokens != 60 {
		t.Fatalf("%d choices, %d tokens", len(r.Choices), r.Usage.CompletionTokens)
	}
	for i, c := range r.Choices {
		if c.Index != i || c.Text != want {
			t.Errorf("choice %d (index %d): %q, want %q", i, c.Index, c.Text, want)
		}
	}
	body := map[string]any{"prompt": prompt, "max_tokens": 20, "temperature": 1, "seed": 5, "n": 2, "ignore_eos": true}
	a := postLP(t, ts.URL+"/v1/completions", body)
	b := postLP(t, ts.URL+"/v1/completions", body)
	if a.Choices[0].Text != b.Choices[0].Text || a.Choices[1].Text != b.Choices[1].Text {
		t.Errorf("a seed gives the same choices: %q %q, then %q %q", a.Choices[0].Text, a.Choices[1].Text, b.Choices[0].Text, b.Choices[1].Text)
	}
	if a.Choices[0].Text == a.Choices[1].Text {
		t.Errorf("seeded choices are the same: %q", a.Choices[0].Text)
	}
}

// Echo with logprobs scores the prompt, as lm-evaluation-harness asks: the prompt's
// tokens first, the first with null value and alternatives, the others with the
// target's log-probability given those before (the decoder's Score); then, when
// max_tokens is not 0, the generated tokens as without echo. max_tokens 0 with echo
// generates nothing. Whole, streamed (the prompt's scores come with the echoed text in
// the first chunk) and with n = 2 (each choice starts with the prompt's scores).
func TestEchoLogprobs(t *testing.T) {
	srv, ts := startServer(t, speculativeConfig())
	prompt := "func (s *Server) Close() error {\n"
	ids := srv.Engine().Tokenizer().Encode(prompt, srv.Engine().Tokenizer().DefaultOptions())
	scored, err := srv.Engine().Score(context.Background(), specula.ScoreRequest{Prompt: prompt, TopLogprobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := plainLogprobs(t, srv, prompt, 6, 2)
	close := func(a *float64, b float32) bool { return a != nil && math.Abs(*a-float64(b)) < 1e-4 }
	checkPrompt := func(name string, tokens []string, values []*float64, top []map[string]float64, offsets []int) {
		t.Helper()
		if len(values) < len(ids) || len(tokens) != len(values) || len(top) != len(values) || len(offsets) != len(values) {
			t.Fatalf("%s: %d tokens, %d values, %d tops, %d offsets for a prompt of %d", name, len(tokens), len(values), len(top), len(offsets), len(ids))
		}
		if values[0] != nil || top[0] != nil || offsets[0] != 0 {
			t.Errorf("%s: the first token: %v, %v at %d; want null, null at 0", name, values[0], top[0], offsets[0])
		}
		for i := 1; i < len(ids); i++ {
			text, _ := tokenText(srv, ids[i])
			if tokens[i] != text || !close(values[i], scored[i-1].Logprob) || len(top[i]) != 2 || offsets[i] < offsets[i-1] {
				t.Errorf("%s: prompt token %d: %q %v %v at %d, want %q %v", name, i, tokens[i], values[i], top[i], offsets[i], text, scored[i-1].Logprob)
			}
		}
	}

	only := postLP(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 0, "echo": true, "logprobs": 2})
	c := only.Choices[0]
	if c.Text != prompt || c.FinishReason != "length" || only.Usage.CompletionTokens != 0 || c.Logprobs == nil || len(c.Logprobs.Tokens) != len(ids) {
		t.Fatalf("max_tokens 0: %q (%s), %d tokens generated, logprobs %+v", c.Text, c.FinishReason, only.Usage.CompletionTokens, c.Logprobs)
	}
	checkPrompt("max_tokens 0", c.Logprobs.Tokens, c.Logprobs.TokenLogprobs, c.Logprobs.TopLogprobs, c.Logprobs.TextOffset)

	body := map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": true, "echo": true, "logprobs": 2}
	both := postLP(t, ts.URL+"/v1/completions", body)
	c = both.Choices[0]
	lp := c.Logprobs
	if lp == nil || len(lp.Tokens) != len(ids)+len(want.Tokens) || !strings.HasPrefix(c.Text, prompt) {
		t.Fatalf("max_tokens 6: %q, logprobs %+v", c.Text, lp)
	}
	checkPrompt("max_tokens 6", lp.Tokens, lp.TokenLogprobs, lp.TopLogprobs, lp.TextOffset)
	for i, w := range want.Logprobs {
		at := len(ids) + i
		if !close(lp.TokenLogprobs[at], w.Logprob) || (i == 0 && lp.TextOffset[at] != len(prompt)) {
			t.Errorf("generated token %d: %v at %d, want %v", i, lp.TokenLogprobs[at], lp.TextOffset[at], w.Logprob)
		}
	}

	st := stream(t, ts.URL+"/v1/completions", body)
	if st.text() != c.Text {
		t.Errorf("streamed %q, whole %q", st.text(), c.Text)
	}
	first := st.chunks[0]
	raw, _ := json.Marshal(first.Choices[0].Logprobs)
	var slp struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []*float64           `json:"token_logprobs"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	}
	if err := json.Unmarshal(raw, &slp); err != nil || first.Choices[0].Text != prompt || len(slp.Tokens) != len(ids) {
		t.Fatalf("the first chunk: %q with %s (%v)", first.Choices[0].Text, raw, err)
	}
	checkPrompt("streamed", slp.Tokens, slp.TokenLogprobs, slp.TopLogprobs, slp.TextOffset)

	body["n"] = 2
	delete(body, "stream")
	two := postLP(t, ts.URL+"/v1/completions", body)
	if len(two.Choices) != 2 {
		t.Fatalf("n 2: %d choices", len(two.Choices))
	}
	for i, ch := range two.Choices {
		if ch.Text != c.Text || ch.Logprobs == nil || len(ch.Logprobs.Tokens) != len(lp.Tokens) {
			t.Fatalf("n 2, choice %d: %q with %+v", i, ch.Text, ch.Logprobs)
		}
		checkPrompt("n 2", ch.Logprobs.Tokens, ch.Logprobs.TokenLogprobs, ch.Logprobs.TopLogprobs, ch.Logprobs.TextOffset)
	}

	bare := postLP(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 0, "echo": true})
	if bare.Choices[0].Text != prompt || bare.Choices[0].Logprobs != nil || bare.Usage.CompletionTokens != 0 {
		t.Errorf("echo, max_tokens 0, no logprobs: %+v", bare.Choices[0])
	}
}

// An echoed prompt that names a special token keeps text_offset in step with the
// echoed text: the token's text is counted where the prompt has it.
func TestEchoOffsetsSpecial(t *testing.T) {
	srv, ts := startServer(t, speculativeConfig())
	prompt := "<|endoftext|>func main() {"
	if ids := srv.Engine().Tokenizer().Encode(prompt, srv.Engine().Tokenizer().DefaultOptions()); !srv.Engine().Tokenizer().IsSpecial(ids[0]) {
		t.Skipf("the demo tokenizer does not parse %q as a special token: %v", "<|endoftext|>", ids)
	}
	r := postLP(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 3, "temperature": 0, "ignore_eos": true, "echo": true, "logprobs": 1})
	c := r.Choices[0]
	if c.Logprobs == nil || !strings.HasPrefix(c.Text, prompt) {
		t.Fatalf("%q with %+v", c.Text, c.Logprobs)
	}
	lp := c.Logprobs
	for i := range lp.Tokens {
		end := len(c.Text)
		if i+1 < len(lp.Tokens) {
			end = lp.TextOffset[i+1]
		}
		if got := c.Text[lp.TextOffset[i]:end]; got != lp.Tokens[i] {
			t.Errorf("token %d %q: the text at its offsets is %q", i, lp.Tokens[i], got)
		}
	}
}

// Under an output format, top_logprobs list only tokens the format allows at each
// place — fewer than asked where fewer are allowed, never a ruled-out token padded in
// at -9999 — for completions (guided_choice; guided_regex with an echoed prompt,
// whose first token is null and whose others are unconstrained) and chat
// (response_format json_schema); every response is JSON with finite values.
func TestLogprobsUnderFormat(t *testing.T) {
	cfg := speculativeConfig()
	cfg.Engine.Model = withChatTemplate(t, testTarget, t.TempDir(), chatmlTemplate(t))
	srv, ts := startServer(t, cfg)
	words := func(ws ...string) func(string) (bool, bool) {
		return func(s string) (prefix, complete bool) {
			for _, w := range ws {
				prefix = prefix || strings.HasPrefix(w, s)
				complete = complete || w == s
			}
			return prefix, complete
		}
	}
	digits := func(s string) (bool, bool) {
		ok := len(s) <= 4 && strings.Trim(s, "0123456789") == ""
		return ok, ok && s != ""
	}
	const top = 5
	echoed := "const port = "
	for _, c := range []struct {
		name   string
		url    string
		body   map[string]any
		lang   func(string) (prefix, complete bool)
		prompt int  // echoed prompt tokens before the generated ones
		fewer  bool // some place allows fewer than top tokens
	}{
		{name: "completions, guided_choice", url: "/v1/completions", lang: words("yes", "no"), fewer: true,
			body: map[string]any{"prompt": "// Is Go compiled? Answer yes or no: ", "max_tokens": 8, "temperature": 0, "logprobs": top, "guided_choice": []string{"yes", "no"}}},
		{name: "completions, echo, guided_regex", url: "/v1/completions", lang: digits,
			prompt: len(srv.Engine().Tokenizer().Encode(echoed, srv.Engine().Tokenizer().DefaultOptions())),
			body:   map[string]any{"prompt": echoed, "echo": true, "max_tokens": 8, "temperature": 0, "logprobs": top, "guided_regex": "[0-9]{1,4}"}},
		{name: "chat, response_format", url: "/v1/chat/completions", lang: words(`"yes"`, `"no"`), fewer: true,
			body: map[string]any{"messages": []map[string]any{{"role": "user", "content": "Is Go compiled? Answer yes or no."}}, "max_tokens": 8,
				"temperature": 1, "seed": 3, "logprobs": true, "top_logprobs": top,
				"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer", "schema": map[string]any{"enum": []string{"yes", "no"}}}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, raw := post(t, ts.URL+c.url, c.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, raw)
			}
			if s := string(raw); strings.Contains(s, "-9999") || strings.Contains(s, `\u0000`) {
				t.Errorf("ruled-out tokens padded in: %s", s)
			}
			var r lpResp
			if err := json.Unmarshal(raw, &r); err != nil || len(r.Choices) != 1 || r.Choices[0].Logprobs == nil {
				t.Fatalf("%v: %s", err, raw)
			}
			// Each place's chosen token and alternatives, from either API's object.
			type place struct {
				token string
				value *float64
				alts  map[string]float64
			}
			var places []place
			lp := r.Choices[0].Logprobs
			for i := range lp.Tokens {
				places = append(places, place{lp.Tokens[i], lp.TokenLogprobs[i], lp.TopLogprobs[i]})
			}
			for _, e := range lp.Content {
				alts := map[string]float64{}
				for _, a := range e.TopLogprobs {
					alts[a.Token] = a.Logprob
				}
				places = append(places, place{e.Token, &e.Logprob, alts})
			}
			if len(places) <= c.prompt {
				t.Fatalf("%d places for a prompt of %d: %s", len(places), c.prompt, raw)
			}
			if c.prompt > 0 && (places[0].value != nil || places[0].alts != nil) {
				t.Errorf("the echoed prompt's first token: %v %v, want null, null", places[0].value, places[0].alts)
			}
			text, sawFewer := "", false
			for i, p := range places {
				if i == 0 && c.prompt > 0 {
					continue
				}
				if p.value == nil || *p.value > 1e-6 || math.IsNaN(*p.value) || math.IsInf(*p.value, 0) || len(p.alts) == 0 || len(p.alts) > top {
					t.Errorf("place %d %q: value %v, %d alternatives", i, p.token, p.value, len(p.alts))
				}
				if i < c.prompt {
					continue // the prompt's tokens: not constrained
				}
				_, complete := c.lang(text)
				for alt, v := range p.alts {
					if ok, _ := c.lang(text + alt); (!ok && !complete) || v < -100 {
						t.Errorf("place %d after %q: alternative %q at %v is ruled out", i, text, alt, v)
					}
				}
				sawFewer = sawFewer || len(p.alts) < top
				text += p.token
			}
			if ok, complete := c.lang(text); !ok || !complete {
				t.Errorf("the output %q is not a sentence of the format", text)
			}
			if c.fewer && !sawFewer {
				t.Errorf("no place listed fewer than %d alternatives: %s", top, raw)
			}
		})
	}
}
