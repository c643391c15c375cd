package oncekv_test

import (
	"encoding/json"
	"expvar"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// readVar decodes the expvar name as /debug/vars would show it.
func readVar(t *testing.T, name string) *oncekv.Stats {
	t.Helper()
	v := expvar.Get(name)
	require.NotNil(t, v, "expvar %q", name)
	var st *oncekv.Stats
	require.NoError(t, json.Unmarshal([]byte(v.String()), &st), v.String())
	return st
}

func TestPublishShowsLiveStats(t *testing.T) {
	db := oncetest.Open(t, &oncekv.Options{NoSync: true})
	name := "oncekv-" + t.Name()
	require.NoError(t, oncekv.Publish(name, db))

	require.Zero(t, readVar(t, name).Total.Applied)
	applyUniqueN(t, db, "pub", 4)
	st := readVar(t, name)
	require.EqualValues(t, 4, st.Total.Applied, "a fresh snapshot at each read")
	require.EqualValues(t, 4, st.Handlers["pub"].Applied)
	require.EqualValues(t, 4, st.LiveMarks)
	require.Positive(t, st.File.Size)
	require.EqualValues(t, 4, st.CommitHistograms.MarkCommits)

	require.NoError(t, oncekv.Publish(name, db), "publishing the same DB again is a no-op")
}

func TestPublishTwiceIsAnErrorNotAPanic(t *testing.T) {
	db1 := oncetest.Open(t, &oncekv.Options{NoSync: true})
	db2 := oncetest.Open(t, &oncekv.Options{NoSync: true})
	name := "oncekv-" + t.Name()
	require.NoError(t, oncekv.Publish(name, db1))

	err := oncekv.Publish(name, db2)
	require.ErrorIs(t, err, oncekv.ErrPublish)
	require.Contains(t, err.Error(), name)
	require.Contains(t, err.Error(), db1.Path(), "names who holds it")
	applyUniqueN(t, db2, "other", 2)
	require.Zero(t, readVar(t, name).Total.Applied, "the name still shows db1")

	foreign := "foreign-" + t.Name()
	expvar.NewInt(foreign)
	err = oncekv.Publish(foreign, db1)
	require.ErrorIs(t, err, oncekv.ErrPublish)
	require.Contains(t, err.Error(), "another variable")

	require.ErrorIs(t, oncekv.Publish("", db1), oncekv.ErrPublish)
	require.ErrorIs(t, oncekv.Publish("nil-"+t.Name(), nil), oncekv.ErrPublish)
	require.Nil(t, expvar.Get("nil-"+t.Name()), "a refused Publish publishes nothing")
}

func TestPublishConcurrentlyOneWins(t *testing.T) {
	name := "oncekv-" + t.Name()
	const n = 8
	dbs := make([]*oncekv.DB, n)
	for i := range dbs {
		dbs[i] = oncetest.Open(t, &oncekv.Options{NoSync: true})
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = oncekv.Publish(name, dbs[i]) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			require.ErrorIs(t, err, oncekv.ErrPublish)
		}
	}
	require.Equal(t, 1, won)
}

func TestPublishAfterReopenTakesTheName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reopen.db")
	name := "oncekv-" + t.Name()
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, oncekv.Publish(name, db))
	applyUniqueN(t, db, "before", 3)
	require.NoError(t, db.Close())
	require.Equal(t, "null", expvar.Get(name).String(), "a closed DB shows as null")

	db, err = oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.NoError(t, oncekv.Publish(name, db), "the reopened store takes the name over")
	st := readVar(t, name)
	require.EqualValues(t, 3, st.LiveMarks, "the marks are on file")
	require.Zero(t, st.Total.Applied, "counters restart at Open")
}
