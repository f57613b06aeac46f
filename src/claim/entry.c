/*-------------------------------------------------------------------------
 *
 * entry.c
 *	  The kit of the claims' SQL entry points: the argument checks, the
 *	  batch argument and its answer, the checks made before a claim, and
 *	  the frame that counts a claim's error before it is rethrown.  Every
 *	  claim -- single or batch, by key (claim.c), by offset
 *	  (stream_offsets.c) or routed to colocated records (colocated.c) --
 *	  goes through them in the same order:
 *
 * 1. its arguments, in their order, a batch's elements last: a NULL, an
 *	  empty or an oversized key is an error, never a NULL answer or a key
 *	  cut short (dedup_check_not_null, dedup_check_key, dedup_batch_arg);
 * 2. the transaction: not in recovery, not read-only (dedup_claim_checks);
 *	  a routed claim then checks the node, the Citus coordinator (a local
 *	  claim's table lookup refuses a worker node itself, relations.c);
 * 3. the caller's right to claim for the consumer, dedup_consumer_roles
 *	  (dedup_claim_checks);
 * 4. the table it claims into, opened (a colocated records table found
 *	  registered and of the right shape);
 * 5. only then an empty batch returns an empty answer, so that it is
 *	  refused wherever a batch with keys would be;
 * 6. the claims: an error is counted by its class before it is rethrown
 *	  (dedup_claim_failed), the answers are counted once per call
 *	  (dedup_claim_counted).
 *
 * The other entry points that take a consumer and a key (records.c,
 * stream_positions.c) check their arguments with the same functions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/lsyscache.h"

#include "claim/claim.h"
#include "keys.h"

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
 * Read the batch argument argno of function (argname, for errors), an
 * array of elemtype, into *batch: refused when it is NULL, has more than
 * one dimension or more than DEDUP_MAX_BATCH_KEYS elements.  Its elements
 * are the caller's to check.
 */
void
dedup_batch_arg(FunctionCallInfo fcinfo, int argno, const char *function,
				const char *argname, Oid elemtype, DedupBatch *batch)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" of %s must not be null",
						argname, function)));
	batch->array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(batch->array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("argument \"%s\" of %s must be a one-dimensional array",
						argname, function)));
	batch->n = ArrayGetNItems(ARR_NDIM(batch->array), ARR_DIMS(batch->array));
	if (batch->n > DEDUP_MAX_BATCH_KEYS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("argument \"%s\" of %s has too many elements",
						argname, function),
				 errdetail("It has %d elements; at most %d are accepted.",
						   batch->n, DEDUP_MAX_BATCH_KEYS),
				 errhint("Claim a larger batch in several calls, in the same transaction.")));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(batch->array, elemtype, typlen, typbyval, typalign,
					  &batch->elements, &batch->nulls, &batch->n);
}

/*
 * The answer to batch: a boolean array with answers[i] for its element i,
 * with the batch's lower bound (an empty array for an empty batch).
 */
ArrayType *
dedup_batch_answers(const DedupBatch *batch, const bool *answers)
{
	Datum	   *results;
	int			n = batch->n;
	int			lbound;

	if (n == 0)
		return construct_empty_array(BOOLOID);
	results = palloc(n * sizeof(Datum));
	for (int i = 0; i < n; i++)
		results[i] = BoolGetDatum(answers[i]);
	lbound = ARR_LBOUND(batch->array)[0];
	return construct_md_array(results, NULL, 1, &n, &lbound, BOOLOID, 1, true,
							  TYPALIGN_CHAR);
}

/*
 * The checks made before a claim, after its arguments and before its table
 * is opened: with DEDUP_CHECK_WRITES, that the transaction may write; with
 * DEDUP_CHECK_CLAIMANT, that the caller may claim for consumer.  call names
 * the function, with "()", for errors.
 */
void
dedup_claim_checks(const char *call, text *consumer, int checks)
{
	if (checks & DEDUP_CHECK_WRITES)
	{
		PreventCommandDuringRecovery(call);
		PreventCommandIfReadOnly(call);
	}
	if (checks & DEDUP_CHECK_CLAIMANT)
		dedup_check_claimant(consumer, call);
}

/*
 * Start counting the claims of one call for consumer (and for its stream,
 * when stream is not NULL), in the caller's memory context.
 */
void
dedup_claim_frame_start(DedupClaimFrame *frame, text *consumer, text *stream)
{
	memset(frame, 0, sizeof(DedupClaimFrame));
	frame->caller_context = CurrentMemoryContext;
	frame->consumer = consumer;
	frame->stream = stream;
}

/*
 * In the PG_CATCH of a claim that raised an error: count the claim as
 * failed, by the class of the error, with the claims counted before it,
 * back in the caller's memory context (not the error's).  The caller
 * rethrows.
 */
void
dedup_claim_failed(DedupClaimFrame *frame, bool waited,
				   const instr_time *start)
{
	int			code = geterrcode();

	MemoryContextSwitchTo(frame->caller_context);
	dedup_stats_tally(&frame->tally, dedup_claim_failure(code), waited,
					  start);
	dedup_claim_counted(frame);
}

/* Add the claims counted in frame to the counters, once per call. */
void
dedup_claim_counted(DedupClaimFrame *frame)
{
	dedup_stats_flush(frame->consumer, NULL, &frame->tally);
	if (frame->stream != NULL)
		dedup_stats_flush(frame->consumer, frame->stream, &frame->tally);
}
