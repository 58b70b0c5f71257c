package sqlonce_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestKeysSQLite(t *testing.T) {
	tg := sqliteTarget(t)
	tg.dsn = "sqlite://" + tg.dsn
	keys(t, tg)
}

func TestKeysPostgres(t *testing.T) { keys(t, keyValue(t, postgresTarget(t))) }

func TestKeysMySQL(t *testing.T) {
	tg := mysqlTarget(t)
	tg.dsn = "mysql://" + tg.dsn // the form with a scheme, still taken
	keys(t, tg)
}

// keyJSON is what keys get --json and keys list --json write.
type keyJSON struct {
	Kind              string
	Scope, Key, State string
	Created, Expires  string
	LeaseUntil        *string `json:"lease_until"`
	FencingToken      int64   `json:"fencing_token"`
	FingerprintBytes  int     `json:"fingerprint_bytes"`
	Response          bool    `json:"response"`
	ResponseBytes     int     `json:"response_bytes"`
}

// keys: support's questions answered from a shell: what a key holds,
// which leases are stuck, and forgetting a key so that the customer's
// retry runs again, never another scope's or namespace's key, never a
// lease that holds unless told.
func keys(t *testing.T, tg target) {
	db := tg.dsn
	sqlonce(t, "migrate", "up", "--db", db).succeeds(t)
	sdb, err := sql.Open(tg.driver, tg.sqlDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	// at is the database's now plus seconds, as each dialect writes it.
	at := func(s int) string {
		switch tg.driver {
		case "pgx":
			return fmt.Sprintf("now() + interval '%d seconds'", s)
		case "mysql":
			return fmt.Sprintf("UTC_TIMESTAMP(6) + INTERVAL %d SECOND", s)
		}
		return fmt.Sprintf("(unixepoch() + %d) * 1000000", s)
	}
	insert := func(ns int, scope, key string, state int, lockedUntil string, created, expires int, fp, resp []byte) {
		t.Helper()
		ph := []string{"?", "?", "?", "?"}
		if tg.driver == "pgx" {
			ph = []string{"$1", "$2", "$3", "$4"}
		}
		q := fmt.Sprintf(`INSERT INTO sqlonce_keys (namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at)
			VALUES (%d, %s, %s, %s, %s, %d, 7, %s, %s, %s)`, ns, ph[0], ph[1], ph[2], ph[3], state, lockedUntil, at(created), at(expires))
		if _, err := sdb.Exec(q, scope, key, fp, resp); err != nil {
			t.Fatal(err)
		}
	}
	insert(0, "cust-7", "refund-3", 1, "NULL", -60, 3600, []byte("fp!"), []byte("declined"))
	insert(0, "cust-7", "charge-1", 2, at(600), -60, 3600, []byte{}, nil)
	insert(0, "cust-7", "charge-2", 2, at(-30), -60, 3600, []byte{}, nil)
	insert(0, "cust-7", "old", 1, "NULL", -7200, -3600, []byte{}, []byte{})
	insert(0, "cust-8", "refund-3", 1, "NULL", -60, 3600, []byte{}, []byte("other scope"))
	insert(2, "cust-7", "refund-3", 1, "NULL", -60, 3600, []byte{}, []byte("httpidem's"))

	r := sqlonce(t, "keys", "get", "--db", db, "--scope", "cust-7", "refund-3").succeeds(t)
	for _, re := range []string{`(?m)^state\s+done\s`, `(?m)^fingerprint\s+3 bytes$`, `(?m)^response\s+8 bytes$`, `(?m)^fencing token\s+7\s`, `(?m)^created\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("keys get: no %s in\n%s", re, r.stdout)
		}
	}
	r = sqlonce(t, "keys", "get", "--db", db, "--scope", "cust-7", "charge-1", "--json").succeeds(t)
	var k keyJSON
	if err := json.Unmarshal([]byte(r.stdout), &k); err != nil {
		t.Fatalf("keys get --json: %v\n%s", err, r.stdout)
	}
	if k.Kind != "dedupe" || k.State != "leased" || k.Key != "charge-1" || k.Scope != "cust-7" || k.LeaseUntil == nil || k.Response || k.FingerprintBytes != 0 || k.FencingToken != 7 {
		t.Fatalf("keys get --json: %+v", k)
	}

	list := func(args ...string) []keyJSON {
		t.Helper()
		r := sqlonce(t, append([]string{"keys", "list", "--db", db, "--scope", "cust-7", "--json"}, args...)...).succeeds(t)
		var ks []keyJSON
		if err := json.Unmarshal([]byte(r.stdout), &ks); err != nil {
			t.Fatalf("keys list --json: %v\n%s", err, r.stdout)
		}
		return ks
	}
	names := func(ks []keyJSON) string {
		var s []string
		for _, k := range ks {
			s = append(s, k.Key+":"+k.State)
		}
		return strings.Join(s, " ")
	}
	if got := names(list()); got != "charge-1:leased charge-2:lapsed old:expired refund-3:done" {
		t.Fatalf("keys list: %s", got)
	}
	if got := names(list("--state", "leased")); got != "charge-1:leased" {
		t.Fatalf("keys list --state leased: %s", got)
	}
	if got := names(list("--limit", "1")); got != "charge-1:leased" {
		t.Fatalf("keys list --limit 1: %s", got)
	}
	r = sqlonce(t, "keys", "list", "--db", db, "--scope", "cust-7", "--state", "lapsed").succeeds(t)
	if !regexp.MustCompile(`(?m)^dedupe\s+charge-2\s+lapsed\s`).MatchString(r.stdout) || strings.Contains(r.stdout, "refund-3") {
		t.Fatalf("keys list --state lapsed:\n%s", r.stdout)
	}

	// A lease that holds is forgotten only when asked.
	sqlonce(t, "keys", "forget", "--db", db, "--scope", "cust-7", "charge-1").failsWith(t, 4, "--leased")
	sqlonce(t, "keys", "forget", "--db", db, "--scope", "cust-7", "charge-1", "--leased").succeeds(t)
	r = sqlonce(t, "keys", "forget", "--db", db, "--scope", "cust-7", "refund-3", "--json").succeeds(t)
	if !strings.Contains(r.stdout, `"forgotten":true`) {
		t.Fatalf("keys forget --json: %s", r.stdout)
	}
	sqlonce(t, "keys", "get", "--db", db, "--scope", "cust-7", "refund-3").failsWith(t, 3, "not found")
	sqlonce(t, "keys", "forget", "--db", db, "--scope", "cust-7", "refund-3").failsWith(t, 3, "not found")
	if got := names(list()); got != "charge-2:lapsed old:expired" {
		t.Fatalf("keys list after forget: %s", got)
	}
	// Another scope's key and httpidem's of the same spelling are there.
	var n int
	if err := sdb.QueryRow("SELECT count(*) FROM sqlonce_keys WHERE idempotency_key = 'refund-3'").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows for refund-3 in other scopes and namespaces, want 2 (%v)", n, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"keys"}, "keys takes get, forget, list or redrive"},
		{[]string{"keys", "drop", "--db", db}, `keys "drop"`},
		{[]string{"keys", "get", "--db", db, "k"}, "needs --scope"},
		{[]string{"keys", "get", "--db", db, "--scope", "s"}, "one KEY"},
		{[]string{"keys", "list", "--db", db, "--scope", "s", "--state", "stuck"}, `--state "stuck"`},
		{[]string{"keys", "list", "--db", db, "--scope", "s", "--limit", "0"}, "--limit 0"},
		{[]string{"keys", "get", "--scope", "s", "k"}, "needs --db"},
	} {
		sqlonce(t, tc.args...).failsWith(t, 2, tc.want)
	}
}
