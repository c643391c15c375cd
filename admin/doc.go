// Package admin is an http.Handler that shows a running program's oncekv
// store as JSON: its stats, marks and claims, its queues with their live
// messages, ordering keys and dead letters, the HTTP records of idemhttp,
// and a consistent hot backup of the whole file, streamed from DB.Backup.
// It is how an operator sees a store that a process holds open (bbolt's
// file lock keeps the oncekv command out): the oncekv command takes the
// handler's URL where it takes a PATH, for its read commands.
//
// # It exposes everything
//
// The handler exposes every stored response (HTTP records with their
// bodies, marks with their responses, queue messages with their bodies)
// and a full copy of the file at /backup. It never listens by itself:
// mount it on your own server, behind your own authentication, and never
// on a public listener. It writes nothing: redrives and deletes are the
// program's own calls (queue.Redrive), or the oncekv command's on a file no
// process holds.
//
//	mux.Handle("/debug/oncekv/", http.StripPrefix("/debug/oncekv", requireOperator(h)))
//
// (Example is this snippet, compiled and run.)
//
// # Endpoints
//
// Every endpoint answers GET (and HEAD) only, JSON unless said; a list
// takes after= (the last ID of a page) and limit= (at most Options.MaxList):
//
//	/                                 the endpoints
//	/stats                            DB.Stats
//	/marks?handler=&state=&window=    marks, one JSON object a line, as oncekv marks -json prints them
//	/mark?handler=&key=               one mark (404 when absent)
//	/claims                           the claims in progress, one a line
//	/queues                           every queue's Stats (ages in seconds)
//	/queues/{name}                    one queue's Stats
//	/queues/{name}/messages           its live messages, by ID
//	/queues/{name}/dead               its dead letters, by ID
//	/queues/{name}/keys               its ordering keys, held ones marked (after= is a key)
//	/http?scope=&key=&handler=        the idemhttp record of (scope, Idempotency-Key), decoded
//	/backup                           the whole file, application/octet-stream
//
// An error is {"error": "..."} with 400 (a bad parameter), 404 (no such
// mark, queue or record), 405 (not GET) or 500.
package admin
