/* sql/dedup--1.2--1.3.sql: from dedup 1.2 to 1.3 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dedup UPDATE TO '1.3'" to load this file. \quit

/*
 * The same rules as the earlier scripts: everything schema-qualified, every
 * literal in a function body or view cast to its schema-qualified type, no
 * OR REPLACE but for the extension's own functions, no IF NOT EXISTS.
 */

/* --- the arbiters of the writes into the extension's tables (issue 29, item 2) --- */

/*
 * dedup_allow_claimant: 1.1 and 1.2 wrote ON CONFLICT DO NOTHING without a
 * target, which makes every unique index and exclusion constraint of
 * dedup_consumer_roles an arbiter: with a unique index a DBA added on
 * claimant, allowing a role for a second consumer silently did nothing.
 * Only the key is the arbiter now, as for the retention windows and the
 * stream positions: any other unique index or exclusion constraint raises
 * its own error.
 */
CREATE OR REPLACE FUNCTION @extschema@.dedup_allow_claimant(consumer text, claimant regrole)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	INSERT INTO @extschema@.dedup_consumer_roles (consumer_name, claimant)
		 VALUES (@extschema@.dedup_valid_consumer(consumer, 'dedup_allow_claimant'::pg_catalog.text),
				 claimant)
	ON CONFLICT (consumer_name, claimant) DO NOTHING;
END;
