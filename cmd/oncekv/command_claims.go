package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/oncekv/oncekv"
)

func init() {
	register(&command{
		name: "claims", short: "list the claims in progress and their leases",
		args: "PATH", nargs: 1,
		summary: "List the claims in progress with their leases and tokens: the stuck work to look at.",
		flags: func(fs *flag.FlagSet) func(io.Writer, []string) error {
			var sf storeFlags
			sf.register(fs, true, false)
			return func(out io.Writer, args []string) error {
				return listMarks(&sf, out, args[0], oncekv.MarkFilter{State: oncekv.MarkInProgress}, 0, claimRow)
			}
		},
	})
}

// claimRow is a row of claims; the zero mark gives the header.
func claimRow(m oncekv.MarkInfo, now time.Time) string {
	if m.Handler == "" {
		return "TOKEN\tLEASE UNTIL\tHANDLER\tKEY"
	}
	return fmt.Sprintf("%d\t%s\t%s\t%s", m.Token, leaseText(m, now), printable([]byte(m.Handler)), printable([]byte(m.Key)))
}
