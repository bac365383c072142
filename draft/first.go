package draft

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// First combines drafters: each step it asks them in order and proposes what the
// first one with anything to say drafts — cheap lookups first (package draft/lookup),
// a draft model when they have nothing. Every session sees the whole history whenever it is asked.
func First(drafters ...Drafter) Drafter { return first(drafters) }

type first []Drafter

// Start implements [Drafter].
func (f first) Start(ctx context.Context, req Request) (Session, error) {
	if len(f) == 0 {
		return nil, errors.New("draft: First needs at least one drafter")
	}
	s := &firstSession{}
	for i, d := range f {
		if d == nil {
			s.Close()
			return nil, fmt.Errorf("draft: First: drafter %d is nil", i)
		}
		sub, err := d.Start(ctx, req.Split(i))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("draft: First: drafter %d: %w", i, err)
		}
		s.subs = append(s.subs, sub)
	}
	return s, nil
}

// Drafters returns the drafters combined, in the order they are asked, so that a
// decoder can check each of them ([Composite]).
func (f first) Drafters() []Drafter { return slices.Clone(f) }

type firstSession struct{ subs []Session }

// Sessions implements [CompositeSession].
func (s *firstSession) Sessions() []Session { return s.subs }

func (s *firstSession) Propose(ctx context.Context, history []int32, k int, p *Proposal) error {
	for _, sub := range s.subs {
		if err := sub.Propose(ctx, history, k, p); err != nil {
			return err
		}
		if len(p.Tokens) > 0 {
			return nil
		}
	}
	return nil
}

// Learn passes a finished request on to the sessions that learn.
func (s *firstSession) Learn(history []int32) {
	for _, sub := range s.subs {
		if l, ok := sub.(Learner); ok {
			l.Learn(history)
		}
	}
}

func (s *firstSession) Close() error {
	var errs []error
	for _, sub := range s.subs {
		errs = append(errs, sub.Close())
	}
	return errors.Join(errs...)
}
