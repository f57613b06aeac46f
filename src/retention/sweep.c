/*-------------------------------------------------------------------------
 *
 * sweep.c
 *	  The sweep: the sweep lock, its targets (each consumer with expired
 *	  processed_messages rows, by the retention rule of rule.c), a batch of
 *	  deletes, and dedup_sweep(), which sweeps in its caller's transaction.
 *
 * A consumer's rows are deleted oldest first through the (consumer_name,
 * processed_at) index, by TID, as DELETE deletes them (tid_delete.c), each
 * batch resuming where the previous one stopped, so the cost per deleted
 * row does not grow with the backlog.  Callers own the transactions: the
 * sweeper commits after every batch, dedup_sweep() runs in its caller's
 * transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "audit.h"
#include "compat.h"
#include "retention/retention.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_sweep);

/*
 * The sweep lock's tag: an advisory lock on (database, processed_messages,
 * "dedu", SWEEP_LOCK_TAG).  SQL's advisory lock functions only ever use 1
 * or 2 in the last field, so no session can take it.
 */
#define SWEEP_LOCK_KEY 0x64656475
#define SWEEP_LOCK_TAG 0x6475

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

/* The WARNING that a consumer's claims are kept: its window is invalid. */
void
dedup_warn_invalid_window(const DedupConsumer *consumer)
{
	ereport(WARNING,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("claims of consumer \"%s\" are kept: its retention window %s is invalid",
					text_to_cstring(consumer->name),
					DatumGetCString(DirectFunctionCall1(interval_out,
														IntervalPGetDatum(consumer->window)))),
			 errhint("Set a window of at most 100 years with dedup_set_retention().")));
}

/*
 * The consumers of processed_messages that have expired rows, each with its
 * cutoff, allocated in the caller's memory context: all of them, or only
 * only_consumer.  Consumers with an invalid window are left out, with a
 * WARNING (dedup_warn_invalid_window), or, when invalid is not NULL,
 * appended to *invalid for the caller to say (the sweeper, once).
 */
List *
dedup_sweep_targets(const DedupRelations *rels, const char *only_consumer,
					List **invalid)
{
	List	   *targets = NIL;
	ListCell   *lc;

	foreach(lc, dedup_consumers(rels, only_consumer, false))
	{
		DedupConsumer *consumer = lfirst(lc);
		DedupSweepTarget *target;

		if (!consumer->expires)
		{
			if (consumer->window != NULL && invalid != NULL)
				*invalid = lappend(*invalid, consumer);
			else if (consumer->window != NULL)
				dedup_warn_invalid_window(consumer);
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
 * Delete the expired rows of one consumer, oldest first, at most batch_size
 * of them (0: all), starting where the previous batch for this target
 * stopped, and return how many were deleted.  The caller holds
 * dedup_sweep_lock and a snapshot.
 */
uint64
dedup_sweep_batch(const DedupRelations *rels, DedupSweepTarget *target,
				  int batch_size)
{
	return dedup_tid_delete_range(rels, target->consumer, target->resume,
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
	targets = dedup_sweep_targets(rels, only_consumer, NULL);
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
