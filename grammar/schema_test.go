package grammar

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// byteVocab is a vocabulary of every printable ASCII character, a few multi-byte
// ones, a few two-character tokens, and an end-of-sequence token (the last).
func byteVocab() *Vocab {
	var pieces []string
	for c := 0x20; c < 0x7F; c++ {
		pieces = append(pieces, string(rune(c)))
	}
	pieces = append(pieces, "\n", "\t", "é", "😀", `":`, `",`, "{\"", "\xc3", "\xa9", "")
	return NewVocab(pieces, []int32{int32(len(pieces) - 1)})
}

// sample walks a matcher from its start, each token drawn uniformly from those
// allowed (the end, where allowed, with probability stop), and returns the text, or
// false when it ran past maxLen.
func sample(m *Matcher, pieces func(int32) string, rng *rand.Rand, stop float64, maxLen int) (string, bool) {
	s := m.Start()
	var b strings.Builder
	eos := m.v.eos[0]
	for b.Len() < maxLen {
		mk := m.Mask(s)
		if mk.Allowed(eos) && (rng.Float64() < stop || mk.Count() == 1) {
			return b.String(), true
		}
		var allowed []int32
		for t := range int32(m.v.size) {
			if t != eos && mk.Allowed(t) {
				allowed = append(allowed, t)
			}
		}
		if len(allowed) == 0 {
			return b.String(), false
		}
		t := allowed[rng.IntN(len(allowed))]
		b.WriteString(pieces(t))
		s = m.Next(s, t)
		if s == Dead {
			panic("an allowed token led nowhere")
		}
	}
	return b.String(), false
}

// TestMaskIsNext: a state's mask holds exactly the tokens Next accepts there, along
// random walks of a JSON grammar.
func TestMaskIsNext(t *testing.T) {
	v := byteVocab()
	m := NewMatcher(JSONValue(), v)
	rng := rand.New(rand.NewPCG(5, 6))
	s := m.Start()
	for step := range 400 {
		mk := m.Mask(s)
		var allowed []int32
		for tok := range int32(v.size) {
			next := m.Next(s, tok)
			require.Equal(t, next != Dead, mk.Allowed(tok), "step %d token %d", step, tok)
			if next != Dead && tok != v.eos[0] {
				allowed = append(allowed, tok)
			}
		}
		if len(allowed) == 0 {
			s = m.Start()
			continue
		}
		s = m.Next(s, allowed[rng.IntN(len(allowed))])
	}
}

// validate checks v against the supported subset of JSON Schema (the test's own
// reading of the keywords ParseJSONSchema supports).
func validate(schema map[string]any, v any, defs map[string]any) error {
	if ref, ok := schema["$ref"].(string); ok {
		name := ref[strings.LastIndexByte(ref, '/')+1:]
		return validate(defs[name].(map[string]any), v, defs)
	}
	if c, ok := schema["const"]; ok {
		if fmt.Sprint(c) != fmt.Sprint(v) {
			return fmt.Errorf("const %v: got %v", c, v)
		}
		return nil
	}
	if e, ok := schema["enum"].([]any); ok {
		for _, x := range e {
			if fmt.Sprint(x) == fmt.Sprint(v) {
				return nil
			}
		}
		return fmt.Errorf("%v not in enum %v", v, e)
	}
	if alts, ok := schema["anyOf"].([]any); ok {
		for _, a := range alts {
			if validate(a.(map[string]any), v, defs) == nil {
				return nil
			}
		}
		return fmt.Errorf("%v matches no anyOf", v)
	}
	switch typ := schema["type"]; typ {
	case "object":
		o, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("not an object: %v", v)
		}
		props, _ := schema["properties"].(map[string]any)
		for _, r := range schema["required"].([]any) {
			if _, ok := o[r.(string)]; !ok {
				return fmt.Errorf("required %q missing in %v", r, o)
			}
		}
		for k, x := range o {
			ps, ok := props[k]
			if !ok {
				if schema["additionalProperties"] != true {
					return fmt.Errorf("additional property %q", k)
				}
				continue
			}
			if err := validate(ps.(map[string]any), x, defs); err != nil {
				return err
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			return fmt.Errorf("not an array: %v", v)
		}
		if mn, ok := schema["minItems"].(float64); ok && len(l) < int(mn) {
			return fmt.Errorf("%d items < %v", len(l), mn)
		}
		if mx, ok := schema["maxItems"].(float64); ok && len(l) > int(mx) {
			return fmt.Errorf("%d items > %v", len(l), mx)
		}
		for _, x := range l {
			if err := validate(schema["items"].(map[string]any), x, defs); err != nil {
				return err
			}
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("not a string: %v", v)
		}
		if p, ok := schema["pattern"].(string); ok && !regexp.MustCompile(`^(?:`+p+`)$`).MatchString(s) {
			return fmt.Errorf("%q does not match %s", s, p)
		}
		n := utf8.RuneCountInString(s)
		if mn, ok := schema["minLength"].(float64); ok && n < int(mn) {
			return fmt.Errorf("%q shorter than %v", s, mn)
		}
		if mx, ok := schema["maxLength"].(float64); ok && n > int(mx) {
			return fmt.Errorf("%q longer than %v", s, mx)
		}
	case "integer", "number":
		f, ok := v.(float64)
		if !ok || typ == "integer" && f != float64(int64(f)) {
			return fmt.Errorf("not an %s: %v", typ, v)
		}
		for k, bad := range map[string]func(b float64) bool{
			"minimum": func(b float64) bool { return f < b }, "maximum": func(b float64) bool { return f > b },
			"exclusiveMinimum": func(b float64) bool { return f <= b }, "exclusiveMaximum": func(b float64) bool { return f >= b },
		} {
			if b, ok := schema[k].(float64); ok && bad(b) {
				return fmt.Errorf("%v breaks %s %v", f, k, b)
			}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("not a boolean: %v", v)
		}
	}
	return nil
}

var testSchemas = []string{
	`{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["name", "age"]}`,
	`{"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3}`,
	`{"type": "object", "properties": {"color": {"enum": ["red", "green", "blu\"e"]}, "id": {"type": "string", "pattern": "[a-f0-9]{4}-x"}}, "required": ["color", "id"]}`,
	`{"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 2, "maxLength": 3}]}, "c": {"const": "k"}}, "required": ["c"]}`,
	`{"$defs": {"node": {"type": "object", "properties": {"val": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "boolean"}]}}, "required": ["val", "next"]}}, "$ref": "#/$defs/node"}`,
	`{"type": "object", "properties": {"a": {"type": "integer"}}, "required": [], "additionalProperties": true}`,
	`{"type": "object", "properties": {"month": {"type": "integer", "minimum": 1, "maximum": 12}, "delta": {"type": "integer", "exclusiveMinimum": -50, "maximum": -3}}, "required": ["month", "delta"]}`,
	`{"type": "array", "items": {"type": "number", "exclusiveMinimum": -1, "maximum": 1}, "minItems": 2, "maxItems": 4}`,
}

// TestSchemaOutputsValidate: texts drawn at random from each schema's grammar are
// JSON that validates against the schema (many seeds; walks that run too long are
// not counted).
func TestSchemaOutputsValidate(t *testing.T) {
	v := byteVocab()
	piece := func(tok int32) string {
		if int(tok) < 0x7F-0x20 {
			return string(rune(0x20 + tok))
		}
		return []string{"\n", "\t", "é", "😀", `":`, `",`, "{\"", "\xc3", "\xa9", ""}[tok-(0x7F-0x20)]
	}
	for i, src := range testSchemas {
		g, err := ParseJSONSchema([]byte(src))
		require.NoError(t, err, src)
		var schema map[string]any
		require.NoError(t, json.Unmarshal([]byte(src), &schema))
		defs, _ := schema["$defs"].(map[string]any)
		m := NewMatcher(g, v)
		done := 0
		for seed := range uint64(300) {
			text, ok := sample(m, piece, rand.New(rand.NewPCG(seed, uint64(i))), 0.3, 400)
			if !ok {
				continue
			}
			done++
			var out any
			require.NoError(t, json.Unmarshal([]byte(text), &out), "schema %d: %q", i, text)
			assert.NoError(t, validate(schema, out, defs), "schema %d: %q", i, text)
		}
		assert.Greater(t, done, 100, "schema %d: finished walks", i)
	}
}

func TestSchemaErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`{"type": "integer", "multipleOf": 3}`, `keyword "multipleOf" is not supported`},
		{`{"type": "strung"}`, `type "strung"`},
		{`{"$ref": "#/$defs/missing"}`, "does not resolve"},
		{`{"type": "string", "format": "hostname"}`, `format "hostname"`},
		{`{"type": "array", "minItems": 3, "maxItems": 1}`, "below"},
		{`{"properties": {"a": {"not": {}}}}`, `#/properties/a: keyword "not"`},
		{`{"type": "string", "pattern": "a\\bb"}`, "word boundaries"},
		{`{`, "JSON Schema"},
	} {
		_, err := ParseJSONSchema([]byte(c.src))
		require.Error(t, err, c.src)
		assert.ErrorIs(t, err, ErrSyntax, c.src)
		assert.Contains(t, err.Error(), c.want, c.src)
	}
}

// TestFirstSpace: with a SentencePiece-style vocabulary, whose first token's leading
// space is not written, the first token is judged without it, and later ones with.
func TestFirstSpace(t *testing.T) {
	g, err := ParseGBNF(`root ::= "ab" " cd"`)
	require.NoError(t, err)
	v := NewVocab([]string{" ab", "ab", " cd", " ", ""}, []int32{4})
	v.strip = true
	m := NewMatcher(g, v)
	s := m.Start()
	mk := m.Mask(s)
	assert.True(t, mk.Allowed(0) && mk.Allowed(1), "\" ab\" writes ab first")
	assert.False(t, mk.Allowed(2) || mk.Allowed(3) || mk.Allowed(4))
	s = m.Next(s, 0)
	require.NotEqual(t, Dead, s)
	mk = m.Mask(s)
	assert.True(t, mk.Allowed(2) && !mk.Allowed(0) && !mk.Allowed(4))
	assert.True(t, m.Accepting(m.Next(s, 2)))
	v.strip = false
	m = NewMatcher(g, v)
	assert.False(t, m.Mask(m.Start()).Allowed(0), "without stripping \" ab\" writes its space")
}

// The corners the review found: anchors inside a pattern, prefixItems with bounds,
// lengths beside a pattern, required properties not described, data after the
// schema, a vocabulary smaller than the logits.
func TestSchemaCorners(t *testing.T) {
	_, err := ParseRegex(`a$b`)
	assert.ErrorContains(t, err, "at the ends")
	g, err := ParseRegex(`^ab$`)
	require.NoError(t, err)
	assert.True(t, g.Matches("ab"))

	g, err = ParseJSONSchema([]byte(`{"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "items": false}`))
	require.NoError(t, err)
	assert.True(t, g.Matches(`[1, true]`))
	assert.False(t, g.Matches(`[1, true, 2]`))
	g, err = ParseJSONSchema([]byte(`{"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "null"}, "maxItems": 2}`))
	require.NoError(t, err)
	assert.True(t, g.Matches(`[1, null]`))
	assert.False(t, g.Matches(`[1, null, null]`))
	_, err = ParseJSONSchema([]byte(`{"type": "array", "prefixItems": [{}, {}], "maxItems": 1}`))
	assert.ErrorContains(t, err, "prefixItems")

	_, err = ParseJSONSchema([]byte(`{"type": "string", "pattern": "[a-z]+", "maxLength": 2}`))
	assert.ErrorContains(t, err, "maxLength with pattern")

	g, err = ParseJSONSchema([]byte(`{"type": "object", "required": ["a"]}`))
	require.NoError(t, err)
	assert.True(t, g.Matches(`{"a": [1]}`))
	assert.False(t, g.Matches(`{}`))

	_, err = ParseJSONSchema([]byte(`{"type": "null"} x`))
	assert.ErrorContains(t, err, "after the schema")

	m := NewMatcher(JSON(), NewVocab([]string{"{", "}", ""}, []int32{2}))
	logits := make([]float32, 100)
	m.MaskLogits(m.Start(), logits)
	assert.Equal(t, float32(0), logits[0])
	assert.True(t, math.IsInf(float64(logits[99]), -1), "ids past the vocabulary are masked")
}

// TestIntegerBounds: an integer schema with bounds matches exactly the integers
// within them, written as JSON writes them, for ranges that cross digit counts, zero
// and sign; bounds of a number, or none that an integer meets, are refused.
func TestIntegerBounds(t *testing.T) {
	for _, c := range []struct {
		schema string
		lo, hi int
	}{
		{`{"type": "integer", "minimum": 0, "maximum": 100}`, 0, 100},
		{`{"type": "integer", "minimum": 7, "maximum": 1234}`, 7, 1234},
		{`{"type": "integer", "minimum": -37, "maximum": 5}`, -37, 5},
		{`{"type": "integer", "minimum": -120, "maximum": -19}`, -120, -19},
		{`{"type": "integer", "exclusiveMinimum": 9, "exclusiveMaximum": 1000}`, 10, 999},
		{`{"type": "integer", "minimum": 2.5, "maximum": 19.9}`, 3, 19},
		{`{"type": "integer", "minimum": 305, "maximum": 305}`, 305, 305},
		{`{"type": "integer", "minimum": 1999, "maximum": 3001}`, 1999, 3001},
	} {
		g, err := ParseJSONSchema([]byte(c.schema))
		require.NoError(t, err, c.schema)
		for x := c.lo - 1200; x <= c.hi+1200; x++ {
			want := x >= c.lo && x <= c.hi
			require.Equal(t, want, g.Matches(strconv.Itoa(x)), "%s: %d", c.schema, x)
		}
		for _, bad := range []string{"-0", "007", "+5", "1.0", ""} {
			assert.False(t, g.Matches(bad), "%s: %q", c.schema, bad)
		}
	}
	g, err := ParseJSONSchema([]byte(`{"type": "integer", "minimum": 10}`))
	require.NoError(t, err)
	assert.True(t, g.Matches("9999999999999999"))
	assert.False(t, g.Matches("9"))
	assert.False(t, g.Matches("10000000000000000"), "17 digits: beyond the JSON grammar's integers")
	g, err = ParseJSONSchema([]byte(`{"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 12}}, "required": ["n"]}`))
	require.NoError(t, err)
	assert.True(t, g.Matches(`{"n": 12}`))
	assert.False(t, g.Matches(`{"n": 13}`))
	for _, c := range []struct{ src, want string }{
		{`{"type": "integer", "minimum": 5, "maximum": 4}`, "no integer"},
		{`{"type": "integer", "exclusiveMinimum": 4, "exclusiveMaximum": 5}`, "no integer"},
		{`{"type": "integer", "minimum": "3"}`, "must be a number"},
		{`{"type": "integer", "exclusiveMinimum": true}`, "must be a number"},
		{`{"type": "integer", "minimum": 1e16}`, "2^53"},
		{`{"anyOf": [{"type": "integer"}], "minimum": 3}`, "minimum beside anyOf"},
		{`{"enum": [1, 5], "maximum": 2}`, "maximum beside enum"},
		{`{"maximum": -1e17}`, "2^53"},
		{`{"type": "integer", "exclusiveMinimum": 9999999999999999}`, "2^53"},
		{`{"type": "integer", "minimum": 9007199254740993, "maximum": 9007199254740995}`, "2^53"},
	} {
		_, err := ParseJSONSchema([]byte(c.src))
		assert.ErrorIs(t, err, ErrSyntax, c.src)
		assert.ErrorContains(t, err, c.want, c.src)
	}
}

// TestNumberBounds: a number schema with whole bounds matches exactly the decimals
// within them — open and closed ends, ranges across zero, negative ones — checked on a
// grid of whole parts and fractions; "-0" is not written, exponents are not, and a
// fractional bound or an empty range is refused.
func TestNumberBounds(t *testing.T) {
	fractions := []string{"", ".0", ".00", ".5", ".05", ".50", ".001", ".999", ".0000000000000001"}
	for _, c := range []struct {
		schema         string
		lo, hi         float64
		loOpen, hiOpen bool
	}{
		{`{"type": "number", "minimum": 0, "maximum": 1}`, 0, 1, false, false},
		{`{"type": "number", "exclusiveMinimum": 0, "maximum": 10}`, 0, 10, true, false},
		{`{"type": "number", "minimum": -5, "exclusiveMaximum": 5}`, -5, 5, false, true},
		{`{"type": "number", "exclusiveMinimum": -12, "exclusiveMaximum": -3}`, -12, -3, true, true},
		{`{"type": "number", "minimum": -1, "exclusiveMaximum": 0}`, -1, 0, false, true},
		{`{"type": "number", "minimum": 7, "maximum": 7}`, 7, 7, false, false},
		{`{"type": "number", "minimum": 95, "maximum": 105}`, 95, 105, false, false},
		{`{"minimum": -3}`, -3, 1e16, false, false},
	} {
		g, err := ParseJSONSchema([]byte(c.schema))
		require.NoError(t, err, c.schema)
		for whole := -130; whole <= 130; whole++ {
			for _, f := range fractions {
				for _, neg := range []bool{false, true} {
					if neg != (whole < 0) && whole != 0 {
						continue
					}
					text := strconv.Itoa(max(whole, -whole)) + f
					if neg {
						text = "-" + text
					}
					x, ok := new(big.Rat).SetString(text) // exactly: 1.0000000000000001 > 1
					require.True(t, ok, text)
					lo, hi := new(big.Rat).SetFloat64(c.lo), new(big.Rat).SetFloat64(c.hi)
					above, below := x.Cmp(lo), x.Cmp(hi)
					want := (above > 0 || !c.loOpen && above == 0) && (below < 0 || !c.hiOpen && below == 0) && !(neg && x.Sign() == 0)
					require.Equal(t, want, g.Matches(text), "%s: %s", c.schema, text)
				}
			}
		}
		assert.False(t, g.Matches("1e0"), "%s: no exponent", c.schema)
	}
	for _, c := range []struct{ src, want string }{
		{`{"type": "number", "minimum": 0.5}`, "only whole bounds"},
		{`{"type": "number", "minimum": 2, "maximum": 1}`, "no number"},
		{`{"type": "number", "exclusiveMinimum": 3, "exclusiveMaximum": 3}`, "no number"},
		{`{"type": "number", "minimum": 3, "exclusiveMaximum": 3}`, "no number"},
		{`{"type": "number", "maximum": 1e17}`, "2^53"},
		{`{"type": "number", "minimum": 9007199254740993}`, "2^53"},
	} {
		_, err := ParseJSONSchema([]byte(c.src))
		assert.ErrorIs(t, err, ErrSyntax, c.src)
		assert.ErrorContains(t, err, c.want, c.src)
	}
}
