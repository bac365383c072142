package server

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/specula/specula"
)

// request is the body of POST /v1/completions and /v1/chat/completions: OpenAI's
// fields, and a few extensions that vLLM and llama-server accept too (top_k, min_p,
// repetition_penalty, ignore_eos, chat_template_kwargs), and the structured-output
// fields of both (grammar, json_schema; guided_json, guided_regex, guided_choice,
// guided_grammar, structured_outputs). A field it does not decode is refused with a
// 400 naming it, unless [ignoredField] names it as one that changes nothing in the
// text (user, store, metadata, …): see checkFields.
type request struct {
	Model         *string         `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`   // completions
	Messages      json.RawMessage `json:"messages"` // chat
	MaxTokens     *int            `json:"max_tokens"`
	MaxCompletion *int            `json:"max_completion_tokens"` // chat's newer name
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	N             *int            `json:"n"`
	Stream        *bool           `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	Stop             json.RawMessage    `json:"stop"`
	Seed             *int64             `json:"seed"`
	Echo             *bool              `json:"echo"`
	Logprobs         json.RawMessage    `json:"logprobs"` // an integer for completions, a bool for chat
	TopLogprobs      *int               `json:"top_logprobs"`
	BestOf           *int               `json:"best_of"`
	Suffix           *string            `json:"suffix"`
	LogitBias        map[string]float64 `json:"logit_bias"`
	PresencePenalty  *float64           `json:"presence_penalty"`
	FrequencyPenalty *float64           `json:"frequency_penalty"`
	Tools            json.RawMessage    `json:"tools"`
	ToolChoice       json.RawMessage    `json:"tool_choice"`
	ResponseFormat   *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
	Grammar    *string         `json:"grammar"`     // llama-server: GBNF
	JSONSchema json.RawMessage `json:"json_schema"` // llama-server: a schema
	// vLLM's structured-output fields (guided_decoding_backend is ignored).
	GuidedRegex             *string         `json:"guided_regex"`
	GuidedJSON              json.RawMessage `json:"guided_json"` // a schema, or a string holding one
	GuidedChoice            []string        `json:"guided_choice"`
	GuidedGrammar           *string         `json:"guided_grammar"` // GBNF
	GuidedWhitespacePattern *string         `json:"guided_whitespace_pattern"`
	StructuredOutputs       json.RawMessage `json:"structured_outputs"` // a structuredOutputs

	TopK               *int           `json:"top_k"`
	MinP               *float64       `json:"min_p"`
	RepetitionPenalty  *float64       `json:"repetition_penalty"`
	IgnoreEOS          *bool          `json:"ignore_eos"`
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
}

// chatMessage is one message of a chat request.
type chatMessage struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    *string         `json:"name"`
}

// Defaults where a request says nothing, as OpenAI has them.
const (
	defaultCompletionTokens = 16 // /v1/completions; chat runs to a stop or the context's end
	maxStops                = 4
)

// decodeBody reads a request body of at most limit bytes into q, answering 413 for a
// larger body and 400, naming the field, for JSON that is malformed or of the wrong
// type, and for fields the server neither decodes nor ignores by name (checkFields).
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, q *request) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "request_too_large",
				Message: fmt.Sprintf("the request body is larger than the server's limit of %d bytes", mbe.Limit)}
		}
		return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Message: "reading the request body: " + err.Error()}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "invalid_json",
			Message: "the request body is empty: send a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // chat_template_kwargs keep their integers
	err = dec.Decode(q)
	if err == nil {
		if _, err2 := dec.Token(); err2 != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil {
		return checkFields(body)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if te.Field == "" {
			return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "invalid_json",
				Message: fmt.Sprintf("the request body must be a JSON object, not %s", te.Value)}
		}
		return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: te.Field, Code: "invalid_type",
			Message: fmt.Sprintf("invalid type for '%s': expected %s, but got %s", te.Field, jsonKind(te.Type.String()), te.Value)}
	}
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "invalid_json",
		Message: "could not parse the JSON body of the request: " + err.Error()}
}

// jsonKind names a Go type the way a JSON user thinks of it.
func jsonKind(goType string) string {
	t := strings.TrimLeft(goType, "*")
	switch {
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "map") || strings.HasPrefix(t, "struct"):
		return "an object"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	}
	return t
}

// job is a validated request, ready for the engine.
type job struct {
	chat         bool
	stream       bool
	includeUsage bool
	model        *served // the engine it goes to
	modelName    string  // the name to answer with
	formatParam  string  // the request field the output format came from
	id           string
	created      int64
	req          specula.Request
}

// parse validates a request and turns it into a job. Every problem is a 400 naming
// the parameter, except an unknown model (404). What only the engine can judge — the
// prompt's tokens, its length, the format's text — it judges when the job is handed
// to it, before any work.
func (s *Server) parse(q *request, chat bool) (*job, *apiError) {
	j := &job{chat: chat, created: time.Now().Unix(), id: newJobID(chat)}
	var e *apiError
	if j.model, j.modelName, e = s.requestedModel(q.Model); e != nil {
		return nil, e
	}
	if e := checkEndpoint(q, chat); e != nil {
		return nil, e
	}
	if e := checkUnsupported(q, chat); e != nil {
		return nil, e
	}
	if j.stream, j.includeUsage, e = streamOptions(q); e != nil {
		return nil, e
	}
	if j.req.N, e = choiceCount(q, j.stream); e != nil {
		return nil, e
	}
	if j.req.Logprobs, j.req.TopLogprobs, e = logprobsParams(q, chat); e != nil {
		return nil, e
	}
	if e = samplingParams(q, &j.req.Params); e != nil {
		return nil, e
	}
	maxTokens, e := j.requestedMaxTokens(q, chat)
	if e != nil {
		return nil, e
	}
	if e := setFormat(q, j); e != nil {
		return nil, e
	}
	stops, e := parseStop(q.Stop)
	if e != nil {
		return nil, e
	}
	j.req.Stop, j.req.IgnoreEOS = stops, q.IgnoreEOS != nil && *q.IgnoreEOS
	if chat {
		e = chatPrompt(q, j)
	} else {
		e = completionPrompt(q, j)
	}
	if e != nil {
		return nil, e
	}
	j.req.MaxTokens = tokenBudget(maxTokens, chat)
	// Scoring a text, as lm-evaluation-harness asks: echo with logprobs scores the
	// prompt's tokens, and echo with max_tokens 0 generates nothing (OpenAI's legacy
	// completions, vLLM); without echo, max_tokens 0 keeps meaning "to the end of the
	// context".
	j.req.PromptOnly = j.req.Echo && maxTokens != nil && *maxTokens == 0
	return j, nil
}

// newJobID returns a fresh id in OpenAI's form: "chatcmpl-…" for chat, "cmpl-…" for
// completions.
func newJobID(chat bool) string {
	if chat {
		return "chatcmpl-" + randomID()
	}
	return "cmpl-" + randomID()
}

// requestedModel returns the engine and the name to answer with: the one the
// request gives, which must be one the server answers to (404 otherwise), or the
// primary name.
func (s *Server) requestedModel(name *string) (*served, string, *apiError) {
	if name == nil || *name == "" {
		return s.models[0], s.models[0].names[0], nil
	}
	m := s.model(*name)
	if m == nil {
		var all []string
		for _, m := range s.models {
			all = append(all, quoteAll(m.names)...)
		}
		return nil, "", &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("the model '%s' does not exist: this server serves %s", *name, strings.Join(all, " and "))}
	}
	return m, *name, nil
}

// streamOptions reads stream and stream_options, which only a stream may have.
func streamOptions(q *request) (stream, includeUsage bool, e *apiError) {
	stream = q.Stream != nil && *q.Stream
	if q.StreamOptions != nil {
		if !stream {
			return false, false, badParam("stream_options", "stream_options is only allowed when stream is true")
		}
		includeUsage = q.StreamOptions.IncludeUsage != nil && *q.StreamOptions.IncludeUsage
	}
	return stream, includeUsage, nil
}

// samplingParams reads the sampling parameters into p, each checked against the
// range OpenAI's API gives it. A request with a seed samples reproducibly: the same
// seed gives the same text every time, 0 included.
func samplingParams(q *request, p *specula.Params) *apiError {
	p.Temperature, p.TopP = 1, 1
	if t := q.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return badParam("temperature", "temperature %v is out of range: it must lie in [0, 2]", *t)
		}
		p.Temperature = *t
	}
	if t := q.TopP; t != nil {
		if !(*t > 0 && *t <= 1) {
			return badParam("top_p", "top_p %v is out of range: it must lie in (0, 1]", *t)
		}
		p.TopP = *t
	}
	if k := q.TopK; k != nil {
		if *k < -1 {
			return badParam("top_k", "top_k %d is out of range: it must be -1 or 0 (all tokens) or positive", *k)
		}
		p.TopK = max(*k, 0)
	}
	if m := q.MinP; m != nil {
		if *m < 0 || *m > 1 {
			return badParam("min_p", "min_p %v is out of range: it must lie in [0, 1]", *m)
		}
		p.MinP = *m
	}
	if r := q.RepetitionPenalty; r != nil {
		if !(*r > 0 && *r <= 10) {
			return badParam("repetition_penalty", "repetition_penalty %v is out of range: it must lie in (0, 10]", *r)
		}
		p.RepetitionPenalty = *r
	}
	if q.Seed != nil {
		p.Seed, p.Reproducible = uint64(*q.Seed), true
	}
	return nil
}

// requestedMaxTokens returns the request's bound on generated tokens, nil when it
// sets none: max_tokens, or for chat max_completion_tokens, its newer name, which
// wins. It must not be negative (0: to the end of the context) and must fit in the
// model's context.
func (j *job) requestedMaxTokens(q *request, chat bool) (*int, *apiError) {
	maxTokens, param := q.MaxTokens, "max_tokens"
	if chat && q.MaxCompletion != nil {
		maxTokens, param = q.MaxCompletion, "max_completion_tokens"
	}
	if maxTokens == nil {
		return nil, nil
	}
	if *maxTokens < 0 {
		return nil, badParam(param, "%s %d is out of range: it must be at least 0 (0: to the end of the context, as in the library and the CLI)", param, *maxTokens)
	}
	if ctxLen := j.model.eng.Info().ContextLength; ctxLen > 0 && *maxTokens > ctxLen {
		return nil, badParam(param, "%s %d is larger than the model's context length of %d tokens", param, *maxTokens, ctxLen)
	}
	return maxTokens, nil
}

// setFormat reads the output format a request asks for — OpenAI's response_format
// (json_object, json_schema), llama-server's grammar and json_schema, vLLM's
// guided_json, guided_regex, guided_choice, guided_grammar and structured_outputs;
// at most one, or a 400 naming them all. The engine compiles it (and keeps what it
// compiled, so a schema asked for again is not compiled again); one that does not
// compile is a 400 naming the field it came from.
func setFormat(q *request, j *job) *apiError {
	fs, e := requestedFormats(q)
	if e != nil {
		return e
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
	default:
		params := make([]string, len(fs))
		for i, f := range fs {
			params[i] = f.param
		}
		return badParam(params[1], "%s: a request takes one output format, not %s", params[1], strings.Join(params, " and "))
	}
	j.req.Format, j.formatParam = fs[0].f, fs[0].param
	return nil
}

// tokenBudget is the job's MaxTokens: the request's bound, or by default as OpenAI
// has it, the rest of the context for chat and defaultCompletionTokens for
// completions.
func tokenBudget(maxTokens *int, chat bool) int {
	switch {
	case maxTokens != nil:
		return *maxTokens
	case chat:
		return 0 // to a stop or the end of the context
	default:
		return defaultCompletionTokens
	}
}

// maxChoices is the most choices (n) a request may ask for.
const maxChoices = 16

// choiceCount reads n: 1 to maxChoices, and more than 1 only without stream.
func choiceCount(q *request, stream bool) (int, *apiError) {
	if q.N == nil {
		return 1, nil
	}
	n := *q.N
	switch {
	case n < 1 || n > maxChoices:
		return 0, badParam("n", "n %d is out of range: it must lie in [1, %d]", n, maxChoices)
	case n > 1 && stream:
		return 0, unsupported("n", "n = %d with stream is not supported: stream one choice, or ask for %d without stream", n, n)
	}
	return n, nil
}

// logprobsParams reads logprobs — for completions the number of alternatives (0: the
// chosen token's alone), for chat a bool with top_logprobs beside it — as the
// decoder's Logprobs and TopLogprobs.
func logprobsParams(q *request, chat bool) (on bool, top int, e *apiError) {
	if raw := bytes.TrimSpace(q.Logprobs); len(raw) > 0 && string(raw) != "null" {
		if chat {
			if json.Unmarshal(raw, &on) != nil {
				return false, 0, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: "logprobs", Code: "invalid_type",
					Message: "logprobs must be a boolean (true for the tokens' log-probabilities; top_logprobs asks for alternatives)"}
			}
		} else {
			if json.Unmarshal(raw, &top) != nil {
				return false, 0, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: "logprobs", Code: "invalid_type",
					Message: fmt.Sprintf("logprobs must be an integer from 0 to %d: how many alternatives to report per token", maxLogprobs)}
			}
			if top < 0 || top > maxLogprobs {
				return false, 0, badParam("logprobs", "logprobs %d is out of range: it must lie in [0, %d]", top, maxLogprobs)
			}
			on = true
		}
	}
	if q.TopLogprobs != nil {
		k := *q.TopLogprobs
		switch {
		case !chat:
			return false, 0, badParam("top_logprobs", "top_logprobs is a chat parameter: completions take logprobs = N")
		case k < 0 || k > maxLogprobs:
			return false, 0, badParam("top_logprobs", "top_logprobs %d is out of range: it must lie in [0, %d]", k, maxLogprobs)
		case k > 0 && !on:
			return false, 0, badParam("top_logprobs", "top_logprobs needs logprobs: true")
		}
		top = k
	}
	return on, top, nil
}

// checkUnsupported rejects features the server does not implement, rather than
// silently ignoring them. Their neutral values (best_of 1, penalties 0, no tools, …)
// are accepted.
func checkUnsupported(q *request, chat bool) *apiError {
	if q.BestOf != nil && *q.BestOf != 1 {
		return unsupported("best_of", "best_of = %d is not supported (it would generate best_of samples and return the likeliest): use n to get several samples", *q.BestOf)
	}
	if q.Suffix != nil && *q.Suffix != "" {
		return unsupported("suffix", "suffix (insertion) is not supported")
	}
	if len(q.LogitBias) > 0 {
		return unsupported("logit_bias", "logit_bias is not supported")
	}
	for _, pen := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", q.PresencePenalty}, {"frequency_penalty", q.FrequencyPenalty}} {
		if pen.v == nil || *pen.v == 0 {
			continue
		}
		if *pen.v < -2 || *pen.v > 2 {
			return badParam(pen.name, "%s %v is out of range: it must lie in [-2, 2]", pen.name, *pen.v)
		}
		return unsupported(pen.name, "%s is not supported; repetition_penalty is", pen.name)
	}
	if chat {
		if t := bytes.TrimSpace(q.Tools); len(t) > 0 && string(t) != "null" && string(t) != "[]" {
			return unsupported("tools", "tools (function calling) are not supported")
		}
		if t := bytes.TrimSpace(q.ToolChoice); len(t) > 0 && string(t) != "null" && string(t) != `"none"` && string(t) != `"auto"` {
			return unsupported("tool_choice", "tool_choice is not supported")
		}
	}
	return nil
}

// parseStop reads stop: null, a string, or an array of up to 4 strings. Empty strings
// are ignored.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badParam("stop", "stop must be a string or an array of strings")
	}
	if len(list) > maxStops {
		return nil, badParam("stop", "stop holds %d sequences: at most %d are allowed", len(list), maxStops)
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// completionPrompt reads prompt: a string, an array of one string, an array of token
// ids, or an array of one array of token ids.
func completionPrompt(q *request, j *job) *apiError {
	raw := bytes.TrimSpace(q.Prompt)
	if len(raw) == 0 || string(raw) == "null" {
		return badParam("prompt", "prompt is required")
	}
	var texts []string
	var idLists [][]int32
	switch {
	case json.Unmarshal(raw, &j.req.Prompt) == nil:
	case json.Unmarshal(raw, &texts) == nil:
		if len(texts) != 1 {
			return onePrompt(len(texts))
		}
		j.req.Prompt = texts[0]
	case json.Unmarshal(raw, &j.req.Tokens) == nil:
	case json.Unmarshal(raw, &idLists) == nil:
		if len(idLists) != 1 {
			return onePrompt(len(idLists))
		}
		j.req.Tokens = idLists[0]
	default:
		return badParam("prompt", "prompt must be a string, an array of one string, or an array of token ids")
	}
	if j.req.Prompt == "" && len(j.req.Tokens) == 0 {
		return badParam("prompt", "prompt must not be empty")
	}
	j.req.Echo = q.Echo != nil && *q.Echo
	return nil
}

// onePrompt refuses a request of n prompts but one.
func onePrompt(n int) *apiError {
	if n == 0 {
		return badParam("prompt", "prompt must not be empty")
	}
	return unsupported("prompt", "prompt holds %d prompts: this server takes one per request", n)
}

// chatPrompt reads messages, which the engine renders with the model's chat template.
func chatPrompt(q *request, j *job) *apiError {
	raw := bytes.TrimSpace(q.Messages)
	if len(raw) == 0 || string(raw) == "null" {
		return badParam("messages", "messages is required")
	}
	var msgs []chatMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return badParam("messages", "messages must be an array of message objects")
	}
	if len(msgs) == 0 {
		return badParam("messages", "messages must not be empty")
	}
	j.req.Messages = make([]specula.Message, len(msgs))
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role == nil {
			return badParam(param+".role", "%s.role is required", param)
		}
		role := *m.Role
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer": // OpenAI's newer name for system; templates know system
			role = "system"
		default:
			return badParam(param+".role", "%s.role %q is not one of system, developer, user, assistant, tool", param, role)
		}
		text, err := messageText(m.Content, param+".content")
		if err != nil {
			return err
		}
		j.req.Messages[i] = specula.Message{Role: role, Content: text}
		if m.Name != nil {
			j.req.Messages[i].Name = *m.Name
		}
	}
	j.req.TemplateArgs = q.ChatTemplateKwargs
	return nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = "'" + s + "'"
	}
	return out
}

// randomID returns 24 random letters and digits, for response ids.
func randomID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	var b [24]byte
	rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}
