package keys

import (
	"database/sql"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/sqlonce/sqlonce"
)

func TestCheckTx(t *testing.T) {
	var nilFile *os.File
	cases := []struct {
		name string
		err  error
	}{
		{"nil *sql.Tx", CheckTx((*sql.Tx)(nil))},
		{"nil interface", CheckTx[io.Closer](nil)},
		{"typed nil in an interface", CheckTx[io.Closer](nilFile)},
	}
	for _, c := range cases {
		if !errors.Is(c.err, sqlonce.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.name, c.err)
		}
	}
	if err := CheckTx(&sql.Tx{}); err != nil {
		t.Errorf("non-nil *sql.Tx: %v", err)
	}
	if err := CheckTx[io.Closer](os.Stdin); err != nil {
		t.Errorf("non-nil interface: %v", err)
	}
}
