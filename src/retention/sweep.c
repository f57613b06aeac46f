/*-------------------------------------------------------------------------
 *
 * sweep.c
 *	  The retention rule, the consumer walk (each consumer with its window
 *	  and cutoff: the sweep's targets, and the storage views' consumers in
 *	  storage.c), deleting expired processed_messages rows, and the SQL
 *	  functions built on them: dedup_sweep(), dedup_retention_cutoff() and
 *	  the window checks.
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
 * Everything here works on the tables by OID (relations.c) through their
 * indexes: consumers are listed with a skip scan of the (consumer_name,
 * processed_at) index, and a consumer's rows are deleted oldest first from
 * that index, each batch resuming where the previous one stopped, so the
 * cost per deleted row does not grow with the backlog.  Callers own the
 * transactions: the sweeper commits after every batch, dedup_sweep() runs in
 * its caller's transaction.
 *
 * Every row that dedup deletes -- swept, or forgotten (records.c,
 * stream_positions.c) -- is deleted as DELETE deletes it (dedup_delete_row):
 * a row that another transaction is changing is waited for; in READ
 * COMMITTED, a row it updated is deleted in its latest version if that
 * still matches, and one it deleted is skipped; with REPEATABLE READ or
 * SERIALIZABLE, either is a serialization failure.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "audit.h"
#include "compat.h"
#include "guc.h"
#include "retention/sweep.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_sweep);
PG_FUNCTION_INFO_V1(dedup_default_retention);
PG_FUNCTION_INFO_V1(dedup_retention_cutoff);
PG_FUNCTION_INFO_V1(dedup_retention_is_valid);
PG_FUNCTION_INFO_V1(dedup_valid_retention);
PG_FUNCTION_INFO_V1(dedup_valid_consumer);

/*
 * The sweep lock's tag: an advisory lock on (database, processed_messages,
 * "dedu", SWEEP_LOCK_TAG).  SQL's advisory lock functions only ever use 1
 * or 2 in the last field, so no session can take it.
 */
#define SWEEP_LOCK_KEY 0x64656475
#define SWEEP_LOCK_TAG 0x6475

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
 * Take the lock that keeps two sweeps of this database apart, for the rest
 * of the transaction, on processed_messages (OID messages).  With !wait,
 * return false at once if another sweep holds it.
 *
 * It is a lock of the advisory lock method on a tag that no SQL function
 * can build (pg_advisory_lock() and friends use 1 and 2 in the last field),
 * so no role, however it connects, can take it and stop retention; it
 * shows up in pg_locks as an advisory lock with objsubid SWEEP_LOCK_TAG.
 *
 * Sweeps need not lock the rows they delete: no other sweep deletes at the
 * same time, and claims never lock existing rows.
 */
bool
dedup_sweep_lock(Oid messages, bool wait)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, messages, SWEEP_LOCK_KEY,
						 SWEEP_LOCK_TAG);
	return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * Raise the error a sweep by role must end with if role may not do what a
 * DELETE of expired rows would need: USAGE on the schema, SELECT and DELETE
 * on processed_messages, SELECT on dedup_retention.  The sweep itself runs
 * no SQL, but dedup.sweep_role still says who may sweep.
 */
void
dedup_sweep_check_role(const DedupRelations *rels, Oid role)
{
	AclResult	result;

	result = dedup_namespace_aclcheck(rels->schema, role, ACL_USAGE);
	if (result != ACLCHECK_OK)
		aclcheck_error(result, OBJECT_SCHEMA, get_namespace_name(rels->schema));
	/* one privilege at a time: a check of several passes if any is held */
	result = pg_class_aclcheck(rels->messages, role, ACL_SELECT);
	if (result == ACLCHECK_OK)
		result = pg_class_aclcheck(rels->messages, role, ACL_DELETE);
	if (result != ACLCHECK_OK)
		aclcheck_error(result, OBJECT_TABLE, get_rel_name(rels->messages));
	result = pg_class_aclcheck(rels->retention, role, ACL_SELECT);
	if (result != ACLCHECK_OK)
		aclcheck_error(result, OBJECT_TABLE, get_rel_name(rels->retention));
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

/*
 * The consumers of processed_messages that have expired rows, each with its
 * cutoff, allocated in the caller's memory context: all of them, or only
 * only_consumer.  Consumers with an invalid window are left out, with a
 * WARNING.
 */
List *
dedup_sweep_targets(const DedupRelations *rels, const char *only_consumer)
{
	List	   *targets = NIL;
	ListCell   *lc;

	foreach(lc, dedup_consumers(rels, only_consumer, false))
	{
		DedupConsumer *consumer = lfirst(lc);
		DedupSweepTarget *target;

		if (!consumer->expires)
		{
			if (consumer->window != NULL)
				ereport(WARNING,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("claims of consumer \"%s\" are kept: its retention window %s is invalid",
								text_to_cstring(consumer->name),
								DatumGetCString(DirectFunctionCall1(interval_out,
																	IntervalPGetDatum(consumer->window)))),
						 errhint("Set a window of at most 100 years with dedup_set_retention().")));
			continue;
		}

		target = palloc(sizeof(DedupSweepTarget));
		target->consumer = consumer->name;
		target->cutoff = consumer->cutoff;
		target->resume = DT_NOBEGIN;
		targets = lappend(targets, target);
	}
	return targets;
}

/*
 * Does the row in slot match the scan keys keys[0..nkeys-1] of index, a
 * btree index of its table?  What EvalPlanQual rechecks of a row's latest
 * version: the quals of the scan that found an earlier one.
 */
static bool
row_matches(Relation index, TupleTableSlot *slot, const ScanKeyData *keys,
			int nkeys)
{
	for (int i = 0; i < nkeys; i++)
	{
		const ScanKeyData *key = &keys[i];
		bool		isnull;
		Datum		value = slot_getattr(slot,
										 index->rd_index->indkey.values[key->sk_attno - 1],
										 &isnull);

		if (isnull ||
			!DatumGetBool(FunctionCall2Coll(unconstify(FmgrInfo *, &key->sk_func),
											key->sk_collation, value,
											key->sk_argument)))
			return false;
	}
	return true;
}

/*
 * Delete the row tid of rel, found with the active snapshot through the
 * scan keys keys[0..nkeys-1] of index, as DELETE would (ExecDelete in
 * nodeModifyTable.c), and say whether it was deleted.  A transaction that is
 * changing the row is waited for.  If it deleted the row, the row is gone;
 * if it updated it, READ COMMITTED locks the latest version and deletes it
 * if it still matches the keys, as EvalPlanQual does.  With REPEATABLE READ
 * or SERIALIZABLE, a row that a transaction committed after the snapshot
 * changed is a serialization failure.  A row deleted by this command
 * already is skipped.  slot (of rel) is free for the row's latest version.
 */
bool
dedup_delete_row(Relation rel, Relation index, const ScanKeyData *keys,
				 int nkeys, ItemPointer tid, TupleTableSlot *slot)
{
	CommandId	cid = GetCurrentCommandId(true);
	Snapshot	snapshot = GetActiveSnapshot();
	ItemPointerData target = *tid;

	for (;;)
	{
		TM_FailureData tmfd;
		TM_Result	result;
		bool		matches;

		result = table_tuple_delete(rel, &target, cid, snapshot,
									InvalidSnapshot, true, &tmfd, false);
		if (result == TM_Ok)
			return true;
		if (result == TM_SelfModified)
			return false;
		if (result != TM_Updated && result != TM_Deleted)
			elog(ERROR, "unexpected table_tuple_delete status: %u", result);
		if (IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 result == TM_Updated ?
					 errmsg("could not serialize access due to concurrent update") :
					 errmsg("could not serialize access due to concurrent delete")));
		if (result == TM_Deleted)
			return false;

		/* READ COMMITTED: the latest version, if it still matches */
		result = table_tuple_lock(rel, &target, snapshot, slot, cid,
								  LockTupleExclusive, LockWaitBlock,
								  TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
		if (result == TM_Deleted || result == TM_SelfModified)
			return false;
		if (result != TM_Ok)
			elog(ERROR, "unexpected table_tuple_lock status: %u", result);
		matches = row_matches(index, slot, keys, nkeys);
		target = slot->tts_tid;
		ExecClearTuple(slot);
		if (!matches)
			return false;
	}
}

/*
 * Delete consumer's rows dated from from (inclusive) to before (exclusive;
 * DT_NOEND: no end), oldest first, at most limit of them (0: all), and
 * return how many were deleted; *last (if not NULL) is set to the claim
 * time of the last row looked at.  The caller holds a snapshot.
 *
 * The rows are read from the (consumer_name, processed_at) index and
 * deleted by TID as DELETE would (dedup_delete_row), waiting for a
 * transaction that has locked one (the sweeper bounds that wait with
 * lock_timeout).  Claims never update rows.
 */
uint64
dedup_delete_rows(const DedupRelations *rels, text *consumer,
				  TimestampTz from, TimestampTz before, int limit,
				  TimestampTz *last)
{
	Relation	rel = table_open(rels->messages, RowExclusiveLock);
	Relation	index = index_open(rels->messages_time, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	ScanKeyData keys[3];
	int			nkeys = 2;
	IndexScanDesc scan;
	uint64		deleted = 0;

	/* what a DELETE checks: a publication may need the rows' identity */
	CheckCmdReplicaIdentity(rel, CMD_DELETE);
	dedup_scan_key(&keys[0], index, 1, BTEqualStrategyNumber,
			 PointerGetDatum(consumer));
	dedup_scan_key(&keys[1], index, 2, BTGreaterEqualStrategyNumber,
			 TimestampTzGetDatum(from));
	if (before != DT_NOEND)
		dedup_scan_key(&keys[nkeys++], index, 2, BTLessStrategyNumber,
				 TimestampTzGetDatum(before));
	scan = dedup_index_beginscan(rel, index, GetActiveSnapshot(), nkeys);
	index_rescan(scan, keys, nkeys, NULL, 0);

	while ((limit == 0 || deleted < (uint64) limit) &&
		   index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		ItemPointerData tid = slot->tts_tid;

		CHECK_FOR_INTERRUPTS();
		if (last != NULL)
			*last = DatumGetTimestampTz(slot_getattr(slot, 3, &isnull));
		ExecClearTuple(slot);
		if (dedup_delete_row(rel, index, keys, nkeys, &tid, slot))
			deleted++;
	}

	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(rel, NoLock);
	return deleted;
}

/*
 * Delete the expired rows of one consumer, oldest first, at most batch_size
 * of them (0: all), starting where the previous batch for this target
 * stopped, and return how many were deleted.  The caller holds
 * dedup_sweep_lock and a snapshot.
 */
uint64
dedup_sweep_batch(const DedupRelations *rels, DedupSweepTarget *target,
				  int batch_size)
{
	return dedup_delete_rows(rels, target->consumer, target->resume,
							 target->cutoff, batch_size, &target->resume);
}

/*
 * dedup_sweep(consumer text DEFAULT NULL) RETURNS bigint
 *
 * Delete every expired row now (of one consumer, if given) and return how
 * many were deleted, in the caller's transaction.  Each consumer that lost
 * rows gets an audit line: with a window just made shorter, a manual sweep
 * deletes what the window was meant to keep.
 */
Datum
dedup_sweep(PG_FUNCTION_ARGS)
{
	char	   *only_consumer = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	const DedupRelations *rels;
	List	   *targets;
	ListCell   *lc;
	int64		total = 0;

	PreventCommandDuringRecovery("dedup_sweep()");
	PreventCommandIfReadOnly("dedup_sweep()");

	rels = dedup_relations(false);
	(void) dedup_sweep_lock(rels->messages, true);
	targets = dedup_sweep_targets(rels, only_consumer);
	foreach(lc, targets)
	{
		DedupSweepTarget *target = lfirst(lc);
		uint64		deleted = dedup_sweep_batch(rels, target, 0);

		if (deleted > 0)
			dedup_audit_sweep(target->consumer, target->cutoff, deleted);
		total += deleted;
	}
	PG_RETURN_INT64(total);
}
