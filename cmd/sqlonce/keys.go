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

// keysCmd reads, lists and forgets keys of every kind (keyKinds), through
// the API of the package that keeps each: dedupe.Store's Inspect and
// Forget (and InspectSteps, ForgetSteps), inbox.Inbox's, httpidem's.
func keysCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return cmdUsagef("keys", "keys takes get, forget, list or redrive")
	}
	sub, args := args[0], args[1:]
	if isHelp(sub) {
		return helpRequest{keysHelp()}
	}
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	dsn, schema := dbFlag(fs), schemaFlag(fs)
	scope := fs.String("scope", "", "the keys' scope `S` (required): a dedupe scope, an inbox consumer, an httpidem or grpcidem principal")
	kind := fs.String("kind", "", "only keys of `KIND`: "+kindNames()+" (default: every kind)")
	asJSON := fs.Bool("json", false, "write JSON for scripts (fields below)")
	var (
		leased *bool
		state  *string
		limit  *int
	)
	switch sub {
	case "get":
	case "forget":
		leased = fs.Bool("leased", false, "forget a key whose lease still holds (its holder loses it)")
	case "redrive":
	case "list":
		state = fs.String("state", "", "only keys in `STATE`: done, leased, lapsed or expired; with --kind steps or http-steps, also running, stopped (their leased and lapsed) and failed (given up; done then leaves them out)")
		limit = fs.Int("limit", 100, "list at most `N` keys (1..10000)")
	default:
		return cmdUsagef("keys", "keys %q: want get, forget, list or redrive", sub)
	}
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if *scope == "" {
		return cmdUsagef("keys "+sub, "keys %s needs --scope", sub)
	}
	kinds := keyKinds
	if *kind != "" {
		k, ok := findKind(*kind)
		if !ok {
			return cmdUsagef("keys "+sub, "--kind %q: want one of %s", *kind, kindNames())
		}
		kinds = []keyKind{k}
	}
	if sub == "redrive" {
		if *kind == "" {
			k, _ := findKind("steps")
			kinds = []keyKind{k}
		}
		if kinds[0].name != "steps" {
			return cmdUsagef("keys redrive", "--kind %q: only operations of several steps (--kind steps) are re-driven", *kind)
		}
	}
	if sub == "list" {
		if len(pos) > 0 {
			return cmdUsagef("keys list", "keys list takes no arguments, got %q", pos)
		}
		if _, ok := stateConds[*state]; !ok {
			return cmdUsagef("keys list", "--state %q: want done, leased, lapsed or expired (or, with --kind steps or http-steps, running, stopped or failed)", *state)
		}
		if stepsStates[*state] && (*kind == "" || !kinds[0].steps()) {
			return cmdUsagef("keys list", "--state %s lists operations of several steps: add --kind steps or --kind http-steps", *state)
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
			return getKey(ctx, b, kinds, *kind != "", *scope, pos[0], *asJSON, stdout)
		case "forget":
			return forgetKey(ctx, b, kinds, *kind != "", *scope, pos[0], *leased, *asJSON, stdout)
		case "redrive":
			return redriveKey(ctx, b, kinds[0], *scope, pos[0], *asJSON, stdout)
		}
		return listKeys(ctx, b, kinds, *kind != "", *scope, *state, *limit, *asJSON, stdout, stderr)
	}
	return withDB(ctx, *dsn, *schema, false,
		func(b *backend[pgx.Tx]) error { return withKeys(ctx, b, run) },
		func(b *backend[*sql.Tx]) error { return withKeys(ctx, b, run) })
}

// keysBackend is what the keys commands need of a backend, whatever its
// transaction type.
type keysBackend struct {
	dialect migrations.Dialect
	db      *sql.DB
	qualify func(string) string
	ops     map[string]keyOps // by kind name
}

func withKeys[TTx any](ctx context.Context, b *backend[TTx], fn func(keysBackend) error) error {
	if err := needSchema(ctx, b); err != nil {
		return err
	}
	kb := keysBackend{dialect: b.dialect, db: b.db, qualify: b.qualify, ops: map[string]keyOps{}}
	for _, k := range keyKinds {
		ops, err := opsOf(b.driver, k)
		if err != nil {
			return err
		}
		kb.ops[k.name] = ops
	}
	return fn(kb)
}

// found is a key and its kind.
type found struct {
	kind string
	info dedupe.StepsInfo
}

// lookup reads scope and key in each of kinds, returning those that hold it.
func lookup(ctx context.Context, b keysBackend, kinds []keyKind, scope, key string) ([]found, error) {
	var fs []found
	for _, k := range kinds {
		info, err := b.ops[k.name].inspect(ctx, scope, key)
		switch {
		case isNotFound(err):
			continue
		case err != nil:
			return nil, err
		}
		fs = append(fs, found{k.name, info})
	}
	return fs, nil
}

// others returns the kinds not in kinds.
func others(kinds []keyKind) []keyKind {
	var o []keyKind
	for _, k := range keyKinds {
		if !containsKind(kinds, k.name) {
			o = append(o, k)
		}
	}
	return o
}

func containsKind(kinds []keyKind, name string) bool {
	for _, k := range kinds {
		if k.name == name {
			return true
		}
	}
	return false
}

// notFoundError is keys get/forget's exit 3, naming the kinds that do
// hold the key when --kind asked for another.
func notFoundError(ctx context.Context, b keysBackend, kinds []keyKind, asked bool, scope, key string) error {
	what := "not found"
	if asked {
		what = "not found as a " + kinds[0].name + " key"
	}
	msg := fmt.Sprintf("key %q in scope %q: %s (never recorded, forgotten, purged, or not committed yet)", key, scope, what)
	if asked {
		elsewhere, err := lookup(ctx, b, others(kinds), scope, key)
		if err != nil {
			return err
		}
		if len(elsewhere) > 0 {
			var names []string
			for _, f := range elsewhere {
				names = append(names, f.kind)
			}
			msg = fmt.Sprintf("key %q in scope %q: %s, but there is one of kind %s: --kind %s reaches it", key, scope, what,
				strings.Join(names, " and "), names[0])
		}
	}
	return exitError{exitNotFound, msg}
}

func getKey(ctx context.Context, b keysBackend, kinds []keyKind, asked bool, scope, key string, asJSON bool, out io.Writer) error {
	fs, err := lookup(ctx, b, kinds, scope, key)
	if err != nil {
		return err
	}
	if len(fs) == 0 {
		return notFoundError(ctx, b, kinds, asked, scope, key)
	}
	for i, f := range fs {
		if asJSON {
			if err := json.NewEncoder(out).Encode(toJSON(f)); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(out)
		}
		if err := writeKey(out, f); err != nil {
			return err
		}
	}
	return nil
}

func forgetKey(ctx context.Context, b keysBackend, kinds []keyKind, asked bool, scope, key string, leased, asJSON bool, out io.Writer) error {
	kind := kinds[0].name
	if !asked {
		fs, err := lookup(ctx, b, kinds, scope, key)
		if err != nil {
			return err
		}
		switch len(fs) {
		case 0:
			return notFoundError(ctx, b, kinds, false, scope, key)
		case 1:
			kind = fs[0].kind
		default:
			var names []string
			for _, f := range fs {
				names = append(names, f.kind)
			}
			return cmdUsagef("keys forget", "key %q in scope %q is a key of kinds %s: name the one to forget with --kind", key, scope, strings.Join(names, ", "))
		}
	}
	err := b.ops[kind].forget(ctx, scope, key, leased)
	switch {
	case isNotFound(err):
		k, _ := findKind(kind)
		return notFoundError(ctx, b, []keyKind{k}, true, scope, key)
	case errors.Is(err, sqlonce.ErrInProgress):
		return exitError{exitRefused, fmt.Sprintf("%s key %q in scope %q: a lease still holds it; add --leased to forget it anyway (its holder loses it)", kind, key, scope)}
	case err != nil:
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(forgetJSON{Kind: kind, Scope: scope, Key: key, Forgotten: true})
	}
	fmt.Fprintf(out, "forgot %s key %q in scope %q: its next request runs the work again\n", kind, key, scope)
	return nil
}

// keyJSON is a key as --json writes it; keyFields documents its fields.
type keyJSON struct {
	Kind             string     `json:"kind"`
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
	Operation        string     `json:"operation,omitempty"`
	StepsDone        []string   `json:"steps_done,omitempty"`
	Attempts         int        `json:"attempts,omitempty"`
	Failed           string     `json:"failed,omitempty"`
	FailedStep       string     `json:"failed_step,omitempty"`
	FailedAt         *time.Time `json:"failed_at,omitempty"`
}

// redriveJSON is keys redrive --json's answer.
type redriveJSON struct {
	Kind     string `json:"kind"`
	Scope    string `json:"scope"`
	Key      string `json:"key"`
	Redriven bool   `json:"redriven"`
}

// forgetJSON is keys forget --json's answer.
type forgetJSON struct {
	Kind      string `json:"kind"`
	Scope     string `json:"scope"`
	Key       string `json:"key"`
	Forgotten bool   `json:"forgotten"`
}

// keyFields and forgetFields document --json's fields, in -h and the
// package doc; a test holds them to what is printed.
var keyFields = `JSON fields (--json; keys list writes an array of them, keys get one object per line, one per kind holding the key):
  kind               the kind of key: ` + kindNames() + `
  scope              the scope as --scope names it (an httpidem or grpcidem principal)
  key                the key
  state              done, leased, lapsed or expired
  created            when the key was claimed (RFC 3339, the database's clock)
  expires            when it expires
  lease_until        a lease's deadline (only while the key has one)
  fencing_token      the token of the key's last claim
  fingerprint_bytes  the recorded fingerprint's length, 0 without one
  response           whether a response is recorded
  response_bytes     the recorded response's length
  operation          steps kinds: the Operation.Name (none for a key ended by a pre-release build)
  steps_done         steps kinds, unfinished: the steps done, in order
  attempts           steps kinds, unfinished or given up: the runs that held the lease
  failed             steps kinds, given up: why, the last step error's text (repeats get ErrOperationFailed)
  failed_step        steps kinds, given up: the step it stopped at
  failed_at          steps kinds, given up: when (the database's clock)
`

const redriveFields = `JSON fields (--json):
  kind               the kind of the key re-driven
  scope              the scope as --scope names it
  key                the key
  redriven           true
`

const forgetFields = `JSON fields (--json):
  kind               the kind of the key forgotten
  scope              the scope as --scope names it
  key                the key
  forgotten          true
`

func toJSON(f found) keyJSON {
	k := f.info
	j := keyJSON{
		Kind: f.kind, Scope: k.Scope, Key: k.Key, State: k.State.String(), Created: k.Created, Expires: k.Expires, FencingToken: k.Token,
		FingerprintBytes: k.FingerprintSize, Response: k.HasResponse, ResponseBytes: k.ResponseSize,
		Operation: k.Operation, StepsDone: k.Done, Attempts: k.Attempts, Failed: k.Failed,
	}
	if !k.LeaseUntil.IsZero() {
		j.LeaseUntil = &k.LeaseUntil
	}
	if !k.FailedAt.IsZero() {
		j.FailedAt = &k.FailedAt
	}
	j.FailedStep = k.FailedStep
	return j
}

const timeLayout = "2006-01-02 15:04:05.000000 UTC"

func writeKey(out io.Writer, f found) error {
	k := f.info
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "kind\t%s\n", f.kind)
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
	switch {
	case k.Failed != "" && k.Attempts > 0: // given up after its attempts
		fmt.Fprintf(w, "operation\t%s\t(%d attempts)\n", k.Operation, k.Attempts)
	case k.Failed == "" && k.Operation != "" && k.State != dedupe.KeyDone: // unfinished
		fmt.Fprintf(w, "operation\t%s\t(%d attempts)\n", k.Operation, k.Attempts)
		done := strings.Join(k.Done, ", ")
		if done == "" {
			done = "none yet"
		}
		fmt.Fprintf(w, "steps done\t%s\t(a retry or the resumer goes on after them)\n", done)
	case k.Operation != "": // done or given up
		fmt.Fprintf(w, "operation\t%s\n", k.Operation)
	}
	if k.Failed != "" {
		if k.FailedStep != "" {
			fmt.Fprintf(w, "failed step\t%s\n", k.FailedStep)
		}
		if !k.FailedAt.IsZero() {
			fmt.Fprintf(w, "given up at\t%s\n", k.FailedAt.UTC().Format(timeLayout))
		}
		fmt.Fprintf(w, "given up\t%s\t(repeats fail; 'sqlonce keys forget' lets the next one start again)\n", k.Failed)
	}
	return w.Flush()
}

var stateHelp = map[dedupe.KeyState]string{
	dedupe.KeyDone:    "(repeats get the recorded answer; 'sqlonce keys forget' lets the next one run)",
	dedupe.KeyLeased:  "(a holder is at work; repeats are told it is in progress)",
	dedupe.KeyLapsed:  "(the lease ran out; the next request takes the key over)",
	dedupe.KeyExpired: "(counts as absent; 'sqlonce purge' deletes it)",
}

// stateConds selects the keys of a state, now being the database's "now"
// and FAILED true for an operation of several steps given up (its recorded
// end's first byte: dedupe's encodings 0x11, 0x13 and 0x14).
var stateConds = map[string]string{
	"":        "1 = 1",
	"done":    "state = 1 AND expires_at > NOW",
	"leased":  "state = 2 AND locked_until > NOW",
	"lapsed":  "state = 2 AND locked_until <= NOW AND expires_at > NOW",
	"expired": "expires_at <= NOW",
	"running": "state = 2 AND locked_until > NOW",
	"stopped": "state = 2 AND locked_until <= NOW AND expires_at > NOW",
	"failed":  "state = 1 AND expires_at > NOW AND FAILED",
}

// stepsStates are the states only the steps kinds have; for those kinds,
// done leaves out failed.
var stepsStates = map[string]bool{"running": true, "stopped": true, "failed": true}

const stepsDoneCond = "state = 1 AND expires_at > NOW AND NOT (FAILED)"

// inState tells whether info is in state ("" any) as --state names it.
func inState(state string, k keyKind, info dedupe.StepsInfo) bool {
	if state == "" {
		return true
	}
	if s := stateOf(k, info); s == "failed" {
		return state == s
	} else if s == state {
		return true
	}
	return state == info.State.String()
}

// stateOf is info's state as --state names it for kind k.
func stateOf(k keyKind, info dedupe.StepsInfo) string {
	s := info.State.String()
	if !k.steps() {
		return s
	}
	switch {
	case info.State == dedupe.KeyDone && info.Failed != "":
		return "failed"
	case info.State == dedupe.KeyLeased:
		return "running"
	case info.State == dedupe.KeyLapsed:
		return "stopped"
	}
	return s
}

// listQuery names the keys of a namespace and scope, in key order; COND
// is a stateConds entry.
var listQuery = map[migrations.Dialect]struct{ query, now, first string }{
	migrations.Postgres: {`SELECT idempotency_key FROM sqlonce_keys WHERE namespace = $1 AND scope = $2 AND (COND) ORDER BY idempotency_key LIMIT $3`, "now()", "encode(substring(response FROM 1 FOR 1), 'hex')"},
	migrations.MySQL:    {`SELECT CAST(idempotency_key AS CHAR) FROM sqlonce_keys WHERE namespace = ? AND scope = ? AND (COND) ORDER BY idempotency_key LIMIT ?`, "UTC_TIMESTAMP(6)", "HEX(LEFT(response, 1))"},
	migrations.SQLite:   {`SELECT idempotency_key FROM sqlonce_keys WHERE namespace = ? AND scope = ? AND (COND) ORDER BY idempotency_key LIMIT ?`, "(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)", "hex(substr(response, 1, 1))"},
}

// countQuery counts the keys of a namespace and scope.
var countQuery = map[migrations.Dialect]string{
	migrations.Postgres: `SELECT count(*) FROM sqlonce_keys WHERE namespace = $1 AND scope = $2`,
	migrations.MySQL:    `SELECT count(*) FROM sqlonce_keys WHERE namespace = ? AND scope = ?`,
	migrations.SQLite:   `SELECT count(*) FROM sqlonce_keys WHERE namespace = ? AND scope = ?`,
}

func listKeys(ctx context.Context, b keysBackend, kinds []keyKind, asked bool, scope, state string, limit int, asJSON bool, out, notes io.Writer) error {
	q := listQuery[b.dialect]
	queryFor := func(k keyKind) string {
		cond := stateConds[state]
		if state == "done" && k.steps() {
			cond = stepsDoneCond
		}
		cond = strings.ReplaceAll(cond, "FAILED", "coalesce("+q.first+", '') IN ('11', '13', '14')")
		return b.qualify(strings.Replace(q.query, "COND", strings.ReplaceAll(cond, "NOW", q.now), 1))
	}
	var keys []found
	more := false
	for _, k := range kinds {
		if len(keys) == limit {
			more = true
			break
		}
		rows, err := b.db.QueryContext(ctx, queryFor(k), int(k.ns), k.stored(scope), limit-len(keys)+1)
		if err != nil {
			return fmt.Errorf("keys list: %v", err)
		}
		var names []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				rows.Close()
				return fmt.Errorf("keys list: %v", err)
			}
			names = append(names, name)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("keys list: %v", err)
		}
		if len(names) > limit-len(keys) {
			names, more = names[:limit-len(keys)], true
		}
		for _, name := range names {
			info, err := b.ops[k.name].inspect(ctx, scope, name)
			switch {
			case isNotFound(err):
				continue // forgotten or purged since
			case err != nil:
				return err
			case !inState(state, k, info):
				continue // changed since
			}
			keys = append(keys, found{k.name, info})
		}
	}
	if asJSON {
		js := make([]keyJSON, len(keys))
		for i, k := range keys {
			js[i] = toJSON(k)
		}
		if err := json.NewEncoder(out).Encode(js); err != nil {
			return err
		}
	} else {
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "kind\tkey\tstate\tcreated (UTC)\texpires (UTC)\tlease until (UTC)\tresponse\t")
		for _, f := range keys {
			k := f.info
			lease, resp := "-", "-"
			if !k.LeaseUntil.IsZero() {
				lease = k.LeaseUntil.UTC().Format(time.DateTime)
			}
			if k.HasResponse {
				resp = fmt.Sprintf("%d bytes", k.ResponseSize)
			}
			state := k.State.String()
			if k.State == dedupe.KeyDone && k.Failed != "" {
				state = "failed" // an operation of several steps given up
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", f.kind, k.Key, state, k.Created.UTC().Format(time.DateTime), k.Expires.UTC().Format(time.DateTime), lease, resp)
		}
		if len(keys) == 0 {
			fmt.Fprintln(w, "(no keys)\t\t\t\t\t\t\t")
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if more {
			fmt.Fprintf(out, "(the first %d; --limit lists more)\n", limit)
		}
	}
	if !asked {
		return nil
	}
	// The scope's keys of the kinds not asked for, on stderr, so that
	// --json's output stays one document.
	var held []string
	for _, k := range others(kinds) {
		var n int64
		if err := b.db.QueryRowContext(ctx, b.qualify(countQuery[b.dialect]), int(k.ns), k.stored(scope)).Scan(&n); err != nil {
			return fmt.Errorf("keys list: %v", err)
		}
		if n > 0 {
			held = append(held, fmt.Sprintf("%d %s (--kind %s)", n, plural(n, k.name+" key"), k.name))
		}
	}
	if len(held) > 0 {
		fmt.Fprintf(notes, "sqlonce: note: scope %q also holds %s; without --kind every kind is listed\n", scope, strings.Join(held, ", "))
	}
	return nil
}

func plural(n int64, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// redriveKey turns a given-up operation back into a stopped one
// (dedupe.Store.Redrive): exit 3 for no such key, 4 for one not given up.
func redriveKey(ctx context.Context, b keysBackend, k keyKind, scope, key string, asJSON bool, out io.Writer) error {
	err := b.ops[k.name].redrive(ctx, scope, key)
	switch {
	case isNotFound(err):
		return notFoundError(ctx, b, []keyKind{k}, true, scope, key)
	case errors.Is(err, dedupe.ErrNotRedrivable):
		return exitError{exitRefused, fmt.Sprintf("%s key %q in scope %q: not re-driven: %v", k.name, key, scope, err)}
	case err != nil:
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(redriveJSON{Kind: k.name, Scope: scope, Key: key, Redriven: true})
	}
	fmt.Fprintf(out, "re-drove %s key %q in scope %q: its next run (a retry or the resumer) goes on from its last recovery point\n", k.name, key, scope)
	return nil
}
