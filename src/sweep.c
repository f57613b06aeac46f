/*-------------------------------------------------------------------------
 *
 * sweep.c
 *	  Finding and deleting expired processed_messages rows, and the
 *	  on-demand dedup_sweep() SQL function.
 *
 * The retention rule: a consumer's window is counted back from that
 * consumer's latest claim, not from the wall clock.  A row is expired when
 * it is older than (latest claim of its consumer - window), where the window
 * is the consumer's own (dedup_retention table) or dedup.retention.  A
 * consumer that stops, or a server that is down, for longer than its window
 * therefore keeps the records its redeliveries still need.
 *
 * The statements here are fully schema-qualified, operators included, so
 * nothing is resolved through the search_path of whoever runs them.  Their
 * callers own the transactions: the sweeper commits after every batch,
 * dedup_sweep() runs inside its caller's transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "dedup.h"

PG_FUNCTION_INFO_V1(dedup_sweep);
PG_FUNCTION_INFO_V1(dedup_default_retention);

static char *
qualified_table(Oid schema, const char *table)
{
	return quote_qualified_identifier(get_namespace_name(schema), table);
}

/*
 * dedup.retention as an interval; NULL (*isnull) for -1, forever, as in the
 * dedup_retention table.
 */
static Datum
default_retention(bool *isnull)
{
	Interval   *window;

	*isnull = (dedup_retention < 0);
	if (*isnull)
		return (Datum) 0;
	window = palloc0(sizeof(Interval));
	window->time = (int64) dedup_retention * USECS_PER_SEC;
	return IntervalPGetDatum(window);
}

/*
 * dedup_default_retention() RETURNS interval: dedup.retention, NULL when it
 * keeps claims forever.
 */
Datum
dedup_default_retention(PG_FUNCTION_ARGS)
{
	bool		isnull;
	Datum		window = default_retention(&isnull);

	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(window);
}

/*
 * The consumers of processed_messages that have expired rows, each with its
 * cutoff, allocated in the caller's memory context.  Consumers are listed
 * with a skip scan of the primary key (one index probe per consumer), and
 * each one's latest claim is read from the (consumer_name, processed_at)
 * index, so the cost grows with the number of consumers, not rows.
 */
List *
dedup_sweep_targets(Oid schema, const char *only_consumer)
{
	MemoryContext caller_context = CurrentMemoryContext;
	char	   *messages = qualified_table(schema, "processed_messages");
	char	   *retention = qualified_table(schema, "dedup_retention");
	char	   *query;
	Oid			argtypes[2] = {INTERVALOID, TEXTOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	List	   *targets = NIL;
	bool		isnull;
	int			ret;

	query = psprintf(
					 "WITH RECURSIVE consumers(name) AS ("
					 "    (SELECT m.consumer_name FROM %s m"
					 "      ORDER BY m.consumer_name LIMIT 1)"
					 "  UNION ALL"
					 "    SELECT (SELECT m.consumer_name FROM %s m"
					 "             WHERE m.consumer_name OPERATOR(pg_catalog.>) c.name"
					 "             ORDER BY m.consumer_name LIMIT 1)"
					 "      FROM consumers c WHERE c.name IS NOT NULL"
					 ")"
					 " SELECT c.name,"
					 "        (SELECT pg_catalog.max(m.processed_at) FROM %s m"
					 "          WHERE m.consumer_name OPERATOR(pg_catalog.=) c.name)"
					 "        OPERATOR(pg_catalog.-)"
					 "        CASE WHEN r.consumer_name IS NULL THEN $1 ELSE r.retention END"
					 "   FROM consumers c LEFT JOIN %s r"
					 "        ON r.consumer_name OPERATOR(pg_catalog.=) c.name"
					 "  WHERE c.name IS NOT NULL"
					 "    AND ($2 IS NULL OR c.name OPERATOR(pg_catalog.=) $2)"
					 "    AND CASE WHEN r.consumer_name IS NULL THEN $1 ELSE r.retention END"
					 "        IS NOT NULL",
					 messages, messages, messages, retention);

	values[0] = default_retention(&isnull);
	nulls[0] = isnull ? 'n' : ' ';
	if (only_consumer == NULL)
		nulls[1] = 'n';
	else
		values[1] = CStringGetTextDatum(only_consumer);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute_with_args(query, 2, argtypes, values, nulls, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "listing expired claims failed: %s",
			 SPI_result_code_string(ret));

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		cutoff = SPI_getbinval(tuple, desc, 2, &isnull);
		MemoryContext spi_context;
		DedupSweepTarget *target;

		/* a consumer whose latest claim is NULL cannot exist; be safe */
		if (isnull)
			continue;
		spi_context = MemoryContextSwitchTo(caller_context);
		target = palloc(sizeof(DedupSweepTarget));
		target->consumer = TextDatumGetCString(SPI_getbinval(tuple, desc, 1,
															 &isnull));
		target->cutoff = DatumGetTimestampTz(cutoff);
		targets = lappend(targets, target);
		MemoryContextSwitchTo(spi_context);
	}
	SPI_finish();
	return targets;
}

/*
 * Take the lock that keeps two sweeps of this database apart, for the rest
 * of the transaction: an advisory lock keyed on processed_messages (OID
 * messages).  With
 * !wait, return false at once if another sweep holds it.
 *
 * Sweeps need not lock the rows they delete (which would take UPDATE
 * privilege): no other sweep deletes at the same time, and claims never
 * lock existing rows.
 */
bool
dedup_sweep_lock(Oid messages, bool wait)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, messages, DEDUP_SWEEP_LOCK_KEY, 2);
	return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * Delete at most batch_size expired rows of one consumer, oldest first, and
 * return how many were deleted.  The rows are found through the
 * (consumer_name, processed_at) index.  The caller holds dedup_sweep_lock.
 */
uint64
dedup_sweep_batch(Oid schema, DedupSweepTarget *target, int batch_size)
{
	char	   *messages = qualified_table(schema, "processed_messages");
	char	   *query;
	Oid			argtypes[3] = {TEXTOID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3];
	uint64		deleted;
	int			ret;

	query = psprintf(
					 "DELETE FROM %s"
					 " WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
					 "   SELECT m.ctid FROM %s m"
					 "    WHERE m.consumer_name OPERATOR(pg_catalog.=) $1"
					 "      AND m.processed_at OPERATOR(pg_catalog.<) $2"
					 "    ORDER BY m.processed_at"
					 "    LIMIT $3))",
					 messages, messages);
	values[0] = CStringGetTextDatum(target->consumer);
	values[1] = TimestampTzGetDatum(target->cutoff);
	values[2] = Int32GetDatum(batch_size);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ret = SPI_execute_with_args(query, 3, argtypes, values, NULL, false, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "deleting expired claims failed: %s",
			 SPI_result_code_string(ret));
	deleted = SPI_processed;
	SPI_finish();
	return deleted;
}

/*
 * dedup_sweep(consumer text DEFAULT NULL) RETURNS bigint
 *
 * Delete every expired row now (of one consumer, if given) and return how
 * many were deleted.  Runs in the caller's transaction, batch by batch.
 */
Datum
dedup_sweep(PG_FUNCTION_ARGS)
{
	char	   *only_consumer = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	Oid			schema;
	List	   *targets;
	ListCell   *lc;
	int64		total = 0;

	PreventCommandDuringRecovery("dedup_sweep()");
	PreventCommandIfReadOnly("dedup_sweep()");

	schema = dedup_extension_schema(false);
	(void) dedup_sweep_lock(get_relname_relid("processed_messages", schema),
							true);
	targets = dedup_sweep_targets(schema, only_consumer);
	foreach(lc, targets)
	{
		DedupSweepTarget *target = lfirst(lc);
		uint64		deleted;

		do
		{
			CHECK_FOR_INTERRUPTS();
			deleted = dedup_sweep_batch(schema, target, dedup_sweep_batch_size);
			total += deleted;
		} while (deleted == (uint64) dedup_sweep_batch_size);
	}
	PG_RETURN_INT64(total);
}
