package spec

import (
	"fmt"
	"slices"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/target"
)

// keepStateRows makes the target's session keep what the readers of states read: the
// final states, and in front of them the streams after the layers the
// [draft.LayerStateSession]s among them ask for, which must agree. The readers of the
// final state alone are then told the last HiddenSize values of each row.
func (r *run) keepStateRows(ts target.StateSession) error {
	var layers []int32
	asked := false
	for i := range r.sess.readers {
		rd := &r.sess.readers[i]
		ls, ok := rd.s.(draft.LayerStateSession)
		if !ok {
			continue
		}
		l := ls.StateLayers()
		if asked && !slices.Equal(l, layers) {
			return fmt.Errorf("drafters read the target's layers %v and %v: one request keeps one set", layers, l)
		}
		layers, asked = l, true
	}
	if !asked || len(layers) == 0 {
		return r.keepStatesFrom(ts)
	}
	lts, ok := ts.(target.LayerStateSession)
	if !ok {
		return fmt.Errorf("a drafter reads the streams after the target's layers %v; target %q keeps only final states", layers, r.d.info.Name)
	}
	if err := lts.KeepStateLayers(layers); err != nil {
		return err
	}
	if err := r.keepStatesFrom(ts); err != nil {
		return err
	}
	for i := range r.sess.readers {
		rd := &r.sess.readers[i]
		if _, ok := rd.s.(draft.LayerStateSession); !ok {
			rd.width = r.d.info.HiddenSize
		}
	}
	return nil
}

// keepStatesFrom has the target keep the states from the first position a reader
// reads (see statesFrom), taking a cached prefix in front of it, where the target
// can; every state otherwise.
func (r *run) keepStatesFrom(ts target.StateSession) error {
	if ps, ok := ts.(target.PrefixStateSession); ok {
		return ps.KeepStatesFrom(r.statesFrom())
	}
	return ts.KeepStates()
}

// view is what the reader is told of state rows: the rows as they are, or, for a
// reader of the final state beside one of layers' streams, the final state of each.
func (rd *reader) view(states [][]float32) [][]float32 {
	if rd.width == 0 {
		return states
	}
	rd.final = rd.final[:0]
	for _, st := range states {
		rd.final = append(rd.final, st[len(st)-rd.width:])
	}
	return rd.final
}
