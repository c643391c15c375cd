package kafka

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KeyFunc returns the idempotency key of a record: the same for every
// delivery of one logical operation, whoever produced it and however many
// times. An empty result means the record has none (ErrNoKey).
type KeyFunc func(r *kgo.Record) string

// DefaultKeyHeader is the header Sender puts the idempotency key in, and
// the one HeaderKey is usually given.
const DefaultKeyHeader = "Idempotency-Key"

// DefaultFenceHeader is the header Sender puts the delivery's fencing
// token in, in decimal.
const DefaultFenceHeader = "Oncekv-Fence"

// HeaderKey returns a KeyFunc reading the value of the record's first
// header named name (case-sensitive, as Kafka compares header keys). This
// is the best choice when the producer sets it (Sender does, under
// DefaultKeyHeader): the key then names the operation, not the record.
func HeaderKey(name string) KeyFunc {
	return func(r *kgo.Record) string {
		for _, h := range r.Headers {
			if h.Key == name {
				return string(h.Value)
			}
		}
		return ""
	}
}

// RecordKey is a KeyFunc returning the record's key: right when producers
// key each record by the operation's id (Sender does), wrong when the
// record key is a partitioning key shared by many operations (a customer
// id), since every operation of that customer after the first would then
// be suppressed as a duplicate.
func RecordKey(r *kgo.Record) string { return string(r.Key) }

// CoordinatesKey is a KeyFunc returning "topic/partition/offset". Use it
// only when records carry no id of their own. It deduplicates the
// redeliveries of one record (a rebalance, a crash before the offset
// commit), but not a record the producer sent twice (two offsets), and it
// breaks when the topic is deleted and re-created or mirrored to another
// cluster: offsets start again from 0, and new records would be suppressed
// as duplicates of old ones for the whole dedup window.
func CoordinatesKey(r *kgo.Record) string {
	return r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10)
}
