//go:build race

package specula_test

// raceEnabled reports whether the race detector is on: it multiplies the memory a
// program holds, so that measuring resident memory tells nothing.
const raceEnabled = true
