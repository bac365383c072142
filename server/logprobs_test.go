package server

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/specula/specula/spec"
)

// lpResp reads the logprobs objects of both APIs.
type lpResp struct {
	Choices []struct {
		Index    int
		Text     string
		Message  *struct{ Content string }
		Logprobs *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []float64            `json:"token_logprobs"`
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
func plainLogprobs(t *testing.T, srv *Server, prompt string, maxTokens, top int) spec.Result {
	t.Helper()
	return plainRun(t, srv, spec.Request{Prompt: srv.tok.Encode(prompt, srv.tok.DefaultOptions()), MaxTokens: maxTokens,
		Logprobs: true, TopLogprobs: top})
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
		text, _ := tokenText(srv.tok, w.Token)
		if lp.Tokens[i] != text || !close(lp.TokenLogprobs[i], float64(w.Logprob)) || lp.TextOffset[i] != offset {
			t.Errorf("token %d: %q %v at %d, want %q %v at %d", i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TextOffset[i], text, w.Logprob, offset)
		}
		offset += len(text)
		for _, alt := range w.Top {
			s, _ := tokenText(srv.tok, alt.Token)
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
