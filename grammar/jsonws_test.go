package grammar

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wsSchema describes the documents of TestJSONWhitespace.
const wsSchema = `{"type": "object", "properties": {
	"name": {"type": "string"},
	"tags": {"type": "array", "items": {"type": "string"}},
	"inner": {"type": "object", "properties": {"n": {"type": "integer"}, "deep": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}}}
}, "required": ["name"], "additionalProperties": false}`

// The whitespace each mode allows, in the JSON grammars and a schema's: by
// default what encoding/json writes (compact or indented), compact only, or free.
func TestJSONWhitespace(t *testing.T) {
	compact := `{"name":"a b","tags":["x","y"],"inner":{"n":1,"deep":[[1,2],[]]}}`
	indent := func(in string) string { // as MarshalIndent writes it, in the schema's order
		var b bytes.Buffer
		require.NoError(t, json.Indent(&b, []byte(compact), "", in))
		return b.String()
	}
	cases := []struct {
		name               string
		text               string
		indent, comp, free bool
	}{
		{"compact", compact, true, true, true},
		{"MarshalIndent tabs", indent("\t"), true, false, true},
		{"MarshalIndent 2 spaces", indent("  "), true, false, true},
		{"MarshalIndent 4 spaces", indent("    "), true, false, true},
		{"one space after colon and comma", `{"name": "a b", "tags": ["x", "y"], "inner": {"n": 1, "deep": [[1, 2], []]}}`, true, false, true},
		{"3 spaces after a colon", `{"name":   "a b"}`, false, false, false},
		{"2 spaces after a comma", `{"name":"a b",  "tags":[]}`, false, false, false},
		{"space before a colon", `{"name" : "a b"}`, false, false, true},
		{"space before a comma", `{"name":"a b" ,"tags":[]}`, false, false, true},
		{"newline after the root", compact + "\n", false, false, true},
		{"space after the root", compact + " ", false, false, true},
		{"20 tabs", "{\n" + strings.Repeat("\t", 20) + `"name":"a b"}`, false, false, true},
		{"3 tabs at level 1", "{\n\t\t\t\"name\":\"a b\"}", false, false, true},
		{"9 spaces at level 1", "{\n" + strings.Repeat(" ", 9) + "\"name\":\"a b\"}", false, false, true},
		{"16 spaces at level 2", "{\"name\":\"a b\",\"inner\":{\n" + strings.Repeat(" ", 16) + "\"n\":1}}", true, false, true},
		{"tabs and spaces in one line", "{\n\t \"name\":\"a b\"}", false, false, true},
		{"space after an opening bracket", `{ "name":"a b"}`, false, false, true},
		{"leading newline", "\n" + compact, false, false, false},
	}
	schema := func(w Whitespace) *Grammar {
		g, err := ParseJSONSchema([]byte(wsSchema), WithWhitespace(w))
		require.NoError(t, err)
		return g
	}
	for _, m := range []struct {
		ws   Whitespace
		want func(int) bool
	}{
		{WhitespaceIndent, func(i int) bool { return cases[i].indent }},
		{WhitespaceCompact, func(i int) bool { return cases[i].comp }},
		{WhitespaceFree, func(i int) bool { return cases[i].free }},
	} {
		grammars := map[string]*Grammar{"JSON": JSON(WithWhitespace(m.ws)), "JSONValue": JSONValue(WithWhitespace(m.ws)), "schema": schema(m.ws)}
		for i, c := range cases {
			for gname, g := range grammars {
				assert.Equal(t, m.want(i), g.Matches(c.text), "%v %s: %s: %q", m.ws, gname, c.name, c.text)
			}
		}
	}
	assert.True(t, JSON().Matches(compact), "the default is WhitespaceIndent")
	assert.False(t, JSON().Matches(compact+" "), "the default is WhitespaceIndent")
}

// Everything encoding/json writes, compact or indented, nested deeper than the
// levels with their own bound, matches the default grammar.
func TestJSONWhitespaceMarshal(t *testing.T) {
	g := JSONValue()
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		v := randomJSON(rng, 4)
		for _, in := range []string{"\t", "  ", "    ", " "} {
			b, err := json.MarshalIndent(v, "", in)
			require.NoError(t, err)
			assert.True(t, g.Matches(string(b)), "%s", b)
		}
	}
	deep := strings.Repeat("[", 12) + "1" + strings.Repeat("]", 12)
	var v any
	require.NoError(t, json.Unmarshal([]byte(deep), &v))
	b, err := json.MarshalIndent(v, "", "\t")
	require.NoError(t, err)
	assert.True(t, g.Matches(string(b)), "12 levels, indented: %s", b)
}

// A mode that is none of them is an error of ParseJSONSchema and the default of
// JSON.
func TestJSONWhitespaceInvalid(t *testing.T) {
	_, err := ParseJSONSchema([]byte(`{"type": "null"}`), WithWhitespace(Whitespace(7)))
	assert.ErrorIs(t, err, ErrSyntax)
	assert.ErrorContains(t, err, "Whitespace(7)")
	assert.False(t, JSON(WithWhitespace(-1)).Matches(`{} `))
	assert.True(t, JSON(WithWhitespace(-1)).Matches("{\n}"))
}

// Deep documents under the default: a recursive schema and one whose deep values
// are any JSON, indented as MarshalIndent writes them, match (tabs and 2 spaces at
// every depth tried, 8 spaces up to the 9 levels whose bound grows); a line
// indented past its level's bound does not.
func TestJSONWhitespaceDeep(t *testing.T) {
	tree, err := ParseJSONSchema([]byte(`{"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"], "additionalProperties": false}}}`))
	require.NoError(t, err)
	free, err := ParseJSONSchema([]byte(`{"type": "object", "properties": {"a": {"type": "array"}}, "additionalProperties": true}`))
	require.NoError(t, err)
	type tn struct { // the schema's order: v, then kids
		V    int   `json:"v"`
		Kids []any `json:"kids,omitempty"`
	}
	node := func(depth int) any {
		v := tn{}
		for i := range depth {
			v = tn{i + 1, []any{v, tn{V: -1}}}
		}
		return v
	}
	for depth := range 6 {
		for _, in := range []string{"", "\t", "  ", "        "} {
			if len(in) == 8 && depth > 3 {
				continue // past 9 levels: 8 spaces a level is beyond the bound
			}
			b, err := json.MarshalIndent(node(depth), "", in)
			require.NoError(t, err)
			assert.True(t, tree.Matches(string(b)), "tree, depth %d, indent %q: %s", depth, in, b)
			b, err = json.MarshalIndent(map[string]any{"a": []any{node(depth)}, "b": node(depth)}, "", in)
			require.NoError(t, err)
			assert.True(t, free.Matches(string(b)), "any value, depth %d, indent %q: %s", depth, in, b)
		}
	}
	for _, bad := range []string{
		"{\n\t\"v\": 1,\n\t\"kids\": [\n\t\t\t\t\t{\"v\": 2}]}", // 5 tabs at level 2: the bound is 4
		"{\"v\": 1, \"kids\": [{\"v\": 2}\n\t\t\t]}",            // 3 tabs before the level-1 bracket: the bound is 2
		"{\"v\": 1}\n",
	} {
		assert.False(t, tree.Matches(bad), "%q", bad)
	}
}
