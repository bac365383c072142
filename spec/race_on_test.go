//go:build race

package spec_test

// raceEnabled: the race detector is on; it allocates for channel and lock operations,
// so allocation counts mean nothing.
const raceEnabled = true
