// Package bloomcmp benchmarks oncekv's bloom.Filter against
// github.com/bits-and-blooms/bloom/v3 at the same key count and target
// false-positive rate. The benchmarks are in the package's tests; see
// README.md for the command and the last measured numbers.
package bloomcmp
