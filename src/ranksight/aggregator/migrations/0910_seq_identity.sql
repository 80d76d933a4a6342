-- Sequence marks keyed by (cluster, node, agent): an incarnation id read off the bus by another node cannot move the
-- marks of its owner. seq_jumps counts jumps beyond ingest.max_seq_jump (which open no gap).

CREATE TABLE agent_seq_v2 (
    agent       VARCHAR NOT NULL,      -- agent incarnation id
    cluster     VARCHAR NOT NULL,
    node        VARCHAR NOT NULL,
    high_seq    BIGINT  NOT NULL,      -- highest sequence number committed
    messages    BIGINT  NOT NULL,      -- messages committed
    duplicates  BIGINT  NOT NULL,      -- redeliveries and re-publishes skipped
    gaps_open   BIGINT  NOT NULL,      -- sequence numbers never received (so far)
    first_recv  TIMESTAMP NOT NULL,
    last_recv   TIMESTAMP NOT NULL,
    seq_jumps   BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (cluster, node, agent)
);
INSERT INTO agent_seq_v2 BY NAME SELECT * FROM agent_seq;
DROP TABLE agent_seq;
ALTER TABLE agent_seq_v2 RENAME TO agent_seq;

CREATE TABLE agent_seq_gaps_v2 (
    cluster VARCHAR NOT NULL,
    node    VARCHAR NOT NULL,
    agent   VARCHAR NOT NULL,
    seq_lo  BIGINT  NOT NULL,
    seq_hi  BIGINT  NOT NULL
);
INSERT INTO agent_seq_gaps_v2
SELECT s.cluster, s.node, g.agent, g.seq_lo, g.seq_hi FROM agent_seq_gaps g JOIN agent_seq s USING (agent);
DROP TABLE agent_seq_gaps;
ALTER TABLE agent_seq_gaps_v2 RENAME TO agent_seq_gaps;
