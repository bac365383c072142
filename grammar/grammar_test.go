package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGBNF(t *testing.T) {
	for _, c := range []struct {
		src     string
		yes, no []string
	}{
		{`root ::= "a" | "b" "c"`, []string{"a", "bc"}, []string{"", "b", "ab", "abc"}},
		{"root ::= [a-c]+ x\nx ::= \"!\"?", []string{"a", "abc!", "cc"}, []string{"", "!", "ad"}},
		{`root ::= [^a-z]{2,3}`, []string{"AB", "12!", "é1"}, []string{"A", "abc", "ABCD"}},
		{`root ::= "é" [α-ω]`, []string{"éα", "éω"}, []string{"é", "ea"}},
		{"root ::= ( \"x\" # a comment\n  | \"y\" )* \"\\n\"", []string{"\n", "xyx\n"}, []string{"x"}},
		{`root ::= "\x41\u00e9\U0001F600\"\\"`, []string{"Aé😀\"\\"}, []string{"A"}},
		{`root ::= . "."`, []string{"a.", "😀."}, []string{"ab"}},
		{"root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= [0-9] | list", []string{"[]", "[1,[2,[]],3]"}, []string{"[", "[1,]"}},
	} {
		g, err := ParseGBNF(c.src)
		require.NoError(t, err, c.src)
		for _, s := range c.yes {
			assert.True(t, g.Matches(s), "%q should match %q", c.src, s)
		}
		for _, s := range c.no {
			assert.False(t, g.Matches(s), "%q should not match %q", c.src, s)
		}
	}
}

func TestGBNFErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"root ::= \"a", "line 1, column 10: unterminated literal"},
		{"root ::= a\n", `rule "a" is used but not defined`},
		{"x ::= \"a\"", `no rule "root"`},
		{"root ::= \"a\"\nroot ::= \"b\"", `line 2, column 1: rule "root" is defined twice`},
		{"root ::= root \"a\" | \"b\"", "left-recursive"},
		{"root ::= [z-a]", "reversed"},
		{"root ::= \"a\"{3,1}", "impossible"},
		{"root ::= ( \"a\" ", `expected ")"`},
		{"root ::= \"\\q\"", `unknown escape \q`},
		{"root = \"a\"", `expected "::="`},
		{"root ::= <think>", "not supported"},
		{"root ::= \"a\" )", "line 1, column 14"},
	} {
		_, err := ParseGBNF(c.src)
		require.Error(t, err, c.src)
		assert.True(t, errors.Is(err, ErrSyntax) || strings.Contains(err.Error(), "grammar:"), "%v", err)
		assert.Contains(t, err.Error(), c.want, c.src)
	}
}

// TestRegexAgreesWithGo: the grammar of a regular expression accepts exactly the
// strings Go's regexp matches whole, over random strings of the pattern's alphabet.
func TestRegexAgreesWithGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, pat := range []string{`a+b*`, `(ab|cd)*e?`, `[a-c]{2,4}`, `x.y`, `(?i)ab`, `[^ab]c`, `a{3}|b{1,}`, `^(a|)b$`, `\d+\.\d*`} {
		g, err := ParseRegex(pat)
		require.NoError(t, err, pat)
		re := regexp.MustCompile(`^(?:` + pat + `)$`)
		alphabet := []rune("abcdexyAB.12")
		for range 3000 {
			n := rng.IntN(6)
			var b strings.Builder
			for range n {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			s := b.String()
			assert.Equal(t, re.MatchString(s), g.Matches(s), "%q on %q", pat, s)
		}
	}
	_, err := ParseRegex(`a\bb`)
	assert.ErrorContains(t, err, "word boundaries")
	_, err = ParseRegex(`a(`)
	assert.ErrorIs(t, err, ErrSyntax)
}

// randomJSON makes a random JSON value, nested up to depth.
func randomJSON(rng *rand.Rand, depth int) any {
	switch k := rng.IntN(7); {
	case k == 0 && depth > 0:
		m := map[string]any{}
		for i := range rng.IntN(4) {
			m[fmt.Sprintf("k%d\"\\é", i)] = randomJSON(rng, depth-1)
		}
		return m
	case k == 1 && depth > 0:
		var l []any
		for range rng.IntN(4) {
			l = append(l, randomJSON(rng, depth-1))
		}
		return l
	case k == 2:
		return "s\n\t\u0001" + string(rune('a'+rng.IntN(26)))
	case k == 3:
		return rng.NormFloat64() * 1e3
	case k == 4:
		return rng.IntN(2) == 0
	case k == 5:
		return nil
	}
	return rng.IntN(1000) - 500
}

func TestJSON(t *testing.T) {
	g, obj := JSONValue(), JSON()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		v := randomJSON(rng, 3)
		b, err := json.Marshal(v)
		require.NoError(t, err)
		assert.True(t, g.Matches(string(b)), "%s", b)
		ind, _ := json.MarshalIndent(v, "", "  ")
		assert.True(t, g.Matches(string(ind)), "%s", ind)
		_, isObj := v.(map[string]any)
		assert.Equal(t, isObj, obj.Matches(string(b)), "%s", b)
	}
	for _, bad := range []string{`{`, `{"a"}`, `[1,]`, `01`, `"\x"`, "\"a\nb\"", `tru`, `{"a":1,}`, `1.`} {
		assert.False(t, g.Matches(bad), bad)
	}
}

// A grammar that writes out to more than the bound is refused quickly, not built.
func TestGrammarTooLarge(t *testing.T) {
	_, err := ParseGBNF(`root ::= "` + strings.Repeat("abcdefghij", 20) + `"{10000}`) // 2 M elements from 230 bytes
	assert.ErrorIs(t, err, ErrSyntax)
	assert.ErrorContains(t, err, "too large")
}
