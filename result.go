package sqlonce

// Outcome says whether a call did the work or found it already done.
type Outcome uint8

const (
	// FirstRun means this call did the work: its effects are part of the
	// caller's transaction and happen when that transaction commits.
	FirstRun Outcome = iota + 1
	// AlreadyDone means an earlier call did the work; this call changed
	// nothing. Where the strategy records one, Result.Response holds the
	// earlier call's answer.
	AlreadyDone
)

// String returns "first run" or "already done".
func (o Outcome) String() string {
	switch o {
	case FirstRun:
		return "first run"
	case AlreadyDone:
		return "already done"
	default:
		return "unknown outcome"
	}
}

// Result is the answer every sqlonce strategy gives.
//
// The zero Result (Outcome 0) is returned together with every error; a nil
// error always comes with FirstRun or AlreadyDone.
type Result struct {
	// Outcome is FirstRun or AlreadyDone.
	Outcome Outcome
	// Response is the response recorded for the key (dedupe): on FirstRun
	// what this call recorded, on AlreadyDone what the first run recorded,
	// byte for byte.
	//
	// It is nil exactly when nothing is recorded: dedupe's Do, a lease
	// not yet completed, and the strategies that record no answer
	// (optimistic, statemachine, unique, token, inbox). A recorded
	// response is never nil, even when empty: DoResponse, DoJSON, Run and
	// Complete record a nil response as an empty one, and return it as a
	// non-nil, empty slice on FirstRun and on every replay alike.
	Response []byte
}

// FirstRun reports whether this call did the work.
func (r Result) FirstRun() bool { return r.Outcome == FirstRun }

// AlreadyDone reports whether an earlier call did the work.
func (r Result) AlreadyDone() bool { return r.Outcome == AlreadyDone }

// String returns the outcome as text.
func (r Result) String() string { return r.Outcome.String() }
