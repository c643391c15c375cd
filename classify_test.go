package oncekv_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv"
)

// classified is the action of every error the root package exports, as a
// consumer meets it: wrapped in a *RequestError or another error.
var classified = map[string]struct {
	err  error
	want oncekv.Action
}{
	"ErrKeyReuse":           {oncekv.ErrKeyReuse, oncekv.GiveUp},
	"ErrInProgress":         {oncekv.ErrInProgress, oncekv.RetryLater},
	"ErrFenced":             {oncekv.ErrFenced, oncekv.GiveUp},
	"ErrFailed":             {oncekv.ErrFailed, oncekv.GiveUp},
	"ErrHandlerRequired":    {oncekv.ErrHandlerRequired, oncekv.GiveUp},
	"ErrKeyRequired":        {oncekv.ErrKeyRequired, oncekv.GiveUp},
	"ErrKeyTooLarge":        {oncekv.ErrKeyTooLarge, oncekv.GiveUp},
	"ErrValueTooLarge":      {oncekv.ErrValueTooLarge, oncekv.GiveUp},
	"ErrResponseTooLarge":   {oncekv.ErrResponseTooLarge, oncekv.GiveUp},
	"ErrMarkOwnKey":         {oncekv.ErrMarkOwnKey, oncekv.GiveUp},
	"ErrPublish":            {oncekv.ErrPublish, oncekv.GiveUp},
	"ErrInvalidMark":        {oncekv.ErrInvalidMark, oncekv.GiveUp},
	"ErrBucketNameRequired": {oncekv.ErrBucketNameRequired, oncekv.GiveUp},
	"ErrInvalidOptions":     {oncekv.ErrInvalidOptions, oncekv.GiveUp},
	"ErrInvalidWindow":      {oncekv.ErrInvalidWindow, oncekv.GiveUp},
	"ErrInvalidFingerprint": {oncekv.ErrInvalidFingerprint, oncekv.GiveUp},
	"ErrTxNotWritable":      {oncekv.ErrTxNotWritable, oncekv.GiveUp},
	"ErrTxClosed":           {oncekv.ErrTxClosed, oncekv.GiveUp},
	"ErrIncompatibleValue":  {oncekv.ErrIncompatibleValue, oncekv.GiveUp},
	"ErrClosed":             {oncekv.ErrClosed, oncekv.Reopen},
	"ErrReadOnly":           {oncekv.ErrReadOnly, oncekv.Reopen},
	"ErrLocked":             {oncekv.ErrLocked, oncekv.RetryLater},
	"ErrNotOncekv":          {oncekv.ErrNotOncekv, oncekv.GiveUp},
	"ErrCorrupt":            {oncekv.ErrCorrupt, oncekv.GiveUp},
	"ErrFormatVersion":      {oncekv.ErrFormatVersion, oncekv.GiveUp},
	"ErrPoisoned":           {fmt.Errorf("%w: %w", oncekv.ErrPoisoned, syscall.EIO), oncekv.Reopen},
	"ErrNoSpace":            {fmt.Errorf("%w: %w", oncekv.ErrNoSpace, syscall.ENOSPC), oncekv.RetryLater},
	"ErrVersionConflict":    {oncekv.ErrVersionConflict, oncekv.RetryNow},
	"ErrUnversioned":        {oncekv.ErrUnversioned, oncekv.GiveUp},
	"ErrInvalidFence":       {oncekv.ErrInvalidFence, oncekv.GiveUp},
	"ErrResourceRequired":   {oncekv.ErrResourceRequired, oncekv.GiveUp},
	"ErrExhausted":          {oncekv.ErrExhausted, oncekv.GiveUp},
	"ErrInvalidLease":       {oncekv.ErrInvalidLease, oncekv.GiveUp},
	"ErrClaimDone":          {oncekv.ErrClaimDone, oncekv.GiveUp},
	"ErrUnknownClaim":       {oncekv.ErrUnknownClaim, oncekv.GiveUp},
	"ErrNotFound":           {oncekv.ErrNotFound, oncekv.GiveUp},
	"ErrParked":             {&oncekv.ParkedError{}, oncekv.GiveUp},
	"ErrParkFull":           {oncekv.ErrParkFull, oncekv.GiveUp},
	"ErrNotParked":          {oncekv.ErrNotParked, oncekv.GiveUp},
}

// TestClassifyEveryExportedError: every Err variable the root package
// declares has its action, and gets it wrapped as callers see it. A new
// error without a row here fails the test.
func TestClassifyEveryExportedError(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var declared []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for _, name := range vs.Names {
					if strings.HasPrefix(name.Name, "Err") && name.IsExported() {
						declared = append(declared, name.Name)
					}
				}
			}
			return true
		})
	}
	require.NotEmpty(t, declared)
	for _, name := range declared {
		require.Contains(t, classified, name, "exported error without an action")
	}
	for name, tc := range classified {
		t.Run(name, func(t *testing.T) {
			wrapped := &oncekv.RequestError{Op: "apply", Handler: "h", Key: "k", Err: fmt.Errorf("somewhere: %w", tc.err)}
			require.Equal(t, tc.want, oncekv.Classify(wrapped).Action)
			require.Equal(t, tc.want, oncekv.Classify(tc.err).Action)
		})
	}
}

func TestClassifyOthers(t *testing.T) {
	require.Equal(t, oncekv.Advice{Action: oncekv.Ack}, oncekv.Classify(nil))
	require.Equal(t, oncekv.RetryLater, oncekv.Classify(errors.New("upstream timeout")).Action, "the unknown is worth a retry with backoff")
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(oncekv.Permanent(errors.New("400"))).Action)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(gatewayRejected{true}).Action)
	require.Equal(t, oncekv.RetryNow, oncekv.Classify(context.Canceled).Action)
	require.Equal(t, oncekv.RetryNow, oncekv.Classify(fmt.Errorf("x: %w", context.DeadlineExceeded)).Action)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(&oncekv.FenceError{Stored: 2, Presented: 1}).Action)
	require.Equal(t, oncekv.RetryNow, oncekv.Classify(&oncekv.VersionError{Stored: 2, Presented: 1}).Action)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(&oncekv.FailedError{Message: "x"}).Action)
	for a, s := range map[oncekv.Action]string{oncekv.Ack: "ack", oncekv.RetryNow: "retry now", oncekv.RetryLater: "retry later", oncekv.GiveUp: "give up", oncekv.Reopen: "reopen", 9: "Action(9)"} {
		require.Equal(t, s, a.String())
	}
}

// TestClassifyInProgressSaysWhen: a claim in progress is RetryLater, not
// before its lease ends; a 33 KB id is GiveUp, not a redelivery loop.
func TestClassifyInProgressSaysWhen(t *testing.T) {
	db, _ := openClocked(t)
	ctx := context.Background()
	mustClaim(t, db, welcome)
	_, err := db.Apply(ctx, welcome, mustNotApply(t))
	require.Equal(t, oncekv.Advice{Action: oncekv.RetryLater, NotBefore: claimEpoch.Add(lease)}, oncekv.Classify(err))
	_, err = db.Apply(ctx, oncekv.Request{Handler: "h", Key: strings.Repeat("k", 33<<10)}, nil)
	require.Equal(t, oncekv.GiveUp, oncekv.Classify(err).Action)
	require.NoError(t, db.Close())
	_, err = db.Apply(ctx, welcome, nil)
	require.Equal(t, oncekv.Reopen, oncekv.Classify(err).Action)
}
