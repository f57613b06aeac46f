/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  dedup_claim(), dedup_claim_many() and dedup_try_claim(): record, in the
 *	  caller's transaction, that a consumer has processed a message (or a
 *	  batch of them), optionally with a fingerprint of its payload.
 *
 * This file owns the SQL entry points: their argument checks (shared with
 * records.c and the claims by offset), the order in which a batch's keys are claimed, the claimant
 * check (claimants.c), and reporting each claim's outcome to the counters
 * (claim_stats.c).  The claim itself, INSERT ... ON CONFLICT DO NOTHING
 * done directly on the table found by OID, is claim_writer.c's: it has
 * exactly that statement's guarantees under every isolation level.  What
 * the statement would add around it (triggers, rules, permission checks on
 * the table) does not apply: the table is the extension's own, and EXECUTE
 * on dedup_claim is the privilege that matters, refined per consumer by
 * dedup_consumer_roles.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/table.h"
#include "catalog/pg_enum.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/syscache.h"
#include "utils/timeout.h"

#include "claim.h"
#include "claim_stats.h"
#include "claim_writer.h"
#include "claimants.h"
#include "guc.h"
#include "keys.h"
#include "outbox/outbox.h"
#include "relations.h"

PG_FUNCTION_INFO_V1(dedup_claim);
PG_FUNCTION_INFO_V1(dedup_claim_many);
PG_FUNCTION_INFO_V1(dedup_try_claim);

/*
 * Raise the error a caller must see, rather than a NULL, when a key
 * (argument argname of function, or its element number element, counted
 * from 1; 0 for a plain argument) is NULL.
 */
void
dedup_check_not_null(const char *function, const char *argname, int element,
					 bool isnull)
{
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 element > 0 ?
				 errmsg("element %d of argument \"%s\" of %s must not be null",
						element, argname, function) :
				 errmsg("argument \"%s\" of %s must not be null",
						argname, function),
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
				 element > 0 ?
				 errmsg("element %d of argument \"%s\" of %s must not be empty",
						element, argname, function) :
				 errmsg("argument \"%s\" of %s must not be empty",
						argname, function)));
	if (len > max_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 element > 0 ?
				 errmsg("element %d of argument \"%s\" of %s is too long",
						element, argname, function) :
				 errmsg("argument \"%s\" of %s is too long",
						argname, function),
				 errdetail("It is %zu bytes; at most %zu bytes are accepted.",
						   len, max_bytes),
				 errhint("Claim a digest of long keys, for example encode(sha256(convert_to(key, 'UTF8')), 'hex').")));
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
	ClaimWriter *writer;
	DedupClaimTally tally = {0};
	int			done = 0;

	PreventCommandDuringRecovery(options->function);
	PreventCommandIfReadOnly(options->function);
	dedup_check_claimant(consumer, options->function);

	rel = dedup_table_open(DEDUP_MESSAGES, RowExclusiveLock, false, &rels);
	writer = dedup_claim_writer_begin(rel, rels->messages_key,
									  rels->fingerprint_attnum, false);
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
			outcome = dedup_claim_writer_insert(writer,
												PointerGetDatum(consumer),
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
							  dedup_claim_waited(lock_wait_mark), &start);
			dedup_stats_flush(consumer, NULL, &tally);
			PG_RE_THROW();
		}
		PG_END_TRY();
		outcomes[keys[done].position] = outcome;
		if (outcome == CLAIM_CLAIMED)
			dedup_outbox_note_claim(consumer, nkeys == 1 ? keys[done].key : NULL);
		if (outcome != CLAIM_IN_PROGRESS)
			dedup_stats_tally(&tally,
							  outcome == CLAIM_CLAIMED ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
							  dedup_claim_waited(lock_wait_mark), &start);
	}
	dedup_claim_writer_end(writer);
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
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("type dedup_claim_status of extension \"dedup\" has no label \"%s\"",
						labels[outcome])));
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
