package reading_test

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/examples/internal/reading"
	"github.com/oncekv/oncekv/oncekvtest"
)

// readings draws sensor readings whose content follows from their key
// (two draws of one key are one reading, sent twice), one in eight a
// poison reading that fails for good.
var readings = rapid.Custom(func(t *rapid.T) reading.Reading {
	n := rapid.IntRange(0, 40).Draw(t, "reading")
	return reading.Reading{Key: fmt.Sprintf("sensor-%d/%d", n%4, n), Value: float64(n) / 4, Poison: n%8 == 7}
})

// spec is the broker examples' handler as both consume it (mqtt with
// Apply, nats with ApplyBatch): reading.Store under reading.Request.
var spec = oncekvtest.Spec[reading.Reading]{
	Messages: readings,
	Request: func(r reading.Reading) oncekv.Request {
		return reading.Request("readings", reading.Encode(r), r)
	},
	Effect: func(tx *oncekv.Tx, r reading.Reading) ([]byte, error) {
		return nil, reading.Store(tx, reading.Encode(r), r)
	},
}

// The MQTT and NATS consumers' effect applies each reading once:
// duplicates, reordering, rolled-back attempts and crashes after commits
// leave the readings and their counts as S once.
func TestStoreIsIdempotent(t *testing.T) {
	oncekvtest.Check(t, spec)
}

// The same with the consumer SIGKILLed inside the effect and right after
// its commits, and restarted.
func TestStoreIsIdempotentAcrossCrashes(t *testing.T) {
	s := spec
	s.CrashChecks = 5
	oncekvtest.CheckCrash(t, s)
}
