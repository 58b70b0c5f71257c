package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
)

// keysCmd reads, lists and forgets the keys of dedupe stores (namespace
// dedupe), through dedupe.Store's Inspect and Forget.
func keysCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return cmdUsagef("keys", "keys takes get, forget or list")
	}
	sub, args := args[0], args[1:]
	if isHelp(sub) {
		return helpRequest{keysHelp()}
	}
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	dsn := dbFlag(fs)
	scope := fs.String("scope", "", "the keys' scope `S` (required)")
	asJSON := fs.Bool("json", false, "write JSON for scripts")
	var (
		leased *bool
		state  *string
		limit  *int
	)
	switch sub {
	case "get":
	case "forget":
		leased = fs.Bool("leased", false, "forget a key whose lease still holds (its holder loses it)")
	case "list":
		state = fs.String("state", "", "only keys in `STATE`: done, leased, lapsed or expired")
		limit = fs.Int("limit", 100, "list at most `N` keys (1..10000)")
	default:
		return cmdUsagef("keys", "keys %q: want get, forget or list", sub)
	}
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if *scope == "" {
		return cmdUsagef("keys "+sub, "keys %s needs --scope", sub)
	}
	if sub == "list" {
		if len(pos) > 0 {
			return cmdUsagef("keys list", "keys list takes no arguments, got %q", pos)
		}
		if _, ok := stateConds[*state]; !ok {
			return cmdUsagef("keys list", "--state %q: want done, leased, lapsed or expired", *state)
		}
		if *limit < 1 || *limit > 10000 {
			return cmdUsagef("keys list", "--limit %d is outside 1..10000", *limit)
		}
	} else if len(pos) != 1 {
		return cmdUsagef("keys "+sub, "keys %s takes one KEY", sub)
	}
	if err := needDB("keys "+sub, *dsn); err != nil {
		return err
	}
	run := func(b keysBackend) error {
		switch sub {
		case "get":
			info, err := b.store.Inspect(ctx, *scope, pos[0])
			if err != nil {
				return keyError(err, *scope, pos[0])
			}
			return writeKey(stdout, info, *asJSON)
		case "forget":
			var opts []dedupe.ForgetOption
			if *leased {
				opts = append(opts, dedupe.ForgetLeased())
			}
			if err := b.store.Forget(ctx, *scope, pos[0], opts...); err != nil {
				return keyError(err, *scope, pos[0])
			}
			if *asJSON {
				return json.NewEncoder(stdout).Encode(map[string]any{"scope": *scope, "key": pos[0], "forgotten": true})
			}
			fmt.Fprintf(stdout, "forgot key %q in scope %q: its next request runs the work again\n", pos[0], *scope)
			return nil
		}
		return listKeys(ctx, b, *scope, *state, *limit, *asJSON, stdout)
	}
	return withDB(ctx, *dsn, false,
		func(b *backend[pgx.Tx]) error { return withKeys(ctx, b, run) },
		func(b *backend[*sql.Tx]) error { return withKeys(ctx, b, run) })
}

// keyError says what went wrong with a key in the command's words.
func keyError(err error, scope, key string) error {
	switch {
	case errors.Is(err, sqlonce.ErrNotFound):
		return exitError{exitNotFound, fmt.Sprintf("key %q in scope %q: not found (never recorded, forgotten, purged, or not committed yet)", key, scope)}
	case errors.Is(err, sqlonce.ErrInProgress):
		return exitError{exitRefused, fmt.Sprintf("key %q in scope %q: a lease still holds it; add --leased to forget it anyway (its holder loses it)", key, scope)}
	}
	return err
}

// keysBackend is what the keys commands need of a backend, whatever its
// transaction type.
type keysBackend struct {
	dialect migrations.Dialect
	db      *sql.DB
	store   interface {
		Inspect(ctx context.Context, scope, key string) (dedupe.KeyInfo, error)
		Forget(ctx context.Context, scope, key string, opts ...dedupe.ForgetOption) error
	}
}

func withKeys[TTx any](ctx context.Context, b *backend[TTx], fn func(keysBackend) error) error {
	if err := needSchema(ctx, b); err != nil {
		return err
	}
	s, err := dedupe.New(b.driver)
	if err != nil {
		return err
	}
	return fn(keysBackend{dialect: b.dialect, db: b.db, store: s})
}

// keyJSON is a key as --json writes it.
type keyJSON struct {
	Scope            string     `json:"scope"`
	Key              string     `json:"key"`
	State            string     `json:"state"`
	Created          time.Time  `json:"created"`
	Expires          time.Time  `json:"expires"`
	LeaseUntil       *time.Time `json:"lease_until,omitempty"`
	FencingToken     int64      `json:"fencing_token"`
	FingerprintBytes int        `json:"fingerprint_bytes"`
	Response         bool       `json:"response"`
	ResponseBytes    int        `json:"response_bytes"`
}

func toJSON(k dedupe.KeyInfo) keyJSON {
	j := keyJSON{
		Scope: k.Scope, Key: k.Key, State: k.State.String(), Created: k.Created, Expires: k.Expires, FencingToken: k.Token,
		FingerprintBytes: k.FingerprintSize, Response: k.HasResponse, ResponseBytes: k.ResponseSize,
	}
	if !k.LeaseUntil.IsZero() {
		j.LeaseUntil = &k.LeaseUntil
	}
	return j
}

const timeLayout = "2006-01-02 15:04:05.000000 UTC"

func writeKey(out io.Writer, k dedupe.KeyInfo, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(out).Encode(toJSON(k))
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "scope\t%s\n", k.Scope)
	fmt.Fprintf(w, "key\t%s\n", k.Key)
	fmt.Fprintf(w, "state\t%s\t%s\n", k.State, stateHelp[k.State])
	fmt.Fprintf(w, "created\t%s\n", k.Created.UTC().Format(timeLayout))
	fmt.Fprintf(w, "expires\t%s\n", k.Expires.UTC().Format(timeLayout))
	if !k.LeaseUntil.IsZero() {
		fmt.Fprintf(w, "lease until\t%s\n", k.LeaseUntil.UTC().Format(timeLayout))
	}
	fmt.Fprintf(w, "fencing token\t%d\t(grows with every claim of the key)\n", k.Token)
	if k.FingerprintSize > 0 {
		fmt.Fprintf(w, "fingerprint\t%d bytes\n", k.FingerprintSize)
	} else {
		fmt.Fprintf(w, "fingerprint\tnone\n")
	}
	if k.HasResponse {
		fmt.Fprintf(w, "response\t%d bytes\n", k.ResponseSize)
	} else {
		fmt.Fprintf(w, "response\tnone\n")
	}
	return w.Flush()
}

var stateHelp = map[dedupe.KeyState]string{
	dedupe.KeyDone:    "(repeats get the recorded answer; 'sqlonce keys forget' lets the next one run)",
	dedupe.KeyLeased:  "(a holder is at work; repeats are told it is in progress)",
	dedupe.KeyLapsed:  "(the lease ran out; the next request takes the key over)",
	dedupe.KeyExpired: "(counts as absent; 'sqlonce purge' deletes it)",
}

// stateConds selects the keys of a state, now being the database's "now".
var stateConds = map[string]string{
	"":        "1 = 1",
	"done":    "state = 1 AND expires_at > NOW",
	"leased":  "state = 2 AND locked_until > NOW",
	"lapsed":  "state = 2 AND locked_until <= NOW AND expires_at > NOW",
	"expired": "expires_at <= NOW",
}

// listQuery names the keys of a scope in the dedupe namespace, in key
// order; COND is a stateConds entry.
var listQuery = map[migrations.Dialect]struct{ query, now string }{
	migrations.Postgres: {`SELECT idempotency_key FROM sqlonce_keys WHERE namespace = 0 AND scope = $1 AND (COND) ORDER BY idempotency_key LIMIT $2`, "now()"},
	migrations.MySQL:    {`SELECT CAST(idempotency_key AS CHAR) FROM sqlonce_keys WHERE namespace = 0 AND scope = ? AND (COND) ORDER BY idempotency_key LIMIT ?`, "UTC_TIMESTAMP(6)"},
	migrations.SQLite:   {`SELECT idempotency_key FROM sqlonce_keys WHERE namespace = 0 AND scope = ? AND (COND) ORDER BY idempotency_key LIMIT ?`, "(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)"},
}

func listKeys(ctx context.Context, b keysBackend, scope, state string, limit int, asJSON bool, out io.Writer) error {
	q := listQuery[b.dialect]
	query := strings.Replace(q.query, "COND", strings.ReplaceAll(stateConds[state], "NOW", q.now), 1)
	rows, err := b.db.QueryContext(ctx, query, scope, limit)
	if err != nil {
		return fmt.Errorf("keys list: %v", err)
	}
	var names []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return fmt.Errorf("keys list: %v", err)
		}
		names = append(names, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("keys list: %v", err)
	}
	infos := make([]dedupe.KeyInfo, 0, len(names))
	for _, k := range names {
		info, err := b.store.Inspect(ctx, scope, k)
		switch {
		case errors.Is(err, sqlonce.ErrNotFound):
			continue // forgotten or purged since
		case err != nil:
			return err
		case state != "" && info.State.String() != state:
			continue // changed since
		}
		infos = append(infos, info)
	}
	if asJSON {
		js := make([]keyJSON, len(infos))
		for i, k := range infos {
			js[i] = toJSON(k)
		}
		return json.NewEncoder(out).Encode(js)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "key\tstate\tcreated (UTC)\texpires (UTC)\tlease until (UTC)\tresponse\t")
	for _, k := range infos {
		lease, resp := "-", "-"
		if !k.LeaseUntil.IsZero() {
			lease = k.LeaseUntil.UTC().Format(time.DateTime)
		}
		if k.HasResponse {
			resp = fmt.Sprintf("%d bytes", k.ResponseSize)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t\n", k.Key, k.State, k.Created.UTC().Format(time.DateTime), k.Expires.UTC().Format(time.DateTime), lease, resp)
	}
	if len(infos) == 0 {
		fmt.Fprintln(w, "(no keys)\t\t\t\t\t\t")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(names) == limit {
		fmt.Fprintf(out, "(the first %d; --limit lists more)\n", limit)
	}
	return nil
}
