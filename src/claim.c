/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  dedup_claim(), dedup_claim_many() and dedup_try_claim(): record, in the
 *	  caller's transaction, that a consumer has processed a message (or a
 *	  batch of them), optionally with a fingerprint of its payload.
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
 * claim itself, which reports its outcome to the counters (claim_stats.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_enum.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"

#include "dedup.h"

PG_FUNCTION_INFO_V1(dedup_claim);
PG_FUNCTION_INFO_V1(dedup_claim_many);
PG_FUNCTION_INFO_V1(dedup_try_claim);
PG_FUNCTION_INFO_V1(dedup_consumer_roles_changed);

/* SQLSTATE UD001: the same message id claimed with a different fingerprint */
#define ERRCODE_DEDUP_MESSAGE_ID_REUSED MAKE_SQLSTATE('U','D','0','0','1')

/* for errors: argument argname, or its element number element (from 1) */
char *
dedup_argument_description(const char *argname, int element)
{
	if (element > 0)
		return psprintf("element %d of argument \"%s\"", element, argname);
	return psprintf("argument \"%s\"", argname);
}

/*
 * Raise the error a caller must see, rather than a NULL, when a key
 * (argument argname of function, or its element number element) is NULL.
 */
void
dedup_check_not_null(const char *function, const char *argname, int element,
					 bool isnull)
{
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s of %s must not be null",
						dedup_argument_description(argname, element), function),
				 errdetail("A claim is either recorded or a duplicate; a null key can be neither.")));
}

/*
 * Raise the error a caller must see, rather than a NULL or a silently
 * truncated key, when a key is unusable: argument argname of function, or
 * its element number element (counted from 1; 0 for a plain argument).
 *
 * The length is read from the varlena header, so an oversized value is
 * rejected without being detoasted and before any index is touched.
 */
void
dedup_check_key(const char *function, const char *argname, int element,
				Datum value, bool isnull, Size max_bytes)
{
	Size		len;

	dedup_check_not_null(function, argname, element, isnull);
	len = toast_raw_datum_size(value) - VARHDRSZ;
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s of %s must not be empty",
						dedup_argument_description(argname, element), function)));
	if (len > max_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s of %s is too long",
						dedup_argument_description(argname, element), function),
				 errdetail("It is %zu bytes; at most %zu bytes are accepted.",
						   len, max_bytes),
				 errhint("Claim a digest of long keys, for example encode(sha256(convert_to(key, 'UTF8')), 'hex').")));
}

/*
 * Whether dedup_consumer_roles (OID claimant_map_relid) has any row, as this
 * backend last saw it.  Every change of the table invalidates its relcache
 * entry (dedup_consumer_roles_changed, a row trigger that fires in every
 * session_replication_role, logical replication's apply included, and a
 * TRUNCATE trigger), which every backend processes at its next transaction
 * start at the latest and which resets this.  The table is read with a
 * snapshot taken after its lock, so after any invalidation that lock
 * acquisition processed: a change that this snapshot cannot see has not
 * sent its invalidation yet, and will reset the answer when it does.  Claims
 * in a database that maps no consumer pay one test for the check, and a
 * change applies to transactions that start after it commits.
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
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = table_beginscan(roles, snapshot, 0, NULL);
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
	UnregisterSnapshot(snapshot);
}

/*
 * May the current user claim for consumer, or look at its records
 * (dedup_seen)?  When dedup_consumer_roles maps the consumer to roles, only
 * members of one of them may (superusers are members of every role); an
 * unmapped consumer is open to every holder of EXECUTE unless
 * dedup.require_consumer_roles is on.  A row whose role has been dropped
 * maps nothing: the role is unmapped with it (pg_dump leaves such rows out,
 * since a bare OID restored elsewhere would name another role).  function
 * names the caller for the error.
 */
void
dedup_check_claimant(text *consumer, const char *function)
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
	dedup_scan_key(&key, index, 1, BTEqualStrategyNumber,
				   PointerGetDatum(consumer));
	slot = table_slot_create(roles, NULL);
	scan = dedup_index_beginscan(roles, index, GetActiveSnapshot(), 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (!allowed && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		claimant = slot_getattr(slot, 2, &isnull);

		if (isnull || !SearchSysCacheExists1(AUTHOID, claimant))
			continue;
		mapped = true;
		allowed = has_privs_of_role(user, DatumGetObjectId(claimant));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(roles, AccessShareLock);

	if (allowed || (!mapped && (!dedup_require_consumer_roles || superuser())))
		return;

	/* the same words whether or not the consumer is mapped: no probing */
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("role \"%s\" may not use %s for consumer \"%s\"",
					GetUserNameFromId(user, false), function,
					text_to_cstring(consumer)),
			 errdetail("Only roles mapped to the consumer in dedup_consumer_roles may; a consumer without a mapping is open to every role while dedup.require_consumer_roles is off."),
			 errhint("A superuser can map the consumer to a role with dedup_allow_claimant().")));
}

/*
 * dedup_consumer_roles_changed(): trigger of dedup_consumer_roles, for each
 * row changed and for TRUNCATE.  Invalidating the table's relcache entry
 * tells every backend, at commit, to look at the table again before its
 * next claim.
 */
Datum
dedup_consumer_roles_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function dedup_consumer_roles_changed() was not called by the trigger manager")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}

static bool
varlenas_equal(Datum a, Datum b)
{
	struct varlena *va = PG_DETOAST_DATUM_PACKED(a);
	struct varlena *vb = PG_DETOAST_DATUM_PACKED(b);

	return VARSIZE_ANY_EXHDR(va) == VARSIZE_ANY_EXHDR(vb) &&
		memcmp(VARDATA_ANY(va), VARDATA_ANY(vb), VARSIZE_ANY_EXHDR(va)) == 0;
}

/* Does the row in slot hold the consumer and message id of the claim? */
static bool
same_key(ClaimWriter *writer, TupleTableSlot *slot)
{
	bool		isnull;

	return varlenas_equal(slot_getattr(slot, 1, &isnull),
						  writer->slot->tts_values[0]) &&
		varlenas_equal(slot_getattr(slot, 2, &isnull),
					   writer->slot->tts_values[1]);
}

/*
 * With REPEATABLE READ or SERIALIZABLE, a row that a claim conflicts with
 * (in slot) and that this transaction's snapshot cannot see was committed
 * after the snapshot was taken: answering from it would act on data the
 * transaction must not see, so raise a serialization failure, as ON
 * CONFLICT does (nodeModifyTable.c, ExecCheckTIDVisible and
 * ExecCheckTupleVisible).  A row this transaction wrote itself is an answer
 * however the snapshot sees it.
 */
void
claim_check_visible(ClaimWriter *writer, TupleTableSlot *slot)
{
	bool		isnull;

	if (IsolationUsesXactSnapshot() &&
		!table_tuple_satisfies_snapshot(writer->rel, slot,
										writer->estate->es_snapshot) &&
		!TransactionIdIsCurrentTransactionId(
			DatumGetTransactionId(slot_getsysattr(slot,
												  MinTransactionIdAttributeNumber,
												  &isnull))))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to concurrent update")));
}

/*
 * A claim found the row conflict_tid with its key: decide that it is a
 * duplicate, or raise the error that it is not: a serialization failure
 * (claim_check_visible), or, with a fingerprint, a row of the same key recorded with a different one
 * means that the producer reused the message id for another message: an
 * error, never a silent "duplicate".  A row recorded without a fingerprint
 * matches any.  A row found through another unique index a DBA added (of
 * another consumer, say) is a duplicate by that index, as for ON CONFLICT,
 * and neither its fingerprint nor its key is ever shown to the caller.
 */
static void
claim_check_conflict(ClaimWriter *writer, ItemPointer conflict_tid,
					 Datum fingerprint, bool has_fingerprint)
{
	TupleTableSlot *slot = writer->conflict_slot;
	bool		isnull;

	if (!IsolationUsesXactSnapshot() && !has_fingerprint)
		return;
	if (!table_tuple_fetch_row_version(writer->rel, conflict_tid, SnapshotAny,
									   slot))
		elog(ERROR, "failed to fetch conflicting claim");
	claim_check_visible(writer, slot);
	if (has_fingerprint && writer->fingerprint_attnum != 0 &&
		same_key(writer, slot))
	{
		Datum		recorded = slot_getattr(slot, writer->fingerprint_attnum,
											&isnull);

		if (!isnull && !varlenas_equal(recorded, fingerprint))
			ereport(ERROR,
					(errcode(ERRCODE_DEDUP_MESSAGE_ID_REUSED),
					 errmsg("message id \"%s\" of consumer \"%s\" was claimed before with a different fingerprint",
							TextDatumGetCString(writer->slot->tts_values[1]),
							TextDatumGetCString(writer->slot->tts_values[0])),
					 errdetail("The producer reused the message id for a different message, or the fingerprint is not computed the same way every time."),
					 errhint("Give each message its own id.")));
	}
	ExecClearTuple(slot);
}

/*
 * Open an index of processed_messages as ExecOpenIndices would: locked,
 * with its IndexInfo, and for a unique index the information speculative
 * insertion needs.
 */
static void
claim_writer_open_index(ClaimWriter *writer, Oid indexoid)
{
	ResultRelInfo *result_rel = writer->result_rel;
	Relation	index = index_open(indexoid, RowExclusiveLock);
	IndexInfo  *info = BuildIndexInfo(index);
	int			n = result_rel->ri_NumIndices++;

	if (info->ii_Unique)
		BuildSpeculativeIndexInfo(index, info);
	result_rel->ri_IndexRelationDescs[n] = index;
	result_rel->ri_IndexRelationInfo[n] = info;
}

/*
 * Before the first insertion of the statement: open the indexes besides the
 * key, which a duplicate never needs.  Returns whether one of them is
 * unique (an index a DBA added): it is an arbiter too, so the caller must
 * look for conflicts again.
 */
bool
claim_writer_open_other_indexes(ClaimWriter *writer)
{
	MemoryContext oldcontext = MemoryContextSwitchTo(writer->estate->es_query_cxt);
	ResultRelInfo *result_rel = writer->result_rel;
	bool		unique = false;
	ListCell   *lc;

	foreach(lc, writer->indexes)
	{
		if (lfirst_oid(lc) == RelationGetRelid(writer->key_index))
			continue;
		claim_writer_open_index(writer, lfirst_oid(lc));
		unique |= result_rel->ri_IndexRelationInfo[result_rel->ri_NumIndices - 1]->ii_Unique;
	}
	writer->all_indexes_open = true;
	MemoryContextSwitchTo(oldcontext);
	return unique;
}

void
claim_writer_begin(ClaimWriter *writer, Relation rel, Oid key_index,
				   AttrNumber fingerprint_attnum)
{
	ResultRelInfo *result_rel;
	int			nindexes;

	writer->rel = rel;
	writer->natts = RelationGetDescr(rel)->natts;
	writer->fingerprint_attnum = fingerprint_attnum;
	writer->caller_context = CurrentMemoryContext;
	writer->estate = CreateExecutorState();
	MemoryContextSwitchTo(writer->estate->es_query_cxt);
	result_rel = writer->result_rel = makeNode(ResultRelInfo);
	InitResultRelInfo(result_rel, rel, 1, NULL, 0);

	/* the key first: all that a duplicate needs */
	writer->indexes = RelationGetIndexList(rel);
	nindexes = list_length(writer->indexes);
	result_rel->ri_IndexRelationDescs = palloc(nindexes * sizeof(Relation));
	result_rel->ri_IndexRelationInfo = palloc(nindexes * sizeof(IndexInfo *));
	claim_writer_open_index(writer, key_index);
	writer->key_index = result_rel->ri_IndexRelationDescs[0];
	writer->all_indexes_open = (nindexes == 1);

	writer->estate->es_snapshot = GetActiveSnapshot();
	writer->slot = table_slot_create(rel, NULL);
	writer->conflict_slot = table_slot_create(rel, NULL);
	MemoryContextSwitchTo(writer->caller_context);
}

void
claim_writer_end(ClaimWriter *writer)
{
	ExecDropSingleTupleTableSlot(writer->conflict_slot);
	ExecDropSingleTupleTableSlot(writer->slot);
	ExecCloseIndices(writer->result_rel);
	FreeExecutorState(writer->estate);
}

/*
 * Without waiting for anyone: does a row conflict with the claim in the slot
 * through arbiter index (a unique index or an exclusion constraint, info
 * its IndexInfo)?  The same dirty read of the index that ON CONFLICT starts
 * with (check_exclusion_or_unique_constraint in execIndexing.c), minus the
 * wait: CLAIM_DUPLICATE (with its TID in *conflict_tid) for a row whose
 * inserting transaction committed (or is ours), CLAIM_IN_PROGRESS for one
 * that another transaction is inserting or deleting right now,
 * CLAIM_CLAIMED for none.
 */
static ClaimOutcome
claim_probe_index(ClaimWriter *writer, Relation index, IndexInfo *info,
				  ItemPointer conflict_tid)
{
	EState	   *estate = writer->estate;
	ExprContext *econtext = GetPerTupleExprContext(estate);
	TupleTableSlot *existing = writer->conflict_slot;
	int			nkeys = IndexRelationGetNumberOfKeyAttributes(index);
	Oid		   *procs = info->ii_ExclusionOps ? info->ii_ExclusionProcs : info->ii_UniqueProcs;
	uint16	   *strategies = info->ii_ExclusionOps ? info->ii_ExclusionStrats : info->ii_UniqueStrats;
	Datum		values[INDEX_MAX_KEYS];
	bool		isnull[INDEX_MAX_KEYS];
	ScanKeyData keys[INDEX_MAX_KEYS];
	SnapshotData dirty;
	IndexScanDesc scan;
	ClaimOutcome outcome = CLAIM_CLAIMED;

	/* a partial index the claim would not enter, or a null key: no conflict */
	econtext->ecxt_scantuple = writer->slot;
	if (info->ii_Predicate != NIL)
	{
		if (info->ii_PredicateState == NULL)
			info->ii_PredicateState = ExecPrepareQual(info->ii_Predicate, estate);
		if (!ExecQual(info->ii_PredicateState, econtext))
			return CLAIM_CLAIMED;
	}
	FormIndexDatum(info, writer->slot, estate, values, isnull);
	for (int i = 0; i < nkeys; i++)
	{
		if (isnull[i] && !info->ii_NullsNotDistinct)
			return CLAIM_CLAIMED;
		ScanKeyEntryInitialize(&keys[i], isnull[i] ? SK_ISNULL | SK_SEARCHNULL : 0,
							   i + 1, strategies[i], InvalidOid,
							   index->rd_indcollation[i], procs[i], values[i]);
	}

	InitDirtySnapshot(dirty);
	econtext->ecxt_scantuple = existing;
	scan = dedup_index_beginscan(writer->rel, index, &dirty, nkeys);
	index_rescan(scan, keys, nkeys, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, existing))
	{
		/* a lossy index: does the row really conflict? */
		if (scan->xs_recheck)
		{
			Datum		found[INDEX_MAX_KEYS];
			bool		found_null[INDEX_MAX_KEYS];
			bool		conflicts = true;

			FormIndexDatum(info, existing, estate, found, found_null);
			for (int i = 0; conflicts && i < nkeys; i++)
				conflicts = !found_null[i] &&
					DatumGetBool(OidFunctionCall2Coll(procs[i],
													  index->rd_indcollation[i],
													  found[i], values[i]));
			if (!conflicts)
				continue;
		}
		/* the dirty snapshot tells of a transaction still at work on it */
		if (TransactionIdIsValid(dirty.xmin) || TransactionIdIsValid(dirty.xmax))
			outcome = CLAIM_IN_PROGRESS;
		else
		{
			*conflict_tid = existing->tts_tid;
			outcome = CLAIM_DUPLICATE;
		}
		break;
	}
	index_endscan(scan);
	ExecClearTuple(existing);
	return outcome;
}

/*
 * Without waiting for anyone: the first conflict of the claim in the slot,
 * through the arbiter indexes open so far, in the order ON CONFLICT checks
 * them (ExecCheckIndexConstraints): the key first, then the unique indexes
 * and exclusion constraints a DBA added.  So dedup_try_claim answers
 * 'duplicate' where dedup_claim answers false, and 'in_progress' where
 * dedup_claim would wait.
 */
static ClaimOutcome
claim_probe(ClaimWriter *writer, ItemPointer conflict_tid)
{
	ResultRelInfo *result_rel = writer->result_rel;

	for (int i = 0; i < result_rel->ri_NumIndices; i++)
	{
		Relation	index = result_rel->ri_IndexRelationDescs[i];
		IndexInfo  *info = result_rel->ri_IndexRelationInfo[i];
		ClaimOutcome outcome;

		if ((!info->ii_Unique && info->ii_ExclusionOps == NULL) ||
			!info->ii_ReadyForInserts)
			continue;
		if (!index->rd_index->indimmediate)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("ON CONFLICT does not support deferrable unique constraints/exclusion constraints as arbiters"),
					 errtableconstraint(writer->rel,
										RelationGetRelationName(index))));
		outcome = claim_probe_index(writer, index, info, conflict_tid);
		if (outcome != CLAIM_CLAIMED)
			return outcome;
	}
	return CLAIM_CLAIMED;
}

/*
 * Insert the row in writer->slot unless a row with its key is there
 * already, and say what happened: the speculative insertion protocol of
 * ExecInsert for ON CONFLICT with every unique index as arbiter.
 *
 * First look for a conflicting row: with wait, as ON CONFLICT does,
 * waiting for an in-progress inserter of the same key to finish; without,
 * answering CLAIM_IN_PROGRESS instead.  If there is none, insert the heap
 * tuple speculatively, under a speculative insertion lock, and then its
 * index entries; if a concurrent claim of the same key got into the unique
 * index first, the tuple is killed ("super-deleted") and the whole thing
 * starts again, now finding the other claim as a conflict, whose TID is
 * returned in *conflict_tid with CLAIM_DUPLICATE.
 */
ClaimOutcome
claim_writer_put(ClaimWriter *writer, bool wait, ItemPointer conflict_tid)
{
	EState	   *estate = writer->estate;
	TupleTableSlot *slot = writer->slot;
	ClaimOutcome outcome;

	for (;;)
	{
		TransactionId xid;
		uint32		token;
		bool		spec_conflict = false;
		List	   *recheck;

		CHECK_FOR_INTERRUPTS();
		if (wait)
			outcome = ExecCheckIndexConstraints(writer->result_rel, slot, estate,
												conflict_tid,
#if PG_VERSION_NUM >= 180000
												NULL,
#endif
												NIL) ? CLAIM_CLAIMED : CLAIM_DUPLICATE;
		else
			outcome = claim_probe(writer, conflict_tid);
		if (outcome != CLAIM_CLAIMED)
			return outcome;

		/*
		 * Only a claim that writes needs the other indexes, a transaction ID
		 * and a command ID.  A unique index opened now must be checked too.
		 */
		if (!writer->all_indexes_open &&
			claim_writer_open_other_indexes(writer))
			continue;
		xid = GetCurrentTransactionId();
		estate->es_output_cid = GetCurrentCommandId(true);
		token = SpeculativeInsertionLockAcquire(xid);
		table_tuple_insert_speculative(writer->rel, slot, estate->es_output_cid,
									   0, NULL, token);
		recheck = ExecInsertIndexTuples(writer->result_rel, slot, estate,
										false, true, &spec_conflict, NIL
#if PG_VERSION_NUM >= 160000
										,false	/* not only summarizing indexes */
#endif
			);
		table_tuple_complete_speculative(writer->rel, slot, token,
										 !spec_conflict);
		SpeculativeInsertionLockRelease(xid);
		list_free(recheck);
		if (!spec_conflict)
			return CLAIM_CLAIMED;
	}
}

/*
 * Insert (consumer, message_id, now(), fingerprint) into processed_messages
 * unless the key is there already (claim_writer_put), and say what
 * happened.  What one key needs is allocated in the per-tuple context,
 * reset afterwards.
 */
static ClaimOutcome
claim_writer_insert(ClaimWriter *writer, Datum consumer, Datum message_id,
					Datum fingerprint, bool has_fingerprint, bool wait)
{
	EState	   *estate = writer->estate;
	TupleTableSlot *slot = writer->slot;
	ItemPointerData conflict_tid;
	ClaimOutcome outcome;

	MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
	ExecClearTuple(slot);
	/* NULL in every other attribute: dropped ones, a missing fingerprint */
	memset(slot->tts_isnull, true, writer->natts * sizeof(bool));
	slot->tts_values[0] = consumer;
	slot->tts_values[1] = message_id;
	slot->tts_values[2] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	memset(slot->tts_isnull, false, 3 * sizeof(bool));
	if (writer->fingerprint_attnum != 0 && has_fingerprint)
	{
		slot->tts_values[writer->fingerprint_attnum - 1] = fingerprint;
		slot->tts_isnull[writer->fingerprint_attnum - 1] = false;
	}
	ExecStoreVirtualTuple(slot);

	outcome = claim_writer_put(writer, wait, &conflict_tid);
	if (outcome == CLAIM_DUPLICATE)
		claim_check_conflict(writer, &conflict_tid, fingerprint,
							 has_fingerprint);

	ExecClearTuple(slot);
	MemoryContextSwitchTo(writer->caller_context);
	ResetPerTupleExprContext(estate);
	return outcome;
}

/*
 * The keys of a batch, in the order they are claimed: by key, and among
 * equal keys by position, so that the first of them is the one claimed and
 * two batches with keys in common take their locks in the same order
 * (concurrent batches cannot deadlock on each other's keys).
 */
typedef struct BatchKey
{
	text	   *key;
	int			position;
} BatchKey;

static int
batch_key_compare(const void *a, const void *b)
{
	const BatchKey *ka = a;
	const BatchKey *kb = b;
	int			la = VARSIZE_ANY_EXHDR(ka->key);
	int			lb = VARSIZE_ANY_EXHDR(kb->key);
	int			cmp = memcmp(VARDATA_ANY(ka->key), VARDATA_ANY(kb->key),
							 Min(la, lb));

	if (cmp != 0)
		return cmp;
	if (la != lb)
		return la < lb ? -1 : 1;
	return ka->position - kb->position;
}

/*
 * How to claim: the fingerprint every key is checked against (if any),
 * and whether to wait for in-progress claims of the same keys.
 */
typedef struct ClaimOptions
{
	const char *function;		/* for errors: "dedup_claim()" */
	Datum		fingerprint;
	bool		has_fingerprint;
	bool		wait;
} ClaimOptions;

/*
 * Check that the transaction may write and the caller may claim for
 * consumer; then claim each of the nkeys keys (keys[i].key, already
 * checked) for consumer, setting outcomes[keys[i].position], and count
 * each outcome.
 */
static void
claim_keys(const ClaimOptions *options, text *consumer, BatchKey *keys,
		   int nkeys, ClaimOutcome *outcomes)
{
	MemoryContext caller_context = CurrentMemoryContext;
	const DedupRelations *rels;
	Relation	rel;
	ClaimWriter writer;
	DedupClaimTally tally = {0};
	int			done = 0;

	PreventCommandDuringRecovery(options->function);
	PreventCommandIfReadOnly(options->function);
	dedup_check_claimant(consumer, options->function);

	rel = dedup_table_open(DEDUP_MESSAGES, RowExclusiveLock, false, &rels);
	claim_writer_begin(&writer, rel, rels->messages_key,
					   rels->fingerprint_attnum);
	for (; done < nkeys; done++)
	{
		TimestampTz lock_wait_mark = get_timeout_start_time(DEADLOCK_TIMEOUT);
		instr_time	start;
		ClaimOutcome outcome;

		/* each key is timed on its own: read only when counting */
		if (dedup_track_claims)
			INSTR_TIME_SET_CURRENT(start);
		PG_TRY();
		{
			outcome = claim_writer_insert(&writer, PointerGetDatum(consumer),
										  PointerGetDatum(keys[done].key),
										  options->fingerprint,
										  options->has_fingerprint,
										  options->wait);
		}
		PG_CATCH();
		{
			int			code = geterrcode();

			/* count in the caller's context, not the error context */
			MemoryContextSwitchTo(caller_context);
			dedup_stats_tally(&tally, dedup_claim_failure(code),
							  claim_waited(lock_wait_mark), &start);
			dedup_stats_flush(consumer, NULL, &tally);
			PG_RE_THROW();
		}
		PG_END_TRY();
		outcomes[keys[done].position] = outcome;
		if (outcome != CLAIM_IN_PROGRESS)
			dedup_stats_tally(&tally,
							  outcome == CLAIM_CLAIMED ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
							  claim_waited(lock_wait_mark), &start);
	}
	claim_writer_end(&writer);
	table_close(rel, NoLock);
	dedup_stats_flush(consumer, NULL, &tally);
}

/*
 * Check the arguments of a single claim -- consumer, message_id and, if
 * the function has a third argument, a fingerprint (NULL: none) -- and
 * claim it.  name is the function's name and call the same with "()",
 * both for errors (passed as constants: nothing is formatted per call).
 */
static ClaimOutcome
claim_one(FunctionCallInfo fcinfo, const char *name, const char *call,
		  bool wait)
{
	ClaimOptions options = {0};
	BatchKey	key;
	ClaimOutcome outcome;

	dedup_check_key(name, "consumer", 0, PG_GETARG_DATUM(0), PG_ARGISNULL(0),
					DEDUP_MAX_CONSUMER_BYTES);
	dedup_check_key(name, "message_id", 0, PG_GETARG_DATUM(1), PG_ARGISNULL(1),
					DEDUP_MAX_MESSAGE_ID_BYTES);
	options.function = call;
	options.wait = wait;
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
	{
		Size		len = toast_raw_datum_size(PG_GETARG_DATUM(2)) - VARHDRSZ;

		if (len == 0 || len > DEDUP_MAX_FINGERPRINT_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"fingerprint\" of %s must be 1 to %d bytes long, not %zu",
							name, DEDUP_MAX_FINGERPRINT_BYTES, len),
					 errhint("Pass a digest of the message, for example sha256(payload).")));
		options.fingerprint = PointerGetDatum(PG_GETARG_BYTEA_PP(2));
		options.has_fingerprint = true;
	}
	key.key = PG_GETARG_TEXT_PP(1);
	key.position = 0;
	claim_keys(&options, PG_GETARG_TEXT_PP(0), &key, 1, &outcome);
	return outcome;
}

/*
 * dedup_claim(consumer text, message_id text [, fingerprint bytea])
 * RETURNS boolean
 *
 * True when this transaction has just recorded the claim: do the work, in the
 * same transaction.  False when a committed claim for the same consumer and
 * message id exists, or this transaction made it already: skip the work.
 * With a fingerprint, a recorded claim with a different one is an error.
 */
Datum
dedup_claim(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(claim_one(fcinfo, "dedup_claim", "dedup_claim()", true) == CLAIM_CLAIMED);
}

/*
 * dedup_try_claim(consumer text, message_id text, fingerprint bytea DEFAULT
 * NULL) RETURNS dedup_claim_status
 *
 * dedup_claim that never waits for another transaction's claim of the same
 * key: 'claimed', 'duplicate', or 'in_progress' when another transaction
 * holds an uncommitted claim of it (or is deleting it) right now.
 */
Datum
dedup_try_claim(PG_FUNCTION_ARGS)
{
	static const char *const labels[] = {"claimed", "duplicate", "in_progress"};
	ClaimOutcome outcome = claim_one(fcinfo, "dedup_try_claim",
									 "dedup_try_claim()", false);
	Oid			status_type = get_fn_expr_rettype(fcinfo->flinfo);
	Oid			label;

	label = GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid,
							ObjectIdGetDatum(status_type),
							CStringGetDatum(labels[outcome]));
	if (!OidIsValid(label))
		elog(ERROR, "dedup_claim_status has no label \"%s\"", labels[outcome]);
	PG_RETURN_OID(label);
}

/*
 * dedup_claim_many(consumer text, message_ids text[]) RETURNS boolean[]
 *
 * Claim every message id of a batch in one call, in the caller's
 * transaction, each exactly as dedup_claim would: element i of the result
 * is true when message_ids[i] was claimed now, false when it is a
 * duplicate -- of an earlier claim, or of an earlier element of the same
 * array.  Every key is checked before any is claimed.
 */
Datum
dedup_claim_many(PG_FUNCTION_ARGS)
{
	ArrayType  *array;
	Datum	   *elements;
	bool	   *nulls;
	int			nkeys;
	BatchKey   *keys;
	ClaimOptions options = {0};
	ClaimOutcome *outcomes;
	Datum	   *results;
	int			lbound = 1;

	dedup_check_key("dedup_claim_many", "consumer", 0, PG_GETARG_DATUM(0),
					PG_ARGISNULL(0), DEDUP_MAX_CONSUMER_BYTES);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"message_ids\" of dedup_claim_many must not be null")));
	array = PG_GETARG_ARRAYTYPE_P(1);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("argument \"message_ids\" of dedup_claim_many must be a one-dimensional array")));
	nkeys = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
	if (nkeys > DEDUP_MAX_BATCH_KEYS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("argument \"message_ids\" of dedup_claim_many has too many elements"),
				 errdetail("It has %d elements; at most %d are accepted.",
						   nkeys, DEDUP_MAX_BATCH_KEYS),
				 errhint("Claim a larger batch in several calls, in the same transaction.")));
	if (nkeys == 0)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(BOOLOID));

	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT,
					  &elements, &nulls, &nkeys);
	keys = palloc(nkeys * sizeof(BatchKey));
	for (int i = 0; i < nkeys; i++)
	{
		dedup_check_key("dedup_claim_many", "message_ids", i + 1, elements[i],
						nulls[i], DEDUP_MAX_MESSAGE_ID_BYTES);
		keys[i].key = DatumGetTextPP(elements[i]);
		keys[i].position = i;
	}
	qsort(keys, nkeys, sizeof(BatchKey), batch_key_compare);

	outcomes = palloc(nkeys * sizeof(ClaimOutcome));
	options.function = "dedup_claim_many()";
	options.wait = true;
	claim_keys(&options, PG_GETARG_TEXT_PP(0), keys, nkeys, outcomes);

	results = palloc(nkeys * sizeof(Datum));
	for (int i = 0; i < nkeys; i++)
		results[i] = BoolGetDatum(outcomes[i] == CLAIM_CLAIMED);
	if (ARR_NDIM(array) == 1)
		lbound = ARR_LBOUND(array)[0];
	PG_RETURN_ARRAYTYPE_P(construct_md_array(results, NULL, 1, &nkeys, &lbound,
											 BOOLOID, 1, true, TYPALIGN_CHAR));
}
