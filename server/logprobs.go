package server

import (
	"math"

	"github.com/specula/specula"
)

// maxLogprobs is the most alternatives logprobs (completions) or top_logprobs (chat)
// may ask for, as vLLM's default max_logprobs.
const maxLogprobs = specula.MaxTopLogprobs

// completionLogprobs is a completion choice's logprobs object (the legacy format). A
// prompt echoed with logprobs starts it, its first token's value and alternatives
// null (nothing comes before it).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// chatLogprobs is a chat choice's logprobs object.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal []chatTokenLogprob `json:"refusal"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// finite keeps a log-probability JSON can carry: -Inf (a token the model rules out)
// becomes -9999, as vLLM reports it.
func finite(x float32) float64 {
	if math.IsInf(float64(x), -1) || math.IsNaN(float64(x)) {
		return -9999
	}
	return float64(x)
}

// ints lists bytes as JSON numbers.
func ints(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// newCompletionLogprobs is an empty logprobs object (its lists [] rather than null).
func newCompletionLogprobs() *completionLogprobs {
	return &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
}

// addTokens appends scored tokens whose texts begin at offset; pieces are the text
// each token added there (what the streaming decoder wrote for it), which
// text_offset counts. It returns the offset after them.
func (out *completionLogprobs) addTokens(lps []specula.TokenLogprob, pieces []string, offset int) int {
	for i, lp := range lps {
		out.add(lp, offset)
		if i < len(pieces) {
			offset += len(pieces[i])
		}
	}
	return offset
}

// addPrompt appends an echoed prompt's logprobs: its first token unscored, then the
// log-probability of every later token given those before, text_offset counting
// from 0.
func (out *completionLogprobs) addPrompt(ev specula.Event) int {
	if len(ev.Logprobs) == 0 {
		return len(ev.Text)
	}
	out.Tokens = append(out.Tokens, ev.Logprobs[0].Text)
	out.TokenLogprobs = append(out.TokenLogprobs, nil)
	out.TopLogprobs = append(out.TopLogprobs, nil)
	out.TextOffset = append(out.TextOffset, 0)
	return out.addTokens(ev.Logprobs[1:], ev.Pieces[1:], len(ev.Pieces[0]))
}

// add appends one scored token at offset.
func (out *completionLogprobs) add(lp specula.TokenLogprob, offset int) {
	v := finite(lp.Logprob)
	out.Tokens = append(out.Tokens, lp.Text)
	out.TokenLogprobs = append(out.TokenLogprobs, &v)
	out.TextOffset = append(out.TextOffset, offset)
	top := make(map[string]float64, len(lp.Top))
	for _, t := range lp.Top {
		if _, dup := top[t.Text]; !dup { // two tokens of one text: the likelier
			top[t.Text] = finite(t.Logprob)
		}
	}
	out.TopLogprobs = append(out.TopLogprobs, top)
}

// chatLogprobsOf renders lps for a chat choice.
func chatLogprobsOf(lps []specula.TokenLogprob) *chatLogprobs {
	out := &chatLogprobs{Content: []chatTokenLogprob{}}
	for _, lp := range lps {
		e := chatTokenLogprob{Token: lp.Text, Logprob: finite(lp.Logprob), Bytes: ints(lp.Bytes), TopLogprobs: []chatTopLogprob{}}
		for _, t := range lp.Top {
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: t.Text, Logprob: finite(t.Logprob), Bytes: ints(t.Bytes)})
		}
		out.Content = append(out.Content, e)
	}
	return out
}
