package oncekv_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
	"github.com/oncekv/oncekv/internal/oncetest"
)

// hangBound is how long these tests wait for a call that must not block
// behind a reader. It is generous, so a loaded machine never fails them;
// it only turns a hang into a failure instead of a wedged test binary.
const hangBound = time.Minute

// putBig is an Apply effect that writes n bytes, enough to grow the file.
func putBig(key string, n int) func(tx *oncekv.Tx) ([]byte, error) {
	return func(tx *oncekv.Tx) ([]byte, error) {
		b, err := tx.CreateBucketIfNotExists([]byte("big"))
		if err != nil {
			return nil, err
		}
		return []byte(key), b.Put([]byte(key), bytes.Repeat([]byte{'x'}, n))
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// holdView opens a View in another goroutine and returns once it is open;
// closing release ends it, and viewDone then carries View's error.
func holdView(db *oncekv.DB) (release chan struct{}, viewDone chan error) {
	inView, release, viewDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		viewDone <- db.View(func(*oncekv.Tx) error {
			close(inView)
			<-release
			return nil
		})
	}()
	<-inView
	return release, viewDone
}

// applyBig starts an Apply that writes n bytes in another goroutine; the
// channel carries its error.
func applyBig(db *oncekv.DB, n int) chan error {
	applied := make(chan error, 1)
	go func() {
		_, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "big"}, putBig("big", n))
		applied <- err
	}()
	return applied
}

// TestViewDoesNotBlockGrowingWriter: with the default InitialMmapSize, an
// Apply whose commit grows the file completes while a View is open. Before
// the option, bbolt's map of a new file was 32 KiB, and that commit waited
// for the View to end.
func TestViewDoesNotBlockGrowingWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grow.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	before := fileSize(t, path)

	release, viewDone := holdView(db)
	applied := applyBig(db, 24<<20)
	select {
	case err := <-applied:
		require.NoError(t, err)
	case <-time.After(hangBound):
		close(release) // let the writer finish, so the deferred Close does not hang too
		t.Fatalf("an Apply that grows the file was still blocked by an open View after %v", hangBound)
	}
	close(release)
	require.NoError(t, <-viewDone)
	require.Greater(t, fileSize(t, path), before+8<<20, "the commit did grow the file")
}

// TestViewBlocksWriterPastInitialMmap pins down the documented limit: a
// commit that grows the file past the map waits for the open View, and
// completes once it ends.
func TestViewBlocksWriterPastInitialMmap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "past.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, InitialMmapSize: 1 << 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()

	release, viewDone := holdView(db)
	applied := applyBig(db, 4<<20)
	// While the View is open the writer cannot finish; this can only fail
	// if it did, never because the machine is slow.
	select {
	case err := <-applied:
		close(release)
		t.Fatalf("a commit past the 1 MiB map finished while a View was open (err %v): the documented limit is wrong", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-viewDone)
	select {
	case err := <-applied:
		require.NoError(t, err)
	case <-time.After(hangBound):
		t.Fatalf("the writer did not finish within %v after the View ended", hangBound)
	}
}

// TestApplyInsideViewOnFreshFile: Apply called from inside View's function
// on a new file works while the file fits the map (before the option it
// deadlocked: the commit's remap waited for the View around it). On a
// deadlock the DB is left open, since Close would wait for it too.
func TestApplyInsideViewOnFreshFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inside.db")
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	req := oncekv.Request{Handler: "h", Key: "inside"}
	done := make(chan error, 1)
	var res oncekv.Result
	go func() {
		done <- db.View(func(*oncekv.Tx) error {
			var err error
			res, err = db.Apply(context.Background(), req, putBig("inside", 4<<20))
			return err
		})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(hangBound):
		t.Fatalf("Apply inside View on a fresh file deadlocked (still waiting after %v)", hangBound)
	}
	require.False(t, res.Duplicate)
	require.Equal(t, "inside", string(res.Response))
	again, err := db.Apply(context.Background(), req, nil)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.NoError(t, db.Close())
}

func TestInitialMmapSizeOption(t *testing.T) {
	path := filepath.Join(t.TempDir(), "opt.db")
	_, err := oncekv.Open(path, &oncekv.Options{InitialMmapSize: math.MaxInt})
	require.ErrorIs(t, err, oncekv.ErrInvalidOptions)
	require.Contains(t, err.Error(), "InitialMmapSize")
	require.NoFileExists(t, path, "invalid options must not create the file")

	// Negative: bbolt's own growth. Everything still works, and the file
	// is no bigger than its data needs.
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true, InitialMmapSize: -1})
	require.NoError(t, err)
	_, err = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, putBig("k", 100<<10))
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Less(t, fileSize(t, path), int64(1<<20))

	// The default maps far more than the file holds, without writing it.
	db, err = oncekv.Open(path, nil)
	require.NoError(t, err)
	res, err := db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.NoError(t, db.Close())
	require.Less(t, fileSize(t, path), int64(1<<20), "opening with a large map leaves the file as it was")
}

func TestOpenSecondTimeFailsAfterTimeoutNamingPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	db, err := oncekv.Open(path, nil)
	require.NoError(t, err)
	defer db.Close()

	start := time.Now()
	_, err = oncekv.Open(path, &oncekv.Options{OpenTimeout: 200 * time.Millisecond})
	elapsed := time.Since(start)
	require.ErrorIs(t, err, oncekv.ErrLocked)
	require.Contains(t, err.Error(), path)
	require.Less(t, elapsed, 10*time.Second)
	// The message says how long Open really waited, which bbolt may cut a
	// poll short of the timeout, and names the timeout apart.
	require.Contains(t, err.Error(), "(OpenTimeout 200ms)")
	_, rest, ok := strings.Cut(err.Error(), "gave up after ")
	require.True(t, ok, err.Error())
	waited, perr := time.ParseDuration(strings.Fields(rest)[0])
	require.NoError(t, perr)
	require.LessOrEqual(t, waited, elapsed.Round(time.Millisecond)+time.Millisecond)

	// The default is finite too.
	_, err = oncekv.Open(path, nil)
	require.ErrorIs(t, err, oncekv.ErrLocked)
}

func TestOpenRejectsForeignFiles(t *testing.T) {
	dir := t.TempDir()

	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte("hello, this is not a database\n"), 0o600))
	_, err := oncekv.Open(text, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), text)

	random := filepath.Join(dir, "random.db")
	junk := make([]byte, 64<<10)
	for i := range junk {
		junk[i] = byte(i*7 + i/251)
	}
	require.NoError(t, os.WriteFile(random, junk, 0o600))
	_, err = oncekv.Open(random, nil)
	require.ErrorIs(t, err, oncekv.ErrNotOncekv)

	// A valid bbolt file of another program: not ours, and left untouched.
	other := filepath.Join(dir, "other.db")
	b, err := bolt.Open(other, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucket([]byte("widgets"))
		if err != nil {
			return err
		}
		return bk.Put([]byte("w1"), []byte("blue"))
	}))
	require.NoError(t, b.Close())
	before, err := os.ReadFile(other)
	require.NoError(t, err)
	_, err = oncekv.Open(other, nil)
	require.ErrorIs(t, err, oncekv.ErrNotOncekv)
	require.Contains(t, err.Error(), "widgets")
	after, err := os.ReadFile(other)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// TestOpenForeignFiles adds to TestOpenRejectsForeignFiles (text, random
// bytes, another program's bbolt file) the files that look most like a
// store: a header of another format, all zeros, one byte, an oncekv file
// cut after its meta pages (bbolt read past the end of its memory map and
// the process died of SIGBUS before Open asked for faults as panics). Each
// gets ErrNotOncekv or ErrCorrupt naming the path, never a panic, and the
// file is left as it was.
func TestOpenForeignFiles(t *testing.T) {
	write := func(data []byte) func(*testing.T, string) {
		return func(t *testing.T, path string) { require.NoError(t, os.WriteFile(path, data, 0o600)) }
	}
	cut := func(n int) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			src := filepath.Join(t.TempDir(), "src.db")
			buildSmall(t, src)
			raw, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, raw[:n], 0o600))
		}
	}
	cases := map[string]func(*testing.T, string){
		"sqlite header":         write(append([]byte("SQLite format 3\x00"), make([]byte, 8192)...)),
		"zeros":                 write(make([]byte, 16384)),
		"one byte":              write([]byte{0}),
		"meta pages only":       cut(8192),
		"cut inside meta pages": cut(5000),
	}
	for name, make := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "foreign.db")
			make(t, path)
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			db, err := oncekv.Open(path, &oncekv.Options{OpenTimeout: time.Second})
			require.Error(t, err)
			require.Nil(t, db)
			require.True(t, clearFileError(err), "unclear error: %v", err)
			require.Contains(t, err.Error(), path)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused file is left as it was")
		})
	}
}

func buildSmall(t *testing.T, path string) {
	db, err := oncekv.Open(path, &oncekv.Options{NoSync: true})
	require.NoError(t, err)
	_, err = db.Apply(context.Background(), oncekv.Request{Handler: "h", Key: "k"}, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
}

// TestOpenSyncsParentDirectory watches, with strace, a child create a new
// store: the file's directory must be fsynced after the file was created,
// or a power loss can lose the whole file (the directory entry); a reopen
// of an existing file needs no such fsync.
func TestOpenSyncsParentDirectory(t *testing.T) {
	strace := needStrace(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "new.db")
	trace := filepath.Join(t.TempDir(), "trace")
	syncsOfDir := func() int {
		run := runWorkloadChild(t, path, "1:1:0:1:0", "",
			strace, "-f", "-qq", "-y", "-o", trace, "-e", "trace=openat,fsync")
		require.NoError(t, run.err, run.stderr)
		raw, err := os.ReadFile(trace)
		require.NoError(t, err)
		created, n := false, 0
		for line := range strings.SplitSeq(string(raw), "\n") {
			switch {
			case strings.Contains(line, "openat(") && strings.Contains(line, path) && strings.Contains(line, "O_CREAT"):
				created = true
			case strings.Contains(line, "fsync(") && strings.Contains(line, "<"+dir+">"):
				require.True(t, created, "the directory was synced before the file was created:\n%s", raw)
				n++
			}
		}
		return n
	}
	require.Equal(t, 1, syncsOfDir(), "creating a store syncs its directory once")
	require.Zero(t, syncsOfDir(), "reopening an existing store needs no directory sync")
}

// TestVersion2FileReadsAndUpgrades: a store whose marks are in the msgpack
// form of format 2 opens read-only as it is, writing nothing; its first
// writable open moves it to the current format (so a format 2 build
// refuses it from then on); its DONE, FAILED and claimed keys are answered
// as before, across the upgrade and a reopen; a payload other than the
// first is still key reuse; and the marks written after the upgrade are in
// the new form while the old ones stay readable.
func TestVersion2FileReadsAndUpgrades(t *testing.T) {
	ctx := context.Background()
	clock := oncetest.NewClock(epoch.Add(10 * time.Minute))
	path := filepath.Join(t.TempDir(), "x.db")
	opts := timeOpts(clock, time.Hour, 24*time.Hour)
	opts.KeepOrphanedClaims = true // the claim below is read back, not released
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	done := applyKey(t, db, "done")
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "failed", Payload: []byte("failed")},
		func(*oncekv.Tx) ([]byte, error) { return nil, oncekv.Permanent(errors.New("card declined")) })
	require.Error(t, err)
	claim, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "claimed", Payload: []byte("claimed")}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.Equal(t, 3, rewriteAsVersion2(t, path))

	sum := func() []byte { b, err := os.ReadFile(path); require.NoError(t, err); return b }
	before := sum()
	ro := timeOpts(clock, 0, 24*time.Hour)
	ro.ReadOnly = true
	db, err = oncekv.Open(path, ro)
	require.NoError(t, err)
	require.Equal(t, done.Response, applyKey(t, db, "done").Response)
	require.NoError(t, db.Close())
	require.Equal(t, before, sum(), "a read-only open writes nothing")
	require.Equal(t, uint32(2), fileFormat(t, path).Version)

	check := func(db *oncekv.DB) {
		t.Helper()
		runs := 0
		res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "done", Payload: []byte("done")}, counted(&runs))
		require.NoError(t, err)
		require.True(t, res.Duplicate)
		require.Equal(t, done.Response, res.Response)
		require.Equal(t, done.FirstSeen, res.FirstSeen)
		_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "done", Payload: []byte("other")}, counted(&runs))
		require.ErrorIs(t, err, oncekv.ErrKeyReuse)
		_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: "failed", Payload: []byte("failed")}, counted(&runs))
		var failed *oncekv.FailedError
		require.ErrorAs(t, err, &failed)
		require.Equal(t, "card declined", failed.Message)
		require.Zero(t, runs)
	}
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	check(db)
	info, err := db.Mark("h", "claimed")
	require.NoError(t, err)
	require.Equal(t, oncekv.MarkInProgress, info.State)
	require.Equal(t, claim.Token(), info.Token)
	require.Equal(t, claim.LeaseUntil(), info.LeaseUntil)
	clock.Advance(2 * time.Minute) // the claim's lease ran out: taken over with a greater token
	again, err := db.Claim(ctx, oncekv.Request{Handler: "h", Key: "claimed", Payload: []byte("claimed")}, time.Minute)
	require.NoError(t, err)
	require.Greater(t, again.Token(), claim.Token())
	_, err = again.Complete(ctx, []byte("sent"), nil)
	require.NoError(t, err)
	applyKey(t, db, "new")
	require.NoError(t, db.Close())
	require.Equal(t, uint32(layout.FormatVersion), fileFormat(t, path).Version, "upgraded by the writable open")
	require.Equal(t, map[string]bool{"done": true, "failed": true, "claimed": false, "new": false}, legacyMarks(t, path),
		"the marks written since are in the new form")

	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	check(db)
	res, err := db.Apply(ctx, oncekv.Request{Handler: "h", Key: "claimed", Payload: []byte("claimed")}, mustNotRunApply(t))
	require.NoError(t, err)
	require.Equal(t, "sent", string(res.Response))
	require.True(t, applyKey(t, db, "new").Duplicate)
	require.NoError(t, db.Close())
	oncetest.Check(t, path)
}

// rewriteAsVersion2 turns the closed store at path into one written by a
// format 2 build: every mark in msgpack, format record version 2. It
// returns how many marks it rewrote.
func rewriteAsVersion2(t *testing.T, path string) (n int) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		err := layout.ForEachWindow(tx, false, func(_ int64, w *bolt.Bucket) error {
			var keys [][]byte
			err := w.ForEach(func(k, _ []byte) error {
				keys = append(keys, bytes.Clone(k)) // bbolt's keys are not to be kept, nor written under a cursor
				return nil
			})
			for _, k := range keys {
				var m layout.Mark
				require.NoError(t, m.Unmarshal(w.Get(k)))
				if err := w.Put(k, m.MarshalLegacy()); err != nil {
					return err
				}
			}
			n += len(keys)
			return err
		})
		if err != nil {
			return err
		}
		var f layout.Format
		meta := tx.Bucket(layout.MetaRoot)
		require.NoError(t, f.Unmarshal(meta.Get([]byte("format"))))
		f.Version = 2
		return meta.Put([]byte("format"), f.Marshal())
	}))
	return n
}

// legacyMarks reports, for every mark of handler "h" in the closed store
// at path, whether it is still in the msgpack form of format 2.
func legacyMarks(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer b.Close()
	legacy := map[string]bool{}
	legacyForm := (&layout.Mark{State: layout.Done}).MarshalLegacy()[0]
	require.NoError(t, b.View(func(tx *bolt.Tx) error {
		return layout.ForEachWindow(tx, false, func(_ int64, w *bolt.Bucket) error {
			return w.ForEach(func(k, v []byte) error {
				_, key, ok := layout.SplitMarkKey(k)
				require.True(t, ok)
				legacy[key] = v[0] == legacyForm
				return nil
			})
		})
	}))
	return legacy
}

// fileState is what must not change when nothing was written: the bytes
// and the modification time.
type fileState struct {
	bytes []byte
	mtime time.Time
}

func statFile(t *testing.T, path string) fileState {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	return fileState{raw, st.ModTime()}
}

// seedStore makes a closed store with a done key, a failed key, a claim in
// progress, user data and a fence, and returns its path.
func seedStore(t *testing.T, now func() time.Time) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "seed.db")
	db, err := oncekv.Open(path, &oncekv.Options{Now: now})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "d-1", Payload: []byte("100")}, deposit("ann", 100))
	require.NoError(t, err)
	_, err = db.Claim(ctx, welcome, time.Hour)
	require.NoError(t, err)
	_, err = db.NextFence("config/x")
	require.NoError(t, err)
	require.NoError(t, db.Close())
	return path
}

// TestReadOnlyRefusesEveryWrite: several read-only DBs share the file, each
// answers duplicates and look-ups, refuses every write with ErrReadOnly,
// and none of them changes a byte of the file, Close included.
func TestReadOnlyRefusesEveryWrite(t *testing.T) {
	clock := oncetest.NewClock(claimEpoch)
	path := seedStore(t, clock.Now)
	before := statFile(t, path)
	// Far past the retention, with expiry every nanosecond: a writable store
	// would drop every window.
	clock.Advance(30 * 24 * time.Hour)
	opts := &oncekv.Options{ReadOnly: true, Now: clock.Now, ExpireInterval: time.Nanosecond}
	a, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	b, err := oncekv.Open(path, opts)
	require.NoError(t, err, "readers share the file")

	// A writer cannot have it while readers do.
	_, err = oncekv.Open(path, &oncekv.Options{OpenTimeout: 100 * time.Millisecond})
	require.ErrorIs(t, err, oncekv.ErrLocked)

	ctx := context.Background()
	for _, db := range []*oncekv.DB{a, b} {
		res, err := db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "d-1", Payload: []byte("100")}, mustNotApply(t))
		require.NoError(t, err, "a duplicate is answered")
		require.True(t, res.Duplicate)
		require.Equal(t, "ann=100", string(res.Response))
		info, err := db.Mark("deposit", "d-1")
		require.NoError(t, err)
		require.Equal(t, oncekv.MarkDone, info.State)
		require.Equal(t, uint64(100), balance(t, db, "ann"))

		writes := map[string]error{}
		_, writes["apply"] = db.Apply(ctx, oncekv.Request{Handler: "deposit", Key: "d-2"}, deposit("ann", 1))
		_, writes["apply batch"] = db.ApplyBatch(ctx, []oncekv.Request{{Handler: "deposit", Key: "d-3"}}, nil)
		_, writes["claim"] = db.Claim(ctx, oncekv.Request{Handler: "email", Key: "other"}, lease)
		_, writes["claim takeover"] = db.Claim(ctx, welcome, lease) // an orphan: free to take, but not here
		writes["update"] = db.Update(func(*oncekv.Tx) error { return nil })
		writes["forget"] = db.Forget("deposit", "d-1")
		_, writes["expire"] = db.Expire(ctx)
		_, writes["next fence"] = db.NextFence("config/x")
		writes["release claim"] = db.ReleaseClaim(welcome.Handler, welcome.Key, 1)
		for name, err := range writes {
			require.ErrorIs(t, err, oncekv.ErrReadOnly, name)
		}
		require.NoError(t, db.Sync())
		require.Len(t, db.Stats().Windows, 1, "no expiry, in the background or not")
	}
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	after := statFile(t, path)
	require.Equal(t, before.mtime, after.mtime)
	require.True(t, string(before.bytes) == string(after.bytes), "the file is byte for byte as it was")
}

func TestReadOnlyNeedsAnOncekvFile(t *testing.T) {
	_, err := oncekv.Open(filepath.Join(t.TempDir(), "missing.db"), &oncekv.Options{ReadOnly: true})
	require.ErrorIs(t, err, os.ErrNotExist, "read-only never creates")

	// An empty file (created by touch, or by a crash before bbolt's first
	// pages) is refused with a typed error, and left empty.
	empty := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = oncekv.Open(empty, &oncekv.Options{ReadOnly: true})
	require.ErrorIs(t, err, oncekv.ErrReadOnly)
	require.Contains(t, err.Error(), "empty")
	info, err := os.Stat(empty)
	require.NoError(t, err)
	require.Zero(t, info.Size())
}

// TestVersion3FileUpgradesToParkedAndTombstones: a store of format 3 (no
// parked keys, no tombstones, every mark of record version 2) reads as it
// is read-only, and its first writable open moves it to format 4 before
// writing a parked key or a tombstone, which a format 3 build would
// ignore; its old marks stay as they were and answer as before.
func TestVersion3FileUpgradesToParkedAndTombstones(t *testing.T) {
	ctx := context.Background()
	clock := oncetest.NewClock(epoch.Add(10 * time.Minute))
	path := filepath.Join(t.TempDir(), "v3.db")
	opts := timeOpts(clock, time.Hour, 2*time.Hour)
	db, err := oncekv.Open(path, opts)
	require.NoError(t, err)
	done := applyKey(t, db, "done")
	require.NoError(t, db.Close())
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		var f layout.Format
		meta := tx.Bucket(layout.MetaRoot)
		require.NoError(t, f.Unmarshal(meta.Get([]byte("format"))))
		f.Version = 3
		return meta.Put([]byte("format"), f.Marshal())
	}))
	require.NoError(t, b.Close())

	ro := timeOpts(clock, 0, 2*time.Hour)
	ro.ReadOnly = true
	db, err = oncekv.Open(path, ro)
	require.NoError(t, err)
	require.Equal(t, done.Response, applyKey(t, db, "done").Response)
	require.NoError(t, db.Close())
	require.Equal(t, uint32(3), fileFormat(t, path).Version, "a read-only open writes nothing")

	opts.TombstoneRetention = 24 * time.Hour
	db, err = oncekv.Open(path, opts)
	require.NoError(t, err)
	require.Equal(t, uint32(layout.FormatVersion), fileFormat2(t, db), "upgraded before anything new is written")
	res := applyKey(t, db, "done")
	require.True(t, res.Duplicate)
	require.Equal(t, done.Response, res.Response)
	clock.Advance(4 * time.Hour)
	st, err := db.Expire(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Tombstones, "the old mark's tombstone")
	require.True(t, applyKey(t, db, "done").ResponseExpired)
	require.NoError(t, db.Close())
}

// fileFormat2 reads the format version of db's file through a backup, as
// db holds the file.
func fileFormat2(t *testing.T, db *oncekv.DB) uint32 {
	t.Helper()
	copyPath := filepath.Join(t.TempDir(), "copy.db")
	_, err := db.BackupFile(copyPath)
	require.NoError(t, err)
	return fileFormat(t, copyPath).Version
}
