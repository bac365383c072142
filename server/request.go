package server

// request.go: the wire request and its parse into a specula.Request, in one place.
// Everything a request body may carry is decoded, checked and translated here and
// nowhere else: the JSON types ([request], [chatMessage], [structuredOutputs]), the
// JSON syntax and type errors, the unknown-field check, and every field's
// translation — the model, the fields of the other endpoint, the features refused,
// streaming, n, logprobs, sampling, max_tokens, the output format, stops, the
// prompt or the messages. The rule: what is the wire's is judged here (a JSON type,
// a field's endpoint, a feature the server does not implement, a value of the wire
// that the engine cannot express); what is the library's — a parameter's range, a
// format's text, the prompt's tokens and length — is passed on unjudged, and the
// engine's *specula.ParameterError comes back named by its JSON field (errors.go).

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"slices"
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
		// OpenAI's padding of chunks against length side channels: accepted,
		// and changes nothing in the text.
		IncludeObfuscation *bool `json:"include_obfuscation"`
		// vLLM's usage on every chunk: refused when true.
		ContinuousUsageStats *bool `json:"continuous_usage_stats"`
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
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"` // the schema is always followed strictly
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

// chatMessage is one message of a chat request: OpenAI's fields. Those of tool
// calling (tool_calls, function_call) and audio are refused when set, as the
// request's tools are; tool_call_id, which only names the call a tool message
// answers, is accepted and changes nothing; an assistant's refusal stands for its
// content when it has none.
type chatMessage struct {
	Role         *string         `json:"role"`
	Content      json.RawMessage `json:"content"` // a string, or an array of contentParts
	Name         *string         `json:"name"`
	Refusal      *string         `json:"refusal"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	ToolCallID   *string         `json:"tool_call_id"`
	FunctionCall json.RawMessage `json:"function_call"`
	Audio        json.RawMessage `json:"audio"`
}

// contentPart is one part of a message's content. Only text parts are supported;
// the other types OpenAI defines are named so that a part of theirs is refused for
// its type, not for its fields.
type contentPart struct {
	Type       string          `json:"type"`
	Text       json.RawMessage `json:"text"`
	ImageURL   json.RawMessage `json:"image_url"`
	InputAudio json.RawMessage `json:"input_audio"`
	File       json.RawMessage `json:"file"`
	Refusal    json.RawMessage `json:"refusal"`
}

// tool is one entry of a request's tools, as OpenAI defines it; tools are refused
// (see checkUnsupported), but a misspelt field is named first.
type tool struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// structuredOutputs is vLLM's structured_outputs object (its StructuredOutputsParams):
// one constraint — json (a schema, as an object or a string holding one), regex,
// choice, grammar or json_object — and options about it.
type structuredOutputs struct {
	JSON       json.RawMessage `json:"json"`
	Regex      *string         `json:"regex"`
	Choice     []string        `json:"choice"`
	Grammar    *string         `json:"grammar"`
	JSONObject *bool           `json:"json_object"`
	// Refused when set: a structural tag (tool-call tags) is not supported.
	StructuralTag json.RawMessage `json:"structural_tag"`
	// DisableAnyWhitespace makes a JSON format compact (specula.WhitespaceCompact):
	// no whitespace at all, as vLLM's xgrammar writes it; without it the JSON
	// grammars allow what encoding/json writes, compact or indented. It does not
	// concern regular expressions, grammars and choices.
	DisableAnyWhitespace *bool `json:"disable_any_whitespace"`
	// Refused when they would change the language: whitespace patterns and
	// additional properties are the grammar package's (see docs/structured-output.md).
	DisableAdditionalProperties *bool   `json:"disable_additional_properties"`
	WhitespacePattern           *string `json:"whitespace_pattern"`
	// Accepted either way: the server never falls back to another backend or to
	// free text; a format that does not compile is always a 400.
	DisableFallback *bool `json:"disable_fallback"`
}

// Defaults where a request says nothing, and the wire's own limits, as OpenAI has
// them.
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
		return invalidJSON("the request body is empty: send a JSON object")
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
			return invalidJSON("the request body must be a JSON object, not %s", te.Value)
		}
		return invalidType(te.Field, "invalid type for '%s': expected %s, but got %s", te.Field, jsonKind(te.Type.String()), te.Value)
	}
	return invalidJSON("could not parse the JSON body of the request: %v", err)
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

// Unknown fields. A request's top-level fields are the ones [request] decodes —
// OpenAI's, and the extensions of vLLM and llama-server that the server implements —
// and the ones ignoredField names, which change nothing in the text the model
// writes. Any other field is refused with a 400 naming it (unknown_parameter), as
// OpenAI's own API does: a typo such as "temperture" would otherwise run the
// request with the default temperature, silently changing its meaning.

// ignoredField reports whether name (matched, as encoding/json matches fields,
// without regard to case) is a field of OpenAI's, vLLM's or llama-server's requests
// that the server accepts and ignores because it has no effect on the text
// generated: who asks (user, safety_identifier), what a hosted service keeps or
// bills (store, metadata, service_tier), routing and cache hints (prompt_cache_key,
// cache_salt, cache_prompt, request_id, priority, guided_decoding_backend), and
// parallel_tool_calls, which means nothing without tools (refused).
func ignoredField(name string) bool {
	switch strings.ToLower(name) {
	case "user", "safety_identifier", "store", "metadata", "service_tier",
		"prompt_cache_key", "cache_salt", "cache_prompt", "request_id", "priority",
		"guided_decoding_backend", "parallel_tool_calls":
		return true
	}
	return false
}

// checkFields refuses a request body (a JSON object, already decoded into a
// request) with fields that are neither decoded nor, at the top level, ignored by
// name — at every level OpenAI's and vLLM's schemas define: the request, its
// messages and their content parts, response_format and its json_schema,
// stream_options, tools and their functions, structured_outputs.
func checkFields(body []byte) *apiError {
	return checkObject(body, reflect.TypeFor[request](), "", ignoredField)
}

// checkObject refuses the fields of the JSON object obj, found at prefix, that the
// struct type t does not decode (nor ignored names), then checks the objects
// inside it the same way (see nestedType); a value of the wrong JSON type is left
// to the decoding that reports it.
func checkObject(obj json.RawMessage, t reflect.Type, prefix string, ignored func(string) bool) *apiError {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(obj, &fields); err != nil {
		return invalidJSON("could not parse the JSON body of the request: reading the fields of %s: %v", t.Name(), err)
	}
	keys := slices.Sorted(maps.Keys(fields))
	var unknown []string
	for _, key := range keys {
		if _, ok := fieldByJSON(t, key); !ok && !ignored(key) {
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 {
		return unknownFieldError(prefix, unknown, jsonFields(t))
	}
	for _, key := range keys {
		f, ok := fieldByJSON(t, key)
		if !ok {
			continue // ignored by name
		}
		if inner, ok := nestedType(t, f); ok {
			if e := checkNested(bytes.TrimSpace(fields[key]), inner, prefix+key, noneIgnored); e != nil {
				return e
			}
		}
	}
	return nil
}

// fieldByJSON is the field of the struct type t that encoding/json decodes the key
// into (its JSON name, without regard to case).
func fieldByJSON(t reflect.Type, key string) (reflect.StructField, bool) {
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); strings.EqualFold(name, key) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// checkNested checks the object raw, or each object of the array raw, at param.
func checkNested(raw json.RawMessage, t reflect.Type, param string, ignored func(string) bool) *apiError {
	switch {
	case len(raw) > 0 && raw[0] == '{':
		return checkObject(raw, t, param+".", ignored)
	case len(raw) > 0 && raw[0] == '[':
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return nil // the decoding reports it
		}
		for i, el := range elems {
			if el = bytes.TrimSpace(el); len(el) > 0 && el[0] == '{' {
				if e := checkObject(el, t, fmt.Sprintf("%s[%d].", param, i), ignored); e != nil {
					return e
				}
			}
		}
	}
	return nil
}

// nestedType is the struct type of the objects the field f of t holds, whose
// fields are checked too: a struct field's own type (or a pointer's, or a
// slice's element), and for the raw fields that the parse reads later, the type
// it reads them as.
func nestedType(t reflect.Type, f reflect.StructField) (reflect.Type, bool) {
	ft := f.Type
	for ft.Kind() == reflect.Pointer || (ft.Kind() == reflect.Slice && ft != reflect.TypeFor[json.RawMessage]()) {
		ft = ft.Elem()
	}
	if ft.Kind() == reflect.Struct {
		return ft, true
	}
	switch {
	case t == reflect.TypeFor[request]() && f.Name == "Messages":
		return reflect.TypeFor[chatMessage](), true
	case t == reflect.TypeFor[request]() && f.Name == "Tools":
		return reflect.TypeFor[tool](), true
	case t == reflect.TypeFor[request]() && f.Name == "StructuredOutputs":
		return reflect.TypeFor[structuredOutputs](), true
	case t == reflect.TypeFor[chatMessage]() && f.Name == "Content":
		return reflect.TypeFor[contentPart](), true
	}
	return nil, false
}

// noneIgnored is the ignore list inside a request: empty.
func noneIgnored(string) bool { return false }

// jsonFields returns the JSON names of the fields of the struct type t.
func jsonFields(t reflect.Type) []string {
	names := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// unknownFieldError is the 400 of a request with fields the server does not know,
// prefix being where they are ("" at the top level, "structured_outputs." inside
// it): it names them all, and for a near miss the field meant.
func unknownFieldError(prefix string, unknown, known []string) *apiError {
	quoted := make([]string, len(unknown))
	for i, u := range unknown {
		quoted[i] = "'" + prefix + u + "'"
		if near := nearest(u, known); near != "" {
			quoted[i] += fmt.Sprintf(" (did you mean '%s%s'?)", prefix, near)
		}
	}
	noun := "argument"
	if len(unknown) > 1 {
		noun = "arguments"
	}
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: prefix + unknown[0], Code: "unknown_parameter",
		Message: fmt.Sprintf("unrecognized request %s supplied: %s; the server refuses fields it does not know rather than ignore them",
			noun, strings.Join(quoted, ", "))}
}

// nearest returns the name in known closest to s, if it is a likely typo of it (at
// most two edits, and fewer than half the name), or "".
func nearest(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), k); d < bestD && 2*d < len(k) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, counted in bytes.
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// exchange is one call of a generation endpoint, parsed: the specula.Request the
// engine is handed, and what the answer needs — the endpoint, whether it streams,
// the engine and the name to answer with, the response's id and time, and the
// request fields that the engine's errors about the Request's fields are named by.
type exchange struct {
	chat           bool
	stream         bool
	includeUsage   bool
	model          *served // the engine it goes to
	modelName      string  // the name to answer with
	formatParam    string  // the request field the output format came from
	maxTokensParam string  // max_tokens, or chat's max_completion_tokens
	id             string
	created        int64
	req            specula.Request
}

// parse translates a decoded request into an exchange. Every problem it finds is a
// 400 naming the parameter, except an unknown model (404). What only the engine can
// judge — a parameter's range, the prompt's tokens and length, the format's text —
// it judges when the request is handed to it, before any work.
func (s *Server) parse(q *request, chat bool) (*exchange, *apiError) {
	x := &exchange{chat: chat, created: time.Now().Unix(), id: newResponseID(chat)}
	var e *apiError
	if x.model, x.modelName, e = s.requestedModel(q.Model); e != nil {
		return nil, e
	}
	if e := checkEndpoint(q, chat); e != nil {
		return nil, e
	}
	if e := checkUnsupported(q, chat); e != nil {
		return nil, e
	}
	if x.stream, x.includeUsage, e = streamOptions(q); e != nil {
		return nil, e
	}
	if x.req.N, e = choiceCount(q); e != nil {
		return nil, e
	}
	if x.req.Logprobs, x.req.TopLogprobs, e = logprobsParams(q, chat); e != nil {
		return nil, e
	}
	if e = samplingParams(q, &x.req.Params); e != nil {
		return nil, e
	}
	maxTokens, e := x.requestedMaxTokens(q)
	if e != nil {
		return nil, e
	}
	if e := x.setFormat(q); e != nil {
		return nil, e
	}
	stops, e := parseStop(q.Stop)
	if e != nil {
		return nil, e
	}
	x.req.Stop, x.req.IgnoreEOS = stops, q.IgnoreEOS != nil && *q.IgnoreEOS
	if chat {
		e = x.chatPrompt(q)
	} else {
		e = x.completionPrompt(q)
	}
	if e != nil {
		return nil, e
	}
	x.req.MaxTokens = tokenBudget(maxTokens, chat)
	// Scoring a text, as lm-evaluation-harness asks: echo with logprobs scores the
	// prompt's tokens, and echo with max_tokens 0 generates nothing (OpenAI's legacy
	// completions, vLLM); without echo, max_tokens 0 keeps meaning "to the end of the
	// context".
	x.req.PromptOnly = x.req.Echo && maxTokens != nil && *maxTokens == 0
	return x, nil
}

// newResponseID returns a fresh id in OpenAI's form: "chatcmpl-…" for chat,
// "cmpl-…" for completions.
func newResponseID(chat bool) string {
	if chat {
		return "chatcmpl-" + randomID()
	}
	return "cmpl-" + randomID()
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

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = "'" + s + "'"
	}
	return out
}

// checkEndpoint refuses a field of the other endpoint — prompt or echo in a chat
// request, messages or a chat-only field in a completion — which would otherwise be
// decoded and silently left unused. A null is absent, and echo false, tools [] and
// tool_choice none or auto are accepted as the neutral values they are.
func checkEndpoint(q *request, chat bool) *apiError {
	var fields []string
	if chat {
		if isSet(q.Prompt) {
			fields = append(fields, "prompt")
		}
		if q.Echo != nil && *q.Echo {
			fields = append(fields, "echo")
		}
		if len(fields) > 0 {
			return badParam(fields[0], "%s: a completions field, not a chat one (chat takes messages)", strings.Join(fields, " and "))
		}
		return nil
	}
	if isSet(q.Messages) {
		fields = append(fields, "messages")
	}
	if q.MaxCompletion != nil {
		fields = append(fields, "max_completion_tokens")
	}
	if q.ChatTemplateKwargs != nil {
		fields = append(fields, "chat_template_kwargs")
	}
	if toolsAsked(q) {
		fields = append(fields, "tools")
	}
	if toolChoiceAsked(q) {
		fields = append(fields, "tool_choice")
	}
	if len(fields) > 0 {
		return badParam(fields[0], "%s: a chat field, not a completions one (completions take prompt and max_tokens)", strings.Join(fields, " and "))
	}
	return nil
}

// isSet reports whether a raw field is present and not null.
func isSet(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && string(raw) != "null"
}

// toolsAsked and toolChoiceAsked report whether a request asks for tools: tools set
// and not [], tool_choice set and neither none nor auto (the neutral values).
func toolsAsked(q *request) bool {
	return isSet(q.Tools) && string(bytes.TrimSpace(q.Tools)) != "[]"
}

func toolChoiceAsked(q *request) bool {
	tc := string(bytes.TrimSpace(q.ToolChoice))
	return isSet(q.ToolChoice) && tc != `"none"` && tc != `"auto"`
}

// checkUnsupported rejects features the server does not implement, rather than
// silently ignoring them. Their neutral values (best_of 1, penalties 0, no tools, …)
// are accepted. The presence and frequency penalties, which the library does not
// have, are checked against OpenAI's range before they are refused.
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
		if toolsAsked(q) {
			return unsupported("tools", "tools (function calling) are not supported")
		}
		if toolChoiceAsked(q) {
			return unsupported("tool_choice", "tool_choice is not supported")
		}
	}
	return nil
}

// streamOptions reads stream and stream_options, which only a stream may have.
func streamOptions(q *request) (stream, includeUsage bool, e *apiError) {
	stream = q.Stream != nil && *q.Stream
	if q.StreamOptions != nil {
		if !stream {
			return false, false, badParam("stream_options", "stream_options is only allowed when stream is true")
		}
		includeUsage = q.StreamOptions.IncludeUsage != nil && *q.StreamOptions.IncludeUsage
		if c := q.StreamOptions.ContinuousUsageStats; c != nil && *c {
			return false, false, unsupported("stream_options.continuous_usage_stats", "stream_options.continuous_usage_stats is not supported: include_usage sends the usage in the stream's last chunk")
		}
	}
	return stream, includeUsage, nil
}

// choiceCount reads n, 1 when absent. Its bound is the library's
// (specula.MaxChoices); the wire's own rule is that n 0, which the library would
// read as one, is refused. A stream carries every choice, each chunk naming its
// index, as OpenAI streams them.
func choiceCount(q *request) (int, *apiError) {
	if q.N == nil {
		return 1, nil
	}
	if *q.N == 0 {
		return 0, unsetZero("n", "one choice", "ask for at least 1")
	}
	return *q.N, nil
}

// logprobsParams reads logprobs — for completions the number of alternatives (0: the
// chosen token's alone), for chat a bool with top_logprobs beside it — as the
// decoder's Logprobs and TopLogprobs. Their bounds (specula.MaxTopLogprobs, and
// top_logprobs only with logprobs) are the library's.
func logprobsParams(q *request, chat bool) (on bool, top int, e *apiError) {
	if raw := bytes.TrimSpace(q.Logprobs); isSet(raw) {
		if chat {
			if json.Unmarshal(raw, &on) != nil {
				return false, 0, invalidType("logprobs", "logprobs must be a boolean (true for the tokens' log-probabilities; top_logprobs asks for alternatives)")
			}
		} else {
			if json.Unmarshal(raw, &top) != nil {
				return false, 0, invalidType("logprobs", "logprobs must be an integer from 0 to %d: how many alternatives to report per token", specula.MaxTopLogprobs)
			}
			on = true
		}
	}
	if q.TopLogprobs != nil {
		if !chat {
			return false, 0, badParam("top_logprobs", "top_logprobs is a chat parameter: completions take logprobs = N")
		}
		top = *q.TopLogprobs
	}
	return on, top, nil
}

// samplingParams translates the sampling parameters into p, with OpenAI's defaults
// (temperature 1, top_p 1) where the request says nothing. Their ranges are the
// library's (specula.Params.Validate): the engine refuses a value out of range
// before any work, and errors.go names the field. So temperature takes what the
// library takes, any finite number from 0 (OpenAI documents at most 2; vLLM, like
// this server, has no upper bound). The wire's own translations: top_k -1 means all
// tokens, as 0 does (vLLM); and a 0 that the library reads as unset — top_p 0 (all
// tokens), repetition_penalty 0 (no penalty) — is refused, as passing it on would
// silently ask for something else. A request with a seed samples reproducibly: the
// same seed gives the same text every time, 0 included.
func samplingParams(q *request, p *specula.Params) *apiError {
	p.Temperature, p.TopP = 1, 1
	if t := q.Temperature; t != nil {
		p.Temperature = *t
	}
	if t := q.TopP; t != nil {
		if *t == 0 {
			return unsetZero("top_p", "all tokens", "ask for a small top_p, or temperature 0 for greedy decoding")
		}
		p.TopP = *t
	}
	if k := q.TopK; k != nil {
		p.TopK = *k
		if *k == -1 {
			p.TopK = 0
		}
	}
	if m := q.MinP; m != nil {
		p.MinP = *m
	}
	if r := q.RepetitionPenalty; r != nil {
		if *r == 0 {
			return unsetZero("repetition_penalty", "no penalty", "1 is no penalty, and more than 1 penalises repeats")
		}
		p.RepetitionPenalty = *r
	}
	if q.Seed != nil {
		p.Seed, p.Reproducible = uint64(*q.Seed), true
	}
	return nil
}

// unsetZero refuses a 0 that the wire means as a value but the library reads as
// unset, its default (unset says which): passed on, the request would silently ask
// for something else. instead says what to ask for.
func unsetZero(param, unset, instead string) *apiError {
	return badParam(param, "%s 0 is out of range: the engine reads 0 as unset (%s); %s", param, unset, instead)
}

// requestedMaxTokens returns the request's bound on generated tokens, nil when it
// sets none, and notes its field: max_tokens, or for chat max_completion_tokens, its
// newer name, which wins. Its lower bound is the library's (0: to the end of the
// context); that it fit in the model's context is the wire's rule (OpenAI and vLLM
// refuse more), which the library, which stops at the context's end, does not have.
func (x *exchange) requestedMaxTokens(q *request) (*int, *apiError) {
	maxTokens, param := q.MaxTokens, "max_tokens"
	if x.chat && q.MaxCompletion != nil {
		maxTokens, param = q.MaxCompletion, "max_completion_tokens"
	}
	x.maxTokensParam = param
	if maxTokens == nil {
		return nil, nil
	}
	if ctxLen := x.model.eng.Info().ContextLength; ctxLen > 0 && *maxTokens > ctxLen {
		return nil, badParam(param, "%s %d is larger than the model's context length of %d tokens", param, *maxTokens, ctxLen)
	}
	return maxTokens, nil
}

// tokenBudget is the request's MaxTokens: its bound, or by default as OpenAI has
// it, the rest of the context for chat and defaultCompletionTokens for completions.
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

// setFormat reads the output format a request asks for — OpenAI's response_format
// (json_object, json_schema), llama-server's grammar and json_schema, vLLM's
// guided_json, guided_regex, guided_choice, guided_grammar and structured_outputs;
// at most one, or a 400 naming them all. The engine compiles it (and keeps what it
// compiled, so a schema asked for again is not compiled again); one that does not
// compile is a 400 naming the field it came from.
func (x *exchange) setFormat(q *request) *apiError {
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
	x.req.Format, x.formatParam = fs[0].f, fs[0].param
	return nil
}

// formatSource is an output format a request asks for, and the field it came from.
type formatSource struct {
	param string
	f     specula.Format
}

// requestedFormats lists the output formats a request asks for, each from its field:
// OpenAI's response_format, llama-server's grammar and json_schema, vLLM's guided_*
// fields and structured_outputs. More than one is the caller's error to report.
func requestedFormats(q *request) ([]formatSource, *apiError) {
	var out []formatSource
	add := func(param string, f specula.Format) { out = append(out, formatSource{param, f}) }
	if rf := q.ResponseFormat; rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			add("response_format", specula.Format{JSON: true})
		case "json_schema":
			if rf.JSONSchema == nil || len(bytes.TrimSpace(rf.JSONSchema.Schema)) == 0 {
				return nil, badParam("response_format.json_schema.schema", "response_format json_schema needs json_schema.schema")
			}
			add("response_format", specula.Format{JSONSchema: string(rf.JSONSchema.Schema)})
		default:
			return nil, badParam("response_format.type", "response_format type %q is not one of text, json_object, json_schema", rf.Type)
		}
	}
	if q.Grammar != nil && *q.Grammar != "" {
		add("grammar", specula.Format{Grammar: *q.Grammar})
	}
	if isSet(q.JSONSchema) {
		add("json_schema", specula.Format{JSONSchema: string(bytes.TrimSpace(q.JSONSchema))})
	}
	if q.GuidedRegex != nil && *q.GuidedRegex != "" {
		add("guided_regex", specula.Format{Regex: *q.GuidedRegex})
	}
	if s, e := schemaText(q.GuidedJSON, "guided_json"); e != nil {
		return nil, e
	} else if s != "" {
		add("guided_json", specula.Format{JSONSchema: s})
	}
	if q.GuidedChoice != nil {
		re, e := choiceRegex(q.GuidedChoice, "guided_choice")
		if e != nil {
			return nil, e
		}
		add("guided_choice", specula.Format{Regex: re})
	}
	if q.GuidedGrammar != nil && *q.GuidedGrammar != "" {
		add("guided_grammar", specula.Format{Grammar: *q.GuidedGrammar})
	}
	if p := q.GuidedWhitespacePattern; p != nil && *p != "" {
		return nil, unsupported("guided_whitespace_pattern", "guided_whitespace_pattern is not supported: the JSON grammars' whitespace is fixed")
	}
	so, e := structuredOutputFormats(q.StructuredOutputs)
	if e != nil {
		return nil, e
	}
	return append(out, so...), nil
}

// structuredOutputFormats reads vLLM's structured_outputs object: the formats it
// asks for (each named structured_outputs.<field>), the options the server cannot
// honour refused.
func structuredOutputFormats(raw json.RawMessage) ([]formatSource, *apiError) {
	const prefix = "structured_outputs."
	raw = bytes.TrimSpace(raw)
	if !isSet(raw) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, invalidType("structured_outputs", "invalid type for 'structured_outputs': expected an object (json, regex, choice, grammar or json_object)")
	}
	var so structuredOutputs // its fields were checked with the request's (checkFields)
	if err := json.Unmarshal(raw, &so); err != nil {
		return nil, badParam("structured_outputs", "structured_outputs: %v", err)
	}
	switch {
	case isSet(so.StructuralTag):
		return nil, unsupported(prefix+"structural_tag", "structured_outputs.structural_tag is not supported")
	case so.DisableAdditionalProperties != nil && *so.DisableAdditionalProperties:
		return nil, unsupported(prefix+"disable_additional_properties", "structured_outputs.disable_additional_properties is not supported (a schema's additionalProperties is false unless it says otherwise)")
	case so.WhitespacePattern != nil && *so.WhitespacePattern != "":
		return nil, unsupported(prefix+"whitespace_pattern", "structured_outputs.whitespace_pattern is not supported: the JSON grammars' whitespace is fixed")
	}
	var out []formatSource
	s, e := schemaText(so.JSON, prefix+"json")
	if e != nil {
		return nil, e
	}
	if s != "" {
		out = append(out, formatSource{prefix + "json", specula.Format{JSONSchema: s}})
	}
	if so.Regex != nil {
		out = append(out, formatSource{prefix + "regex", specula.Format{Regex: *so.Regex}})
	}
	if so.Choice != nil {
		re, e := choiceRegex(so.Choice, prefix+"choice")
		if e != nil {
			return nil, e
		}
		out = append(out, formatSource{prefix + "choice", specula.Format{Regex: re}})
	}
	if so.Grammar != nil {
		out = append(out, formatSource{prefix + "grammar", specula.Format{Grammar: *so.Grammar}})
	}
	if so.JSONObject != nil && *so.JSONObject {
		out = append(out, formatSource{prefix + "json_object", specula.Format{JSON: true}})
	}
	if so.DisableAnyWhitespace != nil && *so.DisableAnyWhitespace {
		for i := range out {
			if f := &out[i].f; f.JSON || f.JSONSchema != "" {
				f.Whitespace = specula.WhitespaceCompact
			}
		}
	}
	return out, nil
}

// schemaText reads a JSON Schema given as vLLM takes it: an object, or a string
// holding one ("" when absent or null).
func schemaText(raw json.RawMessage, param string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	switch {
	case !isSet(raw):
		return "", nil
	case raw[0] == '{':
		return string(raw), nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badParam(param, "%s: %v", param, err)
		}
		if strings.TrimSpace(s) == "" {
			return "", badParam(param, "%s is an empty string: give a JSON Schema", param)
		}
		return s, nil
	}
	return "", invalidType(param, "invalid type for '%s': expected a JSON Schema, as an object or a string holding one", param)
}

// choiceRegex is the regular expression (Go's syntax, which a Format's Regex takes
// whole) whose matches are exactly the given strings, each quoted by
// regexp.QuoteMeta: vLLM's guided_choice, the output one of them, whole.
func choiceRegex(choices []string, param string) (string, *apiError) {
	if len(choices) == 0 {
		return "", badParam(param, "%s is empty: give at least one string to choose from", param)
	}
	quoted := make([]string, len(choices))
	for i, c := range choices {
		quoted[i] = regexp.QuoteMeta(c)
	}
	return "(?:" + strings.Join(quoted, "|") + ")", nil
}

// parseStop reads stop: null, a string, or an array of up to 4 strings. Empty strings
// are ignored.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if !isSet(raw) {
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
// ids, or an array of one array of token ids; and echo.
func (x *exchange) completionPrompt(q *request) *apiError {
	raw := bytes.TrimSpace(q.Prompt)
	if !isSet(raw) {
		return badParam("prompt", "prompt is required")
	}
	var texts []string
	var idLists [][]int32
	switch {
	case json.Unmarshal(raw, &x.req.Prompt) == nil:
	case json.Unmarshal(raw, &texts) == nil:
		if len(texts) != 1 {
			return onePrompt(len(texts))
		}
		x.req.Prompt = texts[0]
	case json.Unmarshal(raw, &x.req.Tokens) == nil:
	case json.Unmarshal(raw, &idLists) == nil:
		if len(idLists) != 1 {
			return onePrompt(len(idLists))
		}
		x.req.Tokens = idLists[0]
	default:
		return badParam("prompt", "prompt must be a string, an array of one string, or an array of token ids")
	}
	if x.req.Prompt == "" && len(x.req.Tokens) == 0 {
		return badParam("prompt", "prompt must not be empty")
	}
	x.req.Echo = q.Echo != nil && *q.Echo
	return nil
}

// onePrompt refuses a request of n prompts but one.
func onePrompt(n int) *apiError {
	if n == 0 {
		return badParam("prompt", "prompt must not be empty")
	}
	return unsupported("prompt", "prompt holds %d prompts: this server takes one per request", n)
}

// chatPrompt reads messages, which the engine renders with the model's chat
// template, and chat_template_kwargs. The roles are the wire's: developer,
// OpenAI's newer name for system, is translated to it (templates know system).
func (x *exchange) chatPrompt(q *request) *apiError {
	raw := bytes.TrimSpace(q.Messages)
	if !isSet(raw) {
		return badParam("messages", "messages is required")
	}
	var msgs []chatMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return badParam("messages", "messages must be an array of message objects")
	}
	if len(msgs) == 0 {
		return badParam("messages", "messages must not be empty")
	}
	x.req.Messages = make([]specula.Message, len(msgs))
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role == nil {
			return badParam(param+".role", "%s.role is required", param)
		}
		role := *m.Role
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			role = "system"
		default:
			return badParam(param+".role", "%s.role %q is not one of system, developer, user, assistant, tool", param, role)
		}
		if e := checkMessageFields(m, param); e != nil {
			return e
		}
		text, err := messageText(m.Content, param+".content")
		if err != nil {
			return err
		}
		if text == "" && m.Refusal != nil {
			text = *m.Refusal
		}
		x.req.Messages[i] = specula.Message{Role: role, Content: text}
		if m.Name != nil {
			x.req.Messages[i].Name = *m.Name
		}
	}
	x.req.TemplateArgs = q.ChatTemplateKwargs
	return nil
}

// checkMessageFields refuses the fields of tool calling and audio in a message:
// the server cannot render them, and leaving them out would change the
// conversation the model reads. Their neutral values (null, []) are accepted.
func checkMessageFields(m chatMessage, param string) *apiError {
	switch {
	case isSet(m.ToolCalls) && string(bytes.TrimSpace(m.ToolCalls)) != "[]":
		return unsupported(param+".tool_calls", "%s.tool_calls: tool calls are not supported (nor are tools)", param)
	case isSet(m.FunctionCall):
		return unsupported(param+".function_call", "%s.function_call: function calls are not supported", param)
	case isSet(m.Audio):
		return unsupported(param+".audio", "%s.audio: audio is not supported: this model reads text only", param)
	}
	return nil
}

// messageText flattens a message's content: a string, null, or a list of parts of
// which only {"type": "text", "text": ...} are supported.
func messageText(raw json.RawMessage, param string) (string, *apiError) {
	if !isSet(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string          `json:"type"`
		Text json.RawMessage `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badParam(param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", unsupported(fmt.Sprintf("%s[%d].type", param, i), "content parts of type %q are not supported: this model reads text only", p.Type)
		}
		var t string
		if err := json.Unmarshal(p.Text, &t); err != nil {
			return "", badParam(fmt.Sprintf("%s[%d].text", param, i), "%s[%d].text must be a string", param, i)
		}
		b.WriteString(t)
	}
	return b.String(), nil
}
