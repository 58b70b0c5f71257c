// Command sqlonce shows the toolkit at work and looks after its tables.
//
//	sqlonce demo    [--db DSN] [--orders N] [--keep]   a checkout service hammered by repeats
//	sqlonce migrate [up|down|status] --db DSN          sqlonce's own migrations
//	sqlonce purge   --db DSN [--batch N]               delete expired keys and tokens
//	sqlonce stats   --db DSN                           keys per scope, leased, expired, oldest
//	sqlonce keys get|forget|list --db DSN --scope S    the keys of a dedupe store
//	sqlonce version                                    the command's module version and Go's
//
// 'sqlonce CMD -h' (or 'sqlonce help CMD') shows a command's flags and an
// example.
//
// --db takes a DSN as each driver's users write it (and defaults to
// $SQLONCE_DB):
//
//	postgres://user:pass@host:5432/db?sslmode=disable  PostgreSQL URL (or postgresql://)
//	host=localhost user=app dbname=shop                PostgreSQL key=value DSN
//	user:pass@tcp(host:3306)/db                        MySQL/MariaDB: go-sql-driver/mysql's DSN
//	mysql://user:pass@tcp(host:3306)/db                the same, with a scheme
//	./app.db, /var/lib/app.db, file:app.db             SQLite file (or sqlite://path)
//
// A bare SQLite path must contain a slash or end in .db, .sqlite, .sqlite3
// or .db3, so that a mistyped server address is not taken for a file name.
// Without --db and $SQLONCE_DB, demo runs on a SQLite file in a temporary
// directory, removed afterwards.
//
// Exit status:
//
//	0  success
//	1  operational failure: the database is unreachable, a migration is
//	   missing, an SQL statement failed, a demo check failed
//	2  usage error: an unknown command or flag, a missing --db
//	3  not found: keys get or keys forget named a key that does not exist
//	4  refused: keys forget named a key a lease still holds (see --leased)
package main
