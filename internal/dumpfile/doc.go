// Package dumpfile is the format of "oncekv dump" and "oncekv load": JSON
// lines, one record of a store per line, each an object whose "type" says
// what it is. It is the one reader and writer of the format, shared by the
// oncekv command and by any other store (PostgreSQL) that loads a dump.
//
// # Lines
//
//	{"type":"mark", "handler":…, "key":…, "state":…, …}   a dedup mark (see Mark)
//	{"type":"bucket", "bucket":…}                         a user bucket, so an empty one is kept too
//	{"type":"bucket", "bucket":…, "sequence":N}            … and its NextSequence counter, when not 0
//	{"type":"kv", "bucket":…, "key":…, "value":…}          a key of a user bucket
//	{"type":"kv", …, "fence":N, "version":N}               … with the fence and version it carries
//	{"type":"fence", "bucket":…, "key":…, "fence":N, …}    the fence and version of a deleted key
//	{"type":"counter", "resource":…, "last":N}             a token counter: the last token issued
//	{"type":"counter", "last":N}                           the claim tokens' counter
//
// The counters, fences, versions and sequences are what a copy of a store
// needs to keep its promises: a token, a NextSequence number, never issued
// twice; a stale writer fenced off; a compare-and-set that read a key
// before the move refused if the key changed. A store loading a dump
// raises its own to them and never lowers one.
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
