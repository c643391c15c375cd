package postgres

import "strings"

// queries are the store's SQL statements, with its schema's name in them.
// pgx prepares and caches each one per connection.
type queries struct {
	schema, marks, tombs string

	// lookup is the plain read of a key's mark: no lock, no write. The
	// newest window first, and only the first row: PostgreSQL scans the
	// partitions' primary keys in window order and stops at the first hit,
	// so a duplicate in the current window costs one index probe.
	lookup string
	// lookupMany is lookup for many keys at once, by their index.
	lookupMany string
	// tryLocks takes the advisory locks of many keys without waiting, and
	// says which it got.
	tryLocks string
	insert   string // many marks at once
	rewrite  string // one mark, maybe into another window
	remove   string // one mark, deleted (Abandon; ResolveParked, not applied)
	// countParked and parked count and list the PARKED marks, by the
	// partial index marks_parked.
	countParked, parked string
	token               string // nextval of tokenSeq
	tokenSeq            string
	saveClock           string

	nextFence, advanceFence, storedFence string
}

func newQueries(schema string, tombs bool) queries {
	q := queries{schema: schema, marks: schema + ".marks", tombs: schema + ".tombstones"}
	r := strings.NewReplacer("$S", schema, "$COLS", markColumns, "$TCOLS", tombColumns)
	q.lookup = r.Replace(`SELECT $COLS FROM $S.marks
		WHERE id = $1 AND handler = $2 AND key = $3 ORDER BY win DESC LIMIT 1`)
	q.lookupMany = r.Replace(`SELECT r.i, m.* FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) WITH ORDINALITY AS r(id, handler, key, i)
		CROSS JOIN LATERAL (SELECT $COLS FROM $S.marks m
			WHERE m.id = r.id AND m.handler = r.handler AND m.key = r.key ORDER BY m.win DESC LIMIT 1) m`)
	if tombs {
		// The key's mark, else its newest tombstone (a NULL fingerprint):
		// at most two rows to sort.
		q.lookup = r.Replace(`SELECT * FROM (
			(SELECT $COLS FROM $S.marks WHERE id = $1 AND handler = $2 AND key = $3 ORDER BY win DESC LIMIT 1)
			UNION ALL
			(SELECT $TCOLS FROM $S.tombstones WHERE id = $1 ORDER BY win DESC LIMIT 1)
		) u ORDER BY fingerprint IS NULL LIMIT 1`)
		q.lookupMany = r.Replace(`SELECT r.i, m.* FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) WITH ORDINALITY AS r(id, handler, key, i)
			CROSS JOIN LATERAL (SELECT * FROM (
				(SELECT $COLS FROM $S.marks m
					WHERE m.id = r.id AND m.handler = r.handler AND m.key = r.key ORDER BY m.win DESC LIMIT 1)
				UNION ALL
				(SELECT $TCOLS FROM $S.tombstones t WHERE t.id = r.id ORDER BY t.win DESC LIMIT 1)
			) u ORDER BY fingerprint IS NULL LIMIT 1) m`)
	}
	q.tryLocks = `SELECT r.i, pg_try_advisory_xact_lock(r.lock) FROM unnest($1::bigint[]) WITH ORDINALITY AS r(lock, i)`
	q.insert = r.Replace(`INSERT INTO $S.marks (win, first_seen, lease_until, token, state, id, fingerprint, handler, key, response, error,
			attempt_start, takeovers, parked_at)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::smallint[],
			$6::bytea[], $7::bytea[], $8::bytea[], $9::bytea[], $10::bytea[], $11::bytea[], $12::bigint[], $13::integer[], $14::bigint[])`)
	q.rewrite = r.Replace(`UPDATE $S.marks SET win = $3, lease_until = $4, token = $5, state = $6, response = $7, error = $8,
			attempt_start = $9, takeovers = $10, parked_at = $11
		WHERE id = $1 AND win = $2`)
	q.remove = r.Replace(`DELETE FROM $S.marks WHERE id = $1 AND win = $2`)
	q.countParked = r.Replace(`SELECT count(*) FROM $S.marks WHERE state = 4`)
	q.parked = r.Replace(`SELECT handler, key, $COLS FROM $S.marks WHERE state = 4 ORDER BY handler, key`)
	q.token = `SELECT nextval($1::regclass)`
	q.tokenSeq = schema + ".claim_tokens"
	q.saveClock = r.Replace(`UPDATE $S.meta SET clock_high = greatest(clock_high, $1)`)
	q.nextFence = r.Replace(`INSERT INTO $S.fence_counters AS c (id, resource, last) VALUES ($1, $2, 1)
		ON CONFLICT (id) DO UPDATE SET last = c.last + 1 RETURNING last`)
	q.advanceFence = r.Replace(`INSERT INTO $S.fences AS f (id, resource, fence) VALUES ($1, $2, $3::numeric)
		ON CONFLICT (id) DO UPDATE SET fence = excluded.fence WHERE f.fence < excluded.fence RETURNING fence::text`)
	q.storedFence = r.Replace(`SELECT fence::text FROM $S.fences WHERE id = $1`)
	return q
}
