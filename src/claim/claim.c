/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  dedup_claim(), dedup_claim_many() and dedup_try_claim(): record, in the
 *	  caller's transaction, that a consumer has processed a message (or a
 *	  batch of them), optionally with a fingerprint of its payload.
 *
 * This file owns the SQL entry points and the order in which a batch's keys
 * are claimed; their argument checks, the checks before a claim (the
 * claimant's, claimants.c) and the counting of each claim's outcome
 * (claim_stats.c) are the entry points' kit (entry.c), in the order every
 * claim shares.  The claim itself, INSERT ... ON CONFLICT DO NOTHING
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
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/syscache.h"
#include "utils/timeout.h"

#include "claim/claim.h"
#include "guc.h"
#include "keys.h"
#include "stats/claim_stats.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_claim);
PG_FUNCTION_INFO_V1(dedup_claim_many);
PG_FUNCTION_INFO_V1(dedup_try_claim);

/* told of each claim that answers true (dedup_observe_claims), or NULL */
static DedupClaimObserver claim_observer = NULL;

/* _PG_init: who hears of each claim that answers true */
void
dedup_observe_claims(DedupClaimObserver observer)
{
	claim_observer = observer;
}

/* A claim answered true: tell the observer, if there is one */
void
dedup_claim_observed(const DedupClaimOrigin *origin)
{
	if (claim_observer != NULL)
		claim_observer(origin);
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
 * consumer, and open processed_messages; then claim each of the nkeys keys
 * (keys[i].key, already checked) for consumer, setting
 * outcomes[keys[i].position], and count each outcome.  No keys: checked,
 * nothing claimed.
 */
static void
claim_keys(const ClaimOptions *options, text *consumer, BatchKey *keys,
		   int nkeys, ClaimOutcome *outcomes)
{
	const DedupRelations *rels;
	Relation	rel;
	ClaimWriter *writer;
	DedupClaimFrame frame;
	int			done = 0;

	dedup_claim_checks(options->function, consumer,
					   DEDUP_CHECK_WRITES | DEDUP_CHECK_CLAIMANT);
	rel = dedup_table_open(DEDUP_MESSAGES, RowExclusiveLock, false, &rels);
	if (nkeys == 0)
	{
		table_close(rel, NoLock);
		return;
	}
	dedup_claim_frame_start(&frame, consumer, NULL);
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
			dedup_claim_failed(&frame, dedup_claim_waited(lock_wait_mark),
							   &start);
			PG_RE_THROW();
		}
		PG_END_TRY();
		outcomes[keys[done].position] = outcome;
		if (outcome == CLAIM_CLAIMED)
		{
			DedupClaimOrigin origin = {consumer};

			origin.message_id = nkeys == 1 ? keys[done].key : NULL;
			dedup_claim_observed(&origin);
		}
		if (outcome != CLAIM_IN_PROGRESS)
			dedup_stats_tally(&frame.tally,
							  outcome == CLAIM_CLAIMED ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
							  dedup_claim_waited(lock_wait_mark), &start);
	}
	dedup_claim_writer_end(writer);
	table_close(rel, NoLock);
	dedup_claim_counted(&frame);
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
 * array.  Every key is checked before any is claimed; an empty batch is
 * checked as any other (entry.c), and answers an empty array.
 */
Datum
dedup_claim_many(PG_FUNCTION_ARGS)
{
	DedupBatch	batch;
	BatchKey   *keys;
	ClaimOptions options = {0};
	ClaimOutcome *outcomes;
	bool	   *answers;

	dedup_check_key("dedup_claim_many", "consumer", 0, PG_GETARG_DATUM(0),
					PG_ARGISNULL(0), DEDUP_MAX_CONSUMER_BYTES);
	dedup_batch_arg(fcinfo, 1, "dedup_claim_many", "message_ids", TEXTOID,
					&batch);
	keys = palloc(Max(batch.n, 1) * sizeof(BatchKey));
	for (int i = 0; i < batch.n; i++)
	{
		dedup_check_key("dedup_claim_many", "message_ids", i + 1,
						batch.elements[i], batch.nulls[i],
						DEDUP_MAX_MESSAGE_ID_BYTES);
		keys[i].key = DatumGetTextPP(batch.elements[i]);
		keys[i].position = i;
	}
	qsort(keys, batch.n, sizeof(BatchKey), batch_key_compare);

	outcomes = palloc(Max(batch.n, 1) * sizeof(ClaimOutcome));
	options.function = "dedup_claim_many()";
	options.wait = true;
	claim_keys(&options, PG_GETARG_TEXT_PP(0), keys, batch.n, outcomes);

	answers = palloc(Max(batch.n, 1) * sizeof(bool));
	for (int i = 0; i < batch.n; i++)
		answers[i] = outcomes[i] == CLAIM_CLAIMED;
	PG_RETURN_ARRAYTYPE_P(dedup_batch_answers(&batch, answers));
}
