package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/specula/specula/grammar"
)

// vLLM's structured-output fields constrain the output as response_format does:
// guided_json (a schema or a string holding one), guided_regex, guided_choice,
// guided_grammar and structured_outputs' json, regex, choice, grammar and
// json_object; greedy and sampled, whole, streamed and in chat.
func TestVLLMFormatFields(t *testing.T) {
	cfg := speculativeConfig()
	cfg.Engine.Model = withChatTemplate(t, testTarget, t.TempDir(), chatmlTemplate(t))
	_, ts := startServer(t, cfg)
	prompt := "// a record as JSON\n{\"ok\": true, \"kind\": \"b\"}\n"
	schema := map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"},
		"kind": map[string]any{"enum": []string{"a", "b"}}}, "required": []string{"ok", "kind"}}
	schemaText, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	record := func(s string) error {
		var v struct {
			OK   *bool
			Kind *string
		}
		d := json.NewDecoder(strings.NewReader(s))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil {
			return err
		}
		if v.OK == nil || v.Kind == nil || (*v.Kind != "a" && *v.Kind != "b") {
			return fmt.Errorf("not a record of the schema")
		}
		return nil
	}
	object := func(s string) error { var v map[string]any; return json.Unmarshal([]byte(s), &v) }
	compact := func(then func(string) error) func(string) error {
		return func(s string) error {
			var b bytes.Buffer
			if err := json.Compact(&b, []byte(s)); err != nil || b.String() != s {
				return fmt.Errorf("not compact JSON (%v)", err)
			}
			return then(s)
		}
	}
	oneOf := func(choices ...string) func(string) error {
		return func(s string) error {
			if !slices.Contains(choices, s) {
				return fmt.Errorf("not one of %q", choices)
			}
			return nil
		}
	}
	matches := func(re string) func(string) error {
		return func(s string) error {
			if !regexp.MustCompile(`^(?:` + re + `)$`).MatchString(s) {
				return fmt.Errorf("does not match %s", re)
			}
			return nil
		}
	}
	const re = `[a-z]{2,5}=[0-9]{1,3};`
	const gbnf = `root ::= ("yes" | "no") "."`
	choices := []string{"func", "type \"T\"", "var\tx"}
	special := []string{"a.b", "(x|y)*", `\d+`, "[^a]"} // the regular expressions' characters, literally
	for _, c := range []struct {
		name  string
		extra map[string]any
		check func(string) error
		json  bool // may end at max_tokens before it closes (whitespace: issue 30)
	}{
		{"guided_json", map[string]any{"guided_json": schema}, record, true},
		{"guided_json string", map[string]any{"guided_json": string(schemaText)}, record, true},
		{"guided_regex", map[string]any{"guided_regex": re}, matches(re), false},
		{"guided_choice", map[string]any{"guided_choice": choices}, oneOf(choices...), false},
		{"guided_choice of regex characters", map[string]any{"guided_choice": special}, oneOf(special...), false},
		{"guided_grammar", map[string]any{"guided_grammar": gbnf}, oneOf("yes.", "no."), false},
		{"structured_outputs.json", map[string]any{"structured_outputs": map[string]any{"json": schema}}, record, true},
		{"structured_outputs.json string", map[string]any{"structured_outputs": map[string]any{"json": string(schemaText), "disable_fallback": true}}, record, true},
		{"structured_outputs.regex", map[string]any{"structured_outputs": map[string]any{"regex": re}}, matches(re), false},
		{"structured_outputs.choice", map[string]any{"structured_outputs": map[string]any{"choice": choices}}, oneOf(choices...), false},
		{"structured_outputs.grammar", map[string]any{"structured_outputs": map[string]any{"grammar": gbnf}}, oneOf("yes.", "no."), false},
		{"structured_outputs.json_object", map[string]any{"structured_outputs": map[string]any{"json_object": true}}, object, true},
		{"structured_outputs.json compact", map[string]any{"structured_outputs": map[string]any{"json": schema, "disable_any_whitespace": true}}, compact(record), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			check := func(what string, r completionResp) {
				t.Helper()
				t.Logf("%s: %s %q", what, r.finish(), r.text())
				switch {
				case r.finish() == "stop":
					if err := c.check(r.text()); err != nil {
						t.Errorf("%s: %v: %q", what, err, r.text())
					}
				case !c.json:
					t.Errorf("%s: finish %q, want stop: %q", what, r.finish(), r.text())
				}
			}
			for i, temp := range []float64{0, 1, 1} {
				body := map[string]any{"prompt": prompt, "max_tokens": 64, "temperature": temp, "seed": i}
				maps.Copy(body, c.extra)
				r := complete(t, ts.URL+"/v1/completions", body)
				check(fmt.Sprintf("T=%v seed %d", temp, i), r)
				if i == 0 && (c.name == "guided_choice" || c.name == "structured_outputs.regex") {
					st := stream(t, ts.URL+"/v1/completions", body)
					if st.text() != r.text() || st.finish() != r.finish() {
						t.Errorf("streamed %q (%s), whole %q (%s)", st.text(), st.finish(), r.text(), r.finish())
					}
				}
			}
			chat := map[string]any{"messages": []map[string]any{{"role": "user", "content": "Answer, please."}}, "max_tokens": 64, "temperature": 0}
			maps.Copy(chat, c.extra)
			check("chat", complete(t, ts.URL+"/v1/chat/completions", chat))
		})
	}
}

// Request fields the server does not know are refused naming them (and the field
// meant, for a typo); those known to change nothing are accepted; two output formats
// at once, or vLLM options the server cannot honour, are refused naming them.
func TestRequestFields(t *testing.T) {
	_, ts := startServer(t, Config{})
	type want struct {
		status   int
		param    string
		code     string
		mentions []string // in the message
	}
	const p = `"prompt": "x", "max_tokens": 2, `
	for _, c := range []struct {
		name string
		path string
		body string
		want want
	}{
		{"typo", "/v1/completions", `{` + p + `"temperture": 0.2}`,
			want{400, "temperture", "unknown_parameter", []string{"'temperture'", "did you mean 'temperature'"}}},
		{"typo in chat", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "max_token": 5}`,
			want{400, "max_token", "unknown_parameter", []string{"did you mean 'max_tokens'"}}},
		{"several unknown", "/v1/completions", `{` + p + `"zeta": 1, "alpha": [1]}`,
			want{400, "alpha", "unknown_parameter", []string{"'alpha'", "'zeta'"}}},
		{"unknown vLLM option", "/v1/completions", `{` + p + `"min_tokens": 3}`,
			want{400, "min_tokens", "unknown_parameter", nil}},
		{"unknown in structured_outputs", "/v1/completions", `{` + p + `"structured_outputs": {"jsn": {"type": "object"}}}`,
			want{400, "structured_outputs.jsn", "unknown_parameter", []string{"did you mean 'structured_outputs.json'"}}},
		{"unknown in a message", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi", "bogus": 1}]}`,
			want{400, "messages[0].bogus", "unknown_parameter", []string{"'messages[0].bogus'"}}},
		{"typo in a later message", "/v1/chat/completions", `{"messages": [{"role": "system", "content": "x"}, {"role": "user", "contnet": "hi"}]}`,
			want{400, "messages[1].contnet", "unknown_parameter", []string{"did you mean 'messages[1].content'"}}},
		{"unknown in a content part", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "text", "txt": "hi"}]}]}`,
			want{400, "messages[0].content[0].txt", "unknown_parameter", []string{"did you mean 'messages[0].content[0].text'"}}},
		{"unknown in response_format", "/v1/completions", `{` + p + `"response_format": {"type": "json_object", "shema": {}}}`,
			want{400, "response_format.shema", "unknown_parameter", []string{"'response_format.shema'"}}},
		{"unknown in json_schema", "/v1/completions", `{` + p + `"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}, "strikt": true}}}`,
			want{400, "response_format.json_schema.strikt", "unknown_parameter", []string{"did you mean 'response_format.json_schema.strict'"}}},
		{"json_schema's own fields", "/v1/completions", `{` + p + `"response_format": {"type": "json_schema", "json_schema": {"name": "x", "description": "d", "schema": {"type": "integer"}, "strict": true}}}`,
			want{200, "", "", nil}},
		{"unknown in stream_options", "/v1/completions", `{` + p + `"stream": true, "stream_options": {"include_usge": true}}`,
			want{400, "stream_options.include_usge", "unknown_parameter", []string{"did you mean 'stream_options.include_usage'"}}},
		{"stream_options' own fields", "/v1/completions", `{` + p + `"stream": true, "stream_options": {"include_usage": true, "include_obfuscation": false, "continuous_usage_stats": false}}`,
			want{200, "", "", nil}},
		{"continuous_usage_stats", "/v1/completions", `{` + p + `"stream": true, "stream_options": {"continuous_usage_stats": true}}`,
			want{400, "stream_options.continuous_usage_stats", "unsupported_parameter", nil}},
		{"unknown in a tool", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "fucntion": {"name": "f"}}]}`,
			want{400, "tools[0].fucntion", "unknown_parameter", []string{"did you mean 'tools[0].function'"}}},
		{"unknown in a tool's function", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "params": {}}}]}`,
			want{400, "tools[0].function.params", "unknown_parameter", nil}},
		{"a tool, well formed", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}, "strict": true}}]}`,
			want{400, "tools", "unsupported_parameter", nil}},
		{"tool calls in a message", "/v1/chat/completions", `{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}`,
			want{400, "messages[0].tool_calls", "unsupported_parameter", nil}},
		{"audio in a message", "/v1/chat/completions", `{"messages": [{"role": "assistant", "audio": {"id": "a"}}]}`,
			want{400, "messages[0].audio", "unsupported_parameter", nil}},
		{"ignored names only at the top", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x", "user": "u"}]}`,
			want{400, "messages[0].user", "unknown_parameter", nil}},
		{"guided_json beside response_format", "/v1/completions", `{` + p + `"response_format": {"type": "json_object"}, "guided_json": {"type": "object"}}`,
			want{400, "guided_json", "invalid_value", []string{"response_format", "guided_json"}}},
		{"guided_choice beside guided_regex", "/v1/completions", `{` + p + `"guided_regex": "a", "guided_choice": ["a"]}`,
			want{400, "guided_choice", "invalid_value", []string{"guided_regex", "guided_choice"}}},
		{"guided_grammar beside structured_outputs", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "guided_grammar": "root ::= \"a\"", "structured_outputs": {"regex": "a"}}`,
			want{400, "structured_outputs.regex", "invalid_value", []string{"guided_grammar", "structured_outputs.regex"}}},
		{"two in structured_outputs", "/v1/completions", `{` + p + `"structured_outputs": {"json": {"type": "object"}, "choice": ["a"]}}`,
			want{400, "structured_outputs.choice", "invalid_value", []string{"structured_outputs.json", "structured_outputs.choice"}}},
		{"json_schema beside structured_outputs.json_object", "/v1/completions", `{` + p + `"json_schema": {"type": "object"}, "structured_outputs": {"json_object": true}}`,
			want{400, "structured_outputs.json_object", "invalid_value", []string{"json_schema", "structured_outputs.json_object"}}},
		{"empty guided_choice", "/v1/completions", `{` + p + `"guided_choice": []}`, want{400, "guided_choice", "invalid_value", nil}},
		{"guided_choice of numbers", "/v1/completions", `{` + p + `"guided_choice": [1, 2]}`, want{400, "guided_choice", "invalid_type", nil}},
		{"guided_json a number", "/v1/completions", `{` + p + `"guided_json": 5}`, want{400, "guided_json", "invalid_type", nil}},
		{"guided_json not a schema", "/v1/completions", `{` + p + `"guided_json": "{\"type\": \"thing\"}"}`, want{400, "guided_json", "", nil}},
		{"guided_grammar bad", "/v1/completions", `{` + p + `"guided_grammar": "root ::= [z-a]"}`, want{400, "guided_grammar", "", []string{"line 1"}}},
		{"a Lark grammar", "/v1/completions", `{` + p + `"guided_grammar": "start: \"a\" | \"b\""}`, want{400, "guided_grammar", "", []string{"line 1, column 6", "::="}}},
		{"structured_outputs.grammar bad", "/v1/completions", `{` + p + `"structured_outputs": {"grammar": "root ::= ("}}`, want{400, "structured_outputs.grammar", "", nil}},
		{"structured_outputs not an object", "/v1/completions", `{` + p + `"structured_outputs": "json"}`, want{400, "structured_outputs", "invalid_type", nil}},
		{"structural_tag", "/v1/completions", `{` + p + `"structured_outputs": {"structural_tag": "{}"}}`, want{400, "structured_outputs.structural_tag", "unsupported_parameter", nil}},
		{"disable_any_whitespace", "/v1/completions", `{` + p + `"structured_outputs": {"json_object": true, "disable_any_whitespace": true}}`,
			want{200, "", "", nil}},
		{"disable_additional_properties", "/v1/completions", `{` + p + `"structured_outputs": {"json_object": true, "disable_additional_properties": true}}`,
			want{400, "structured_outputs.disable_additional_properties", "unsupported_parameter", nil}},
		{"guided_whitespace_pattern", "/v1/completions", `{` + p + `"guided_json": {"type": "object"}, "guided_whitespace_pattern": "[ ]?"}`,
			want{400, "guided_whitespace_pattern", "unsupported_parameter", nil}},
		{"messages in a completion", "/v1/completions", `{` + p + `"messages": [{"role": "user", "content": "x"}]}`, want{400, "messages", "invalid_value", []string{"chat field"}}},
		{"chat fields in a completion", "/v1/completions", `{` + p + `"max_completion_tokens": 3, "chat_template_kwargs": {}}`,
			want{400, "max_completion_tokens", "invalid_value", []string{"max_completion_tokens and chat_template_kwargs"}}},
		{"prompt in chat", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "prompt": "y"}`, want{400, "prompt", "invalid_value", []string{"completions field"}}},
		{"echo in chat", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "echo": true}`, want{400, "echo", "invalid_value", nil}},
		{"neutral fields of the other endpoint", "/v1/completions", `{` + p + `"tools": [], "messages": null}`, want{200, "", "", nil}},
		{"ignored fields", "/v1/completions", `{` + p + `"user": "u", "metadata": {"a": 1}, "store": false, "service_tier": "auto", "parallel_tool_calls": true, ` +
			`"prompt_cache_key": "k", "safety_identifier": "s", "cache_salt": "c", "cache_prompt": true, "request_id": "r", "priority": 0, "guided_decoding_backend": "xgrammar"}`,
			want{200, "", "", nil}},
		{"case as encoding/json matches", "/v1/completions", `{"Prompt": "x", "MAX_TOKENS": 2, "Temperature": 0, "USER": "u"}`, want{200, "", "", nil}},
		{"neutral options", "/v1/completions", `{` + p + `"guided_whitespace_pattern": "", "structured_outputs": {"choice": ["a", "b"], "disable_fallback": true, ` +
			`"disable_any_whitespace": false, "disable_additional_properties": false, "whitespace_pattern": null, "structural_tag": null}}`,
			want{200, "", "", nil}},
		{"nulls are absent", "/v1/completions", `{` + p + `"guided_json": null, "guided_choice": null, "guided_grammar": null, "structured_outputs": null}`, want{200, "", "", nil}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, b := post(t, ts.URL+c.path, c.body)
			if c.want.status == 200 {
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				return
			}
			checkError(t, resp, b, c.want.status, c.want.param, c.want.code)
			msg := decode(t, b).Error.Message
			for _, m := range c.want.mentions {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q does not mention %q", msg, m)
				}
			}
		})
	}
}

// A choice list becomes a regular expression whose matches are exactly the choices:
// quotes, backslashes, control characters and the regular expressions' own
// characters taken literally.
func TestChoiceRegex(t *testing.T) {
	for _, c := range []struct {
		choices []string
		not     []string // near misses it must not match
	}{
		{[]string{"a", "b"}, []string{"", "ab", "c", "a "}},
		{[]string{"", " x"}, []string{"x", "  x"}},
		{[]string{"q\"\\\n\t\x01é😀"}, []string{"q\"\\\n\t\x01é", "q\"\\n\t\x01é😀"}},
		{[]string{"a.b", "(x|y)*", `\d+`, "$1", "[^a]"}, []string{"aXb", "xyxy", "x", "", "12", `\d`, "$", "b", "[^a"}},
	} {
		re, e := choiceRegex(c.choices, "guided_choice")
		if e != nil {
			t.Fatalf("%q: %v", c.choices, e)
		}
		// As Go reads it, and as the engine compiles a Format's Regex.
		whole := regexp.MustCompile(`^` + re + `$`)
		g, err := grammar.ParseRegex(re)
		if err != nil {
			t.Fatalf("%q: %s does not compile: %v", c.choices, re, err)
		}
		for _, s := range c.choices {
			if !whole.MatchString(s) || !g.Matches(s) {
				t.Errorf("%q: %s does not match the choice %q (Go %v, grammar %v)", c.choices, re, s, whole.MatchString(s), g.Matches(s))
			}
		}
		for _, s := range c.not {
			if whole.MatchString(s) || g.Matches(s) {
				t.Errorf("%q: %s matches %q, not a choice (Go %v, grammar %v)", c.choices, re, s, whole.MatchString(s), g.Matches(s))
			}
		}
	}
	if _, e := choiceRegex(nil, "guided_choice"); e == nil || e.Param != "guided_choice" {
		t.Errorf("no choices: %v", e)
	}
}

// A message's fields of OpenAI's schema are read as they mean: null and empty tool
// fields are neutral, and an assistant's refusal stands for its content when it has
// none — so the request reads as the conversation written plainly. (The chatml
// template renders no names.)
func TestChatMessageFields(t *testing.T) {
	demoModels(t)
	cfg := Config{}
	cfg.Engine.Model = withChatTemplate(t, testTarget, t.TempDir(), chatmlTemplate(t))
	_, ts := startServer(t, cfg)
	plain := []map[string]any{
		{"role": "user", "content": "write a loop"},
		{"role": "assistant", "content": "I cannot"},
		{"role": "user", "content": "why"},
	}
	withFields := []map[string]any{
		{"role": "user", "content": "write a loop", "function_call": nil, "audio": nil},
		{"role": "assistant", "content": nil, "refusal": "I cannot", "tool_calls": []any{}},
		{"role": "user", "content": "why", "name": "ann", "tool_call_id": nil},
	}
	ask := func(msgs []map[string]any) string {
		return complete(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 16, "temperature": 0}).text()
	}
	if got, want := ask(withFields), ask(plain); got != want {
		t.Errorf("with the schema's fields: %q, written plainly: %q", got, want)
	}
}
