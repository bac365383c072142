package server

import (
	"math"

	"github.com/specula/specula/spec"
	"github.com/specula/specula/tokenizer"
)

// maxLogprobs is the most alternatives logprobs (completions) or top_logprobs (chat)
// may ask for, as vLLM's default max_logprobs.
const maxLogprobs = spec.MaxTopLogprobs

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

// tokenText is a token's text and bytes as logprobs report them: the bytes it stands
// for, and those as text (a part of a character shown as U+FFFD).
func tokenText(tok *tokenizer.Tokenizer, id int32) (string, []int) {
	p, _ := tok.Piece(id)
	b := make([]int, len(p))
	for i := range len(p) {
		b[i] = int(p[i])
	}
	return tok.PieceText(id), b
}

// finite keeps a log-probability JSON can carry: -Inf (a token the model rules out)
// becomes -9999, as vLLM reports it.
func finite(x float32) float64 {
	if math.IsInf(float64(x), -1) || math.IsNaN(float64(x)) {
		return -9999
	}
	return float64(x)
}

// completionLogprobsOf renders lps for a completion choice whose text starts at
// offset in the returned text; pieces are the text each token added there (what the
// streaming decoder wrote for it), which text_offset counts. A prompt's logprobs,
// when echoed, come first.
func completionLogprobsOf(tok *tokenizer.Tokenizer, prompt *completionLogprobs, lps []spec.Logprob, pieces []string, offset int) *completionLogprobs {
	out := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	if prompt != nil {
		out.Tokens = append(out.Tokens, prompt.Tokens...)
		out.TokenLogprobs = append(out.TokenLogprobs, prompt.TokenLogprobs...)
		out.TopLogprobs = append(out.TopLogprobs, prompt.TopLogprobs...)
		out.TextOffset = append(out.TextOffset, prompt.TextOffset...)
	}
	for i, lp := range lps {
		out.add(tok, lp, offset)
		if i < len(pieces) {
			offset += len(pieces[i])
		}
	}
	return out
}

// promptLogprobsOf renders an echoed prompt's logprobs: its first token unscored,
// then scored, the log-probability of every later token given those before; pieces
// are the prompt tokens' texts, which text_offset counts from 0.
func promptLogprobsOf(tok *tokenizer.Tokenizer, prompt []int32, scored []spec.Logprob, pieces []string) *completionLogprobs {
	out := &completionLogprobs{}
	offset := 0
	for i, id := range prompt {
		if i == 0 {
			text, _ := tokenText(tok, id)
			out.Tokens = append(out.Tokens, text)
			out.TokenLogprobs = append(out.TokenLogprobs, nil)
			out.TopLogprobs = append(out.TopLogprobs, nil)
			out.TextOffset = append(out.TextOffset, offset)
		} else {
			out.add(tok, scored[i-1], offset)
		}
		if i < len(pieces) {
			offset += len(pieces[i])
		}
	}
	return out
}

// add appends one scored token at offset.
func (out *completionLogprobs) add(tok *tokenizer.Tokenizer, lp spec.Logprob, offset int) {
	text, _ := tokenText(tok, lp.Token)
	v := finite(lp.Logprob)
	out.Tokens = append(out.Tokens, text)
	out.TokenLogprobs = append(out.TokenLogprobs, &v)
	out.TextOffset = append(out.TextOffset, offset)
	top := make(map[string]float64, len(lp.Top))
	for _, t := range lp.Top {
		s, _ := tokenText(tok, t.Token)
		if _, dup := top[s]; !dup { // two tokens of one text: the likelier
			top[s] = finite(t.Logprob)
		}
	}
	out.TopLogprobs = append(out.TopLogprobs, top)
}

// chatLogprobsOf renders lps for a chat choice.
func chatLogprobsOf(tok *tokenizer.Tokenizer, lps []spec.Logprob) *chatLogprobs {
	out := &chatLogprobs{Content: []chatTokenLogprob{}}
	for _, lp := range lps {
		text, b := tokenText(tok, lp.Token)
		e := chatTokenLogprob{Token: text, Logprob: finite(lp.Logprob), Bytes: b, TopLogprobs: []chatTopLogprob{}}
		for _, t := range lp.Top {
			s, tb := tokenText(tok, t.Token)
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: s, Logprob: finite(t.Logprob), Bytes: tb})
		}
		out.Content = append(out.Content, e)
	}
	return out
}
