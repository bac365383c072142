package draft

import "iter"

// Composite is a drafter that combines others, such as [First]'s: a decoder looks
// through it ([Parts]) to check each of them.
type Composite interface {
	Drafter
	// Drafters returns the drafters combined.
	Drafters() []Drafter
}

// CompositeSession is a session that combines others, as [First]'s does: a decoder
// looks through it ([SessionParts]) for the sessions that read the target's states or
// draft under a constraint.
type CompositeSession interface {
	Session
	// Sessions returns the sessions combined.
	Sessions() []Session
}

// VocabSizer is a drafter tied to a vocabulary of its own, such as a draft model
// ([SmallModel]): a decoder checks that its size is the target's (or, where the target
// pads its vocabulary, no larger).
type VocabSizer interface {
	Drafter
	// VocabSize is the number of tokens of the drafter's vocabulary.
	VocabSize() int
}

// Parts yields d and the drafters it combines, depth first, looking through every
// [Composite]: what a decoder checks of a drafter.
func Parts(d Drafter) iter.Seq[Drafter] {
	return func(yield func(Drafter) bool) { walk(d, drafterParts, yield) }
}

// SessionParts yields s and the sessions it combines, depth first, looking through
// every [CompositeSession].
func SessionParts(s Session) iter.Seq[Session] {
	return func(yield func(Session) bool) { walk(s, sessionParts, yield) }
}

func drafterParts(d Drafter) []Drafter {
	if c, ok := d.(Composite); ok {
		return c.Drafters()
	}
	return nil
}

func sessionParts(s Session) []Session {
	if c, ok := s.(CompositeSession); ok {
		return c.Sessions()
	}
	return nil
}

// walk yields x and then, depth first, the parts of x and of its parts: the one place
// that looks through combined drafters and sessions. It reports whether yield asked
// for more.
func walk[T any](x T, parts func(T) []T, yield func(T) bool) bool {
	if !yield(x) {
		return false
	}
	for _, p := range parts(x) {
		if !walk(p, parts, yield) {
			return false
		}
	}
	return true
}
