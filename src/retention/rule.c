/*-------------------------------------------------------------------------
 *
 * rule.c
 *	  The retention rule and the consumer walk: each consumer of
 *	  processed_messages with its window and cutoff (what the sweep deletes,
 *	  sweep.c; what the storage views count as expired, storage.c; the
 *	  cutoffs of the colocated sweep, colocated_sweep.c), and the SQL
 *	  functions built on the rule: dedup_retention_cutoff() and the window
 *	  checks.
 *
 * The retention rule: a consumer's window is counted back from that
 * consumer's latest claim, or from now if that claim is dated in the future
 * (a clock that was ahead, a restore from a skewed host), never from a later
 * time.  A row is expired when it is older than that point minus the window,
 * where the window is the consumer's own (dedup_retention table) or
 * dedup.retention.  A consumer that stops, or a server that is down, for
 * longer than its window therefore keeps the records its redeliveries still
 * need, and one future-dated row never expires the rest.
 *
 * A valid window moves every component back (no negative months, days or
 * time, at least one of them positive) and is at most 100 years, so the
 * cutoff is always before the latest claim and never overflows.  A consumer
 * whose window is invalid anyway (a row written before 1.1 checked it) is
 * kept, not swept, and does not stop anyone else's sweep or the views.
 *
 * The walk works on the tables by OID (relations.c) through their indexes:
 * consumers are listed with a skip scan of the (consumer_name,
 * processed_at) index, so its cost does not grow with the rows each holds.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "guc.h"
#include "retention/retention.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_default_retention);
PG_FUNCTION_INFO_V1(dedup_retention_cutoff);
PG_FUNCTION_INFO_V1(dedup_retention_is_valid);
PG_FUNCTION_INFO_V1(dedup_valid_retention);
PG_FUNCTION_INFO_V1(dedup_valid_consumer);

/* the longest window: '100 years', as interval comparison counts it */
#define MAX_WINDOW_DAYS		(100 * 12 * 30)

/* the earliest latest claim a window can be subtracted from safely */
#define EARLIEST_LATEST_CLAIM \
	(MIN_TIMESTAMP + (int64) (101 * DAYS_PER_YEAR) * USECS_PER_DAY)

/*
 * dedup.retention as an interval; NULL (*isnull) for -1, forever, as in the
 * dedup_retention table.
 */
static Interval *
default_retention(void)
{
	Interval   *window;

	if (dedup_retention < 0)
		return NULL;
	window = palloc0(sizeof(Interval));
	window->time = (int64) dedup_retention * USECS_PER_SEC;
	return window;
}

/* Does the window move every component back, by at most 100 years? */
static bool
window_is_valid(const Interval *window)
{
	if (window->month < 0 || window->day < 0 || window->time < 0 ||
		(window->month == 0 && window->day == 0 && window->time == 0))
		return false;
	if (window->month > MAX_WINDOW_DAYS / 30 || window->day > MAX_WINDOW_DAYS ||
		window->time > (int64) MAX_WINDOW_DAYS * USECS_PER_DAY)
		return false;
	return window->time / USECS_PER_DAY + window->day +
		(int64) window->month * 30 <= MAX_WINDOW_DAYS;
}

/*
 * The retention rule: set *cutoff to the time before which a consumer whose
 * latest claim is latest has expired rows, and return true; return false
 * when nothing of it expires: its window is NULL (forever) or invalid, or
 * its latest claim too early to count a window back from.
 */
static bool
retention_cutoff(TimestampTz latest, const Interval *window,
				 TimestampTz *cutoff)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	if (window == NULL || !window_is_valid(window) ||
		latest < EARLIEST_LATEST_CLAIM)
		return false;
	latest = Min(latest, now);
	*cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
													  TimestampTzGetDatum(latest),
													  IntervalPGetDatum(window)));
	return true;
}

/*
 * dedup_default_retention() RETURNS interval: dedup.retention, NULL when it
 * keeps claims forever.
 */
Datum
dedup_default_retention(PG_FUNCTION_ARGS)
{
	Interval   *window = default_retention();

	if (window == NULL)
		PG_RETURN_NULL();
	PG_RETURN_INTERVAL_P(window);
}

/*
 * dedup_retention_cutoff(latest timestamptz, retention interval)
 * RETURNS timestamptz
 *
 * The retention rule in SQL (the storage views' 1.1 definition uses it):
 * rows older than the result are expired.  NULL when nothing expires: no
 * claim, a window of NULL (forever), or an invalid window.
 */
Datum
dedup_retention_cutoff(PG_FUNCTION_ARGS)
{
	TimestampTz cutoff;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) ||
		!retention_cutoff(PG_GETARG_TIMESTAMPTZ(0), PG_GETARG_INTERVAL_P(1),
						  &cutoff))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(cutoff);
}

/*
 * dedup_retention_is_valid(retention interval) RETURNS boolean, STRICT:
 * the check constraint of dedup_retention.retention.
 */
Datum
dedup_retention_is_valid(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(window_is_valid(PG_GETARG_INTERVAL_P(0)));
}

/*
 * dedup_valid_retention(retention interval) RETURNS interval
 *
 * The window, or the error a caller of dedup_set_retention must see.
 */
Datum
dedup_valid_retention(PG_FUNCTION_ARGS)
{
	Interval   *window;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"retention\" of dedup_set_retention must not be null"),
				 errhint("Use dedup_keep_forever(consumer) to keep a consumer's claims forever.")));
	window = PG_GETARG_INTERVAL_P(0);
	if (!window_is_valid(window))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid retention window: %s",
						DatumGetCString(DirectFunctionCall1(interval_out,
															IntervalPGetDatum(window)))),
				 errdetail("A window must be positive in every part (no negative months, days or time) and at most 100 years."),
				 errhint("Use dedup_keep_forever(consumer) to keep a consumer's claims forever.")));
	PG_RETURN_INTERVAL_P(window);
}

/*
 * dedup_valid_consumer(consumer text, function_name text) RETURNS text
 *
 * The consumer name, or the error a caller of the maintenance function
 * function_name must see.
 */
Datum
dedup_valid_consumer(PG_FUNCTION_ARGS)
{
	const char *function_name = PG_ARGISNULL(1) ? "dedup" :
	text_to_cstring(PG_GETARG_TEXT_PP(1));

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"consumer\" of %s must not be null",
						function_name)));
	PG_RETURN_DATUM(PG_GETARG_DATUM(0));
}

/*
 * The first row of the (consumer_name, processed_at) index in direction dir
 * that matches keys and is visible: its consumer (copied) and time.
 */
static bool
first_row(Relation rel, Relation index, ScanKey keys, int nkeys,
		  ScanDirection dir, TupleTableSlot *slot, text **consumer,
		  TimestampTz *processed_at)
{
	IndexScanDesc scan = dedup_index_beginscan(rel, index, GetActiveSnapshot(),
											   nkeys);
	bool		found;

	index_rescan(scan, keys, nkeys, NULL, 0);
	found = index_getnext_slot(scan, dir, slot);
	if (found)
	{
		bool		isnull;

		if (consumer != NULL)
			*consumer = DatumGetTextPCopy(slot_getattr(slot, 1, &isnull));
		*processed_at = DatumGetTimestampTz(slot_getattr(slot, 3, &isnull));
		ExecClearTuple(slot);
	}
	index_endscan(scan);
	return found;
}

/*
 * The window in the dedup_retention row in slot, copied into the caller's
 * memory context; NULL for forever.
 */
static Interval *
row_window(TupleTableSlot *slot)
{
	bool		isnull;
	Datum		value = slot_getattr(slot, 2, &isnull);

	if (isnull)
		return NULL;
	return DatumGetIntervalP(datumCopy(value, false, sizeof(Interval)));
}

/*
 * The consumer's window: its dedup_retention row (NULL: forever), else
 * dedup.retention.
 */
static Interval *
consumer_window(const DedupRelations *rels, text *consumer)
{
	Relation	rel = table_open(rels->retention, AccessShareLock);
	Relation	index = index_open(rels->retention_key, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	IndexScanDesc scan;
	ScanKeyData key;
	Interval   *window;

	dedup_scan_key(&key, index, 1, BTEqualStrategyNumber,
				   PointerGetDatum(consumer));
	scan = dedup_index_beginscan(rel, index, GetActiveSnapshot(), 1);
	index_rescan(scan, &key, 1, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
		window = row_window(slot);
	else
		window = default_retention();
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(rel, AccessShareLock);
	return window;
}

/*
 * The retention rule for a consumer whose latest claim, found elsewhere (a
 * colocated records table, colocated.c), is latest: its window (its own or
 * dedup.retention) applied as for processed_messages.  True, with
 * *cutoff, when its rows older than *cutoff are expired.
 */
bool
dedup_consumer_cutoff(const DedupRelations *rels, text *consumer,
					  TimestampTz latest, TimestampTz *cutoff)
{
	return retention_cutoff(latest, consumer_window(rels, consumer), cutoff);
}

/* A consumer, and what the retention rule makes of its window. */
static DedupConsumer *
consumer_make(text *name, Interval *window, bool has_rows,
			  TimestampTz oldest, TimestampTz latest)
{
	DedupConsumer *consumer = palloc0(sizeof(DedupConsumer));

	consumer->name = name;
	consumer->has_rows = has_rows;
	consumer->oldest = oldest;
	consumer->latest = latest;
	consumer->window = window;
	consumer->window_valid = (window == NULL || window_is_valid(window));
	consumer->expires = has_rows &&
		retention_cutoff(latest, window, &consumer->cutoff);
	return consumer;
}

/*
 * Append to consumers those that have a window of their own but no rows
 * (rel, index and slot: processed_messages, its (consumer_name,
 * processed_at) index and a slot of it): all of them, in the order of
 * dedup_retention's key, or only only_consumer.  One index probe each.
 */
static List *
append_windows_only(const DedupRelations *rels, Relation rel, Relation index,
					TupleTableSlot *slot, const char *only_consumer,
					List *consumers)
{
	Relation	windows = table_open(rels->retention, AccessShareLock);
	Relation	windows_key = index_open(rels->retention_key, AccessShareLock);
	TupleTableSlot *window_slot = table_slot_create(windows, NULL);
	IndexScanDesc scan;
	ScanKeyData key;
	int			nkeys = 0;

	if (only_consumer != NULL)
	{
		dedup_scan_key(&key, windows_key, 1, BTEqualStrategyNumber,
					   PointerGetDatum(cstring_to_text(only_consumer)));
		nkeys = 1;
	}
	scan = dedup_index_beginscan(windows, windows_key, GetActiveSnapshot(),
								 nkeys);
	index_rescan(scan, &key, nkeys, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, window_slot))
	{
		bool		isnull;
		text	   *name = DatumGetTextPCopy(slot_getattr(window_slot, 1,
														  &isnull));
		ScanKeyData rows_key;
		TimestampTz oldest;

		CHECK_FOR_INTERRUPTS();
		dedup_scan_key(&rows_key, index, 1, BTEqualStrategyNumber,
					   PointerGetDatum(name));
		if (!first_row(rel, index, &rows_key, 1, ForwardScanDirection, slot,
					   NULL, &oldest))
			consumers = lappend(consumers,
								consumer_make(name, row_window(window_slot),
											  false, 0, 0));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(window_slot);
	index_close(windows_key, AccessShareLock);
	table_close(windows, AccessShareLock);
	return consumers;
}

/*
 * The consumer walk: the consumers of processed_messages in index order,
 * each with its oldest and latest claims, its window and its cutoff; with
 * with_windows, then those that have a window of their own but no rows.
 * All of them, or only only_consumer.  Allocated in the caller's memory
 * context.  Index probes only: one per consumer to find it (with its oldest
 * claim), one for its latest claim, one for its window.
 */
List *
dedup_consumers(const DedupRelations *rels, const char *only_consumer,
				bool with_windows)
{
	Relation	rel = table_open(rels->messages, AccessShareLock);
	Relation	index = index_open(rels->messages_time, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	List	   *consumers = NIL;
	text	   *name = NULL;
	ScanKeyData key;

	for (;;)
	{
		TimestampTz oldest;
		TimestampTz latest;
		bool		found;

		CHECK_FOR_INTERRUPTS();
		if (only_consumer != NULL)
		{
			if (name != NULL)
				break;
			name = cstring_to_text(only_consumer);
			dedup_scan_key(&key, index, 1, BTEqualStrategyNumber,
						   PointerGetDatum(name));
			found = first_row(rel, index, &key, 1, ForwardScanDirection,
							  slot, NULL, &oldest);
		}
		else
		{
			/* the next consumer: the first index entry past the last one */
			dedup_scan_key(&key, index, 1, BTGreaterStrategyNumber,
						   PointerGetDatum(name));
			found = first_row(rel, index, &key, name ? 1 : 0,
							  ForwardScanDirection, slot, &name, &oldest);
		}
		if (!found)
			break;

		/* its latest claim: its last index entry (or the one just found) */
		latest = oldest;
		dedup_scan_key(&key, index, 1, BTEqualStrategyNumber,
					   PointerGetDatum(name));
		(void) first_row(rel, index, &key, 1, BackwardScanDirection, slot,
						 NULL, &latest);

		consumers = lappend(consumers,
							consumer_make(name, consumer_window(rels, name),
										  true, oldest, latest));
	}

	if (with_windows)
		consumers = append_windows_only(rels, rel, index, slot, only_consumer,
										consumers);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(rel, AccessShareLock);
	return consumers;
}
