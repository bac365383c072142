//go:build !race

package llama

// raceEnabled: the race detector is off.
const raceEnabled = false
