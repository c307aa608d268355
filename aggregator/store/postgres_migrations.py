"""The PostgreSQL store's tables, versioned: each migration is applied once, in order, recorded in
the table ``migrations`` (:meth:`PostgresBackend.migrate` holds an advisory lock meanwhile, so nodes
starting at once apply each exactly once). Their meaning is in :mod:`.rows`.

No arrival order: a report's primary key is its random id and there is no serial column.
PostgreSQL's heap keeps rows in insertion order, so ``reports`` is partitioned by hash of the id
into :data:`REPORT_PARTITIONS` tables and each transaction inserts in id order: the reports of
one request land in different tables, not next to each other. Within a table, and in ``xmin``,
they are still in the order of their requests until settling rewrites them (``unsettled``).
"""

from __future__ import annotations

from typing import Any, Callable

import psycopg

from ...shared.windows import ROLLUP
from .wire import PACK_CHUNK, pack_stored_reports

REPORT_PARTITIONS = 64


def _pack_stored_reports(conn: psycopg.Connection[Any]) -> None:
    """The numeric form of every attribute (first only a string attribute's, for its back-fill),
    so that counting parses no JSON: every stored report packed again in today's layout."""
    def update(packed: list[tuple[bytes, str]]) -> None:
        if packed:
            wires, ids = zip(*packed)
            conn.execute("UPDATE reports SET wire = u.wire FROM unnest(%b::bytea[], %b::text[]) AS u(wire, id) "
                         "WHERE reports.id = u.id", (list(wires), list(ids)))

    pack_stored_reports(
        conn.execute("SELECT name, version, definition FROM schemas").fetchall(),
        lambda after: conn.execute('SELECT id, schema, version, "values" FROM reports WHERE id > %s ORDER BY id '
                                   "LIMIT %s", (after, PACK_CHUNK)).fetchall(),
        update)


_KEY = 'schema text COLLATE "C" NOT NULL, version integer NOT NULL, "window" text COLLATE "C" NOT NULL'
# Each a statement, or a function given the migrating connection.
MIGRATIONS: tuple[tuple[str, str | Callable[[psycopg.Connection[Any]], None]], ...] = (
    ("m001_initial", f"""
        CREATE TABLE schemas (name text COLLATE "C" NOT NULL, version integer NOT NULL, definition text NOT NULL,
            published_at text NOT NULL, PRIMARY KEY (name, version));
        CREATE TABLE reports (id text COLLATE "C" NOT NULL PRIMARY KEY, {_KEY}, window_end bigint NOT NULL,
            "values" text NOT NULL) PARTITION BY HASH (id);
        {"".join(f"CREATE TABLE reports_{i:02d} PARTITION OF reports FOR VALUES WITH (MODULUS {REPORT_PARTITIONS}, "
                 f"REMAINDER {i});" for i in range(REPORT_PARTITIONS))}
        CREATE INDEX reports_window_end ON reports (window_end);
        CREATE TABLE totals ({_KEY}, attribute text COLLATE "C" NOT NULL, n bigint NOT NULL, window_end bigint,
            PRIMARY KEY (schema, version, "window", attribute));
        CREATE INDEX totals_window_end ON totals (window_end);
        CREATE TABLE counters ({_KEY}, attribute text COLLATE "C" NOT NULL, value text COLLATE "C" NOT NULL,
            amount double precision NOT NULL, PRIMARY KEY (schema, version, "window", attribute, value));
        -- A mark is never reused, so a refresh that read an older mark never clears a newer one.
        CREATE SEQUENCE dirty_marks;
        CREATE TABLE dirty ({_KEY}, mark bigint NOT NULL, PRIMARY KEY (schema, version, "window"));
        CREATE TABLE estimates ({_KEY}, rank integer NOT NULL, attribute text COLLATE "C" NOT NULL,
            value text COLLATE "C" NOT NULL, estimate double precision NOT NULL,
            estimate_clipped double precision NOT NULL, ci_low double precision NOT NULL,
            ci_high double precision NOT NULL, n bigint NOT NULL, epsilon double precision NOT NULL,
            confidence double precision NOT NULL, computed_at text NOT NULL,
            PRIMARY KEY (schema, version, "window", rank));
        CREATE TABLE generation (id integer PRIMARY KEY CHECK (id = 1), n bigint NOT NULL);
        INSERT INTO generation VALUES (1, 0);
    """),
    # Retention walks the id key instead (Store.expire): the index cost every stored report a write.
    ("m002_reports_without_window_index", "DROP INDEX reports_window_end"),
    # The retention cutoff, kept: erased windows stay refused after the clock moves back.
    ("m003_retention_cutoff", "CREATE TABLE retention (id integer PRIMARY KEY CHECK (id = 1), cutoff bigint NOT NULL)"),
    # The ids of the reports stored since they were last rewritten (PostgresBackend.erase_arrival_order), which
    # still carry their request's transaction id (xmin) and their place in arrival order; reports
    # stored before this migration are rewritten too, a bounded number per settle.
    ("m004_unsettled_reports", """
        CREATE TABLE unsettled (id text COLLATE "C" NOT NULL PRIMARY KEY);
        INSERT INTO unsettled SELECT id FROM reports;
    """),
    # Candidates added after publishing (or discovered), each in a batch back-filled over the stored
    # reports' ids up to its watermark (NULL: done); a mark per schema version that changes with them.
    ("m005_candidates", """
        CREATE TABLE backfills (batch bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            schema text COLLATE "C" NOT NULL, version integer NOT NULL, attribute text COLLATE "C" NOT NULL,
            watermark text COLLATE "C", deficit bigint);
        CREATE TABLE candidates (schema text COLLATE "C" NOT NULL, version integer NOT NULL,
            attribute text COLLATE "C" NOT NULL, value text COLLATE "C" NOT NULL,
            source text NOT NULL CHECK (source IN ('added', 'discovered')), added_at text NOT NULL,
            estimated boolean NOT NULL, rank integer NOT NULL, batch bigint,
            PRIMARY KEY (schema, version, attribute, value));
        ALTER TABLE schemas ADD COLUMN candidates_mark bigint NOT NULL DEFAULT 0;
    """),
    # Breakdowns (DESIGN.md, "Breakdowns"): each of a schema version's, numbered, with its source and
    # (for one added later) its back-fill's batch; their sums per window and their rows.
    ("m006_breakdowns", f"""
        CREATE TABLE breakdowns (schema text COLLATE "C" NOT NULL, version integer NOT NULL, id integer NOT NULL,
            of_attribute text COLLATE "C" NOT NULL, by_attribute text COLLATE "C" NOT NULL,
            source text NOT NULL CHECK (source IN ('listed', 'added')), added_at text NOT NULL, batch bigint,
            PRIMARY KEY (schema, version, id), UNIQUE (schema, version, of_attribute, by_attribute));
        CREATE TABLE breakdown_counters ({_KEY}, breakdown integer NOT NULL, of_key text COLLATE "C" NOT NULL,
            by_key text COLLATE "C" NOT NULL, amount double precision NOT NULL,
            PRIMARY KEY (schema, version, "window", breakdown, of_key, by_key));
        CREATE TABLE breakdown_estimates ({_KEY}, rank integer NOT NULL, breakdown integer NOT NULL,
            value text COLLATE "C" NOT NULL, by_value text COLLATE "C" NOT NULL, estimate double precision,
            estimate_clipped double precision, ci_low double precision, ci_high double precision,
            by_share double precision, n bigint NOT NULL, reason text, confidence double precision NOT NULL,
            computed_at text NOT NULL, PRIMARY KEY (schema, version, "window", rank));
        -- A back-fill's batch is of candidates (of an attribute) or of a breakdown (no attribute).
        ALTER TABLE backfills ALTER COLUMN attribute DROP NOT NULL;
    """),
    # The relay (DESIGN.md, "Relay and amplification"): the Oblivious HTTP keys every node shares (a
    # one-byte key id, reused once its private half is gone), and per (schema, version, window) the
    # reports that came through relays and directly, the smallest crowd of a relay batch, and the
    # central epsilon the refresh computed for a crowd at a delta. The reports stored before came
    # directly: counted from those retained (the rollup over them too).
    ("m007_relay", f"""
        CREATE TABLE ohttp_keys (key_id integer PRIMARY KEY CHECK (key_id BETWEEN 0 AND 255),
            public_key bytea NOT NULL, private_key bytea, created bigint NOT NULL, retired bigint);
        CREATE TABLE crowds ({_KEY}, relayed bigint NOT NULL, direct bigint NOT NULL, crowd bigint,
            epsilon_crowd bigint, epsilon_delta double precision, epsilon_shuffled double precision,
            PRIMARY KEY (schema, version, "window"));
        INSERT INTO crowds (schema, version, "window", relayed, direct) SELECT schema, version, "window", 0, count(*)
            FROM reports GROUP BY schema, version, "window";
        INSERT INTO crowds (schema, version, "window", relayed, direct) SELECT schema, version, '{ROLLUP}', 0, count(*)
            FROM reports GROUP BY schema, version;
    """),
    # Each report's values in a numeric form (.wire), packed by the next migration.
    ("m008_wire", "ALTER TABLE reports ADD COLUMN wire bytea NOT NULL DEFAULT ''::bytea"),
    ("m009_wire_of_every_attribute", _pack_stored_reports),
)
