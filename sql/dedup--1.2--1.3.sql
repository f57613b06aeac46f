/* sql/dedup--1.2--1.3.sql: from dedup 1.2 to 1.3 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dedup UPDATE TO '1.3'" to load this file. \quit

/*
 * The same rules as the earlier scripts: everything schema-qualified, every
 * literal in a function body or view cast to its schema-qualified type, no
 * OR REPLACE but for the extension's own functions, no IF NOT EXISTS.
 */
