package main

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// windowPrefix starts the name of every window bucket in an oncekv file.
// The probe reads it by name through raw bbolt, which is what a user with
// the bbolt CLI would see; oncekv's layout package is internal.
var windowPrefix = []byte("oncekv.window/")

// effectsRoot is the bench's effects bucket as oncekv stores it: user
// buckets live at the root under "u/".
var effectsRoot = []byte("u/effects")

// treeShape is what raw bbolt reports about an oncekv file: how many
// window buckets it has, and the B-tree of the newest one, where every new
// mark lands (its depth is what a commit of one new mark dirties, from the
// root down to a leaf).
type treeShape struct {
	windows     int
	newestKeys  int
	newestDepth int
	newestPages int // branch and leaf pages
	// effectsDepth is the depth of the effects bucket, the other tree a
	// unique Apply writes to (raw bbolt writes only that one).
	effectsDepth int
	// rootPages is the pages of the root bucket itself (the one holding
	// every bucket's header), which a commit also rewrites: 1 while all
	// headers fit one page.
	rootPages int
	filePages int // the file's high-water mark, in pages
	freePages int // pages on bbolt's freelist (written with every commit)
}

// probeTree opens a closed oncekv file read-only with raw bbolt and
// measures its window buckets.
func probeTree(path string) (treeShape, error) {
	var t treeShape
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true, FreelistType: bolt.FreelistArrayType})
	if err != nil {
		return t, err
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		t.filePages = int(tx.Size() / int64(db.Info().PageSize))
		var newest []byte
		// The root's Stats count every bucket's pages below it; each
		// bucket's own Stats, subtracted, leave the root's.
		root := tx.Cursor().Bucket().Stats()
		t.rootPages = root.BranchPageN + root.LeafPageN
		err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			s := b.Stats()
			t.rootPages -= s.BranchPageN + s.LeafPageN
			if bytes.HasPrefix(name, windowPrefix) {
				t.windows++
				newest = bytes.Clone(name) // names sort by start time
			}
			return nil
		})
		if err != nil || newest == nil {
			return err
		}
		if e := tx.Bucket(effectsRoot); e != nil {
			t.effectsDepth = e.Stats().Depth
		}
		s := tx.Bucket(newest).Stats()
		t.newestKeys, t.newestDepth, t.newestPages = s.KeyN, s.Depth, s.BranchPageN+s.LeafPageN
		return nil
	})
	t.freePages = db.Stats().FreePageN
	return t, err
}
