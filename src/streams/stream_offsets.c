/*-------------------------------------------------------------------------
 *
 * stream_offsets.c
 *	  Claims by offset in ordered streams: dedup_claim_offset() and
 *	  dedup_claim_offsets() move a consumer's position in a partition of a
 *	  stream (a row of stream_positions) in the caller's transaction, and
 *	  dedup_set_stream_position() moves it on purpose.
 *
 * A consumer that processes each partition of a partitioned log (a Kafka
 * topic, a RabbitMQ stream) in order needs no record per message: the last
 * offset it has processed is the record, and an offset at or before it is
 * a replay.  A claim by offset does what
 *
 *	   INSERT INTO stream_positions AS p
 *			VALUES (consumer, stream, partition, message_offset, now())
 *	   ON CONFLICT (consumer_name, stream, partition) DO UPDATE
 *			SET committed_offset = excluded.committed_offset,
 *				updated_at = excluded.updated_at
 *		  WHERE p.committed_offset < excluded.committed_offset
 *
 * does, and answers whether it wrote, directly on the table found by OID
 * (relations.c), through the claims' writer (claim_writer.c).  So it has
 * that statement's guarantees under every isolation level:
 *
 * - The first claim of a partition inserts its row speculatively; of two
 *	 transactions inserting it at once, one inserts and the other waits for
 *	 it to end and then finds its row (or, if it rolled back, inserts).
 * - A row that exists is locked (as SELECT ... FOR NO KEY UPDATE) before
 *	 its position is read, as ON CONFLICT DO UPDATE locks the row before it
 *	 evaluates WHERE, and stays locked to the end of the transaction even
 *	 when the answer is false.  So a concurrent claim of the same partition
 *	 -- a "zombie" consumer still at work after a rebalance, say -- waits for
 *	 the first transaction to end and answers against the position it
 *	 left: in READ COMMITTED the latest committed one; with REPEATABLE READ
 *	 or SERIALIZABLE a position that a transaction this one cannot see has
 *	 moved is a serialization failure (40001), never a wrong answer.
 * - Savepoints and rollbacks undo a move like any other update.
 * - Only the key is the arbiter, as the statement's target says: a unique
 *	 index or exclusion constraint that a DBA added (on (stream, partition),
 *	 say) is checked as the statement checks it, and a row of another
 *	 consumer that it conflicts with is its error, never a position to
 *	 replace or a claim answered false.
 *
 * A move changes only committed_offset and updated_at, which no index
 * covers: it is a HOT update, and the table keeps its size however many
 * claims it takes (the table's fillfactor leaves each page room for it).
 *
 * Claims check their arguments and the caller's right to claim for the
 * consumer (dedup_consumer_roles) as dedup_claim does, and are counted
 * with its counters (claim_stats.c), those of the consumer and those of
 * the consumer's stream: each offset a claim or a duplicate (a replay).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "audit.h"
#include "claim/claim.h"
#include "guc.h"
#include "keys.h"
#include "stats/claim_stats.h"
#include "streams/stream_offsets.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_claim_offset);
PG_FUNCTION_INFO_V1(dedup_claim_offsets);
PG_FUNCTION_INFO_V1(dedup_set_stream_position);

/*
 * The greatest offset a claim accepts: the next offset after it must be a
 * bigint too.
 */
#define MAX_CLAIMED_OFFSET	(PG_INT64_MAX - 1)

/* A partition of a stream, as one consumer sees it */
typedef struct PositionKey
{
	text	   *consumer;
	text	   *stream;
	int32		partition;
} PositionKey;

/*
 * Open stream_positions with lockmode, for function (for errors), and set
 * *rels to the lookup used.
 */
Relation
dedup_positions_open(const char *function, LOCKMODE lockmode,
					 const DedupRelations **rels)
{
	Relation	rel = dedup_table_open(DEDUP_STREAM_POSITIONS, lockmode, false,
									   rels);

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s\" of extension \"dedup\" is missing",
						"stream_positions"),
				 errdetail("It is not in the extension's schema, or it is no longer a member of the extension; %s needs it.",
						   function),
				 errhint("Restore it, or drop and create the extension again.")));
	return rel;
}

/*
 * Raise the error a caller must see, rather than a NULL or a position that
 * can never be claimed, when argument argname of function (or its element
 * number element, from 1) -- an offset or a partition -- is NULL, or not
 * between 0 (both count from 0) and maximum.
 */
static void
check_number(const char *function, const char *argname, int element,
			 bool isnull, int64 value, int64 maximum)
{
	dedup_check_not_null(function, argname, element, isnull);
	if (value >= 0 && value <= maximum)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 element > 0 ?
			 errmsg("element %d of argument \"%s\" of %s is out of range",
					element, argname, function) :
			 errmsg("argument \"%s\" of %s is out of range",
					argname, function),
			 errdetail("It is %lld; from 0 to %lld are accepted.",
					   (long long) value, (long long) maximum),
			 errhint("Offsets and partitions count from 0, as in Kafka and RabbitMQ streams.")));
}

/*
 * Check the first three arguments of function -- consumer, stream and
 * partition -- and return them in *key.
 */
static void
check_position_key(FunctionCallInfo fcinfo, const char *function,
				   PositionKey *key)
{
	dedup_check_key(function, "consumer", 0, PG_GETARG_DATUM(0),
					PG_ARGISNULL(0), DEDUP_MAX_CONSUMER_BYTES);
	dedup_check_key(function, "stream", 0, PG_GETARG_DATUM(1),
					PG_ARGISNULL(1), DEDUP_MAX_STREAM_BYTES);
	check_number(function, "partition", 0, PG_ARGISNULL(2),
				 PG_ARGISNULL(2) ? 0 : PG_GETARG_INT32(2), PG_INT32_MAX);
	key->consumer = PG_GETARG_TEXT_PP(0);
	key->stream = PG_GETARG_TEXT_PP(1);
	key->partition = PG_GETARG_INT32(2);
}

/* What position_write's update test needs, and what it found */
typedef struct PositionMove
{
	int64		offset;			/* the committed offset to set */
	bool		forward_only;	/* only if that moves the position forward */
	int64		previous;		/* the committed offset found */
} PositionMove;

/* dedup_claim_writer_upsert's test: move the position found in existing? */
static bool
position_moves(TupleTableSlot *existing, void *arg)
{
	PositionMove *move = arg;
	bool		isnull;

	move->previous = DatumGetInt64(slot_getattr(existing, POSITION_OFFSET,
												&isnull));
	return !move->forward_only || move->offset > move->previous;
}

/*
 * Set key's position to offset -- always (forward_only false), or only if
 * that moves it forward -- and return whether it had one, in *previous
 * (its committed offset; left alone when there was none).  The row is
 * inserted if there is none, and locked to the end of the transaction if
 * there is one.
 */
static bool
position_write(ClaimWriter *writer, const PositionKey *key, int64 offset,
			   bool forward_only, int64 *previous)
{
	Datum		values[POSITION_COLUMNS];
	PositionMove move = {offset, forward_only, 0};

	values[POSITION_CONSUMER - 1] = PointerGetDatum(key->consumer);
	values[POSITION_STREAM - 1] = PointerGetDatum(key->stream);
	values[POSITION_PARTITION - 1] = Int32GetDatum(key->partition);
	values[POSITION_OFFSET - 1] = Int64GetDatum(offset);
	values[POSITION_UPDATED_AT - 1] =
		TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	if (!dedup_claim_writer_upsert(writer, values, POSITION_COLUMNS,
								   position_moves, &move))
		return false;
	*previous = move.previous;
	return true;
}

/*
 * Count the answers of a claim of key: claimed offsets claimed, replays
 * skipped, in one call that started at start and waited for a lock or not.
 * The call's time is counted once, so that the mean time of an offset is
 * its share of the call, as for dedup_claim_many.
 */
static void
count_answers(const PositionKey *key, int claimed, int replays, bool waited,
			  const instr_time *start)
{
	DedupClaimFrame frame;

	if (!dedup_track_claims)
		return;
	dedup_claim_frame_start(&frame, key->consumer, key->stream);
	dedup_stats_tally(&frame.tally, claimed > 0 ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
					  waited, start);
	if (frame.tally.outcomes[DEDUP_CLAIMED] + frame.tally.outcomes[DEDUP_DUPLICATE] == 0)
		return;					/* no counters (not preloaded) */
	frame.tally.outcomes[DEDUP_CLAIMED] = claimed;
	frame.tally.outcomes[DEDUP_DUPLICATE] = replays;
	dedup_claim_counted(&frame);
}

/*
 * Check that the transaction may write and, for a claim of the noffsets
 * offsets of key (answers given), that the caller may claim for the
 * consumer; then move the position to the greatest offset if that is
 * forward, and set answers[i] to whether offsets[i] is past the position
 * as the offsets before it left it, counting them; without answers, set
 * the position to offsets[0] (noffsets 1), whatever it was.  No offsets:
 * checked, nothing claimed.  function names the caller for errors.
 * Returns whether key had a position, in *previous (its committed offset).
 */
static bool
position_set(const char *function, const PositionKey *key,
			 const int64 *offsets, int noffsets, bool *answers,
			 int64 *previous)
{
	const DedupRelations *rels;
	Relation	rel;
	ClaimWriter *writer;
	DedupClaimFrame frame;
	TimestampTz lock_wait_mark = get_timeout_start_time(DEADLOCK_TIMEOUT);
	instr_time	start;
	int64		target;
	int64		position;
	int			claimed = 0;
	bool		found;

	dedup_claim_checks(function, key->consumer,
					   answers != NULL ?
					   DEDUP_CHECK_WRITES | DEDUP_CHECK_CLAIMANT :
					   DEDUP_CHECK_WRITES);
	rel = dedup_positions_open(function, RowExclusiveLock, &rels);
	if (noffsets == 0)
	{
		table_close(rel, NoLock);
		return false;
	}
	target = offsets[0];
	for (int i = 1; i < noffsets; i++)
		target = Max(target, offsets[i]);

	dedup_claim_frame_start(&frame, key->consumer, key->stream);
	INSTR_TIME_SET_CURRENT(start);
	writer = dedup_claim_writer_begin(rel, rels->positions_key, 0, true);
	PG_TRY();
	{
		found = position_write(writer, key, target, answers != NULL,
							   previous);
	}
	PG_CATCH();
	{
		/* a claim that fails counts once */
		if (answers != NULL)
			dedup_claim_failed(&frame, dedup_claim_waited(lock_wait_mark),
							   &start);
		PG_RE_THROW();
	}
	PG_END_TRY();
	dedup_claim_writer_end(writer);
	table_close(rel, NoLock);

	if (answers == NULL)
		return found;
	position = found ? *previous : -1;
	for (int i = 0; i < noffsets; i++)
	{
		answers[i] = offsets[i] > position;
		if (answers[i])
		{
			position = offsets[i];
			claimed++;
		}
	}
	count_answers(key, claimed, noffsets - claimed,
				  dedup_claim_waited(lock_wait_mark), &start);
	if (claimed > 0)
	{
		DedupClaimOrigin origin = {key->consumer};

		/* one offset is one incoming message; a batch has none */
		if (noffsets == 1)
		{
			origin.stream = key->stream;
			origin.partition = key->partition;
			origin.offset = offsets[0];
		}
		dedup_claim_observed(&origin);
	}
	return found;
}

/*
 * dedup_claim_offset(consumer text, stream text, partition integer,
 *					  message_offset bigint) RETURNS boolean
 *
 * True when message_offset is past consumer's position in partition of
 * stream (or it has none): the position moves to it in this transaction,
 * do the work in the same transaction.  False when it is at or before the
 * position: a replay, skip it.  Gaps are normal (compaction, transaction
 * markers): any offset past the position is true.
 */
Datum
dedup_claim_offset(PG_FUNCTION_ARGS)
{
	PositionKey key;
	int64		offset;
	int64		previous;
	bool		answer;

	check_position_key(fcinfo, "dedup_claim_offset", &key);
	check_number("dedup_claim_offset", "message_offset", 0, PG_ARGISNULL(3),
				 PG_ARGISNULL(3) ? 0 : PG_GETARG_INT64(3), MAX_CLAIMED_OFFSET);
	offset = PG_GETARG_INT64(3);
	(void) position_set("dedup_claim_offset()", &key, &offset, 1, &answer,
						&previous);
	PG_RETURN_BOOL(answer);
}

/*
 * dedup_claim_offsets(consumer text, stream text, partition integer,
 *					   message_offsets bigint[]) RETURNS boolean[]
 *
 * The records of one poll of one partition in one call and one write:
 * element i of the result is what dedup_claim_offset(message_offsets[i])
 * would have answered after the elements before it -- true when it is past
 * the position they left, false for a replay (or an offset repeated, or
 * out of order).  Every offset is checked before any is claimed; an empty
 * batch is checked as any other (entry.c), and answers an empty array.
 */
Datum
dedup_claim_offsets(PG_FUNCTION_ARGS)
{
	const char *function = "dedup_claim_offsets";
	PositionKey key;
	DedupBatch	batch;
	int64	   *offsets;
	bool	   *answers;
	int64		previous;

	check_position_key(fcinfo, function, &key);
	/* its own words for a NULL batch: a NULL offset's (stream_claim.sql) */
	if (PG_ARGISNULL(3))
		check_number(function, "message_offsets", 0, true, 0, 0);
	dedup_batch_arg(fcinfo, 3, function, "message_offsets", INT8OID, &batch);
	offsets = palloc(Max(batch.n, 1) * sizeof(int64));
	for (int i = 0; i < batch.n; i++)
	{
		check_number(function, "message_offsets", i + 1, batch.nulls[i],
					 batch.nulls[i] ? 0 : DatumGetInt64(batch.elements[i]),
					 MAX_CLAIMED_OFFSET);
		offsets[i] = DatumGetInt64(batch.elements[i]);
	}

	answers = palloc(Max(batch.n, 1) * sizeof(bool));
	(void) position_set("dedup_claim_offsets()", &key, offsets, batch.n,
						answers, &previous);
	PG_RETURN_ARRAYTYPE_P(dedup_batch_answers(&batch, answers));
}

/*
 * dedup_set_stream_position(consumer text, stream text, partition integer,
 *							 next_offset bigint) RETURNS bigint
 *
 * Move consumer's position in partition of stream on purpose, so that the
 * next offset claimed as new is next_offset: back, to process records
 * again when they are replayed; forward, to skip a poison range.  0 reads
 * the partition again from its start.  Returns the next offset the
 * position had, NULL if it had none.  Written to the server log (audit.c).
 * For operators: it is not subject to dedup_consumer_roles, like
 * dedup_forget.
 */
Datum
dedup_set_stream_position(PG_FUNCTION_ARGS)
{
	PositionKey key;
	int64		next_offset;
	int64		committed;
	int64		previous = 0;
	bool		found;

	check_position_key(fcinfo, "dedup_set_stream_position", &key);
	check_number("dedup_set_stream_position", "next_offset", 0,
				 PG_ARGISNULL(3), PG_ARGISNULL(3) ? 0 : PG_GETARG_INT64(3),
				 PG_INT64_MAX);
	next_offset = PG_GETARG_INT64(3);
	committed = next_offset - 1;
	found = position_set("dedup_set_stream_position()", &key, &committed, 1,
						 NULL, &previous);
	dedup_audit_stream_position(key.consumer, key.stream, key.partition,
								found, previous + 1, next_offset);
	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_INT64(previous + 1);
}
