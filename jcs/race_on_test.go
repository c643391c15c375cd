//go:build race

package jcs_test

// raceEnabled skips TestMemoryBound: under the race detector the same
// code allocates about half as much again for its own bookkeeping.
const raceEnabled = true
