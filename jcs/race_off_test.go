//go:build !race

package jcs_test

// raceEnabled is false in normal builds; see race_on_test.go.
const raceEnabled = false
