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
