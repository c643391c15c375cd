//go:build race

package bloom_test

// raceEnabled scales down the statistical tests: the race detector makes
// every atomic load and store about a hundred times slower, and those tests
// exercise no concurrency.
const raceEnabled = true
