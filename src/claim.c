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
#include "commands/trigger.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
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
PG_FUNCTION_INFO_V1(dedup_claim_many);
PG_FUNCTION_INFO_V1(dedup_consumer_roles_changed);

/*
 * Raise the error a caller must see, rather than a NULL or a silently
 * truncated key, when a key is unusable: argument argname of function, or
 * its element number element (counted from 1; 0 for a plain argument).
 *
 * The length is read from the varlena header, so an oversized value is
 * rejected without being detoasted and before any index is touched.
 */
static void
claim_check_key(const char *function, const char *argname, int element,
				Datum value, bool isnull, Size max_bytes)
{
	char		what[NAMEDATALEN + 32];
	Size		len;

	if (element > 0)
		snprintf(what, sizeof(what), "element %d of argument \"%s\"",
				 element, argname);
	else
		snprintf(what, sizeof(what), "argument \"%s\"", argname);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s of %s must not be null", what, function),
				 errdetail("A claim is either recorded or a duplicate; a null key can be neither.")));

	len = toast_raw_datum_size(value) - VARHDRSZ;
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s of %s must not be empty", what, function)));
	if (len > max_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s of %s is too long", what, function),
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
 * What claims of one statement share: the executor state and the slots of
 * the speculative insertion into processed_messages (rel, opened by the
 * caller with RowExclusiveLock).
 */
typedef struct ClaimWriter
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *result_rel;
	TupleTableSlot *slot;		/* the claim being inserted */
	TupleTableSlot *conflict_slot;	/* a row it conflicts with */
	MemoryContext caller_context;
} ClaimWriter;

static void
claim_writer_begin(ClaimWriter *writer, Relation rel)
{
	writer->rel = rel;
	writer->caller_context = CurrentMemoryContext;
	writer->estate = CreateExecutorState();
	MemoryContextSwitchTo(writer->estate->es_query_cxt);
	writer->result_rel = makeNode(ResultRelInfo);
	InitResultRelInfo(writer->result_rel, rel, 1, NULL, 0);
	ExecOpenIndices(writer->result_rel, true);
	writer->estate->es_snapshot = GetActiveSnapshot();
	writer->slot = table_slot_create(rel, NULL);
	writer->conflict_slot = table_slot_create(rel, NULL);
	MemoryContextSwitchTo(writer->caller_context);
}

static void
claim_writer_end(ClaimWriter *writer)
{
	ExecDropSingleTupleTableSlot(writer->conflict_slot);
	ExecDropSingleTupleTableSlot(writer->slot);
	ExecCloseIndices(writer->result_rel);
	FreeExecutorState(writer->estate);
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
 * again, now finding the other claim as a conflict.  What one key needs is
 * allocated in the per-tuple context, reset afterwards.
 */
static bool
claim_writer_insert(ClaimWriter *writer, Datum consumer, Datum message_id)
{
	EState	   *estate = writer->estate;
	TupleTableSlot *slot = writer->slot;
	bool		claimed = false;

	MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
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
		if (!ExecCheckIndexConstraints(writer->result_rel, slot, estate,
									   &conflict_tid,
#if PG_VERSION_NUM >= 180000
									   NULL,
#endif
									   NIL))
		{
			claim_check_conflict_visible(writer->rel, &conflict_tid,
										 writer->conflict_slot,
										 estate->es_snapshot);
			break;
		}

		/* only a claim that writes needs a transaction ID and a command ID */
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
		{
			claimed = true;
			break;
		}
	}

	ExecClearTuple(slot);
	MemoryContextSwitchTo(writer->caller_context);
	ResetPerTupleExprContext(estate);
	return claimed;
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
 * Check that the transaction may write and the caller may claim for
 * consumer (for function, named in errors); then claim each of the nkeys
 * keys (keys[i].key, already checked) for consumer, setting
 * claimed[keys[i].position], and count each outcome.
 */
static void
claim_keys(const char *function, text *consumer, BatchKey *keys, int nkeys,
		   bool *claimed)
{
	MemoryContext caller_context = CurrentMemoryContext;
	const DedupRelations *rels;
	Relation	rel;
	ClaimWriter writer;
	int			done = 0;

	PreventCommandDuringRecovery(function);
	PreventCommandIfReadOnly(function);
	claim_check_claimant(consumer);

	rel = dedup_table_open(DEDUP_MESSAGES, RowExclusiveLock, false, &rels);
	claim_writer_begin(&writer, rel);
	for (; done < nkeys; done++)
	{
		TimestampTz lock_wait_mark = get_timeout_start_time(DEADLOCK_TIMEOUT);
		bool		this_claimed;

		PG_TRY();
		{
			this_claimed = claim_writer_insert(&writer, PointerGetDatum(consumer),
											   PointerGetDatum(keys[done].key));
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
		claimed[keys[done].position] = this_claimed;
		dedup_stats_count(consumer,
						  this_claimed ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
						  claim_waited(lock_wait_mark));
	}
	claim_writer_end(&writer);
	table_close(rel, NoLock);
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
	BatchKey	key;
	bool		claimed;

	claim_check_key("dedup_claim", "consumer", 0, PG_GETARG_DATUM(0),
					PG_ARGISNULL(0), DEDUP_MAX_CONSUMER_BYTES);
	claim_check_key("dedup_claim", "message_id", 0, PG_GETARG_DATUM(1),
					PG_ARGISNULL(1), DEDUP_MAX_MESSAGE_ID_BYTES);
	key.key = PG_GETARG_TEXT_PP(1);
	key.position = 0;
	claim_keys("dedup_claim()", PG_GETARG_TEXT_PP(0), &key, 1, &claimed);
	PG_RETURN_BOOL(claimed);
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
	bool	   *claimed;
	Datum	   *results;
	int			lbound = 1;

	claim_check_key("dedup_claim_many", "consumer", 0, PG_GETARG_DATUM(0),
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
		claim_check_key("dedup_claim_many", "message_ids", i + 1, elements[i],
						nulls[i], DEDUP_MAX_MESSAGE_ID_BYTES);
		keys[i].key = DatumGetTextPP(elements[i]);
		keys[i].position = i;
	}
	qsort(keys, nkeys, sizeof(BatchKey), batch_key_compare);

	claimed = palloc(nkeys * sizeof(bool));
	claim_keys("dedup_claim_many()", PG_GETARG_TEXT_PP(0), keys, nkeys, claimed);

	results = palloc(nkeys * sizeof(Datum));
	for (int i = 0; i < nkeys; i++)
		results[i] = BoolGetDatum(claimed[i]);
	if (ARR_NDIM(array) == 1)
		lbound = ARR_LBOUND(array)[0];
	PG_RETURN_ARRAYTYPE_P(construct_md_array(results, NULL, 1, &nkeys, &lbound,
											 BOOLOID, 1, true, TYPALIGN_CHAR));
}
