package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/token"
)

// withDB opens dsn, with sqlonce's tables in schema ("" for where the
// connection finds them), and runs fn on the backend of its dialect.
func withDB(ctx context.Context, dsn, schema string, create bool, pg func(*backend[pgx.Tx]) error, std func(*backend[*sql.Tx]) error) error {
	o, err := open(ctx, dsn, schema, create)
	if err != nil {
		return err
	}
	switch b := o.(type) {
	case *backend[pgx.Tx]:
		defer b.close()
		return pg(b)
	case *backend[*sql.Tx]:
		defer b.close()
		return std(b)
	}
	panic("unreachable")
}

func migrateCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	dsn, schema := dbFlag(fs), schemaFlag(fs)
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	action := "up"
	switch len(pos) {
	case 0:
	case 1:
		action = pos[0]
	default:
		return cmdUsagef("migrate", "migrate takes one of up, down, status")
	}
	if action != "up" && action != "down" && action != "status" {
		return cmdUsagef("migrate", "migrate %q: want up, down or status", action)
	}
	if err := needDB("migrate", *dsn); err != nil {
		return err
	}
	return withDB(ctx, *dsn, *schema, action == "up",
		func(b *backend[pgx.Tx]) error { return migrate(ctx, b, action, stdout) },
		func(b *backend[*sql.Tx]) error { return migrate(ctx, b, action, stdout) })
}

func migrate[TTx any](ctx context.Context, b *backend[TTx], action string, out io.Writer) error {
	p, err := b.provider()
	if err != nil {
		return err
	}
	switch action {
	case "up":
		if b.schema != nil {
			return migrateUpSchema(ctx, b, p, out)
		}
		res, err := p.Up(ctx)
		for _, r := range res {
			fmt.Fprintf(out, "applied %s (%v)\n", r.Source.Path, r.Duration.Round(time.Millisecond))
		}
		if err != nil {
			return fmt.Errorf("migrate up: %v", rootCause(err))
		}
		if len(res) == 0 {
			fmt.Fprintf(out, "%s: sqlonce's tables are up to date\n", b.label)
		}
		return nil
	case "down":
		r, err := p.Down(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			fmt.Fprintf(out, "%s: no sqlonce migration is applied\n", b.label)
			return nil
		}
		if err != nil {
			return fmt.Errorf("migrate down: %v", rootCause(err))
		}
		fmt.Fprintf(out, "rolled back %s\n", r.Source.Path)
		return nil
	}
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate status: %v", rootCause(err))
	}
	fmt.Fprintf(out, "%s\n", b.label)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "version\tmigration\tstate\tapplied at")
	for _, s := range st {
		at := ""
		if s.State == goose.StateApplied {
			at = s.AppliedAt.UTC().Format(time.DateTime)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", s.Source.Version, s.Source.Path, s.State, at)
	}
	return w.Flush()
}

// migrateUpSchema is migrate up into --schema: migrations.Up creates the
// schema (database) when it is missing and applies what is pending, under
// the lock that serialises concurrent runs.
func migrateUpSchema[TTx any](ctx context.Context, b *backend[TTx], p *goose.Provider, out io.Writer) error {
	// What is pending: all of it while the schema does not exist.
	var pending []string
	if st, err := p.Status(ctx); err == nil {
		for _, s := range st {
			if s.State != goose.StateApplied {
				pending = append(pending, s.Source.Path)
			}
		}
	} else {
		for _, s := range p.ListSources() {
			pending = append(pending, s.Path)
		}
	}
	start := time.Now()
	if err := migrations.Up(ctx, b.db, b.dialect, migrations.WithSchema(b.schema.Name())); err != nil {
		return fmt.Errorf("migrate up: %v", rootCause(err))
	}
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate up: %v", rootCause(err))
	}
	applied := 0
	for _, s := range st {
		if s.State == goose.StateApplied && slices.Contains(pending, s.Source.Path) {
			fmt.Fprintf(out, "applied %s\n", s.Source.Path)
			applied++
		}
	}
	if applied == 0 {
		fmt.Fprintf(out, "%s: sqlonce's tables are up to date\n", b.label)
	} else {
		fmt.Fprintf(out, "(%v in all)\n", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// needSchema fails with a clear message when sqlonce's migrations are not
// all applied.
func needSchema[TTx any](ctx context.Context, b *backend[TTx]) error {
	p, err := b.provider()
	if err != nil {
		return err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("reading sqlonce's migration state: %v", rootCause(err))
	}
	if pending {
		fix := "sqlonce migrate up --db DSN"
		if b.schema != nil {
			fix += " --schema " + b.schema.Name()
		}
		return fmt.Errorf("%s: sqlonce's migrations are not applied: run '%s' first", b.label, fix)
	}
	return nil
}

func purgeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("purge", flag.ContinueOnError)
	dsn, schema := dbFlag(fs), schemaFlag(fs)
	batch := fs.Int("batch", dedupe.DefaultPurgeBatch, "`N` rows deleted per transaction (1..100000; 0: the default)")
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return cmdUsagef("purge", "purge takes no arguments, got %q", pos)
	}
	if *batch == 0 { // 0 takes the default, as everywhere in the library
		*batch = dedupe.DefaultPurgeBatch
	}
	if *batch < 1 || *batch > 100000 {
		return cmdUsagef("purge", "--batch %d is outside 1..100000 (0: the default, %d)", *batch, dedupe.DefaultPurgeBatch)
	}
	if err := needDB("purge", *dsn); err != nil {
		return err
	}
	return withDB(ctx, *dsn, *schema, false,
		func(b *backend[pgx.Tx]) error { return purge(ctx, b, *batch, stdout, stderr) },
		func(b *backend[*sql.Tx]) error { return purge(ctx, b, *batch, stdout, stderr) })
}

// purge deletes expired keys, then expired tokens, with dedupe's and
// token's Purge (one batch per short transaction, a batch that conflicts
// with another purger's taken up again), reporting each batch.
func purge[TTx any](ctx context.Context, b *backend[TTx], batch int, out, progress io.Writer) error {
	if err := needSchema(ctx, b); err != nil {
		return err
	}
	for _, t := range []struct {
		what  string
		purge func(drv sqlonce.Driver[TTx]) (int64, error)
	}{
		{"expired keys", func(drv sqlonce.Driver[TTx]) (int64, error) {
			s, err := dedupe.New(drv)
			if err != nil {
				return 0, err
			}
			return s.Purge(ctx, batch)
		}},
		{"expired tokens", func(drv sqlonce.Driver[TTx]) (int64, error) {
			s, err := token.New(drv)
			if err != nil {
				return 0, err
			}
			return s.Purge(ctx, batch)
		}},
	} {
		var sofar int64
		total, err := t.purge(batchReporter(b.driver, func(n int64) {
			sofar += n
			if n > 0 {
				fmt.Fprintf(progress, "purging %s: %d so far\n", t.what, sofar)
			}
		}))
		if err != nil {
			return fmt.Errorf("purge %s after %d: %v", t.what, total, err)
		}
		fmt.Fprintf(out, "%s: purged %d %s\n", b.label, total, t.what)
	}
	return nil
}

func statsCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	dsn, schema := dbFlag(fs), schemaFlag(fs)
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return cmdUsagef("stats", "stats takes no arguments, got %q", pos)
	}
	if err := needDB("stats", *dsn); err != nil {
		return err
	}
	return withDB(ctx, *dsn, *schema, false,
		func(b *backend[pgx.Tx]) error { return stats(ctx, b, stdout) },
		func(b *backend[*sql.Tx]) error { return stats(ctx, b, stdout) })
}

// statsQuery lists, per namespace and scope: keys, leases still held,
// expired keys, and the oldest key's creation time in microseconds since
// the Unix epoch, all by the database's clock.
var statsQuery = map[migrations.Dialect]string{
	migrations.Postgres: `
		SELECT namespace, scope, count(*),
		       count(*) FILTER (WHERE state = 2 AND locked_until > now()),
		       count(*) FILTER (WHERE expires_at <= now()),
		       (extract(epoch FROM min(created_at)) * 1000000)::bigint
		FROM sqlonce_keys GROUP BY namespace, scope ORDER BY count(*) DESC, namespace, scope`,
	migrations.MySQL: `
		SELECT namespace, CAST(scope AS CHAR), count(*),
		       CAST(COALESCE(SUM(state = 2 AND locked_until > UTC_TIMESTAMP(6)), 0) AS SIGNED),
		       CAST(COALESCE(SUM(expires_at <= UTC_TIMESTAMP(6)), 0) AS SIGNED),
		       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', MIN(created_at)) AS SIGNED)
		FROM sqlonce_keys GROUP BY namespace, scope ORDER BY count(*) DESC, namespace, scope`,
	migrations.SQLite: `
		SELECT namespace, scope, count(*),
		       coalesce(sum(state = 2 AND locked_until > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000), 0),
		       coalesce(sum(expires_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000), 0),
		       min(created_at)
		FROM sqlonce_keys GROUP BY namespace, scope ORDER BY count(*) DESC, namespace, scope`,
}

// statsTokens counts tokens: all, consumed, expired.
var statsTokens = map[migrations.Dialect]string{
	migrations.Postgres: `SELECT count(*), count(consumed_at), count(*) FILTER (WHERE expires_at <= now()) FROM sqlonce_tokens`,
	migrations.MySQL:    `SELECT count(*), count(consumed_at), CAST(COALESCE(SUM(expires_at <= UTC_TIMESTAMP(6)), 0) AS SIGNED) FROM sqlonce_tokens`,
	migrations.SQLite:   `SELECT count(*), count(consumed_at), coalesce(sum(expires_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000), 0) FROM sqlonce_tokens`,
}

func stats[TTx any](ctx context.Context, b *backend[TTx], out io.Writer) error {
	if err := needSchema(ctx, b); err != nil {
		return err
	}
	rows, err := b.db.QueryContext(ctx, b.qualify(statsQuery[b.dialect]))
	if err != nil {
		return fmt.Errorf("stats: %v", err)
	}
	defer rows.Close()
	fmt.Fprintf(out, "%s\n", b.label)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "kind\tscope\tkeys\tleased\texpired\toldest (UTC)\t")
	var total, leased, expired int64
	var oldest time.Time
	scopes := 0
	for rows.Next() {
		var ns int64
		var scope string
		var n, l, e int64
		var first sql.NullInt64
		if err := rows.Scan(&ns, &scope, &n, &l, &e, &first); err != nil {
			return fmt.Errorf("stats: %v", err)
		}
		at := time.UnixMicro(first.Int64).UTC()
		kind, scope, _ := kindOf(ns, scope)
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t\n", kind, scope, n, l, e, at.Format(time.DateTime))
		total, leased, expired = total+n, leased+l, expired+e
		if scopes == 0 || at.Before(oldest) {
			oldest = at
		}
		scopes++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("stats: %v", err)
	}
	if scopes == 0 {
		fmt.Fprintln(w, "(no keys)\t\t\t\t\t\t")
	} else {
		fmt.Fprintf(w, "all\t%d scopes\t%d\t%d\t%d\t%s\t\n", scopes, total, leased, expired, oldest.Format(time.DateTime))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if scopes > 0 {
		fmt.Fprintln(out, "'sqlonce keys list --kind KIND --scope SCOPE' lists a scope's keys")
	}
	var tn, tc, te int64
	if err := b.db.QueryRowContext(ctx, b.qualify(statsTokens[b.dialect])).Scan(&tn, &tc, &te); err != nil {
		return fmt.Errorf("stats: tokens: %v", err)
	}
	fmt.Fprintf(out, "tokens: %d issued and kept, %d consumed, %d expired\n", tn, tc, te)
	if expired+te > 0 {
		fmt.Fprintln(out, "expired keys and tokens count as absent; 'sqlonce purge' deletes them")
	}
	return outboxStatsLine(ctx, b, out)
}
