package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/oncekv/oncekv"
	"github.com/oncekv/oncekv/internal/layout"
)

// bankBucket is the user bucket holding one balance per account, stored as a
// decimal string so any bbolt tool shows it readably.
var bankBucket = []byte("bank")

// checkStore reports whether path holds an oncekv database, without writing
// to it. A missing file is (false, nil); a file that exists but is not an
// oncekv database, or is one this build cannot read, is an error.
//
// oncekv.Open cannot answer this: it creates a missing file, and bbolt turns
// an existing empty file into a database. The probe opens the file read-only
// instead, so that an unrelated file is never touched, let alone deleted.
func checkStore(path string) (exists bool, err error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case fi.IsDir():
		return true, &notStoreError{path, "it is a directory"}
	case !fi.Mode().IsRegular():
		return true, &notStoreError{path, "it is not a regular file"}
	case fi.Size() == 0:
		return true, &notStoreError{path, "it is an empty file"}
	}

	// bbolt may panic on a damaged file instead of returning an error.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: %w (bbolt: %v)", path, oncekv.ErrCorrupt, r)
		}
	}()
	b, err := bolt.Open(path, 0, &bolt.Options{ReadOnly: true, Timeout: oncekv.DefaultOpenTimeout})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return true, fmt.Errorf("%s: %w", path, oncekv.ErrLocked)
	case err != nil:
		return true, &notStoreError{path, fmt.Sprintf("not a bbolt file: %v", err)}
	}
	defer b.Close()
	if err := b.View(layout.Check); err != nil {
		if errors.Is(err, oncekv.ErrNotOncekv) {
			return true, &notStoreError{path, fmt.Sprintf("a bbolt file of another program: %v", err)}
		}
		return true, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// notStoreError reports a file that is not an oncekv database. It matches
// oncekv.ErrNotOncekv.
type notStoreError struct {
	path string
	why  string
}

func (e *notStoreError) Error() string {
	return fmt.Sprintf("%s is not an oncekv database (%s)", e.path, e.why)
}

func (e *notStoreError) Is(target error) bool { return target == oncekv.ErrNotOncekv }

// openExisting opens the oncekv database at path read-only, refusing to
// create one: inspecting a store never writes to it, and may run while
// other readers have it open.
func openExisting(path string) (*oncekv.DB, error) {
	exists, err := checkStore(path)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%s does not exist; run \"kvdemo demo -db %s\" first", path, path)
	}
	return oncekv.Open(path, &oncekv.Options{ReadOnly: true})
}

// readBalance returns the balance of account, or ok=false when it has none.
func readBalance(b *oncekv.Bucket, account string) (balance int64, ok bool, err error) {
	v := b.Get([]byte(account))
	if v == nil {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("balance of %q in bucket %q is %q, not a number", account, bankBucket, v)
	}
	return n, true, nil
}

func writeBalance(b *oncekv.Bucket, account string, balance int64) error {
	return b.Put([]byte(account), strconv.AppendInt(nil, balance, 10))
}
