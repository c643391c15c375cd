package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
)

func init() {
	register(&command{
		name: "compact", short: "copy the store into a new, compacted file",
		args: "SRC DST", nargs: 2,
		summary: "Copy the store SRC into the new file DST with bbolt's compaction, leaving out the\n" +
			"free pages: the only way a bbolt file shrinks (after expiry dropped windows, say).\n" +
			"DST must not exist. Put DST in SRC's place while no process has SRC open.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var txMax int64
			fs.Int64Var(&txMax, "tx-max-size", 64<<20, "commit the copy every this many bytes, bounding its memory")
			return func(out io.Writer, args []string) error { return runCompact(out, args[0], args[1], txMax) }
		},
	})
}

func runCompact(out io.Writer, src, dst string, txMax int64) (err error) {
	// Opening it through oncekv first checks that SRC is an oncekv store
	// and that no process holds it.
	db, err := (&storeFlags{}).open(src, true)
	if err != nil {
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	// O_EXCL: an existing DST, perhaps the only good copy, is never touched.
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, oncekv.DefaultFileMode)
	if err != nil {
		return fmt.Errorf("oncekv: compact: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(dst)
		}
	}()
	from, err := bolt.Open(src, 0, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("oncekv: compact: open %s: %w", src, err)
	}
	defer from.Close()
	to, err := bolt.Open(dst, oncekv.DefaultFileMode, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("oncekv: compact: open %s: %w", dst, err)
	}
	if err := bolt.Compact(to, from, txMax); err != nil {
		return errors.Join(fmt.Errorf("oncekv: compact: %w", err), to.Close())
	}
	// The copy numbers its transactions afresh, so the stamp that proves
	// SRC's persisted newest-window filter current proves nothing in DST,
	// and could by chance name DST's transaction: DST's first Open
	// rebuilds that filter instead.
	if err := to.Update(layout.DropNewestFilter); err != nil {
		return errors.Join(fmt.Errorf("oncekv: compact: %w", err), to.Close())
	}
	if err := to.Close(); err != nil {
		return err
	}
	before, after := fileSize(src), fileSize(dst)
	fmt.Fprintf(out, "compacted %s (%d bytes) into %s (%d bytes): %.1f%% of the original\n",
		src, before, dst, after, 100*float64(after)/float64(max(before, 1)))
	return nil
}

// fileSize is path's size, or 0 if it cannot be read.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
