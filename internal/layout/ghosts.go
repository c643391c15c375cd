package layout

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/base"
	"github.com/oncekv/oncekv/internal/envelope"
)

// GhostsRoot holds the ghost filters a clean Close left: Bloom filters of
// the keys of windows whose every record expired, by generation (0 the
// current one, 1 the previous), each a record of the generation's start
// and the filter's own encoding. They only estimate late duplicates and
// decide nothing, so a missing or damaged one is dropped, never rebuilt.
var GhostsRoot = []byte("oncekv.ghosts")

// Ghost is one generation of ghost filter.
type Ghost struct {
	// Since is when the generation began, Unix nanoseconds.
	Since int64
	// Filter is the bloom encoding of its filter.
	Filter []byte
}

const ghostVersion = 1

// Marshal encodes the generation.
func (g Ghost) Marshal() []byte {
	out := envelope.Alloc(ghostVersion, 8+len(g.Filter))
	b := envelope.Body(out)
	binary.LittleEndian.PutUint64(b, uint64(g.Since))
	copy(b[8:], g.Filter)
	envelope.Finish(out)
	return out
}

// Unmarshal decodes the generation; Filter points into raw.
func (g *Ghost) Unmarshal(raw []byte) error {
	version, body, err := envelope.Open(raw)
	switch {
	case err != nil:
		return err
	case version != ghostVersion:
		return fmt.Errorf("ghost filter record version %d, this build reads %d", version, ghostVersion)
	case len(body) < 8:
		return errors.New("ghost filter record shorter than its start")
	}
	g.Since, g.Filter = int64(binary.LittleEndian.Uint64(body)), body[8:]
	return nil
}

// PutGhosts replaces the stored generations with gens, newest first.
func PutGhosts(tx *bolt.Tx, gens []Ghost) error {
	if tx.Bucket(GhostsRoot) != nil {
		if err := tx.DeleteBucket(GhostsRoot); err != nil {
			return base.MapBoltErr(err)
		}
	}
	if len(gens) == 0 {
		return nil
	}
	b, err := tx.CreateBucket(GhostsRoot)
	if err != nil {
		return base.MapBoltErr(err)
	}
	for i, g := range gens {
		if err := b.Put([]byte{byte(i)}, g.Marshal()); err != nil {
			return base.MapBoltErr(err)
		}
	}
	return nil
}

// GetGhosts returns the stored generations, newest first; each filter
// points into tx's memory. A record that does not decode is returned as
// an error naming it, with the generations before it.
func GetGhosts(tx *bolt.Tx) ([]Ghost, error) {
	b := tx.Bucket(GhostsRoot)
	if b == nil {
		return nil, nil
	}
	var gens []Ghost
	err := b.ForEach(func(k, v []byte) error {
		var g Ghost
		if len(k) != 1 || int(k[0]) != len(gens) {
			return &base.RecordError{Bucket: string(GhostsRoot), Key: fmt.Sprintf("%x", k), Err: errors.New("not the next generation")}
		}
		if err := g.Unmarshal(v); err != nil {
			return &base.RecordError{Bucket: string(GhostsRoot), Key: fmt.Sprintf("%x", k), Err: err}
		}
		gens = append(gens, g)
		return nil
	})
	return gens, err
}
