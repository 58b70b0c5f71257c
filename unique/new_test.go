package unique_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/unique"
)

func TestNewNilDriver(t *testing.T) {
	for name, call := range map[string]func() (*unique.Inserter[*sql.Tx], error){
		"nil interface": func() (*unique.Inserter[*sql.Tx], error) { return unique.New[*sql.Tx](nil) },
		"typed nil":     func() (*unique.Inserter[*sql.Tx], error) { return unique.New((*mysqldriver.Driver)(nil)) },
	} {
		ins, err := call()
		if ins != nil || !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("%s: %v, %v; want nil and an error matching ErrInvalidArgument", name, ins, err)
		}
	}
}
