-- +goose Up
-- sqlonce_outbox holds the messages of the transactional outbox (package
-- outbox): each is inserted in the caller's transaction, so that it exists
-- exactly when the business write beside it committed, and a relay
-- publishes it afterwards. seq is the enqueue order, which the relay keeps
-- per ordering key; id is the message's stable id (the consumer's inbox
-- key). Text is VARBINARY: compared byte for byte. Times are UTC.
--
-- state: 0 = pending (leased while locked_until is ahead: lease_token
--            fences a relay whose lease was taken over),
--        1 = sent (the broker confirmed it; purged after the retention),
--        2 = parked (it failed too many times; it holds back the later
--            messages of its ordering key until re-driven or forgotten).
CREATE TABLE sqlonce_outbox (
    seq          BIGINT         NOT NULL AUTO_INCREMENT,
    id           VARBINARY(255) NOT NULL,
    topic        VARBINARY(255) NOT NULL,
    ordering_key VARBINARY(255) NOT NULL DEFAULT '',
    payload      LONGBLOB       NOT NULL,
    headers      BLOB           NOT NULL,
    fingerprint  VARBINARY(64)  NOT NULL DEFAULT '',
    state        SMALLINT       NOT NULL DEFAULT 0,
    attempts     INT            NOT NULL DEFAULT 0,
    lease_token  BIGINT         NOT NULL DEFAULT 0,
    locked_until DATETIME(6)    NULL,
    available_at DATETIME(6)    NOT NULL,
    created_at   DATETIME(6)    NOT NULL,
    sent_at      DATETIME(6)    NULL,
    last_error   TEXT           NOT NULL,
    PRIMARY KEY (seq),
    UNIQUE KEY sqlonce_outbox_id_key (id),
    -- The claim walks the pending messages in seq order.
    KEY sqlonce_outbox_state_seq_idx (state, seq),
    -- The claim's "no earlier unsent message of the same ordering key".
    KEY sqlonce_outbox_key_idx (ordering_key, state, seq),
    -- Purge walks the sent messages in sent_at order.
    KEY sqlonce_outbox_sent_at_idx (state, sent_at),
    CONSTRAINT sqlonce_outbox_id_check CHECK (LENGTH(id) > 0),
    CONSTRAINT sqlonce_outbox_topic_check CHECK (LENGTH(topic) > 0),
    CONSTRAINT sqlonce_outbox_state_check CHECK (state IN (0, 1, 2)),
    CONSTRAINT sqlonce_outbox_sent_check CHECK ((state = 1) = (sent_at IS NOT NULL))
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE sqlonce_outbox;
