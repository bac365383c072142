package draft

// LayerStateSession is a [StateSession] that reads, in front of the target's final
// hidden state, the residual stream after some of the target's layers, as an EAGLE-3
// head does (the streams entering three of them). The decoder then keeps those layers'
// streams from the target's passes, and each state row Observe is told holds the
// stream after each layer of StateLayers, in order, then the final state:
// (len(StateLayers())+1)·HiddenSize values. Other readers of states in the same
// request are told the final state alone, as ever.
type LayerStateSession interface {
	StateSession
	// StateLayers are the target's layers (0-based, ascending) after which the
	// session reads the residual stream.
	StateLayers() []int32
}
