package unique_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/unique"
)

func TestNewNilDriverPanics(t *testing.T) {
	for name, call := range map[string]func(){
		"nil interface": func() { unique.New[*sql.Tx](nil) },
		"typed nil":     func() { unique.New((*mysqldriver.Driver)(nil)) },
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, "nil driver") {
					t.Errorf("%s: recovered %v, want a panic naming the nil driver", name, r)
				}
			}()
			call()
		}()
	}
}
