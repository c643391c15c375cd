package oncekv_test

import (
	"testing"

	"github.com/oncekv/oncekv"
)

// BenchmarkPutFencedVsPut: a fenced write against a plain one, timed
// alternately (see pair). In durable and nosync each call is one write
// transaction holding one write of a new key, the way a handler writes;
// tx1000 packs 1000 writes into one transaction, so the commit is shared
// and what is left is the fence's own CPU cost per write.
//
//	go test -run '^$' -bench 'PutFencedVsPut' -benchtime 2000x .
func BenchmarkPutFencedVsPut(b *testing.B) {
	for _, mode := range benchWriteModes {
		b.Run(mode.name, func(b *testing.B) {
			db := openBench(b, mode.noSync)
			pair(b, mode.perTx,
				"put", benchWrites(b, db, mode.perTx, "plain", benchPut),
				"putfenced", benchWrites(b, db, mode.perTx, "fenced", benchPutFenced))
		})
	}
}

// BenchmarkFenceLayouts: the same writes in a bucket that keeps fences in
// the system bucket of fences (created by an older version) and in one
// that keeps them in headers, timed alternately: plain Put must not pay
// for the headers, and PutFenced should gain from them.
//
//	go test -run '^$' -bench 'FenceLayouts' -benchtime 2000x .
func BenchmarkFenceLayouts(b *testing.B) {
	for _, write := range []struct {
		name string
		fn   func(bk *oncekv.Bucket, key []byte, fence uint64) error
	}{{"put", benchPut}, {"putfenced", benchPutFenced}} {
		for _, mode := range benchWriteModes {
			b.Run(write.name+"/"+mode.name, func(b *testing.B) {
				db, err := oncekv.Open(oldBucketFile(b, []byte("old"), mode.noSync), &oncekv.Options{NoSync: mode.noSync, ExpireInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
				pair(b, mode.perTx,
					"records-bucket", benchWrites(b, db, mode.perTx, "old", write.fn),
					"headers", benchWrites(b, db, mode.perTx, "new", write.fn))
			})
		}
	}
}

// benchWriteModes: in durable and nosync each call is one write
// transaction holding one write of a new key, the way a handler writes;
// tx1000 packs 1000 writes into one transaction, so the commit is shared
// and what is left is each write's own CPU cost.
var benchWriteModes = []struct {
	name   string
	noSync bool
	perTx  int
}{{"durable", false, 1}, {"nosync", true, 1}, {"tx1000", true, 1000}}

func benchPut(bk *oncekv.Bucket, key []byte, _ uint64) error { return bk.Put(key, benchValue) }

func benchPutFenced(bk *oncekv.Bucket, key []byte, fence uint64) error {
	return bk.PutFenced(key, benchValue, fence)
}

// benchWrites returns the i-th call of a benchmark: one transaction of
// perTx writes of new keys to bucket, with fences that grow from call to
// call.
func benchWrites(b *testing.B, db *oncekv.DB, perTx int, bucket string, write func(bk *oncekv.Bucket, key []byte, fence uint64) error) func(i uint64) {
	return func(i uint64) {
		if err := db.Update(func(tx *oncekv.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte(bucket))
			if err != nil {
				return err
			}
			for j := range uint64(perTx) {
				n := (i-1)*uint64(perTx) + j + 1
				if err := write(bk, benchKey(n), n); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}
