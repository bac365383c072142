//go:build !race

package spec_test

// raceEnabled: the race detector is off.
const raceEnabled = false
