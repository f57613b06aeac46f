/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  dedup_claim(): record, in the caller's transaction, that a consumer has
 *	  processed a message.
 *
 * A claim is what INSERT ... ON CONFLICT DO NOTHING into processed_messages
 * does, done directly on the table found by OID (relations.c), so that no
 * name is resolved while claiming: the executor's speculative insertion,
 * step by step (see the comment at the top of execIndexing.c).  A claim
 * therefore has exactly that statement's guarantees under every isolation
 * level: a concurrent claimer of the same key waits for the first one and
 * sees its outcome; REPEATABLE READ and SERIALIZABLE transactions get a
 * serialization failure rather than a wrong answer; savepoints and
 * rollbacks undo a claim like any other row.  What the statement would add
 * around it (triggers, rules, permission checks on the table) does not
 * apply: the table is the extension's own, and EXECUTE on dedup_claim is
 * the privilege that matters, refined per consumer by dedup_consumer_roles.
 *
 * This file owns argument checking, the per-consumer claimant check and the
 * claim itself, which reports its outcome to the counters (stats.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"

#include "dedup.h"

PG_FUNCTION_INFO_V1(dedup_claim);
PG_FUNCTION_INFO_V1(dedup_consumer_roles_changed);

/*
 * Raise the error a caller must see, rather than a NULL or a silently
 * truncated key, when argument argno (called argname) is unusable.
 *
 * The length is read from the varlena header, so an oversized value is
 * rejected without being detoasted and before any index is touched.
 */
static void
claim_check_argument(FunctionCallInfo fcinfo, int argno, const char *argname,
					 Size max_bytes)
{
	Size		len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" of dedup_claim must not be null",
						argname),
				 errdetail("A claim is either recorded or a duplicate; a null key can be neither.")));

	len = toast_raw_datum_size(PG_GETARG_DATUM(argno)) - VARHDRSZ;
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" of dedup_claim must not be empty",
						argname)));
	if (len > max_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("argument \"%s\" of dedup_claim is too long", argname),
				 errdetail("It is %zu bytes; at most %zu bytes are accepted.",
						   len, max_bytes),
				 errhint("Claim a digest of long keys, for example encode(sha256(convert_to(key, 'UTF8')), 'hex').")));
}

/*
 * Did this backend wait for a lock since get_timeout_start_time() returned
 * mark?  Every lock wait re-arms the deadlock timeout (ProcSleep), so a new
 * start time means it did: for a claim, nearly always for an in-flight claim
 * of the same key.
 */
static inline bool
claim_waited(TimestampTz mark)
{
	return get_timeout_start_time(DEADLOCK_TIMEOUT) != mark;
}

/*
 * Whether dedup_consumer_roles (OID claimant_map_relid) has any row, as this
 * backend last saw it.  The table's statement trigger
 * (dedup_consumer_roles_changed) invalidates its relcache entry at every
 * change, which every backend processes at its next transaction start and
 * which resets this: claims in a database that maps no consumer pay one
 * test for the check, and a change applies to transactions that start after
 * it commits.
 */
typedef enum ClaimantMapState
{
	CLAIMANT_MAP_UNKNOWN,
	CLAIMANT_MAP_EMPTY,
	CLAIMANT_MAP_IN_USE
} ClaimantMapState;

static ClaimantMapState claimant_map = CLAIMANT_MAP_UNKNOWN;
static Oid	claimant_map_relid = InvalidOid;
static bool claimant_callback_registered = false;

static void
claimant_map_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == claimant_map_relid)
		claimant_map = CLAIMANT_MAP_UNKNOWN;
}

static void
claimant_map_load(Relation roles)
{
	TableScanDesc scan = table_beginscan(roles, GetActiveSnapshot(), 0, NULL);
	TupleTableSlot *slot = table_slot_create(roles, NULL);

	if (!claimant_callback_registered)
	{
		CacheRegisterRelcacheCallback(claimant_map_invalidate, (Datum) 0);
		claimant_callback_registered = true;
	}
	claimant_map_relid = RelationGetRelid(roles);
	claimant_map = table_scan_getnextslot(scan, ForwardScanDirection, slot) ?
		CLAIMANT_MAP_IN_USE : CLAIMANT_MAP_EMPTY;
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
}

/*
 * May the current user claim for consumer?  When dedup_consumer_roles maps
 * the consumer to roles, only members of one of them may (superusers are
 * members of every role); an unmapped consumer is open to every holder of
 * EXECUTE on dedup_claim unless dedup.require_consumer_roles is on.
 */
static void
claim_check_claimant(text *consumer)
{
	const DedupRelations *rels;
	Relation	roles;
	Relation	index;
	IndexScanDesc scan;
	ScanKeyData key;
	TupleTableSlot *slot;
	bool		mapped = false;
	bool		allowed = false;
	Oid			user = GetUserId();

	if (!dedup_require_consumer_roles && claimant_map == CLAIMANT_MAP_EMPTY)
		return;
	roles = dedup_table_open(DEDUP_CONSUMER_ROLES, AccessShareLock, false, &rels);
	if (roles == NULL)
		return;					/* version 1.0 of the SQL objects */
	if (claimant_map == CLAIMANT_MAP_UNKNOWN)
		claimant_map_load(roles);
	if (!dedup_require_consumer_roles && claimant_map == CLAIMANT_MAP_EMPTY)
	{
		table_close(roles, AccessShareLock);
		return;
	}

	index = index_open(rels->consumer_roles_key, AccessShareLock);
	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, TEXTOID,
						   index->rd_indcollation[0], F_TEXTEQ,
						   PointerGetDatum(consumer));
	slot = table_slot_create(roles, NULL);
	scan = dedup_index_beginscan(roles, index, GetActiveSnapshot(), 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (!allowed && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		claimant = slot_getattr(slot, 2, &isnull);

		mapped = true;
		allowed = !isnull && has_privs_of_role(user, DatumGetObjectId(claimant));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(roles, AccessShareLock);

	if (allowed || (!mapped && (!dedup_require_consumer_roles || superuser())))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("role \"%s\" may not claim messages for consumer \"%s\"",
					GetUserNameFromId(user, false), text_to_cstring(consumer)),
			 mapped ?
			 errdetail("The consumer is mapped to other roles in dedup_consumer_roles.") :
			 errdetail("dedup.require_consumer_roles is on and the consumer has no row in dedup_consumer_roles."),
			 errhint("A superuser can map the consumer to a role with dedup_allow_claimant().")));
}

/*
 * dedup_consumer_roles_changed(): statement trigger of dedup_consumer_roles.
 * Invalidating the table's relcache entry tells every backend, at commit,
 * to look at the table again before its next claim.
 */
Datum
dedup_consumer_roles_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "dedup_consumer_roles_changed must be called as a trigger");
	CacheInvalidateRelcache(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}

/*
 * With REPEATABLE READ or SERIALIZABLE, a conflicting row that this
 * transaction's snapshot cannot see was committed after the snapshot was
 * taken: answering "duplicate" would act on data the transaction must not
 * see, so raise a serialization failure, as ON CONFLICT DO NOTHING does
 * (nodeModifyTable.c, ExecCheckTIDVisible).  A row this transaction
 * inserted itself is a duplicate however the snapshot sees it.
 */
static void
claim_check_conflict_visible(Relation rel, ItemPointer tid,
							 TupleTableSlot *slot, Snapshot snapshot)
{
	bool		isnull;

	if (!IsolationUsesXactSnapshot())
		return;
	if (!table_tuple_fetch_row_version(rel, tid, SnapshotAny, slot))
		elog(ERROR, "failed to fetch conflicting claim");
	if (!table_tuple_satisfies_snapshot(rel, slot, snapshot) &&
		!TransactionIdIsCurrentTransactionId(
			DatumGetTransactionId(slot_getsysattr(slot,
												  MinTransactionIdAttributeNumber,
												  &isnull))))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to concurrent update")));
	ExecClearTuple(slot);
}

/*
 * Insert (consumer, message_id, now()) into processed_messages unless the
 * key is there already, and say whether it was inserted: the speculative
 * insertion protocol of ExecInsert for ON CONFLICT DO NOTHING with every
 * unique index as arbiter.
 *
 * First look for a conflicting row (waiting for an in-progress inserter of
 * the same key to finish).  If there is none, insert the heap tuple
 * speculatively, under a speculative insertion lock, and then its index
 * entries; if a concurrent claim of the same key got into the unique index
 * first, the tuple is killed ("super-deleted") and the whole thing starts
 * again, now finding the other claim as a conflict.
 */
static bool
claim_insert(Relation rel, Datum consumer, Datum message_id)
{
	EState	   *estate = CreateExecutorState();
	MemoryContext oldcontext = MemoryContextSwitchTo(estate->es_query_cxt);
	ResultRelInfo *result_rel = makeNode(ResultRelInfo);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	TupleTableSlot *conflict_slot = table_slot_create(rel, NULL);
	bool		claimed = false;

	InitResultRelInfo(result_rel, rel, 1, NULL, 0);
	ExecOpenIndices(result_rel, true);
	estate->es_snapshot = GetActiveSnapshot();

	ExecClearTuple(slot);
	slot->tts_values[0] = consumer;
	slot->tts_values[1] = message_id;
	slot->tts_values[2] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	memset(slot->tts_isnull, 0, 3 * sizeof(bool));
	ExecStoreVirtualTuple(slot);

	for (;;)
	{
		ItemPointerData conflict_tid;
		TransactionId xid;
		uint32		token;
		bool		spec_conflict = false;
		List	   *recheck;

		CHECK_FOR_INTERRUPTS();
		if (!ExecCheckIndexConstraints(result_rel, slot, estate, &conflict_tid,
#if PG_VERSION_NUM >= 180000
									   NULL,
#endif
									   NIL))
		{
			claim_check_conflict_visible(rel, &conflict_tid, conflict_slot,
										 estate->es_snapshot);
			break;
		}

		/* only a claim that writes needs a transaction ID and a command ID */
		xid = GetCurrentTransactionId();
		estate->es_output_cid = GetCurrentCommandId(true);
		token = SpeculativeInsertionLockAcquire(xid);
		table_tuple_insert_speculative(rel, slot, estate->es_output_cid, 0,
									   NULL, token);
		recheck = ExecInsertIndexTuples(result_rel, slot, estate, false, true,
										&spec_conflict, NIL
#if PG_VERSION_NUM >= 160000
										,false	/* not only summarizing indexes */
#endif
			);
		table_tuple_complete_speculative(rel, slot, token, !spec_conflict);
		SpeculativeInsertionLockRelease(xid);
		list_free(recheck);
		if (!spec_conflict)
		{
			claimed = true;
			break;
		}
	}

	ExecDropSingleTupleTableSlot(conflict_slot);
	ExecDropSingleTupleTableSlot(slot);
	ExecCloseIndices(result_rel);
	MemoryContextSwitchTo(oldcontext);
	FreeExecutorState(estate);
	return claimed;
}

/*
 * dedup_claim(consumer text, message_id text) RETURNS boolean
 *
 * True when this transaction has just recorded the claim: do the work, in the
 * same transaction.  False when a committed claim for the same consumer and
 * message id exists, or this transaction made it already: skip the work.
 */
Datum
dedup_claim(PG_FUNCTION_ARGS)
{
	MemoryContext caller_context = CurrentMemoryContext;
	text	   *consumer;
	text	   *message_id;
	const DedupRelations *rels;
	Relation	rel;
	bool		claimed = false;
	TimestampTz lock_wait_mark;

	claim_check_argument(fcinfo, 0, "consumer", DEDUP_MAX_CONSUMER_BYTES);
	claim_check_argument(fcinfo, 1, "message_id", DEDUP_MAX_MESSAGE_ID_BYTES);
	PreventCommandDuringRecovery("dedup_claim()");
	PreventCommandIfReadOnly("dedup_claim()");
	consumer = PG_GETARG_TEXT_PP(0);
	message_id = PG_GETARG_TEXT_PP(1);

	claim_check_claimant(consumer);

	lock_wait_mark = get_timeout_start_time(DEADLOCK_TIMEOUT);
	PG_TRY();
	{
		rel = dedup_table_open(DEDUP_MESSAGES, RowExclusiveLock, false, &rels);
		claimed = claim_insert(rel, PointerGetDatum(consumer),
							   PointerGetDatum(message_id));
		table_close(rel, NoLock);
	}
	PG_CATCH();
	{
		int			code = geterrcode();

		/* count in the caller's context, not the error context */
		MemoryContextSwitchTo(caller_context);
		if (code == ERRCODE_T_R_SERIALIZATION_FAILURE ||
			code == ERRCODE_T_R_DEADLOCK_DETECTED)
			dedup_stats_count(consumer, DEDUP_SERIALIZATION_FAILURE,
							  claim_waited(lock_wait_mark));
		PG_RE_THROW();
	}
	PG_END_TRY();

	dedup_stats_count(consumer, claimed ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
					  claim_waited(lock_wait_mark));
	PG_RETURN_BOOL(claimed);
}
