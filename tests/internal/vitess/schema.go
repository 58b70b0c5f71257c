package vitess

// VSchema is the keyspace's VSchema for sqlonce's tables, as
// docs/deployments.md gives it: sqlonce_keys and sqlonce_tokens sharded by
// scope with the xxhash vindex (a business table sharded with the same
// vindex on its tenant column keeps a key whose scope is the tenant's id
// on the shard of the tenant's rows), and the migrations' version table by
// its version. Applied through vtgate before the tables are created:
// vtgate routes no statement to a table of a sharded keyspace that has no
// vindex.
var VSchema = []string{
	"ALTER VSCHEMA CREATE VINDEX xxhash USING xxhash",
	"ALTER VSCHEMA CREATE VINDEX hash USING hash",
	"ALTER VSCHEMA ON sqlonce_goose_db_version ADD VINDEX hash(version_id) USING hash",
	"ALTER VSCHEMA ON sqlonce_keys ADD VINDEX xxhash(scope) USING xxhash",
	"ALTER VSCHEMA ON sqlonce_tokens ADD VINDEX xxhash(scope) USING xxhash",
}

// Shards are the shards of a two-shard keyspace, as vttestserver names
// them.
var Shards = []string{"-80", "80-"}

// Single is the DSN parameter that keeps every transaction of a session
// on one shard: vtgate refuses (1317) the statement that would write on a
// second one. go-sql-driver/mysql sends it as SET transaction_mode =
// 'single' on each new connection.
const Single = "transaction_mode=%27single%27"
