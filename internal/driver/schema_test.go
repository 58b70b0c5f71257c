package driver

import "testing"

func TestSchemaQualify(t *testing.T) {
	pg, err := NewSchema(Postgres, "billing")
	if err != nil {
		t.Fatal(err)
	}
	my, err := NewSchema(MySQL, "billing")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, pg, my string }{
		{"SELECT token FROM sqlonce_keys AS k", `SELECT token FROM "billing".sqlonce_keys AS k`, "SELECT token FROM `billing`.sqlonce_keys AS k"},
		{"DELETE FROM sqlonce_tokens\nWHERE x", `DELETE FROM "billing".sqlonce_tokens` + "\nWHERE x", "DELETE FROM `billing`.sqlonce_tokens\nWHERE x"},
		{"sqlonce_keys", `"billing".sqlonce_keys`, "`billing`.sqlonce_keys"},
		// a regclass cast takes the qualified name
		{"hashtext('sqlonce_keys'::regclass::oid::text)", `hashtext('"billing".sqlonce_keys'::regclass::oid::text)`, "hashtext('`billing`.sqlonce_keys'::regclass::oid::text)"},
		// a column named through its table (MySQL's batch, ON DUPLICATE KEY)
		{"SET token = sqlonce_keys.token", `SET token = "billing".sqlonce_keys.token`, "SET token = `billing`.sqlonce_keys.token"},
		// left alone: constraint and index names, user variables,
		// names already qualified, other tables
		{"sqlonce_keys_pkey", "sqlonce_keys_pkey", "sqlonce_keys_pkey"},
		{"SET @sqlonce_lock_wait = 1", "SET @sqlonce_lock_wait = 1", "SET @sqlonce_lock_wait = 1"},
		{`other.sqlonce_keys "x".sqlonce_tokens`, `other.sqlonce_keys "x".sqlonce_tokens`, `other.sqlonce_keys "x".sqlonce_tokens`},
		{"SELECT 1 FROM my_sqlonce_keys", "SELECT 1 FROM my_sqlonce_keys", "SELECT 1 FROM my_sqlonce_keys"},
	} {
		if got := pg.Qualify(c.in); got != c.pg {
			t.Errorf("postgres %q: %q, want %q", c.in, got, c.pg)
		}
		if got := my.Qualify(c.in); got != c.my {
			t.Errorf("mysql %q: %q, want %q", c.in, got, c.my)
		}
	}
	var none *Schema
	if got := none.Qualify("FROM sqlonce_keys"); got != "FROM sqlonce_keys" {
		t.Errorf("nil schema: %q", got)
	}
}

func TestSchemaName(t *testing.T) {
	for _, ok := range []string{"billing", "_x", "a1_b2", "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc"} {
		if _, err := NewSchema(Postgres, ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Billing", "1x", "a-b", "a b", `a"b`, "a`b", "a.b", "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd"} {
		if _, err := NewSchema(MySQL, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
