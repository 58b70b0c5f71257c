// Command sqlonce shows the toolkit at work and looks after its tables.
//
//	sqlonce demo    [--db DSN] [--schema NAME] [--orders N] [--keep]   a checkout service hammered by repeats
//	sqlonce migrate [up|down|status] --db DSN [--schema NAME]          sqlonce's own migrations
//	sqlonce purge   --db DSN [--schema NAME] [--batch N]               delete expired keys and tokens
//	sqlonce stats   --db DSN [--schema NAME]                           keys per kind and scope, tokens, outbox messages
//	sqlonce keys get|forget|list|redrive --db DSN --scope S [--kind KIND]  keys of every kind
//	sqlonce outbox stats|list|get|redrive|forget --db DSN ...           the transactional outbox's messages
//	sqlonce version                                                    the command's module version and Go's
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
// --schema names the PostgreSQL schema, or MySQL/MariaDB database, that
// holds sqlonce's tables when the application keeps them there
// (migrations.WithSchema with pgxdriver.WithSchema, pgsqldriver.WithSchema
// or mysqldriver.WithDatabase); migrate up creates it. SQLite has none.
//
// # Keys of every kind
//
// keys reaches each kind of key through the package that keeps it; --kind
// picks one (default: every kind), and every answer names the kind:
//
//	dedupe         dedupe.Store's Do, Run, Claim; --scope is the Request's Scope
//	steps          dedupe.Store.RunSteps operations; --scope is the Request's Scope
//	inbox          inbox message ids; --scope is the consumer name
//	http           httpidem Idempotency-Keys; --scope is the principal
//	http-steps     httpidem requests run as steps; --scope is the principal
//	http-norepeat  httpidem keys derived by WithNoRepeatSubmit; --scope is the principal
//	grpc           grpcidem keys; --scope is the principal
//
// httpidem and grpcidem keep keys per caller: to find a customer's
// Idempotency-Key, give the principal your principal func returns for the
// customer and the header's value as sent:
//
//	sqlonce keys get --db DSN --kind http --scope user-42 8e2f0c1a-5b7d-4c1e-9f3a-2d6b8e4f1a09
//	sqlonce keys forget --db DSN --kind http --scope user-42 8e2f0c1a-5b7d-4c1e-9f3a-2d6b8e4f1a09
//
// 'sqlonce stats' lists the kinds and scopes that hold keys, in the words
// --kind and --scope take. With --kind, keys get's not-found message names
// the kinds that do hold the key, and keys list notes on stderr the
// scope's keys of the other kinds.
//
// # The outbox
//
// outbox looks at the transactional outbox's messages (package outbox)
// through outbox.Store's Stats, List, Get, Redrive and Forget, and mends a
// parked message: one a relay failed to publish for good, which holds back
// the later messages of its ordering key.
//
//	sqlonce outbox stats   --db DSN [--json]               pending (the backlog), the oldest's age, parked, sent
//	sqlonce outbox list    --db DSN --state pending|sent|parked [--after SEQ] [--limit N] [--json]
//	sqlonce outbox get     --db DSN ID [--json]            state, topic, key, times, attempts, last error, payload
//	sqlonce outbox redrive --db DSN ID [--json]            a parked message pending again, due at once
//	sqlonce outbox forget  --db DSN ID [--leased] [--json] delete it, whatever its state
//
// list reads a page of --limit messages in enqueue order; a last line
// gives the --after (the last seq listed) that reads the next page.
// redrive refuses a message that is not parked, naming its state; forget
// refuses one a relay is publishing unless --leased. 'sqlonce stats'
// counts the outbox's messages too.
//
// # JSON
//
// keys get --json writes one object per line, one per kind holding the
// key; keys list --json an array of them. Their fields:
//
//	kind               the kind of key (above)
//	scope              the scope as --scope names it
//	key                the key
//	state              done, leased, lapsed or expired
//	created            when the key was claimed (RFC 3339, the database's clock)
//	expires            when it expires
//	lease_until        a lease's deadline; only while the key has one
//	fencing_token      the token of the key's last claim
//	fingerprint_bytes  the recorded fingerprint's length, 0 without one
//	response           whether a response is recorded
//	response_bytes     the recorded response's length
//	operation          steps kinds: the Operation.Name (none for a key ended by a pre-release build)
//	steps_done         steps kinds, unfinished: the steps done, in order
//	attempts           steps kinds, unfinished or given up: the runs that held the lease
//	failed             steps kinds, given up: why, the last step error's text
//	failed_step        steps kinds, given up: the step it stopped at
//	failed_at          steps kinds, given up: when (the database's clock)
//
// keys forget --json writes {"kind", "scope", "key", "forgotten": true};
// keys redrive --json writes {"kind", "scope", "key", "redriven": true}.
//
// outbox get --json writes one object, outbox list --json an array of
// them:
//
//	seq            the message's place in the outbox, in enqueue order (--after takes it)
//	id             the message id (the consumer's inbox key)
//	topic          the topic
//	key            the ordering key ("" for none)
//	state          pending, sent or parked
//	attempts       the publishes that failed since it was enqueued or re-driven
//	last_error     the last failed publish's error ("" for none)
//	leased         whether a relay is publishing it now
//	locked_until   the relay's lease's deadline (only while leased)
//	created        when it was enqueued (RFC 3339, the database's clock)
//	available      pending: when it is due
//	sent           sent: when the broker confirmed it
//	headers        the headers, an object of strings
//	payload        the payload, base64
//	payload_bytes  the payload's length
//
// outbox stats --json writes {"pending", "oldest_pending",
// "oldest_pending_age_seconds", "parked", "sent"} (oldest_pending and its
// age only while a message is pending); outbox redrive --json {"id",
// "redriven": true}; outbox forget --json {"id", "forgotten": true, "was"}
// (the state it was in). No other command writes JSON.
//
// Exit status:
//
//	0  success
//	1  operational failure: the database is unreachable, a migration is
//	   missing, an SQL statement failed, a demo check failed
//	2  usage error: an unknown command or flag, a missing --db
//	3  not found: keys get, forget or redrive named a key that does not exist,
//	   or outbox get, redrive or forget a message not in the outbox
//	4  refused: keys forget named a key a lease still holds (see --leased),
//	   keys redrive a key whose operation was not given up, outbox redrive
//	   a message that is not parked, or outbox forget one a relay is
//	   publishing (see --leased)
package main
