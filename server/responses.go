package server

import (
	"github.com/specula/specula"
)

// The response objects of the OpenAI API, field for field.

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
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
