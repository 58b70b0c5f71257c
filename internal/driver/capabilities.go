package driver

// Capabilities lists what an engine can do beyond Engine, each as the
// interface that does it; a nil field is a capability the engine lacks,
// and the strategies then take their generic path. Every optional
// interface of this package is a field here, and the strategies find a
// capability only here, never by a type assertion on the engine: so a
// wrapper that embeds an Engine forwards them all as they are, and one
// that changes what they do (Checked) returns its own Capabilities,
// which TestCheckedKeepsCapabilities checks field by field.
type Capabilities[TTx any] struct {
	// Runner runs dedupe.Store.Run in fewer round trips.
	Runner Runner[TTx]
	// BatchClaimer claims a batch's keys in a constant number of
	// statements.
	BatchClaimer BatchClaimer[TTx]
	// BatchRunner claims a batch in the round trip that begins its
	// transaction.
	BatchRunner BatchRunner[TTx]
	// Autocommitter runs statements in autocommit on the driver's handle.
	Autocommitter Autocommitter[TTx]
	// DuplicateInTx tells a duplicate's constraint with the transaction's
	// help; without it, Engine.IsDuplicate does.
	DuplicateInTx DuplicateInTx[TTx]
	// ClaimChecker finds a claim lost with the caller's transaction.
	ClaimChecker ClaimChecker[TTx]
	// OutboxListener wakes an outbox relay when a message commits.
	OutboxListener OutboxListener
}
