package grammar

import (
	"errors"
	"testing"
)

// The parsers take text from requests: nothing may panic, every refusal wraps
// ErrSyntax (or says which rule or keyword is at fault), and what compiles can be
// matched.
//
//	go test ./grammar -run XXX -fuzz FuzzGBNF -fuzztime 30s

func FuzzGBNF(f *testing.F) {
	for _, s := range []string{`root ::= "a" | [b-d]+ x
x ::= ( "e" "f"? ){2,3} # c`, "root ::= [^\"\\\\]* \"\\u00e9\"", "root ::= .", "root ::= x\nx ::= x", "root ::= \"\\U0010FFFF\"{0,}", "root ::= (", "root ::= value0 tail\n" + jsonOptions{}.rules(0, 0)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		g, err := ParseGBNF(src)
		if err != nil {
			return
		}
		g.Matches("a")
		m := NewMatcher(g, NewVocab([]string{"a", "b", "{", "\"", ""}, []int32{4}))
		m.Mask(m.Next(m.Start(), 0))
		if m.Mask(1<<20).Count() != 0 { // a state it never made
			t.Fatal("tokens allowed in an unknown state")
		}
	})
}

func FuzzJSONSchema(f *testing.F) {
	for _, s := range []string{`{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}`, `{"enum": [1, "x", null]}`,
		`{"$defs": {"n": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}, "$ref": "#/$defs/n"}`, `{"type": "string", "pattern": "[a-z]+", "maxLength": 3}`,
		`{"type": ["array", "null"], "items": {"const": true}, "minItems": 1}`, `true`, `{"$ref": "#"}`,
		`{"type": "integer", "minimum": -1e17, "exclusiveMaximum": 99.5}`, `{"type": ["integer", "null"], "exclusiveMinimum": -3, "maximum": 0}`,
		`{"type": "number", "exclusiveMinimum": -2, "exclusiveMaximum": 0}`, `{"maximum": 1.5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		g, err := ParseJSONSchema(schema)
		if err != nil {
			var syntax bool
			syntax = errors.Is(err, ErrSyntax)
			if !syntax && len(err.Error()) == 0 {
				t.Fatal("an empty error")
			}
			return
		}
		g.Matches("{}")
	})
}

func FuzzRegex(f *testing.F) {
	for _, s := range []string{`a+b*`, `(?i)x{2,3}|[^a-c]`, `\d+\.\d*`, `^.$`, `a{1000}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		if g, err := ParseRegex(pattern); err == nil {
			g.Matches("ab")
		}
	})
}
