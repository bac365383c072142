package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// JSON is the grammar of a JSON object, as OpenAI's response_format json_object
// asks for, with the whitespace the options allow (WhitespaceIndent unless set).
func JSON(opts ...JSONOption) *Grammar {
	o := newJSONOptions(opts)
	if !o.ws.Valid() {
		o.ws = WhitespaceIndent
	}
	return mustGBNF("root ::= object0 tail\n" + o.rules(0, 0))
}

// JSONValue is the grammar of any JSON value, with the whitespace the options
// allow (WhitespaceIndent unless set).
func JSONValue(opts ...JSONOption) *Grammar {
	o := newJSONOptions(opts)
	if !o.ws.Valid() {
		o.ws = WhitespaceIndent
	}
	return mustGBNF("root ::= value0 tail\n" + o.rules(0, 0))
}

func mustGBNF(src string) *Grammar {
	g, err := ParseGBNF(src)
	if err != nil {
		panic(err) // the package's own grammars are tested
	}
	return g
}

// ParseJSONSchema compiles a JSON Schema into the grammar of the JSON texts it
// validates. Supported: type (one or a list), properties (generated in their order),
// required, additionalProperties (false unless true or a schema: no property
// outside the schema is generated otherwise; a required property not described is
// generated with any value), items (false: none beyond prefixItems), prefixItems,
// minItems and maxItems (with prefixItems, counting them), enum, const, anyOf and
// oneOf (as anyOf), allOf of one schema, $ref to #/$defs/… or #/definitions/…
// (recursion allowed), for strings minLength and maxLength, or pattern or
// format (date, time, date-time, uuid, email, ipv4) — not both — and for integers and
// numbers minimum, maximum, exclusiveMinimum and exclusiveMaximum (numbers, as since
// draft 6; a number's bounds must be whole, and a bounded number is written without
// an exponent). The annotations (title, description,
// default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are
// ignored. Any other keyword — multipleOf, uniqueItems, not, if/then/else,
// patternProperties, … — is refused with an error naming it. The whitespace
// allowed between tokens is the options' (WhitespaceIndent unless set).
func ParseJSONSchema(schema []byte, opts ...JSONOption) (*Grammar, error) {
	o := newJSONOptions(opts)
	if !o.ws.Valid() {
		return nil, fmt.Errorf("%w: JSON Schema: whitespace mode %v is not one of the modes", ErrSyntax, o.ws)
	}
	root, err := decodeOrdered(schema)
	if err != nil {
		return nil, fmt.Errorf("%w: JSON Schema: %v", ErrSyntax, err)
	}
	c := &schemaCompiler{root: root, opts: o, rules: map[string]string{}, refs: map[string]string{}, anyFrom: o.maxDepth() + 1}
	body, err := c.schema(root, "#", 0)
	if err != nil {
		return nil, err
	}
	var src strings.Builder
	src.WriteString("root ::= " + body + " tail\n")
	names := make([]string, 0, len(c.rules))
	for n := range c.rules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		src.WriteString(n + " ::= " + c.rules[n] + "\n")
	}
	src.WriteString(o.rules(c.anyFrom, c.deepest))
	return ParseGBNF(src.String())
}

// schemaCompiler writes a schema's GBNF rules.
type schemaCompiler struct {
	root  any
	opts  jsonOptions
	rules map[string]string // rule name → body
	refs  map[string]string // $ref and level → its rule name
	n     int
	// The levels whose rules the schema uses: its containers' deepest, and the
	// first of the rules of any value (above maxDepth: none).
	deepest, anyFrom int
}

// anyValue names the rule of any value at level d.
func (c *schemaCompiler) anyValue(d int) string {
	c.anyFrom = min(c.anyFrom, d)
	return fmt.Sprintf("value%d", d)
}

// rule names a new rule of the given body.
func (c *schemaCompiler) rule(body string) string {
	c.n++
	name := fmt.Sprintf("s%d", c.n)
	c.rules[name] = body
	return name
}

var annotations = map[string]bool{"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true, "$defs": true, "definitions": true}

// schema writes the GBNF expression of a schema at path, its value at nesting level
// d (the root's is 0).
func (c *schemaCompiler) schema(s any, path string, d int) (string, error) {
	switch s := s.(type) {
	case bool:
		if s {
			return c.anyValue(d), nil
		}
		return "", fmt.Errorf("%w: JSON Schema %s: false matches nothing", ErrSyntax, path)
	case *ordered:
		return c.object(s, path, d)
	}
	return "", fmt.Errorf("%w: JSON Schema %s: a schema must be an object or a boolean", ErrSyntax, path)
}

func (c *schemaCompiler) object(s *ordered, path string, d int) (string, error) {
	known := map[string]bool{"type": true, "properties": true, "required": true, "additionalProperties": true,
		"items": true, "prefixItems": true, "minItems": true, "maxItems": true, "enum": true, "const": true, "anyOf": true,
		"oneOf": true, "allOf": true, "$ref": true, "minLength": true, "maxLength": true, "pattern": true, "format": true,
		"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true}
	for _, k := range s.keys {
		if !known[k] && !annotations[k] {
			return "", fmt.Errorf("%w: JSON Schema %s: keyword %q is not supported", ErrSyntax, path, k)
		}
	}
	for _, k := range []string{"$ref", "const", "enum", "anyOf", "oneOf", "allOf"} {
		if _, ok := s.get(k); ok {
			if b := boundKeyword(s); b != "" {
				// It would be ignored, and the bound not kept: say so.
				return "", fmt.Errorf("%w: JSON Schema %s: %s beside %s is not supported: put it inside", ErrSyntax, path, b, k)
			}
			break
		}
	}
	if ref, ok := s.get("$ref"); ok {
		return c.ref(ref, path, d)
	}
	if v, ok := s.get("const"); ok {
		return Quote(canonical(v)), nil
	}
	if v, ok := s.get("enum"); ok {
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return "", fmt.Errorf("%w: JSON Schema %s: enum must be a non-empty array", ErrSyntax, path)
		}
		alts := make([]string, len(list))
		for i, e := range list {
			alts[i] = Quote(canonical(e))
		}
		return "(" + strings.Join(alts, " | ") + ")", nil
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		v, ok := s.get(k)
		if !ok {
			continue
		}
		list, ok := v.([]any)
		if !ok || len(list) == 0 || k == "allOf" && len(list) != 1 {
			return "", fmt.Errorf("%w: JSON Schema %s: %s must be a non-empty array (allOf: of one schema)", ErrSyntax, path, k)
		}
		alts := make([]string, len(list))
		for i, sub := range list {
			body, err := c.schema(sub, fmt.Sprintf("%s/%s/%d", path, k, i), d)
			if err != nil {
				return "", err
			}
			alts[i] = body
		}
		return "(" + strings.Join(alts, " | ") + ")", nil
	}
	return c.typed(s, path, d)
}

// typed writes a schema by its type (all of them when it names none).
func (c *schemaCompiler) typed(s *ordered, path string, d int) (string, error) {
	var types []string
	switch t, _ := s.get("type"); t := t.(type) {
	case nil:
		types = c.impliedTypes(s)
	case string:
		types = []string{t}
	case []any:
		for _, e := range t {
			if str, ok := e.(string); ok {
				types = append(types, str)
			}
		}
	}
	if len(types) == 0 {
		return "", fmt.Errorf("%w: JSON Schema %s: type must be a string or an array of strings", ErrSyntax, path)
	}
	alts := make([]string, 0, len(types))
	for _, t := range types {
		var body string
		var err error
		switch t {
		case "object":
			body, err = c.objectType(s, path, d)
		case "array":
			body, err = c.arrayType(s, path, d)
		case "string":
			body, err = c.stringType(s, path)
		case "integer":
			body, err = integerType(s, path)
		case "number":
			body, err = numberType(s, path)
		case "boolean", "null":
			body = t
		default:
			err = fmt.Errorf("%w: JSON Schema %s: type %q is not a JSON type", ErrSyntax, path, t)
		}
		if err != nil {
			return "", err
		}
		alts = append(alts, body)
	}
	return "(" + strings.Join(alts, " | ") + ")", nil
}

// impliedTypes are the types a schema without "type" allows: those its keywords
// describe, or every one.
func (c *schemaCompiler) impliedTypes(s *ordered) []string {
	for _, k := range []string{"properties", "required", "additionalProperties"} {
		if _, ok := s.get(k); ok {
			return []string{"object"}
		}
	}
	for _, k := range []string{"items", "prefixItems", "minItems", "maxItems"} {
		if _, ok := s.get(k); ok {
			return []string{"array"}
		}
	}
	for _, k := range []string{"minLength", "maxLength", "pattern", "format"} {
		if _, ok := s.get(k); ok {
			return []string{"string"}
		}
	}
	if boundKeyword(s) != "" {
		return []string{"number"}
	}
	return []string{"object", "array", "string", "number", "boolean", "null"}
}

func (c *schemaCompiler) ref(v any, path string, d int) (string, error) {
	ref, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: JSON Schema %s: $ref must be a string", ErrSyntax, path)
	}
	key := fmt.Sprintf("%s@%d", ref, d) // the indent differs by level
	if name, ok := c.refs[key]; ok {
		return name, nil
	}
	var target any = c.root
	parts := strings.Split(strings.TrimPrefix(ref, "#"), "/")
	if !strings.HasPrefix(ref, "#") {
		return "", fmt.Errorf("%w: JSON Schema %s: $ref %q: only references inside the schema (#/…) are supported", ErrSyntax, path, ref)
	}
	for _, p := range parts[1:] {
		o, ok := target.(*ordered)
		if !ok {
			return "", fmt.Errorf("%w: JSON Schema %s: $ref %q does not resolve", ErrSyntax, path, ref)
		}
		if target, ok = o.get(strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")); !ok {
			return "", fmt.Errorf("%w: JSON Schema %s: $ref %q does not resolve", ErrSyntax, path, ref)
		}
	}
	name := c.rule("") // named first: the schema may refer to itself
	c.refs[key] = name
	body, err := c.schema(target, ref, d)
	if err != nil {
		return "", err
	}
	c.rules[name] = body
	return name, nil
}

// objectType writes an object: the properties in their order, the required ones
// always, the others optionally, commas between those present; then, when
// additionalProperties allows it, more members.
func (c *schemaCompiler) objectType(s *ordered, path string, d int) (string, error) {
	c.deepest = max(c.deepest, d)
	required := map[string]bool{}
	if v, ok := s.get("required"); ok {
		list, _ := v.([]any)
		for _, e := range list {
			if name, ok := e.(string); ok {
				required[name] = true
			}
		}
	}
	type prop struct {
		kv       string
		required bool
	}
	var props []prop
	declared := map[string]bool{}
	if v, ok := s.get("properties"); ok {
		o, ok := v.(*ordered)
		if !ok {
			return "", fmt.Errorf("%w: JSON Schema %s: properties must be an object", ErrSyntax, path)
		}
		for _, k := range o.keys {
			sub, _ := o.get(k)
			body, err := c.schema(sub, path+"/properties/"+k, c.opts.inner(d))
			if err != nil {
				return "", err
			}
			props = append(props, prop{Quote(canonical(k)) + ` pre ":" colon ` + body, required[k]})
			declared[k] = true
		}
	}
	// A required property the schema does not describe is still written, with any
	// value.
	if v, ok := s.get("required"); ok {
		list, _ := v.([]any)
		for _, e := range list {
			if name, ok := e.(string); ok && !declared[name] {
				props = append(props, prop{Quote(canonical(name)) + ` pre ":" colon ` + c.anyValue(c.opts.inner(d)), true})
				declared[name] = true
			}
		}
	}
	extra := ""
	switch v, _ := s.get("additionalProperties"); v := v.(type) {
	case bool:
		if v {
			extra = `string pre ":" colon ` + c.anyValue(c.opts.inner(d))
		}
	case *ordered:
		body, err := c.schema(v, path+"/additionalProperties", c.opts.inner(d))
		if err != nil {
			return "", err
		}
		extra = `string pre ":" colon ` + body
	}
	// first_i: nothing written yet; rest_i: something written (a comma first).
	n := len(props)
	first, rest := make([]string, n+1), make([]string, n+1)
	sep, closing := fmt.Sprintf(`pre "," sep%d `, d), fmt.Sprintf("close%d", d)
	first[n], rest[n] = `""`, closing
	if extra != "" {
		more := c.rule(`( ` + sep + extra + ` )*`)
		first[n] = c.rule(`( ` + extra + ` ` + more + ` ` + closing + ` )?`)
		rest[n] = more + " " + closing
	}
	for i := n - 1; i >= 0; i-- {
		p := props[i]
		withIt := p.kv + " " + rest[i+1]
		if p.required {
			first[i] = c.rule(withIt)
			rest[i] = c.rule(sep + withIt)
		} else {
			first[i] = c.rule(withIt + " | " + first[i+1])
			rest[i] = c.rule(sep + withIt + " | " + rest[i+1])
		}
	}
	return fmt.Sprintf(`"{" open%d %s "}"`, d, first[0]), nil
}

// arrayType writes an array: prefixItems in order, then items, between minItems and
// maxItems of them.
func (c *schemaCompiler) arrayType(s *ordered, path string, d int) (string, error) {
	c.deepest = max(c.deepest, d)
	minItems, maxItems, err := bounds(s, "minItems", "maxItems", path)
	if err != nil {
		return "", err
	}
	var prefix []string
	if v, ok := s.get("prefixItems"); ok {
		list, _ := v.([]any)
		for i, sub := range list {
			body, err := c.schema(sub, fmt.Sprintf("%s/prefixItems/%d", path, i), c.opts.inner(d))
			if err != nil {
				return "", err
			}
			prefix = append(prefix, body)
		}
	}
	item, more := "", true
	if v, ok := s.get("items"); ok && v != false {
		if item, err = c.schema(v, path+"/items", c.opts.inner(d)); err != nil {
			return "", err
		}
	} else {
		more = !ok // false: no items beyond the prefix
		item = c.anyValue(c.opts.inner(d))
	}
	if len(prefix) > 0 {
		// The prefix items are written as given, each after the one before (all of
		// them: fewer is refused when minItems asks for them); then up to maxItems in
		// all of the rest.
		if minItems > len(prefix) && !more || maxItems >= 0 && maxItems < len(prefix) {
			return "", fmt.Errorf("%w: JSON Schema %s: prefixItems with minItems or maxItems other than their count is not supported", ErrSyntax, path)
		}
		var b strings.Builder
		fmt.Fprintf(&b, `"[" open%d %s`, d, prefix[0])
		for _, p := range prefix[1:] {
			fmt.Fprintf(&b, ` pre "," sep%d %s`, d, p)
		}
		switch {
		case !more || maxItems == len(prefix):
		case maxItems < 0:
			fmt.Fprintf(&b, ` ( pre "," sep%d %s ){%d,}`, d, item, max(minItems-len(prefix), 0))
		default:
			fmt.Fprintf(&b, ` ( pre "," sep%d %s ){%d,%d}`, d, item, max(minItems-len(prefix), 0), maxItems-len(prefix))
		}
		fmt.Fprintf(&b, ` close%d "]"`, d)
		return b.String(), nil
	}
	elems := c.rule(item)
	var list string
	switch {
	case maxItems == 0:
		list = `""`
	case maxItems < 0:
		tail := fmt.Sprintf(`( pre "," sep%d %s ){%d,}`, d, elems, max(minItems-1, 0))
		list = elems + " " + tail + fmt.Sprintf(" close%d", d)
		if minItems == 0 {
			list = "( " + list + " )?"
		}
	default:
		tail := fmt.Sprintf(`( pre "," sep%d %s ){%d,%d}`, d, elems, max(minItems-1, 0), maxItems-1)
		list = elems + " " + tail + fmt.Sprintf(" close%d", d)
		if minItems == 0 {
			list = "( " + list + " )?"
		}
	}
	return fmt.Sprintf(`"[" open%d %s "]"`, d, list), nil
}

// stringFormats are the formats a string schema may name, as patterns.
var stringFormats = map[string]string{
	"date":      `[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])`,
	"time":      `([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`,
	"date-time": `[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`,
	"uuid":      `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`,
	"email":     `[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63}){1,8}`,
	"ipv4":      `((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`,
}

// stringType writes a string: of a pattern or format, or of minLength to maxLength
// characters.
func (c *schemaCompiler) stringType(s *ordered, path string) (string, error) {
	pattern, hasPattern := s.get("pattern")
	if f, ok := s.get("format"); ok {
		name, _ := f.(string)
		p, known := stringFormats[name]
		if !known {
			return "", fmt.Errorf("%w: JSON Schema %s: format %q is not supported (supported: date, time, date-time, uuid, email, ipv4)", ErrSyntax, path, name)
		}
		pattern, hasPattern = p, true
	}
	if hasPattern {
		for _, k := range []string{"minLength", "maxLength"} {
			if _, ok := s.get(k); ok {
				return "", fmt.Errorf("%w: JSON Schema %s: %s with pattern or format is not supported: put the length in the pattern", ErrSyntax, path, k)
			}
		}
		p, ok := pattern.(string)
		if !ok {
			return "", fmt.Errorf("%w: JSON Schema %s: pattern must be a string", ErrSyntax, path)
		}
		body, err := regexGBNF(strings.TrimSuffix(strings.TrimPrefix(p, "^"), "$"), true)
		if err != nil {
			return "", fmt.Errorf("JSON Schema %s: %w", path, err)
		}
		return `"\"" ` + body + ` "\""`, nil
	}
	minLen, maxLen, err := bounds(s, "minLength", "maxLength", path)
	if err != nil {
		return "", err
	}
	if minLen == 0 && maxLen < 0 {
		return "string", nil
	}
	if maxLen < 0 {
		return fmt.Sprintf(`"\"" char{%d,} "\""`, minLen), nil
	}
	return fmt.Sprintf(`"\"" char{%d,%d} "\""`, minLen, maxLen), nil
}

// maxInteger bounds the integers the JSON grammar writes: 16 digits.
const maxInteger int64 = 9_999_999_999_999_999

// boundKeyword returns the first numeric bound keyword of s, or "".
func boundKeyword(s *ordered) string {
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		if _, ok := s.get(k); ok {
			return k
		}
	}
	return ""
}

// integerType writes an integer between the schema's bounds, as the decimal strings
// of that range (no leading zeros, no "-0").
func integerType(s *ordered, path string) (string, error) {
	if boundKeyword(s) == "" {
		return "integer", nil
	}
	lower, upper, err := boundsOf(s, path, false)
	if err != nil {
		return "", err
	}
	lo, hi := -maxInteger, maxInteger
	if lower.set {
		lo = int64(math.Ceil(lower.v))
		if lower.open && lower.v == math.Trunc(lower.v) {
			lo++
		}
	}
	if upper.set {
		hi = int64(math.Floor(upper.v))
		if upper.open && upper.v == math.Trunc(upper.v) {
			hi--
		}
	}
	if lo > hi {
		return "", fmt.Errorf("%w: JSON Schema %s: no integer lies within its bounds", ErrSyntax, path)
	}
	return "(" + strings.Join(intRange(lo, hi), " | ") + ")", nil
}

// maxBound bounds the magnitude of a bound: below 2⁵³ every whole number is exact in
// a JSON reader's float64 (a literal beyond may have been rounded), and the range
// stays within the 16 digits the grammar writes.
const maxBound = 1 << 53

// numBound is one end of a range.
type numBound struct {
	v    float64
	open bool // the end itself is outside
	set  bool // a keyword gave it (else the side is unbounded)
}

// boundsOf reads the schema's minimum, exclusiveMinimum, maximum and
// exclusiveMaximum: the tightest end of each side. whole refuses a fractional bound.
func boundsOf(s *ordered, path string, whole bool) (lo, hi numBound, err error) {
	for _, b := range []struct {
		name        string
		lower, open bool
	}{{"minimum", true, false}, {"exclusiveMinimum", true, true}, {"maximum", false, false}, {"exclusiveMaximum", false, true}} {
		v, ok := s.get(b.name)
		if !ok {
			continue
		}
		f, isNum := v.(float64)
		if !isNum || math.IsNaN(f) || math.Abs(f) >= maxBound {
			return lo, hi, fmt.Errorf("%w: JSON Schema %s: %s must be a number of magnitude below 2^53", ErrSyntax, path, b.name)
		}
		if whole && f != math.Trunc(f) {
			return lo, hi, fmt.Errorf("%w: JSON Schema %s: %s %v of a number: only whole bounds are supported", ErrSyntax, path, b.name, f)
		}
		nb := numBound{v: f, open: b.open, set: true}
		if b.lower && (!lo.set || f > lo.v || f == lo.v && b.open) {
			lo = nb
		} else if !b.lower && (!hi.set || f < hi.v || f == hi.v && b.open) {
			hi = nb
		}
	}
	return lo, hi, nil
}

// numberType writes a number between the schema's bounds, which must be whole
// numbers (a bound of 0.5 is refused): decimals without an exponent, split at their
// integer part — whole parts strictly inside the range take any fraction, a closed
// bound itself only zeros, an open lower bound only a fraction that is not all zeros.
// Zero is written without a minus sign.
func numberType(s *ordered, path string) (string, error) {
	if boundKeyword(s) == "" {
		return "number", nil
	}
	lower, upper, err := boundsOf(s, path, true)
	if err != nil {
		return "", err
	}
	lo, hi := -maxInteger, maxInteger
	if lower.set {
		lo = int64(lower.v)
	}
	if upper.set {
		hi = int64(upper.v)
	}
	var alts []string
	if hi >= 0 { // x ≥ 0: its magnitude from max(lo, 0) to hi
		alts = magnitudes(max(lo, 0), hi, lo < 0 || !lower.open, !upper.open)
	}
	if lo < 0 { // x < 0: its magnitude from max(−hi, 0) to −lo; zero is the other side's
		for _, a := range magnitudes(max(-hi, 0), -lo, hi < 0 && !upper.open, !lower.open) {
			alts = append(alts, `"-" `+a)
		}
	}
	if len(alts) == 0 {
		return "", fmt.Errorf("%w: JSON Schema %s: no number lies within its bounds", ErrSyntax, path)
	}
	return "(" + strings.Join(alts, " | ") + ")", nil
}

// The fractions of a bounded number: any, only zeros, and not only zeros.
const (
	anyFraction     = `("." [0-9]{1,16})?`
	zeroFraction    = `("." "0"{1,16})?`
	nonzeroFraction = `"." "0"{0,15} [1-9] [0-9]{0,15}`
)

// magnitudes returns alternatives matching the unsigned decimals from p to q, each end
// in or out of the range.
func magnitudes(p, q int64, withP, withQ bool) []string {
	lit := func(n int64) string { return `"` + strconv.FormatInt(n, 10) + `"` }
	switch {
	case p > q:
		return nil
	case p == q:
		if withP && withQ {
			return []string{lit(p) + " " + zeroFraction}
		}
		return nil
	}
	var alts []string
	whole := p // the first whole part that takes any fraction
	if !withP {
		alts = append(alts, lit(p)+" "+nonzeroFraction)
		whole++
	}
	if whole <= q-1 {
		for _, a := range uintRange(uint64(whole), uint64(q-1)) {
			alts = append(alts, a+" "+anyFraction)
		}
	}
	if withQ {
		alts = append(alts, lit(q)+" "+zeroFraction)
	}
	return alts
}

// intRange returns GBNF alternatives that together match the decimal strings of
// the integers in [lo, hi] and nothing else.
func intRange(lo, hi int64) []string {
	var alts []string
	if lo < 0 {
		for _, a := range uintRange(uint64(max(1, -hi)), uint64(-lo)) {
			alts = append(alts, `"-" `+a)
		}
	}
	if hi >= 0 {
		alts = append(alts, uintRange(uint64(max(0, lo)), uint64(hi))...)
	}
	return alts
}

// uintRange returns alternatives matching the decimal strings of [a, b], a ≤ b: for
// each number of digits, the strings of that length between the bounds.
func uintRange(a, b uint64) []string {
	var alts []string
	for d := len(strconv.FormatUint(a, 10)); d <= len(strconv.FormatUint(b, 10)); d++ {
		first, last := uint64(math.Pow10(d-1)), uint64(math.Pow10(d))-1
		if d == 1 {
			first = 0
		}
		lo, hi := max(a, first), min(b, last)
		if lo <= hi {
			alts = append(alts, digitRange(strconv.FormatUint(lo, 10), strconv.FormatUint(hi, 10))...)
		}
	}
	return alts
}

// digitRange returns alternatives matching the digit strings of one length from lo
// to hi, lo ≤ hi: a common first digit, then the rest; else the lowest first digit
// with everything above lo's rest, the digits between with any rest, and the highest
// with everything up to hi's.
func digitRange(lo, hi string) []string {
	n := len(lo)
	if n == 0 {
		return []string{""}
	}
	if lo[0] == hi[0] {
		var alts []string
		for _, r := range digitRange(lo[1:], hi[1:]) {
			alts = append(alts, strings.TrimSpace(`"`+lo[:1]+`" `+r))
		}
		return alts
	}
	anyRest := strings.TrimSpace(strings.Repeat(" [0-9]", n-1))
	fromLo, toHi := lo[0], hi[0]
	var alts []string
	if strings.Trim(lo[1:], "0") != "" {
		for _, r := range digitRange(lo[1:], strings.Repeat("9", n-1)) {
			alts = append(alts, strings.TrimSpace(`"`+lo[:1]+`" `+r))
		}
		fromLo++
	}
	tail := strings.Trim(hi[1:], "9") != ""
	if tail {
		toHi--
	}
	if fromLo <= toHi {
		alts = append(alts, strings.TrimSpace(fmt.Sprintf("[%c-%c] %s", fromLo, toHi, anyRest)))
	}
	if tail {
		for _, r := range digitRange(strings.Repeat("0", n-1), hi[1:]) {
			alts = append(alts, strings.TrimSpace(`"`+hi[:1]+`" `+r))
		}
	}
	return alts
}

// bounds reads a pair of count keywords (−1: no upper bound).
func bounds(s *ordered, lo, hi, path string) (int, int, error) {
	minV, maxV := 0, -1
	for _, k := range []struct {
		name string
		dst  *int
	}{{lo, &minV}, {hi, &maxV}} {
		v, ok := s.get(k.name)
		if !ok {
			continue
		}
		f, ok := v.(float64)
		if !ok || f < 0 || f != float64(int(f)) || f > 1000 {
			return 0, 0, fmt.Errorf("%w: JSON Schema %s: %s must be an integer from 0 to 1000", ErrSyntax, path, k.name)
		}
		*k.dst = int(f)
	}
	if maxV >= 0 && maxV < minV {
		return 0, 0, fmt.Errorf("%w: JSON Schema %s: %s %d is below %s %d", ErrSyntax, path, hi, maxV, lo, minV)
	}
	return minV, maxV, nil
}

// canonical is a JSON value written compactly, objects' keys in their order.
func canonical(v any) string {
	var b bytes.Buffer
	writeCanonical(&b, v)
	return b.String()
}

func writeCanonical(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case *ordered:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			x, _ := v.get(k)
			writeCanonical(b, x)
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case string:
		// As the grammar's strings write it: JSON escapes for what must be escaped.
		b.WriteString(`"` + jsonEscape(v) + `"`)
	default:
		vb, _ := json.Marshal(v)
		b.Write(vb)
	}
}

// ordered is a JSON object with its keys in order: a schema's properties are
// generated in the order it gives them.
type ordered struct {
	keys []string
	vals map[string]any
}

func (o *ordered) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// decodeOrdered reads one JSON value, objects as *ordered.
func decodeOrdered(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := readValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the schema")
	}
	return v, nil
}

func readValue(d *json.Decoder) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &ordered{vals: map[string]any{}}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := readValue(d)
				if err != nil {
					return nil, err
				}
				if !slices.Contains(o.keys, k) {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := d.Token()
			return o, err
		case '[':
			var list []any
			for d.More() {
				v, err := readValue(d)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := d.Token()
			return list, err
		}
	case json.Number:
		f, err := t.Float64()
		return f, err
	}
	return t, nil
}
