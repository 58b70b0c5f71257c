package httpidem

import (
	"testing"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lines   []string
		key     string
		present bool
		ok      bool
	}{
		{"absent", nil, "", false, true},
		{"uuid", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", true, true},
		{"random string", []string{`"clkyoesmbgybucifusbbtdsbohtyuuwz"`}, "clkyoesmbgybucifusbbtdsbohtyuuwz", true, true},
		{"escapes", []string{`"a\"b\\c"`}, `a"b\c`, true, true},
		{"spaces inside and around", []string{`  "a b"  `}, "a b", true, true},
		{"empty string", []string{`""`}, "", true, true},
		{"parameters ignored", []string{`"k";a=1;b;c=?0;d="x";e=tok/en:1;f=:aGk=:;g=-1.5;h=@1659578233;i=%"f%c3%bc"`}, "k", true, true},
		{"parameter with space after ;", []string{`"k"; a=1`}, "k", true, true},

		{"bare token", []string{`abc`}, "", true, false},
		{"bare uuid", []string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}, "", true, false},
		{"integer", []string{`42`}, "", true, false},
		{"byte sequence", []string{`:aGk=:`}, "", true, false},
		{"two fields", []string{`"a"`, `"b"`}, "", true, false},
		{"list", []string{`"a", "b"`}, "", true, false},
		{"unterminated", []string{`"abc`}, "", true, false},
		{"bad escape", []string{`"a\nb"`}, "", true, false},
		{"trailing backslash", []string{`"a\`}, "", true, false},
		{"tab inside", []string{"\"a\tb\""}, "", true, false},
		{"non-ascii inside", []string{`"ключ"`}, "", true, false},
		{"junk after", []string{`"a"b`}, "", true, false},
		{"inner list", []string{`("a")`}, "", true, false},
		{"empty field", []string{``}, "", true, false},
		{"uppercase parameter key", []string{`"k";A=1`}, "", true, false},
		{"parameter without key", []string{`"k";=1`}, "", true, false},
		{"parameter missing value", []string{`"k";a=`}, "", true, false},
		{"decimal ends in dot", []string{`"k";a=1.`}, "", true, false},
		{"decimal too precise", []string{`"k";a=1.2345`}, "", true, false},
		{"integer too long", []string{`"k";a=1234567890123456`}, "", true, false},
		{"date is integer only", []string{`"k";a=@1.5`}, "", true, false},
		{"bad boolean", []string{`"k";a=?2`}, "", true, false},
		{"bad byte sequence", []string{`"k";a=:a-b:`}, "", true, false},
		{"display string uppercase hex", []string{`"k";a=%"%C3%BC"`}, "", true, false},
		{"display string not utf-8", []string{`"k";a=%"%ff"`}, "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, present, err := parseKey(tc.lines)
			if present != tc.present || (err == nil) != tc.ok || (tc.ok && key != tc.key) {
				t.Fatalf("parseKey(%q) = (%q, %v, %v), want (%q, %v, ok=%v)", tc.lines, key, present, err, tc.key, tc.present, tc.ok)
			}
		})
	}
}
