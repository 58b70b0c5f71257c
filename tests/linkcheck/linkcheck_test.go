package linkcheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// libraries are the database libraries, by module path.
var libraries = []string{
	"github.com/jackc/pgx",
	"github.com/jackc/pgconn",
	"github.com/lib/pq",
	"github.com/go-sql-driver/mysql",
	"modernc.org/sqlite",
	"github.com/mattn/go-sqlite3",
	"github.com/ncruces/go-sqlite3",
	// The brokers' clients: only the outbox's adapter modules link them.
	natsClient,
	amqpClient,
}

const (
	pgx     = "github.com/jackc/pgx"
	mysql   = "github.com/go-sql-driver/mysql"
	modernc = "modernc.org/sqlite"
	mattn   = "github.com/mattn/go-sqlite3"
	pq      = "github.com/lib/pq"

	natsClient = "github.com/nats-io/nats.go"
	amqpClient = "github.com/rabbitmq/amqp091-go"
)

const mod = "github.com/sqlonce/sqlonce/"

// TestLinks fails when a package links a database library it must not:
// someone imported a library (or a package that does) where the seam says
// a driver package should.
func TestLinks(t *testing.T) {
	for _, tc := range []struct {
		pkg   string
		allow []string
	}{
		// The core and the strategies: no database library at all.
		{"github.com/sqlonce/sqlonce", nil},
		{mod + "dedupe", nil},
		{mod + "optimistic", nil},
		{mod + "statemachine", nil},
		{mod + "unique", nil},
		{mod + "token", nil},
		{mod + "inbox", nil},
		{mod + "outbox", nil},
		// The outbox's broker adapters, modules of their own: their
		// broker's client only.
		{mod + "outbox/natsjs", []string{natsClient}},
		{mod + "outbox/rabbitmq", []string{amqpClient}},
		{mod + "httpidem", nil},
		{mod + "migrations", nil},
		// The transport-neutral core of httpidem and grpcidem.
		{mod + "internal/idem", nil},
		// The SQLite driver recognises both libraries without linking
		// either; the mattn opener leaves the import to the program.
		{mod + "sqlitedriver", nil},
		{mod + "sqlitedriver/mattn", nil},
		// PostgreSQL over database/sql: pgx's stdlib or lib/pq, the
		// program's choice; their errors are recognised by reflection.
		{mod + "pgsqldriver", nil},
		// Each driver: its own library only.
		{mod + "pgxdriver", []string{pgx}},
		{mod + "mysqldriver", []string{mysql}},
		{mod + "sqlitedriver/modernc", []string{modernc}},
		// Programs that use one driver each.
		{mod + "tests/linkcheck/pgxonly", []string{pgx}},
		{mod + "tests/linkcheck/pgsqlonly", []string{pq}},
		{mod + "tests/linkcheck/mysqlonly", []string{mysql}},
		{mod + "tests/linkcheck/modernconly", []string{modernc}},
		{mod + "tests/linkcheck/mattnonly", []string{mattn}},
	} {
		t.Run(strings.TrimPrefix(tc.pkg, mod), func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", tc.pkg).Output()
			if err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, ee.Stderr)
				}
				t.Fatalf("go list -deps %s: %v", tc.pkg, err)
			}
			deps := strings.Fields(string(out))
			if !slices.Contains(deps, tc.pkg) {
				t.Fatalf("go list -deps %s does not list the package itself: %q", tc.pkg, out)
			}
			linked := map[string]bool{}
			for _, dep := range deps {
				for _, lib := range libraries {
					if dep == lib || strings.HasPrefix(dep, lib+"/") {
						linked[lib] = true
						if !slices.Contains(tc.allow, lib) {
							t.Errorf("%s links %s (through %s): only %v allowed", tc.pkg, lib, dep, tc.allow)
						}
					}
				}
			}
			for _, lib := range tc.allow {
				if !linked[lib] {
					t.Errorf("%s does not link %s: the check would not see a wrong import", tc.pkg, lib)
				}
			}
		})
	}
}
