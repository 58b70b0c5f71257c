package sqlonceotel_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/sqlonceotel"
)

// A nil option is refused with an error, as every other constructor of
// the project refuses one, rather than a panic.
func TestNewNilOption(t *testing.T) {
	o, err := sqlonceotel.New(sqlonceotel.WithDBSystem("postgresql"), nil)
	if !errors.Is(err, sqlonce.ErrInvalidArgument) || o != nil {
		t.Fatalf("New(nil option) = %v, %v; want ErrInvalidArgument", o, err)
	}
}

// A bad option value is refused by New, with an error naming the option.
func TestNewBadOption(t *testing.T) {
	for name, opt := range map[string]sqlonceotel.Option{
		"WithDBSystem":       sqlonceotel.WithDBSystem(""),
		"WithMeterProvider":  sqlonceotel.WithMeterProvider(nil),
		"WithTracerProvider": sqlonceotel.WithTracerProvider(nil),
	} {
		o, err := sqlonceotel.New(opt)
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), name) || o != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalidArgument naming the option", name, o, err)
		}
	}
	for _, system := range []string{"PostgreSQL", "my sql", "sqlite\n"} {
		if _, err := sqlonceotel.New(sqlonceotel.WithDBSystem(system)); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("WithDBSystem(%q): %v, want ErrInvalidArgument", system, err)
		}
	}
	for _, system := range []string{"postgresql", "mariadb", "mysql", "sqlite", "microsoft.sql_server"} {
		if _, err := sqlonceotel.New(sqlonceotel.WithDBSystem(system), sqlonceotel.WithoutSpans()); err != nil {
			t.Errorf("WithDBSystem(%q): %v", system, err)
		}
	}
}
