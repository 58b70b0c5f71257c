package sqlonce

import "testing"

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{
		FirstRun:    "first run",
		AlreadyDone: "already done",
		0:           "unknown outcome",
		7:           "unknown outcome",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", o, got, want)
		}
	}
}

func TestResultPredicates(t *testing.T) {
	for _, tc := range []struct {
		r           Result
		first, done bool
		str         string
	}{
		{Result{Outcome: FirstRun}, true, false, "first run"},
		{Result{Outcome: AlreadyDone, Response: []byte("r")}, false, true, "already done"},
		// The zero Result comes with every error: neither outcome.
		{Result{}, false, false, "unknown outcome"},
	} {
		if tc.r.FirstRun() != tc.first || tc.r.AlreadyDone() != tc.done || tc.r.String() != tc.str {
			t.Errorf("%+v: FirstRun %v AlreadyDone %v String %q", tc.r, tc.r.FirstRun(), tc.r.AlreadyDone(), tc.r.String())
		}
	}
}

// The zero Outcome must not be a valid outcome, or a Result returned with
// an error would read as one.
func TestZeroOutcomeIsNeither(t *testing.T) {
	var o Outcome
	if o == FirstRun || o == AlreadyDone {
		t.Fatal("the zero Outcome is a valid outcome")
	}
}
