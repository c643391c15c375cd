// Package dumpfile is the format of "oncekv dump" and "oncekv load": JSON
// lines, one record of a store per line, each an object whose "type" says
// what it is. It is the one reader and writer of the format, shared by the
// oncekv command and by any other store (PostgreSQL) that loads a dump.
//
// # Lines
//
//	{"type":"mark", "handler":…, "key":…, "state":…, …}   a dedup mark (see Mark)
//	{"type":"bucket", "bucket":…}                         a user bucket, so an empty one is kept too
//	{"type":"kv", "bucket":…, "key":…, "value":…}          a key of a user bucket
//
// Bytes (handlers, keys, bucket names, values, responses) are a JSON
// string when they are UTF-8 and {"base64": "…"} when they are not (see
// Text), so a dump stays readable and still carries any bytes. A line may
// carry a "decoded" member, a reading of its bytes for a person (a queue's
// message, an HTTP record); the reader ignores it.
//
// A Reader checks every line and reports the first bad one as a *LineError
// naming its number; a blank line is skipped.
package dumpfile
