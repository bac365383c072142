//go:build race

package llama

// raceEnabled: the race detector is on, and sync.Pool drops what it is given at random.
const raceEnabled = true
