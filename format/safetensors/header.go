package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// entry is one tensor of a header as written, before it is checked against the data.
type entry struct {
	name       string
	typeName   string
	shape      []int64
	begin, end int64
}

// decodeHeader decodes the JSON header: the tensor entries in header order and the
// metadata. A key given twice, which encoding/json would silently resolve to its last
// value, is an error.
func decodeHeader(header []byte) ([]entry, map[string]string, error) {
	var (
		entries []entry
		meta    map[string]string
		seen    = map[string]bool{}
	)
	err := decodeDocument(header, func(s *scanner, key []byte) error {
		name := string(key)
		if seen[name] {
			return fmt.Errorf("key %q appears twice", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			m, err := s.strings()
			if err != nil {
				return fmt.Errorf("__metadata__: %w", err)
			}
			meta = m
			return nil
		}
		e, err := decodeEntry(s)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		e.name = name
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("header: %w", err)
	}
	return entries, meta, nil
}

// decodeDocument decodes a UTF-8 JSON document that must be one object, calling fn for
// each key. Only whitespace (the format pads headers with spaces) may follow the object.
func decodeDocument(doc []byte, fn func(s *scanner, key []byte) error) error {
	if !utf8.Valid(doc) {
		return errors.New("not valid UTF-8")
	}
	s := &scanner{buf: doc}
	if s.peek() != '{' {
		return fmt.Errorf("not a JSON object: %w", s.wrongType("an object"))
	}
	if err := s.object(func(key []byte) error { return fn(s, key) }); err != nil {
		return err
	}
	if s.ws(); s.pos < len(s.buf) {
		return s.syntaxError("data after the JSON object")
	}
	return nil
}

// decodeEntry decodes a tensor's {"dtype", "shape", "data_offsets"} object. Other fields
// are ignored, as the reference implementation does.
func decodeEntry(s *scanner) (entry, error) {
	var (
		e                                entry
		haveType, haveShape, haveOffsets bool
	)
	err := s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "dtype":
			if haveType {
				return errors.New("dtype appears twice")
			}
			haveType = true
			var b []byte
			b, err = s.string()
			e.typeName = string(b)
		case "shape":
			if haveShape {
				return errors.New("shape appears twice")
			}
			haveShape = true
			e.shape, err = s.ints()
		case "data_offsets":
			if haveOffsets {
				return errors.New("data_offsets appear twice")
			}
			haveOffsets = true
			e.begin, e.end, err = decodeOffsets(s)
		default:
			err = s.skip()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
	switch {
	case err != nil:
		return e, err
	case !haveType:
		return e, errors.New("no dtype")
	case !haveShape:
		return e, errors.New("no shape")
	case !haveOffsets:
		return e, errors.New("no data_offsets")
	}
	return e, nil
}

// decodeOffsets decodes [begin, end].
func decodeOffsets(s *scanner) (begin, end int64, err error) {
	offs, err := s.ints()
	if err != nil {
		return 0, 0, err
	}
	if len(offs) != 2 {
		return 0, 0, fmt.Errorf("want [begin, end], found %d values", len(offs))
	}
	if offs[0] < 0 || offs[1] < 0 {
		return 0, 0, fmt.Errorf("negative offset in [%d, %d]", offs[0], offs[1])
	}
	return offs[0], offs[1], nil
}

// scanner reads the few JSON shapes a header is made of, straight from the bytes. It is a
// fraction of the cost of encoding/json's token API on headers of thousands of tensors,
// and it never recurses into values it does not understand: those are skipped with
// encoding/json, which limits their depth.
type scanner struct {
	buf []byte
	pos int
}

// syntaxError is a JSON syntax error.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.off, e.msg)
}

func (s *scanner) syntaxError(msg string) error {
	return &syntaxError{s.pos, msg}
}

// unexpected is the syntax error for finding something other than want at the current
// position.
func (s *scanner) unexpected(want string) error {
	if s.peek() == 0 && s.pos == len(s.buf) {
		return s.syntaxError("unexpected end of input, want " + want)
	}
	return s.syntaxError(fmt.Sprintf("invalid character %q, want %s", s.buf[s.pos], want))
}

// ws skips whitespace.
func (s *scanner) ws() {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte, or 0 at the end of the input.
func (s *scanner) peek() byte {
	if s.ws(); s.pos < len(s.buf) {
		return s.buf[s.pos]
	}
	return 0
}

// wrongType is the error for a value that is not of the kind wanted.
func (s *scanner) wrongType(want string) error {
	var found string
	switch c := s.peek(); {
	case c == '{':
		found = "an object"
	case c == '[':
		found = "an array"
	case c == '"':
		found = "a string"
	case c == '-' || '0' <= c && c <= '9':
		found = "a number"
	case s.literal("true") || s.literal("false"):
		found = "a bool"
	case s.literal("null"):
		found = "null"
	default:
		return s.unexpected(want)
	}
	return fmt.Errorf("want %s, found %s", want, found)
}

// literal reports whether the input continues with lit.
func (s *scanner) literal(lit string) bool {
	return bytes.HasPrefix(s.buf[s.pos:], []byte(lit))
}

// list reads a JSON object or array opened by open and closed by close, calling item for
// each member.
func (s *scanner) list(open, close byte, want string, item func() error) error {
	if s.peek() != open {
		return s.wrongType(want)
	}
	s.pos++
	if s.peek() == close {
		s.pos++
		return nil
	}
	for {
		if err := item(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case close:
			s.pos++
			return nil
		default:
			return s.unexpected(fmt.Sprintf("',' or '%c'", close))
		}
	}
}

// object reads an object, calling fn with each key; fn must read the key's value. The key
// is only valid during the call.
func (s *scanner) object(fn func(key []byte) error) error {
	return s.list('{', '}', "an object", func() error {
		if s.peek() != '"' {
			return s.unexpected("a string key")
		}
		key, err := s.string()
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return s.unexpected("':'")
		}
		s.pos++
		return fn(key)
	})
}

// string reads a string and returns its decoded bytes, which may be a slice of the input.
func (s *scanner) string() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.wrongType("a string")
	}
	start := s.pos
	escaped := false
	for i := start + 1; i < len(s.buf); i++ {
		switch c := s.buf[i]; {
		case c == '"':
			s.pos = i + 1
			if !escaped {
				return s.buf[start+1 : i], nil
			}
			var str string
			if err := json.Unmarshal(s.buf[start:i+1], &str); err != nil {
				return nil, &syntaxError{start, fmt.Sprintf("bad string escape: %v", err)}
			}
			return []byte(str), nil
		case c == '\\':
			escaped = true
			i++ // the escaped byte cannot end the string
		case c < 0x20:
			return nil, &syntaxError{i, "control character in string"}
		}
	}
	return nil, &syntaxError{start, "unterminated string"}
}

// int reads a number, which must be an integer in the int64 range.
func (s *scanner) int() (int64, error) {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		return 0, s.wrongType("an integer")
	}
	start := s.pos
	integer := true
	if c == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.buf) && s.buf[s.pos] == '0':
		s.pos++
	case s.digits() == 0:
		return 0, s.unexpected("a digit")
	}
	if s.pos < len(s.buf) && s.buf[s.pos] == '.' {
		s.pos++
		integer = false
		if s.digits() == 0 {
			return 0, s.unexpected("a digit after '.'")
		}
	}
	if s.pos < len(s.buf) && (s.buf[s.pos] == 'e' || s.buf[s.pos] == 'E') {
		s.pos++
		integer = false
		if s.pos < len(s.buf) && (s.buf[s.pos] == '+' || s.buf[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return 0, s.unexpected("a digit in the exponent")
		}
	}
	lit := s.buf[start:s.pos]
	if !integer {
		return 0, fmt.Errorf("%s is not an integer", lit)
	}
	v, err := strconv.ParseInt(string(lit), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not an integer in the int64 range", lit)
	}
	return v, nil
}

// digits skips decimal digits and returns how many there were.
func (s *scanner) digits() int {
	start := s.pos
	for s.pos < len(s.buf) && '0' <= s.buf[s.pos] && s.buf[s.pos] <= '9' {
		s.pos++
	}
	return s.pos - start
}

// ints reads an array of integers.
func (s *scanner) ints() ([]int64, error) {
	v := make([]int64, 0, 4) // most shapes have at most 4 dimensions
	err := s.list('[', ']', "an array", func() error {
		i, err := s.int()
		v = append(v, i)
		return err
	})
	return v, err
}

// strings reads an object of strings, or null.
func (s *scanner) strings() (map[string]string, error) {
	if s.peek() == 'n' && s.literal("null") {
		s.pos += len("null")
		return nil, nil
	}
	if s.peek() != '{' {
		return nil, s.wrongType("an object of strings")
	}
	m := map[string]string{}
	err := s.object(func(k []byte) error {
		key := string(k)
		if _, dup := m[key]; dup {
			return fmt.Errorf("key %q appears twice", key)
		}
		v, err := s.string()
		if err != nil {
			return fmt.Errorf("%q: %w", key, err)
		}
		m[key] = string(v)
		return nil
	})
	return m, err
}

// skip reads any one value.
func (s *scanner) skip() error {
	s.ws()
	dec := json.NewDecoder(bytes.NewReader(s.buf[s.pos:]))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return s.syntaxError(err.Error())
	}
	s.pos += int(dec.InputOffset())
	return nil
}
