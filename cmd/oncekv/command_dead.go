package main

import (
	"fmt"
	"time"

	"github.com/oncekv/oncekv/queue"
)

func init() {
	register(&command{
		name: "dead", short: "a queue's dead letters and why",
		args: "PATH QUEUE", nargs: 2,
		summary: "List a queue's dead letters: ID, key, ordering key, attempts, when it died, why (the\n" +
			"last error: a far side's answer, a lease that ran out, an interrupted attempt) and the\n" +
			"start of the body. Redrive them with redrive, drop them with dead-delete. PATH may be an\n" +
			"admin handler's URL.",
		flags: listFlags(&messageList{
			header: "ID\tKEY\tORDERING KEY\tATTEMPTS\tDEAD AT\tREASON\tBODY",
			read:   (*queue.View).DeadLetters,
			row: func(m *queue.Message, _ time.Time) string {
				return fmt.Sprintf("%d\t%s\t%s\t%d\t%s\t%s\t%s", m.ID, printable([]byte(m.Key)), orDash(m.OrderingKey),
					m.Attempt, stamp(m.DeadAt), orDash(m.LastError), excerpt(m.Body))
			},
		}),
	})
}
