package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/specula/specula"
	"github.com/specula/specula/grammar"
)

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

// unknownFields returns, sorted, the keys of the JSON object obj that are neither
// JSON fields of the struct type t (without regard to case, as encoding/json
// decodes them) nor fields ignored reports. obj must be an object or null.
func unknownFields(obj json.RawMessage, t reflect.Type, ignored func(string) bool) ([]string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(obj, &fields); err != nil {
		return nil, fmt.Errorf("reading the fields of %s: %w", t.Name(), err)
	}
	known := jsonFields(t)
	var unknown []string
	for k := range fields {
		if !slices.ContainsFunc(known, func(n string) bool { return strings.EqualFold(n, k) }) && !ignored(k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	return unknown, nil
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

// checkFields refuses a request body (a JSON object, already decoded into a
// request) with top-level fields that are neither decoded nor ignored by name.
func checkFields(body []byte) *apiError {
	t := reflect.TypeFor[request]()
	unknown, err := unknownFields(body, t, ignoredField)
	if err != nil {
		return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "invalid_json",
			Message: "could not parse the JSON body of the request: " + err.Error()}
	}
	if len(unknown) == 0 {
		return nil
	}
	return unknownFieldError("", unknown, jsonFields(t))
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
	// DisableAnyWhitespace makes a JSON format compact (grammar.WhitespaceCompact):
	// no whitespace at all, as vLLM's xgrammar writes it; without it the JSON
	// grammars allow what encoding/json writes, compact or indented. It does not
	// concern regular expressions, grammars and choices.
	DisableAnyWhitespace *bool `json:"disable_any_whitespace"`
	// Refused when they would change the language: whitespace patterns and
	// additional properties are the grammar package's (see README).
	DisableAdditionalProperties *bool   `json:"disable_additional_properties"`
	WhitespacePattern           *string `json:"whitespace_pattern"`
	// Accepted either way: the server never falls back to another backend or to
	// free text; a format that does not compile is always a 400.
	DisableFallback *bool `json:"disable_fallback"`
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
	if raw := bytes.TrimSpace(q.JSONSchema); len(raw) > 0 && string(raw) != "null" {
		add("json_schema", specula.Format{JSONSchema: string(raw)})
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
		g, e := choiceGrammar(q.GuidedChoice, "guided_choice")
		if e != nil {
			return nil, e
		}
		add("guided_choice", specula.Format{Grammar: g})
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
// asks for (each named structured_outputs.<field>), its unknown fields and the
// options the server cannot honour refused.
func structuredOutputFormats(raw json.RawMessage) ([]formatSource, *apiError) {
	const prefix = "structured_outputs."
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: "structured_outputs", Code: "invalid_type",
			Message: "invalid type for 'structured_outputs': expected an object (json, regex, choice, grammar or json_object)"}
	}
	t := reflect.TypeFor[structuredOutputs]()
	unknown, err := unknownFields(raw, t, func(string) bool { return false })
	if err != nil {
		return nil, badParam("structured_outputs", "structured_outputs: %v", err)
	}
	if len(unknown) > 0 {
		return nil, unknownFieldError(prefix, unknown, jsonFields(t))
	}
	var so structuredOutputs
	if err := json.Unmarshal(raw, &so); err != nil {
		return nil, badParam("structured_outputs", "structured_outputs: %v", err)
	}
	switch {
	case len(bytes.TrimSpace(so.StructuralTag)) > 0 && string(bytes.TrimSpace(so.StructuralTag)) != "null":
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
		g, e := choiceGrammar(so.Choice, prefix+"choice")
		if e != nil {
			return nil, e
		}
		out = append(out, formatSource{prefix + "choice", specula.Format{Grammar: g}})
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
				f.Whitespace = grammar.WhitespaceCompact
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
	case len(raw) == 0 || string(raw) == "null":
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
	return "", &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: "invalid_type",
		Message: fmt.Sprintf("invalid type for '%s': expected a JSON Schema, as an object or a string holding one", param)}
}

// choiceGrammar is the GBNF grammar whose sentences are exactly the given strings
// (vLLM's guided_choice: the output is one of them, whole).
func choiceGrammar(choices []string, param string) (string, *apiError) {
	if len(choices) == 0 {
		return "", badParam(param, "%s is empty: give at least one string to choose from", param)
	}
	var b strings.Builder
	b.WriteString("root ::= ")
	for i, c := range choices {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(grammar.Quote(c))
	}
	return b.String(), nil
}

// checkEndpoint refuses a field of the other endpoint — prompt or echo in a chat
// request, messages or a chat-only field in a completion — which would otherwise be
// decoded and silently left unused. A null is absent, and echo false, tools [] and
// tool_choice none or auto are accepted as the neutral values they are.
func checkEndpoint(q *request, chat bool) *apiError {
	set := func(raw json.RawMessage) bool {
		raw = bytes.TrimSpace(raw)
		return len(raw) > 0 && string(raw) != "null"
	}
	var fields []string
	if chat {
		if set(q.Prompt) {
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
	if set(q.Messages) {
		fields = append(fields, "messages")
	}
	if q.MaxCompletion != nil {
		fields = append(fields, "max_completion_tokens")
	}
	if q.ChatTemplateKwargs != nil {
		fields = append(fields, "chat_template_kwargs")
	}
	if set(q.Tools) && string(bytes.TrimSpace(q.Tools)) != "[]" {
		fields = append(fields, "tools")
	}
	if tc := string(bytes.TrimSpace(q.ToolChoice)); set(q.ToolChoice) && tc != `"none"` && tc != `"auto"` {
		fields = append(fields, "tool_choice")
	}
	if len(fields) > 0 {
		return badParam(fields[0], "%s: a chat field, not a completions one (completions take prompt and max_tokens)", strings.Join(fields, " and "))
	}
	return nil
}
