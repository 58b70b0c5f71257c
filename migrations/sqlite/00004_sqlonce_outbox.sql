-- +goose Up
-- sqlonce_outbox holds the messages of the transactional outbox (package
-- outbox): each is inserted in the caller's transaction, so that it exists
-- exactly when the business write beside it committed, and a relay
-- publishes it afterwards. seq is the enqueue order (the rowid), which
-- the relay keeps per ordering key; id is the message's stable id (the
-- consumer's inbox key). Text has the BINARY collation: compared byte for
-- byte. Times are microseconds since the Unix epoch, UTC, from the
-- database's clock.
--
-- state: 0 = pending (leased while locked_until is ahead: lease_token
--            fences a relay whose lease was taken over),
--        1 = sent (the broker confirmed it; purged after the retention),
--        2 = parked (it failed too many times; it holds back the later
--            messages of its ordering key until re-driven or forgotten).
--
-- CREATE TABLE without IF NOT EXISTS: this migration fails when it has
-- already been applied, so that two instances running Up at once on a
-- fresh file never both record version 4.
CREATE TABLE sqlonce_outbox (
    seq          INTEGER PRIMARY KEY,
    id           TEXT    NOT NULL,
    topic        TEXT    NOT NULL,
    ordering_key TEXT    NOT NULL DEFAULT '',
    payload      BLOB    NOT NULL,
    headers      BLOB    NOT NULL DEFAULT x'',
    fingerprint  BLOB    NOT NULL DEFAULT x'',
    state        INTEGER NOT NULL DEFAULT 0,
    attempts     INTEGER NOT NULL DEFAULT 0,
    lease_token  INTEGER NOT NULL DEFAULT 0,
    locked_until INTEGER,
    available_at INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    sent_at      INTEGER,
    last_error   TEXT    NOT NULL DEFAULT '',
    CONSTRAINT sqlonce_outbox_id_key UNIQUE (id),
    CONSTRAINT sqlonce_outbox_id_check CHECK (length(CAST(id AS BLOB)) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_outbox_topic_check CHECK (length(CAST(topic AS BLOB)) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_outbox_ordering_key_check CHECK (length(CAST(ordering_key AS BLOB)) <= 255),
    CONSTRAINT sqlonce_outbox_fingerprint_check CHECK (length(fingerprint) <= 64),
    CONSTRAINT sqlonce_outbox_state_check CHECK (state IN (0, 1, 2)),
    CONSTRAINT sqlonce_outbox_sent_check CHECK ((state = 1) = (sent_at IS NOT NULL))
) STRICT;

-- The claim walks the pending messages in seq order.
CREATE INDEX sqlonce_outbox_pending_idx ON sqlonce_outbox (seq) WHERE state = 0;
-- The claim's "no earlier unsent message of the same ordering key" is one
-- probe of this index.
CREATE INDEX sqlonce_outbox_unsent_key_idx ON sqlonce_outbox (ordering_key, seq) WHERE state <> 1;
-- Purge walks the sent messages in sent_at order.
CREATE INDEX sqlonce_outbox_sent_at_idx ON sqlonce_outbox (sent_at) WHERE state = 1;

-- +goose Down
DROP TABLE sqlonce_outbox;
