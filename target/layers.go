package target

import (
	"errors"
	"fmt"
	"slices"
)

// LayerStateSession is a [StateSession] that can also keep, in front of each final
// state, the residual stream after some of the target's layers, from the same pass:
// what an EAGLE-3 head reads (the streams entering three layers). [Local]'s sessions
// are LayerStateSessions.
type LayerStateSession interface {
	StateSession
	// KeepStateLayers is KeepStates with the layers' streams: each row of States then
	// holds (len(layers)+1)·HiddenSize values, the stream after each layer of layers
	// (ascending, 0-based) in order, then the final state. Only the rows a pass
	// asks for are copied, as the final states are. It fails before any tokens are
	// forwarded with states of another width, and when the model has no such layers.
	KeepStateLayers(layers []int32) error
}

func (s *session) KeepStateLayers(layers []int32) error {
	info := s.local.info
	if info.HiddenSize == 0 {
		return errors.New("target: the model gives no hidden states")
	}
	for i, l := range layers {
		if l < 0 || int(l) >= info.Layers || (i > 0 && l <= layers[i-1]) {
			return fmt.Errorf("target: state layers %v must ascend within the model's [0, %d)", layers, info.Layers)
		}
	}
	if s.keep && !slices.Equal(s.layers, layers) && (len(s.hidden) > 0 || s.last != 0) {
		return fmt.Errorf("target: the session keeps the states of layers %v; it cannot change to %v", s.layers, layers)
	}
	s.keep, s.layers = true, slices.Clone(layers)
	s.width = (len(layers) + 1) * info.HiddenSize
	return nil
}
