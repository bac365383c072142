package server

// responses.go: the JSON out. The objects the generation endpoints answer with, as
// OpenAI's API has them field for field — whole completions, stream chunks, usage,
// the logprobs objects of both endpoints — and the timings extension, with the
// functions that fill them from the engine's events and completions. Errors are
// errors.go's; how the objects are written (whole or as server-sent events) is
// generate.go's.

import (
	"github.com/specula/specula"
)

// usage counts a request's tokens: the prompt's, the generated ones (all choices
// together) and their sum.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// usageOf is a completion's token counts, as the wire writes them.
func usageOf(c specula.Completion) *usage {
	u := usage(c.Usage)
	return &u
}

// completion is a text_completion object, whole or as a stream chunk.
type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"` // "text_completion"
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`   // in stream chunks only the last, with include_usage
	Timings *timings           `json:"timings,omitempty"` // an extension, as llama-server's; on a stream's last chunk
}

type completionChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`      // a *completionLogprobs when asked for, else null
	FinishReason *string `json:"finish_reason"` // null until the last chunk
}

// chatCompletion is a chat.completion object.
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // "chat.completion"
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage"`
	Timings *timings     `json:"timings,omitempty"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	Logprobs     any            `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
}

type chatMessageOut struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

// chatChunk is a chat.completion.chunk object of a stream.
type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"` // "chat.completion.chunk"
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usage            `json:"usage,omitempty"`
	Timings *timings          `json:"timings,omitempty"` // on the last chunk
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// timings describes how a request ran, under the names llama-server uses; clients
// that do not know the field ignore it.
type timings struct {
	PromptN            int     `json:"prompt_n"`
	PromptMS           float64 `json:"prompt_ms"`
	PredictedN         int     `json:"predicted_n"`
	PredictedMS        float64 `json:"predicted_ms"`
	PredictedPerSecond float64 `json:"predicted_per_second"`
	TTFTMS             float64 `json:"ttft_ms"`
	DraftN             int     `json:"draft_n"`
	DraftNAccepted     int     `json:"draft_n_accepted"`
	TargetPasses       int     `json:"target_passes"`
	Speculative        bool    `json:"speculative"`
}

// timingsOf describes how a choice ran.
func timingsOf(c specula.Choice) *timings {
	s := c.Stats
	return &timings{
		PromptN:            s.PromptTokens,
		PromptMS:           ms(s.PrefillTime.Seconds()),
		PredictedN:         s.GeneratedTokens,
		PredictedMS:        ms((s.Duration - s.PrefillTime).Seconds()),
		PredictedPerSecond: s.TokensPerSecond(),
		TTFTMS:             ms(s.TimeToFirstToken.Seconds()),
		DraftN:             s.Drafted,
		DraftNAccepted:     s.Accepted,
		TargetPasses:       s.Steps,
		Speculative:        c.Speculative,
	}
}

func ms(seconds float64) float64 { return float64(int64(seconds*1e6)) / 1e3 }

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

// addPrompt appends an echoed prompt's logprobs: its first token unscored (value and
// alternatives null, as OpenAI writes them), then the log-probability of every later
// token given those before, text_offset counting from 0.
func (out *completionLogprobs) addPrompt(ev specula.Event) int {
	if len(ev.Logprobs) == 0 {
		return len(ev.Text)
	}
	return out.addTokens(ev.Logprobs, ev.Pieces, 0)
}

// add appends one scored token at offset: an unscored one (an echoed prompt's first)
// with null value and alternatives. The values are the library's, finite, and the
// alternatives only those the model and the format allow — fewer than asked where
// fewer are allowed, never padded with ruled-out tokens.
func (out *completionLogprobs) add(lp specula.TokenLogprob, offset int) {
	out.Tokens = append(out.Tokens, lp.Text)
	out.TextOffset = append(out.TextOffset, offset)
	if lp.Unscored {
		out.TokenLogprobs = append(out.TokenLogprobs, nil)
		out.TopLogprobs = append(out.TopLogprobs, nil)
		return
	}
	v := float64(lp.Logprob)
	out.TokenLogprobs = append(out.TokenLogprobs, &v)
	top := make(map[string]float64, len(lp.Top))
	for _, t := range lp.Top {
		if _, dup := top[t.Text]; !dup { // two tokens of one text: the likelier
			top[t.Text] = float64(t.Logprob)
		}
	}
	out.TopLogprobs = append(out.TopLogprobs, top)
}

// chatLogprobsOf renders lps for a chat choice.
func chatLogprobsOf(lps []specula.TokenLogprob) *chatLogprobs {
	out := &chatLogprobs{Content: []chatTokenLogprob{}}
	for _, lp := range lps {
		e := chatTokenLogprob{Token: lp.Text, Logprob: float64(lp.Logprob), Bytes: ints(lp.Bytes), TopLogprobs: []chatTopLogprob{}}
		for _, t := range lp.Top {
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: t.Text, Logprob: float64(t.Logprob), Bytes: ints(t.Bytes)})
		}
		out.Content = append(out.Content, e)
	}
	return out
}
