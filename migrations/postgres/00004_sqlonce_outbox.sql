-- +goose Up
-- sqlonce_outbox holds the messages of the transactional outbox (package
-- outbox): each is inserted in the caller's transaction, so that it exists
-- exactly when the business write beside it committed, and a relay
-- publishes it afterwards. seq is the enqueue order, which the relay keeps
-- per ordering key; id is the message's stable id (the consumer's inbox
-- key). Text is compared byte for byte (COLLATE "C").
--
-- state: 0 = pending (leased while locked_until is ahead: lease_token
--            fences a relay whose lease was taken over),
--        1 = sent (the broker confirmed it; purged after the retention),
--        2 = parked (it failed too many times; it holds back the later
--            messages of its ordering key until re-driven or forgotten).
CREATE TABLE sqlonce_outbox (
    seq          bigserial        NOT NULL,
    id           text COLLATE "C" NOT NULL,
    topic        text COLLATE "C" NOT NULL,
    ordering_key text COLLATE "C" NOT NULL DEFAULT '',
    payload      bytea            NOT NULL,
    headers      bytea            NOT NULL DEFAULT '\x'::bytea,
    fingerprint  bytea            NOT NULL DEFAULT '\x'::bytea,
    state        smallint         NOT NULL DEFAULT 0,
    attempts     integer          NOT NULL DEFAULT 0,
    lease_token  bigint           NOT NULL DEFAULT 0,
    locked_until timestamptz,
    available_at timestamptz      NOT NULL,
    created_at   timestamptz      NOT NULL,
    sent_at      timestamptz,
    last_error   text             NOT NULL DEFAULT '',
    CONSTRAINT sqlonce_outbox_pkey PRIMARY KEY (seq),
    CONSTRAINT sqlonce_outbox_id_key UNIQUE (id),
    CONSTRAINT sqlonce_outbox_id_check CHECK (octet_length(id) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_outbox_topic_check CHECK (octet_length(topic) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_outbox_ordering_key_check CHECK (octet_length(ordering_key) <= 255),
    CONSTRAINT sqlonce_outbox_fingerprint_check CHECK (octet_length(fingerprint) <= 64),
    CONSTRAINT sqlonce_outbox_state_check CHECK (state IN (0, 1, 2)),
    CONSTRAINT sqlonce_outbox_sent_check CHECK ((state = 1) = (sent_at IS NOT NULL))
);

-- The claim walks the pending messages in seq order.
CREATE INDEX sqlonce_outbox_pending_idx ON sqlonce_outbox (seq) WHERE state = 0;
-- The claim's "no earlier unsent message of the same ordering key" is one
-- probe of this index.
CREATE INDEX sqlonce_outbox_unsent_key_idx ON sqlonce_outbox (ordering_key, seq) WHERE state <> 1;
-- Purge walks the sent messages in sent_at order.
CREATE INDEX sqlonce_outbox_sent_at_idx ON sqlonce_outbox (sent_at) WHERE state = 1;

-- +goose Down
DROP TABLE sqlonce_outbox;
