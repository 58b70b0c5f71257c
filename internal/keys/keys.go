package keys

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sqlonce/sqlonce"
)

// Check returns an error matching sqlonce.ErrInvalidKey when s, named what,
// is empty, longer than sqlonce.MaxKeyLen bytes, not valid UTF-8 or holds a
// NUL byte (PostgreSQL text cannot store one).
func Check(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", sqlonce.ErrInvalidKey, what)
	case len(s) > sqlonce.MaxKeyLen:
		return fmt.Errorf("%w: %s is %d bytes, longer than %d", sqlonce.ErrInvalidKey, what, len(s), sqlonce.MaxKeyLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", sqlonce.ErrInvalidKey, what)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", sqlonce.ErrInvalidKey, what)
	}
	return nil
}
