package specula

import (
	"sync"
	"time"

	"github.com/specula/specula/grammar"
)

// constraintCache is an engine's cache of compiled output constraints: the matcher of
// every Format it has been asked for, so that a format asked for again — a service's
// schema, request after request — is compiled once and keeps the token masks it has
// computed.
type constraintCache struct {
	once  sync.Once
	vocab *grammar.Vocab

	mu       sync.Mutex
	matchers map[Format]*grammar.Matcher
	order    []Format // oldest first, for eviction
}

// maxFormats is how many compiled formats an engine's constraint cache keeps.
const maxFormats = 64

// constraint compiles a format against the engine's vocabulary (nil for free text),
// or returns the matcher compiled for it before. An error is a *ParameterError
// naming the format's field and saying what is wrong with it, wrapping
// grammar.ErrSyntax where it is its text.
func (e *Engine) constraint(f Format) (*grammar.Matcher, error) {
	kind, err := f.kind()
	if err != nil || kind == "" {
		return nil, err
	}
	c := &e.constraints
	c.mu.Lock()
	m, ok := c.matchers[f]
	c.mu.Unlock()
	if ok && !m.Large() {
		return m, nil
	}
	t := time.Now()
	g, err := compileFormat(kind, f)
	if err != nil {
		return nil, &ParameterError{Field: "Format." + kind, Err: err}
	}
	c.once.Do(func() { c.vocab = grammar.TokenizerVocab(e.tok) })
	m = grammar.NewMatcher(g, c.vocab)
	e.met.compileSeconds.Add(time.Since(t).Seconds())
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.matchers[f]; ok && !old.Large() {
		return old, nil // compiled meanwhile by another request
	}
	if c.matchers == nil {
		c.matchers = map[Format]*grammar.Matcher{}
	}
	if _, ok := c.matchers[f]; !ok {
		if len(c.order) >= maxFormats {
			delete(c.matchers, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, f)
	}
	c.matchers[f] = m // replacing one grown large: requests under way keep theirs
	return m, nil
}

func compileFormat(kind string, f Format) (*grammar.Grammar, error) {
	switch kind {
	case "JSON":
		return grammar.JSON(grammar.WithWhitespace(f.Whitespace)), nil
	case "JSONSchema":
		return grammar.ParseJSONSchema([]byte(f.JSONSchema), grammar.WithWhitespace(f.Whitespace))
	case "Regex":
		return grammar.ParseRegex(f.Regex)
	}
	return grammar.ParseGBNF(f.Grammar)
}
